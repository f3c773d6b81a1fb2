"""A stage's events (docs/semconv.md §2-3): build them, digest them, and spill them over spans.

One ``ragtrail.query`` event per query the stage produced, one ``ragtrail.candidate`` per output
and one ``ragtrail.exclusion`` per excluded input. When they do not fit on one span (the SDK's
event limit, or ``RAGTRAIL_EVENTS_PER_SPAN``) they spill into continuation child spans rather than
letting the SDK evict the top-ranked candidates; ``ragtrail.events.count`` and
``ragtrail.events.digest`` let a reader check that every one arrived.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import (StageReceipt, digest_item, finite_or_none, sorted_events_digest, stage_fields,
                                        stage_receipt)
from ragtrail.recorder.candidates import Candidate
from ragtrail.recorder.exclusions import Exclusion
from ragtrail.recorder.pipeline import QueryRecord
from ragtrail.recorder.sdk_events import Event, add_events
from ragtrail.recorder.values import attribute_value, score_text, wire_str, wire_text
from ragtrail.settings import CaptureSettings

_EVENT_ROOM = 2  # SDK event slots left free on a stage span: an exception event and one other


def query_attributes(query: QueryRecord, config: CaptureSettings) -> dict[str, Any]:
    """A query's attributes, the same on the stage span and on a ``ragtrail.query`` event."""
    attributes: dict[str, Any] = {sc.QUERY_HOP: query.hop, sc.QUERY_TRANSFORM: query.transform}
    if query.parent is not None:
        attributes[sc.QUERY_PARENT_HOP] = query.parent
    if not config.query_receipt_allowed():
        return attributes
    attributes.update(query.receipt.as_attributes(sc.QUERY_RECEIPT_PREFIX))
    if config.query_text_allowed():
        attributes[sc.QUERY_TEXT] = wire_text(query.text)
    return attributes


class EventBuilder:
    """Builds one stage's event attributes under the capture settings in force."""

    def __init__(self, config: CaptureSettings, default_score_kind: str | None) -> None:
        self.config = config
        self.default_score_kind = default_score_kind
        self.content_key: str | None = None
        if config.content_for("") is not None:  # content capture is on: preview or full
            self.content_key = sc.CANDIDATE_CONTENT_PREVIEW if config.content_is_preview() else sc.CANDIDATE_CONTENT_TEXT

    def events(self, variants: Sequence[QueryRecord], outputs: Sequence[Candidate],
               exclusions: Sequence[Exclusion]) -> list[Event]:
        config = self.config
        events: list[Event] = [(sc.EVENT_QUERY, query_attributes(v, config)) for v in variants]
        kind = self.default_score_kind
        for rank, candidate in enumerate(outputs):
            events.append((sc.EVENT_CANDIDATE, self.candidate(candidate, rank, kind)))
        for rank, candidate, reason, detail in exclusions:
            attributes = self.candidate(candidate, rank, None)
            if rank < 0:
                del attributes[sc.CANDIDATE_RANK]
            attributes[sc.EXCLUSION_REASON] = reason
            if detail is not None:
                attributes[sc.EXCLUSION_DETAIL] = wire_str(detail)
            events.append((sc.EVENT_EXCLUSION, attributes))
        return events

    def candidate(self, candidate: Candidate, rank: int, default_kind: str | None) -> dict[str, Any]:
        """One candidate's attributes: id, rank, score, hop, content receipt, captured content,
        transform rule and the captured metadata keys."""
        attributes: dict[str, Any] = {sc.CANDIDATE_ID: wire_str(candidate.id), sc.CANDIDATE_RANK: rank}
        if candidate.score is not None:
            score = finite_or_none(candidate.score)
            if score is not None:
                attributes[sc.CANDIDATE_SCORE] = score
            else:
                attributes[sc.CANDIDATE_SCORE_RAW] = score_text(candidate.score)
        attributes[sc.CANDIDATE_SCORE_KIND] = candidate.score_kind or default_kind or sc.SCORE_NONE
        if candidate.hop is not None:
            attributes[sc.CANDIDATE_HOP] = candidate.hop
        rec = candidate.receipt
        if rec is not None:
            attributes[sc.CANDIDATE_CONTENT_CHARS] = rec.chars
            attributes[sc.CANDIDATE_CONTENT_BYTES] = rec.bytes
            attributes[sc.CANDIDATE_CONTENT_SHA256] = rec.sha256
            if self.content_key is not None:
                attributes[self.content_key] = self.config.content_for(wire_text(candidate.content))
        if candidate.transform_rule:
            attributes[sc.CANDIDATE_TRANSFORM_RULE] = candidate.transform_rule
        if candidate.derived_from:
            attributes[sc.CANDIDATE_TRANSFORM_DERIVED_FROM] = candidate.derived_from
        metadata = candidate.metadata
        if metadata and self.config.metadata:
            for key in self.config.metadata:
                if key in metadata:
                    attributes[sc.CANDIDATE_META_PREFIX + key] = attribute_value(metadata[key])
        return attributes


def digest(events: Sequence[Event]) -> str:
    """``ragtrail.events.digest`` over the events (the contract's digest-item rule, schema 2: in
    sorted order, so a backend that reorders events does not change it)."""
    return sorted_events_digest([digest_item(name, attributes) for name, attributes in events])


def receipt(span_attributes: Any, events: Sequence[Event], key: bytes | None) -> StageReceipt:
    """The stage receipt (``ragtrail.stage.receipt`` and ``.fields``) over the stage's span
    attributes as written and its events (the contract's stage-field rule)."""
    return stage_receipt(stage_fields(span_attributes, events), key)


def capacity(configured: int | None, limits: Any) -> int | None:
    """How many ragtrail events one span may carry: the configured cap, never more than the SDK's
    event limit less the room kept free (``None``: unbounded)."""
    sdk_limit = getattr(limits, "max_events", None)
    if sdk_limit is None:
        return configured
    sdk_capacity = max(1, sdk_limit - _EVENT_ROOM)
    return sdk_capacity if configured is None else min(configured, sdk_capacity)


def emit(span: Any, events: list[Event], room: int | None, tracer: trace.Tracer, name: str,
         kind: str, component: str,
         continuation: Callable[[int, int, int, int, int], dict[str, Any]] | None = None) -> int:
    """Add the events, spilling into continuation child spans so the SDK never evicts any.
    Returns how many spans carry the stage's events. ``continuation(index, parts, first, last,
    total)`` gives a continuation span's mirror attributes (``None``: none)."""
    if room is None or len(events) <= room:
        add_events(span, events)
        return 1
    chunks = [events[i:i + room] for i in range(0, len(events), room)]
    add_events(span, chunks[0])
    parent = trace.set_span_in_context(span)
    for index, chunk in enumerate(chunks[1:], start=1):
        first = index * room + 1
        mirror = {} if continuation is None else continuation(index, len(chunks), first,
                                                              first + len(chunk) - 1, len(events))
        child = tracer.start_span(name, context=parent, kind=SpanKind.INTERNAL, attributes={
            **mirror,
            sc.SCHEMA: sc.SCHEMA_VERSION,
            sc.STAGE_KIND: kind,
            sc.STAGE_COMPONENT: component,
            sc.STAGE_CONTINUATION: True,
            sc.STAGE_CONTINUATION_INDEX: index,
        })
        add_events(child, chunk)
        child.set_attribute(sc.EVENTS_COUNT, len(chunk))
        child.end()
    return len(chunks)
