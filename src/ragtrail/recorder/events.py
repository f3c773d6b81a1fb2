"""A stage's candidates and events (docs/semconv.md §2-3): build them, digest them, and spill them over spans.

Schema 3 writes the stage's outputs as columns on its span (one homogeneous array per field: what a
per-candidate event cost, an SDK ``BoundedAttributes`` and ~10 attributes encoded one by one by the
exporter while it holds the GIL, is the bulk of ragtrail's cost), one ``ragtrail.exclusion`` event
per exclusion reason carrying the same columns for its candidates (so TraceQL still finds
``{ event.ragtrail.exclusion.reason = "superseded" }``), and one ``ragtrail.query`` event per query
the stage produced. When the events do not fit on one span (the SDK's event limit, or
``RAGTRAIL_EVENTS_PER_SPAN``) they spill into continuation child spans; ``ragtrail.events.count``
and ``ragtrail.events.digest`` cover every record (query, output, exclusion) so a reader can check
that every one arrived.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any, NamedTuple

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from ragtrail.contract import columns as codec
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import (
    StageReceipt,
    digest_item,
    keyed_receipt,
    records_digest,
    sorted_events_digest,
    sorted_keys_digest,
    stage_receipt_of,
)
from ragtrail.recorder.candidates import Candidate
from ragtrail.recorder.exclusions import Exclusion
from ragtrail.recorder.pipeline import PipelineState, QueryRecord
from ragtrail.recorder.sdk_events import Event, add_events
from ragtrail.recorder.values import attribute_value, wire_str, wire_text
from ragtrail.settings import CaptureSettings

__all__ = ["Columns", "EventBuilder", "Records", "capacity", "count", "digest", "emit", "query_attributes", "receipt"]

_EVENT_ROOM = 2  # SDK event slots left free on a stage span: an exception event and one other


def query_attributes(query: QueryRecord, config: CaptureSettings) -> dict[str, Any]:
    """A query's attributes, the same on the stage span and on a ``ragtrail.query`` event."""
    attributes: dict[str, Any] = {sc.QUERY_HOP: query.hop, sc.QUERY_TRANSFORM: query.transform}
    if query.parent is not None:
        attributes[sc.QUERY_PARENT_HOP] = query.parent
    if not config.query_receipt_allowed():
        return attributes
    key = config.query_receipt_key()
    stamped = query.receipt if key is None else keyed_receipt(query.text, key)
    attributes.update(stamped.as_attributes(sc.QUERY_RECEIPT_PREFIX))
    if config.query_text_allowed():
        attributes[sc.QUERY_TEXT] = wire_text(query.text)
    return attributes


class Records(NamedTuple):
    """The digest items of one group of records, by column: item ``i`` is ``(name, ids[i],
    shas[i])`` (a produced query's: ``hop:<n>`` and its sha256; a row's: its id and its content
    sha256, ``""`` when not stated). One per group, not a tuple per record: fewer objects for the
    host's garbage collector to count while a stage is written."""

    name: str
    ids: Sequence[Any]
    shas: Sequence[Any]


class Columns(NamedTuple):
    """A stage's candidates as the wire carries them (schema 3): the output columns for the stage
    span, the events (one per produced query, one per exclusion reason), and the digest items of
    every record (produced query, output, exclusion) that ``ragtrail.events.count``/``.digest`` cover."""

    span_attributes: dict[str, Any]
    events: list[Event]
    items: list[Records]


class EventBuilder:
    """Builds one stage's columns and events under the capture settings in force."""

    def __init__(
        self,
        config: CaptureSettings,
        default_score_kind: str | None,
        state: PipelineState | None = None,
        span_id: str | None = None,
        *,
        schema: int = sc.SCHEMA_VERSION,
    ) -> None:
        self.config = config
        # the wire schema whose column rules are written: the current one (an older accepted one only
        # in tests, to check that the reader reads what that schema's writer wrote)
        self.schema = schema
        self.default_score_kind = default_score_kind
        # schema 4: rows whose content an earlier stage of ``state`` already wrote point to it
        # (``content.from``) instead of restating chars, bytes and sha256; ``span_id`` is this stage's
        self.state = state
        self.span_id = span_id
        self.content_key: str | None = None
        if config.content_for("") is not None:  # content capture is on: preview or full
            self.content_key = sc.COLUMN_CONTENT_PREVIEW if config.content_is_preview() else sc.COLUMN_CONTENT_TEXT

    def build(self, variants: Sequence[QueryRecord], outputs: Sequence[Candidate], exclusions: Sequence[Exclusion]) -> Columns:
        config = self.config
        events: list[Event] = [(sc.EVENT_QUERY, query_attributes(v, config)) for v in variants]
        items = [Records(name, [ident], [sha]) for name, ident, sha in (digest_item(n, a) for n, a in events)]
        span_attributes = self.columns(outputs, self.default_score_kind, None)
        if self.state is not None and self.span_id is not None and sc.COLUMN_CONTENT_SHA256 in span_attributes:
            # these outputs' receipts are written here: later stages may point to this span
            remember = self.state.remember_content
            for c in outputs:
                r = c.receipt
                if r is not None:
                    remember(c.id, r.sha256, self.span_id)
        ids = span_attributes.get(sc.COLUMN_IDS, ())
        items.append(Records(sc.EVENT_CANDIDATE, ids, span_attributes.get(sc.COLUMN_CONTENT_SHA256) or [""] * len(ids)))
        groups: dict[str, list[Exclusion]] = {}
        for exclusion in exclusions:
            group = groups.get(exclusion.reason)
            if group is None:
                group = groups[exclusion.reason] = []
            group.append(exclusion)
        for reason, group in groups.items():
            attributes = self.columns([e.candidate for e in group], None, [e.rank if e.rank >= 0 else -1 for e in group])
            details = [wire_str(e.detail) if e.detail is not None else "" for e in group]
            codec.encode_details(attributes, details, self.schema)
            # the reason last: under a tight event attribute limit the SDK evicts the oldest first,
            # and the reason is what TraceQL searches ({ event.ragtrail.exclusion.reason = "..." })
            attributes[sc.EXCLUSION_REASON] = reason
            events.append((sc.EVENT_EXCLUSION, attributes))
            ids = attributes[sc.COLUMN_IDS]
            items.append(Records(sc.EVENT_EXCLUSION, ids, attributes.get(sc.COLUMN_CONTENT_SHA256) or [""] * len(ids)))
        return Columns(span_attributes, events, items)

    def columns(self, candidates: Sequence[Candidate], default_kind: str | None, ranks: list[int] | None) -> dict[str, Any]:
        """The columns of ``candidates`` in their order, each written by its rule in
        ``ragtrail.contract.columns`` (docs/semconv.md §3): here the rows become wire values."""
        if not candidates:
            return {}
        out: dict[str, Any] = {}
        codec.encode_ids(out, [wire_str(c.id) for c in candidates])
        if ranks is not None:
            codec.encode_ranks(out, ranks, self.schema)
        codec.encode_scores(out, [c.score for c in candidates])
        fallback = default_kind or sc.SCORE_NONE
        codec.encode_kinds(out, [c.score_kind or fallback for c in candidates])
        codec.encode_hops(out, [-1 if c.hop is None else c.hop for c in candidates])
        receipts = [c.receipt for c in candidates]
        source = self._content_source(candidates, receipts)
        if source is not None:
            codec.encode_content_from(out, source)
        elif any(r is not None for r in receipts):
            codec.encode_receipts(out, receipts, self.schema)
            if self.content_key is not None:
                content_for = self.config.content_for
                codec.encode_payload(
                    out,
                    self.content_key,
                    [(content_for(wire_text(c.content)) or "") if r is not None else "" for c, r in zip(candidates, receipts, strict=True)],
                )
        codec.encode_text(out, sc.COLUMN_TRANSFORM_RULE, [c.transform_rule or "" for c in candidates])
        codec.encode_text(out, sc.COLUMN_TRANSFORM_DERIVED_FROM, [c.derived_from or "" for c in candidates])
        keys = self.config.metadata
        if keys:
            metas = [c.metadata for c in candidates]
            cell = codec.meta_cell
            for key in keys:
                codec.encode_meta(out, key, [cell(attribute_value(m[key])) if m and key in m else "" for m in metas])
        return out

    def _content_source(self, candidates: Sequence[Candidate], receipts: list[Any]) -> str | None:
        """The span id every row's content receipt can be read from (docs/semconv.md §3, schema 4):
        only when content capture is off (a captured preview or text is checked against its own
        row's receipt), every row has a receipt, and one earlier stage wrote exactly that receipt
        for every row's id on its outputs; else ``None`` (the rows state their receipts)."""
        state = self.state
        if state is None or self.content_key is not None or not candidates or self.schema < sc.SCHEMA_CONTENT_FROM:
            return None
        source: str | None = None
        lookup = state.content_source
        for c, r in zip(candidates, receipts, strict=True):
            if r is None:
                return None
            known = lookup(c.id)
            if known is None or known[0] != r.sha256 or (source is not None and known[1] != source):
                return None
            source = known[1]
        return source if source != self.span_id else None


def count(items: Sequence[Records]) -> int:
    """``ragtrail.events.count``: how many records the groups hold."""
    return sum(min(len(group.ids), len(group.shas)) for group in items)


def digest(items: Sequence[Records]) -> str:
    """``ragtrail.events.digest`` over every record's digest item (the contract's rule, schema 2 on:
    in sorted order, so a backend that reorders events does not change it). The groups' items as the
    NUL-joined texts the contract's fast path sorts, made as strings (no tuple per record) when every
    part is a string; else, or when the fast path declines, the items themselves."""
    made = records_digest(items)
    if made is not None:
        return made
    keys: list[str] | None = []
    for name, ids, shas in items:
        if keys is not None and set(map(type, ids)) <= _STR and set(map(type, shas)) <= _STR and len(ids) <= len(shas):
            keys.extend(map(_NUL.join, zip(repeat(name), ids, shas)))
        else:
            keys = None
    text = sorted_keys_digest(keys) if keys else None
    if text is not None:
        return text
    return sorted_events_digest([item for name, ids, shas in items for item in zip([name] * len(ids), ids, shas, strict=False)])


_STR = frozenset({str})
_NUL = "\x00"


def receipt(span_attributes: Any, events: Sequence[Event], key: bytes | None) -> StageReceipt:
    """The stage receipt (``ragtrail.stage.receipt`` and ``.fields``) over the stage's span
    attributes as written and its events (the contract's stage-field rule)."""
    return stage_receipt_of(span_attributes, events, key)


def capacity(configured: int | None, limits: Any) -> int | None:
    """How many ragtrail events one span may carry: the configured cap, never more than the SDK's
    event limit less the room kept free (``None``: unbounded)."""
    sdk_limit: int | None = getattr(limits, "max_events", None)
    if sdk_limit is None:
        return configured
    sdk_capacity = max(1, sdk_limit - _EVENT_ROOM)
    return sdk_capacity if configured is None else min(configured, sdk_capacity)


def emit(
    span: Any,
    events: list[Event],
    room: int | None,
    tracer: trace.Tracer,
    name: str,
    kind: str,
    component: str,
    continuation: Callable[[int, int, int, int, int], dict[str, Any]] | None = None,
) -> int:
    """Add the events, spilling into continuation child spans so the SDK never evicts any.
    Returns how many spans carry the stage's events. ``continuation(index, parts, first, last,
    total)`` gives a continuation span's mirror attributes (``None``: none)."""
    if room is None or len(events) <= room:
        add_events(span, events)
        return 1
    chunks = [events[i : i + room] for i in range(0, len(events), room)]
    add_events(span, chunks[0])
    parent = trace.set_span_in_context(span)
    for index, chunk in enumerate(chunks[1:], start=1):
        first = index * room + 1
        mirror = {} if continuation is None else continuation(index, len(chunks), first, first + len(chunk) - 1, len(events))
        child = tracer.start_span(
            name,
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes={
                **mirror,
                sc.SCHEMA: sc.SCHEMA_VERSION,
                sc.STAGE_KIND: kind,
                sc.STAGE_COMPONENT: component,
                sc.STAGE_CONTINUATION: True,
                sc.STAGE_CONTINUATION_INDEX: index,
            },
        )
        add_events(child, chunk)
        child.set_attribute(sc.EVENTS_COUNT, len(chunk))
        child.end()
    return len(chunks)
