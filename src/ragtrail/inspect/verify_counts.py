"""Count and stage-receipt checks: events against ``ragtrail.events.count`` and ``.digest``, continuation
spans against ``ragtrail.events.spans``, every semantic field against ``ragtrail.stage.receipt``, spans
against ``ragtrail.trace.span_count``, and the SDK's dropped counts."""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any, NamedTuple

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import (
    ALG_HMAC_SHA256,
    CHANGED_UNCITED,
    UNVERIFIABLE,
    changed_fields,
    digest_item,
    events_digest,
    parse_field_digests,
    receipt_algorithm,
    sorted_events_digest,
    stage_fields,
    stage_receipt,
)

from . import columns
from .fidelity import Ledger, Where
from .model import Span
from .stages import StageView, Stitched, continuation_index, emission_order, schema_of


class Claim(NamedTuple):
    """A span naming its segment's root, and the span count it states (-1 when it is not an int)."""

    span: Span
    stated: int


class Segments(NamedTuple):
    """The trace's spans indexed for the span count: by id, by parent, the spans naming each segment root
    (with the count each states, -1 when it is not an int), and the roots that stamped a count."""

    by_id: dict[str, Span]
    children: dict[str, list[Span]]
    claims: dict[str, list[Claim]]
    roots: dict[str, Span]


def _resource_key(span: Span) -> tuple[Any, Any]:
    return span.resource.get("service.name"), span.resource.get("service.instance.id")


def _first_bad(items: list[tuple[str, str, Any]]) -> str:
    for _, cid, sha in items:
        if sha and (not isinstance(sha, str) or len(sha) != 64):
            return cid
    return ""


def _digest_matches(schema: int, items: list[tuple[str, str, str]], received: list[Any], digest: str) -> bool:
    """Schema 2 digests are over sorted items. A schema 1 digest is over emission order: the order
    received, or (a backend that sorted the events, as Jaeger v2 does) the emission order restored."""
    if schema >= 2:
        return sorted_events_digest(items) == digest
    if events_digest(items) == digest:
        return True
    restored = [digest_item(e.name, e.attributes) for _, e in emission_order(received)]
    return restored != items and events_digest(restored) == digest


class CountChecks:
    """The event, stage-receipt, span and dropped-count checks of one trace, written to its ledger."""

    def __init__(self, ledger: Ledger, stitched: Stitched, key: bytes | None) -> None:
        self.ledger = ledger
        self.trace = ledger.trace
        self.f = ledger.f
        self.stitched = stitched
        self.key = key

    def alarm(self, span: Span, stage: str, field_name: str, problem: str, detail: str = "") -> None:
        """An alarm on a stage (no candidate)."""
        self.ledger.alarm(Where(span, stage), field_name, problem, detail)

    # --- events ------------------------------------------------------------------------------------
    def continuations(self, view: StageView) -> None:
        """Continuation spans announced but missing, and events missing from those that arrived."""
        label = view.label
        announced = view.attributes.get(sc.EVENTS_SPANS, 1)
        if type(announced) is int and announced > 1:
            have = {i for i in map(continuation_index, view.continuations) if i is not None and 0 < i < announced}
            n_missing = announced - 1 - len(have)  # counted, not listed: the announced number is untrusted
            if n_missing:
                first = [str(i) for i in itertools.islice((i for i in range(1, announced) if i not in have), 5)]
                self.f.missing_spans += n_missing
                self.alarm(
                    view.span,
                    label,
                    sc.EVENTS_SPANS,
                    "missing continuation spans",
                    f"{n_missing} of {announced - 1} missing (index {', '.join(first)})",
                )
        for cont in view.continuations:
            own = cont.attributes.get(sc.EVENTS_COUNT)
            got = sum(1 for e in cont.events if e.name in (sc.EVENT_CANDIDATE, sc.EVENT_EXCLUSION, sc.EVENT_QUERY))
            if isinstance(own, int) and got < own:
                self.alarm(cont, label, sc.EVENTS_COUNT, "missing events in continuation", f"{got} of {own} arrived")

    def events(self, view: StageView) -> None:
        """The stage's events against their stamped count and digest."""
        self.continuations(view)
        label = view.label
        attrs = view.attributes
        received = view.events()
        stamped = attrs.get(sc.EVENTS_COUNT)
        if not isinstance(stamped, int):
            self.alarm(view.span, label, sc.EVENTS_COUNT, UNVERIFIABLE, "the stage's event count is missing: its events cannot be checked")
            return
        if len(received) < stamped:
            self.f.missing_events += stamped - len(received)
        if len(received) != stamped:
            self.alarm(view.span, label, sc.EVENTS_COUNT, "event count mismatch", f"{len(received)} received, {stamped} stamped")
        digest = attrs.get(sc.EVENTS_DIGEST)
        items = [digest_item(event.name, event.attributes) for _, event in received]
        if not (isinstance(digest, str) and len(digest) == 64):
            self.alarm(view.span, label, sc.EVENTS_DIGEST, UNVERIFIABLE, "digest missing or damaged")
        elif len(received) == stamped and not _digest_matches(schema_of(view.span), items, received, digest):
            self.ledger.alarm(
                Where(view.span, label, _first_bad(items)),
                sc.EVENTS_DIGEST,
                "events changed in transit",
                "ids or content receipts differ from what the stage emitted",
            )

    # --- stage receipts ----------------------------------------------------------------------------
    def stage_receipt(self, view: StageView) -> None:
        """Schema 2: every semantic field of the stage against ``ragtrail.stage.receipt``; a change
        names the fields whose ``ragtrail.stage.receipt.fields`` digest no longer matches."""
        if schema_of(view.span) < 2:
            return
        label = view.label
        attrs = view.attributes
        if attrs.get(sc.EVENTS_COUNT) != len(view.events()):
            return  # events lost or added: already an alarm, and the receipt cannot match what arrived
        # fields an earlier check already named on this stage (a receipt that does not match its
        # payload, a cut sha256) are not named twice
        named = {a.field for a in self.f.alarms if a.stage == label and a.trace_id == self.trace.trace_id}
        stamped = attrs.get(sc.STAGE_RECEIPT)
        checkable, key = self.receipt_key(view, receipt_algorithm(stamped))
        if not checkable:
            return
        fields = stage_fields(attrs, [(e.name, e.attributes) for _, e in view.wire_events()])
        computed = stage_receipt(fields, key)
        if computed.receipt == stamped:
            received_fields = attrs.get(sc.STAGE_RECEIPT_FIELDS)
            # the field digests only locate a change: one cut by a value-length limit is harmless
            if not (isinstance(received_fields, str) and computed.fields.startswith(received_fields)):
                self.alarm(
                    view.span,
                    label,
                    sc.STAGE_RECEIPT_FIELDS,
                    CHANGED_UNCITED,
                    "the per-field digests were changed after the producer (the fields themselves match)",
                )
            return
        self.changed(view, fields, key, named)

    def receipt_key(self, view: StageView, alg: str | None) -> tuple[bool, bytes | None]:
        """Whether the stage receipt can be checked, and with which key (``None``: unkeyed sha256)."""
        label = view.label
        if alg is None:
            self.alarm(
                view.span, label, sc.STAGE_RECEIPT, UNVERIFIABLE, "the stage receipt is missing or damaged: the stage's fields cannot be checked"
            )
            return False, None
        if alg == ALG_HMAC_SHA256 and self.key is None:
            self.f.count(UNVERIFIABLE)
            self.alarm(
                view.span,
                label,
                sc.STAGE_RECEIPT,
                UNVERIFIABLE,
                "the receipt is keyed (hmac-sha256) and cannot be checked without the key: pass --key-file",
            )
            return False, None
        if alg != ALG_HMAC_SHA256 and self.key is not None:
            # verify was given a key: an unkeyed receipt is what a forger without the key would write
            self.alarm(
                view.span,
                label,
                sc.STAGE_RECEIPT,
                CHANGED_UNCITED,
                "the receipt is unkeyed (sha256) but a key was given: restamped without the key, or the producer ran without RAGTRAIL_RECEIPT_KEY",
            )
            return False, None
        return True, self.key if alg == ALG_HMAC_SHA256 else None

    def changed(self, view: StageView, fields: dict[str, Any], key: bytes | None, named: set[str]) -> None:
        """A stage receipt that does not match: name the fields whose digests say they changed."""
        label = view.label
        stamped_fields = parse_field_digests(view.attributes.get(sc.STAGE_RECEIPT_FIELDS))
        changed = changed_fields(fields, stamped_fields, key)
        if len(changed) > 1 and len(changed) == len(set(fields) | set(stamped_fields)):
            # not one field digest matches: the digests were made by another key (or none)
            self.alarm(
                view.span,
                label,
                sc.STAGE_RECEIPT,
                CHANGED_UNCITED,
                "changed after the producer: every field digest differs, the receipt was restamped "
                + ("without the key" if key is not None else "or damaged"),
            )
            return
        if not changed and named:
            return  # the change is one an earlier check named (the field digests that would say so were cut)
        if not changed:
            why = (
                "the key does not match the producer's, or the fields and their digests were restamped"
                if key is not None
                else "the fields and their digests were restamped"
            )
            self.alarm(view.span, label, sc.STAGE_RECEIPT, CHANGED_UNCITED, f"changed after the producer: {why}")
            return
        for name in changed:
            wire = name if name.startswith("candidate.meta") else name.removeprefix("event.")
            field_name = "ragtrail." + wire
            if field_name in named or columns.RECORD_NAMES.get(field_name) in named:
                continue  # named already (schema 3: by the decoded record's name)
            if field_name in (sc.CANDIDATE_CONTENT_PREVIEW, sc.COLUMN_CONTENT_PREVIEW):
                self.f.count(CHANGED_UNCITED)  # a preview that is not the producer's: not its prefix
            where = "on an event" if name.startswith(("event.", "candidate.meta")) else "on the stage span"
            state = "missing" if name not in fields else "added" if name not in stamped_fields else "changed"
            self.alarm(view.span, label, field_name, CHANGED_UNCITED, f"{state} after the producer ({where}; stage receipt mismatch)")

    # --- spans -------------------------------------------------------------------------------------
    def dropped(self) -> None:
        """The SDK's evictions: counted over every span, an alarm on ragtrail's own spans."""
        if not self.trace.keeps_dropped_counts:
            self.f.dropped_attributes = self.f.dropped_events = None
            return
        views = [*self.stitched.stages, *self.stitched.pipelines]
        ragtrail_ids = {v.span.span_id for v in views} | {c.span_id for v in views for c in v.continuations}
        labels = {v.span.span_id: v.label for v in views}
        for span in self.trace.spans:
            ours = span.span_id in ragtrail_ids
            label = labels.get(span.span_id, span.name)
            if span.dropped_events:
                self.f.dropped_events = (self.f.dropped_events or 0) + span.dropped_events
                if ours:
                    self.alarm(span, label, "droppedEventsCount", "events evicted by the SDK", f"{span.dropped_events} dropped")
            if span.dropped_attributes:
                self.f.dropped_attributes = (self.f.dropped_attributes or 0) + span.dropped_attributes
                if ours:
                    self.alarm(span, label, "droppedAttributesCount", "attributes evicted by the SDK", f"{span.dropped_attributes} dropped")
            for event in span.events:
                if event.dropped_attributes and ours:
                    self.f.dropped_attributes = (self.f.dropped_attributes or 0) + event.dropped_attributes
                    self.ledger.alarm(
                        Where(span, label, str(event.attributes.get(sc.CANDIDATE_ID, ""))),
                        "event.droppedAttributesCount",
                        "event attributes evicted by the SDK",
                        f"{event.dropped_attributes} dropped from {event.name}",
                    )
            errors = span.attributes.get(sc.STAGE_INSTRUMENTATION_ERRORS)
            if ours and isinstance(errors, int) and errors > 0:
                self.alarm(span, label, sc.STAGE_INSTRUMENTATION_ERRORS, "recorder errors", f"{errors} internal errors: the record may be incomplete")

    def segments(self) -> Segments:
        by_id = {s.span_id: s for s in self.trace.spans}
        children: dict[str, list[Span]] = defaultdict(list)
        claims: dict[str, list[Claim]] = defaultdict(list)
        for s in self.trace.spans:
            if s.parent_span_id:
                children[s.parent_span_id].append(s)
            root_id, count = s.attributes.get(sc.TRACE_SEGMENT_ROOT), s.attributes.get(sc.TRACE_SEGMENT_SPAN_COUNT)
            if isinstance(root_id, str) and root_id:
                claims[root_id.lower()].append(Claim(s, count if type(count) is int else -1))
        roots = {s.span_id: s for s in self.trace.spans if isinstance(s.attributes.get(sc.TRACE_SPAN_COUNT), int)}
        return Segments(by_id, children, claims, roots)

    def span_count(self) -> None:
        """Each exported segment's spans against its stamped count. The count is on the local root
        (``ragtrail.trace.span_count``) and, schema 2, on every other ragtrail span of the segment
        with the root's id: a missing root, a missing span or a lowered count is an alarm even when
        the root never arrived."""
        seg = self.segments()
        if not seg.roots and not seg.claims:
            self.f.notes.append(
                "no ragtrail.trace.span_count stamped: whole spans lost in export cannot be counted (export through ragtrail's whole-trace processor)"
            )
            return
        for root_id in [*seg.roots, *(r for r in seg.claims if r not in seg.roots)]:
            self.segment(seg, root_id)
        missing_parents = {s.parent_span_id for s in self.trace.spans if s.parent_span_id and s.parent_span_id not in seg.by_id}
        if missing_parents and len(missing_parents) > 1:
            self.f.notes.append(f"{len(missing_parents)} parent spans referenced but not in the trace")

    def segment(self, seg: Segments, root_id: str) -> None:
        """One segment: its root, the counts its spans state, and the spans that arrived under it."""
        root = seg.roots.get(root_id)
        members = seg.claims.get(root_id, [])
        pin = root or members[0].span
        label = str(pin.attributes.get(sc.STAGE_KIND, pin.name))
        counts = [Claim(root, root.attributes[sc.TRACE_SPAN_COUNT])] if root is not None else []
        counts += members
        stamped = max(c.stated for c in counts)
        if root is None:
            self.f.missing_spans += 1
            present = seg.by_id.get(root_id)
            problem = "root span missing" if present is None else "root span count missing"
            detail = (
                f"{len(members)} spans name root {root_id}, which did not arrive"
                if present is None
                else f"root {root_id} arrived without {sc.TRACE_SPAN_COUNT}"
            )
            self.alarm(pin, label, sc.TRACE_SEGMENT_ROOT, problem, detail)
        for claim in counts:
            if claim.stated != stamped:
                field_name = sc.TRACE_SPAN_COUNT if claim.span is root else sc.TRACE_SEGMENT_SPAN_COUNT
                self.alarm(
                    claim.span,
                    str(claim.span.attributes.get(sc.STAGE_KIND, claim.span.name)),
                    field_name,
                    "span count changed",
                    f"{claim.stated} here, {stamped} on another span of the segment",
                )
        seen = self.arrived(seg, root_id, pin, 1 if root is not None or root_id in seg.by_id else 0)
        unreached = sum(1 for c in members if c.span.parent_span_id and c.span.parent_span_id not in seg.by_id and c.span.parent_span_id != root_id)
        missing = stamped - seen - (1 if root is None else 0)  # a missing root is counted above
        if missing > 0:
            self.f.missing_spans += missing
            self.alarm(
                pin,
                label,
                sc.TRACE_SPAN_COUNT,
                "missing spans",
                f"{seen} received, {stamped} stamped" + (f" ({unreached} under a span that did not arrive)" if unreached else ""),
            )
        elif seen > stamped:
            self.f.notes.append(f"span {pin.span_id}: {seen} spans received for {stamped} stamped (late spans, or spans of another process under it)")

    @staticmethod
    def arrived(seg: Segments, root_id: str, pin: Span, seen: int) -> int:
        """``seen`` plus the spans of the segment that arrived under its root (same process, no other root)."""
        key = _resource_key(pin)
        stack = list(seg.children.get(root_id, ()))
        while stack:
            span = stack.pop()
            if _resource_key(span) != key or isinstance(span.attributes.get(sc.TRACE_SPAN_COUNT), int):
                continue
            other = span.attributes.get(sc.TRACE_SEGMENT_ROOT)
            if isinstance(other, str) and other.lower() != root_id:
                continue
            seen += 1
            stack.extend(seg.children.get(span.span_id, ()))
        return seen

    def orphans(self) -> None:
        for span in self.stitched.orphans:
            self.f.missing_spans += 1
            self.alarm(
                span,
                f"{span.attributes.get(sc.STAGE_KIND)} {span.attributes.get(sc.STAGE_COMPONENT)}",
                sc.STAGE_CONTINUATION,
                "stage span missing",
                f"continuation {span.attributes.get(sc.STAGE_CONTINUATION_INDEX)} arrived without its stage span",
            )


__all__ = ["Claim", "CountChecks", "Segments"]
