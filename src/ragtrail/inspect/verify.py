"""Fidelity: is what arrived what the producer stamped? Pure arithmetic over receipts and counts.

Checks, each producing an alarm that names trace, span, stage, candidate and field:

* every receipt (query text, candidate content) classified with :func:`ragtrail.contract.receipts.classify`:
  the received preview/text against its receipt, or, when no payload was captured, the receipt
  against the same candidate's receipt one stage upstream (a change there needs a transform rule
  whose ``derived_from`` is the upstream sha256);
* a stage's events counted against ``ragtrail.events.count`` and hashed against
  ``ragtrail.events.digest``, continuation spans against ``ragtrail.events.spans``;
* spans counted against ``ragtrail.trace.span_count`` on each exported segment's local root;
* dropped counts (the SDK's evictions) and a backend's partial flag (Tempo ``status: PARTIAL``).

The producer's stamps are never recomputed or trusted beyond arithmetic: nothing here imports the
recorder.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import (ALG_HMAC_SHA256, CHANGED_CITED, CHANGED_UNCITED, INTACT, PREVIEW_RULE,
                                        UNVERIFIABLE, Receipt, changed_fields, classify, digest_item, events_digest,
                                        is_count, is_sha256_hex, parse_field_digests, receipt_algorithm, receipt_keys,
                                        parse_rule, sorted_events_digest, stage_fields, stage_receipt)

from .model import Span, Trace
from . import columns
from .stages import StageView, Stitched, continuation_index, emission_order, schema_of

_SEVERITY = (INTACT, CHANGED_CITED, UNVERIFIABLE, CHANGED_UNCITED)
# stages whose outputs are what the stages inside them produced (checked after those, see receipts)
_GATHERING = (sc.KIND_RETRIEVE, sc.KIND_FUSE)
# an output handed on: (start, end, span, stage label, event attributes, stage kind, first counted as not captured)
_Handed = tuple[int, int, Span, str, dict[str, Any], str, bool]


@dataclass
class Alarm:
    """One fidelity problem, precise enough to find the byte that changed."""

    trace_id: str
    span_id: str
    stage: str
    candidate: str
    field: str
    problem: str
    detail: str = ""

    def line(self) -> str:
        """The one line ``ragtrail verify`` prints per alarm."""
        cand = self.candidate or "-"
        detail = f" ({self.detail})" if self.detail else ""
        return (f"ALARM trace={self.trace_id} span={self.span_id} stage={self.stage or '-'} "
                f"candidate={cand} field={self.field}: {self.problem}{detail}")

    def as_dict(self) -> dict[str, str]:
        return {"trace_id": self.trace_id, "span_id": self.span_id, "stage": self.stage,
                "candidate": self.candidate, "field": self.field, "problem": self.problem, "detail": self.detail}


@dataclass
class Fidelity:
    intact: int = 0
    changed_cited: int = 0
    changed_uncited: int = 0
    unverifiable: int = 0
    not_captured: int = 0
    missing_events: int = 0
    missing_spans: int = 0
    dropped_attributes: int | None = 0
    dropped_events: int | None = 0
    partial: bool = False
    alarms: list[Alarm] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def count(self, verdict: str) -> None:
        setattr(self, verdict, getattr(self, verdict) + 1)

    def as_dict(self) -> dict[str, Any]:
        return {
            "intact": self.intact, "changed_cited": self.changed_cited, "changed_uncited": self.changed_uncited,
            "unverifiable": self.unverifiable, "not_captured": self.not_captured,
            "missing_events": self.missing_events, "missing_spans": self.missing_spans,
            "dropped_attributes": self.dropped_attributes, "dropped_events": self.dropped_events,
            "partial": self.partial, "alarms": [a.as_dict() for a in self.alarms], "notes": list(self.notes),
        }


def _receipt(attributes: dict[str, Any], prefix: str) -> Receipt | None:
    return Receipt.from_attributes(attributes, prefix)


def _describe(received: Any, original: Receipt | None) -> str:
    if original is None:
        return "no receipt"
    if not original.well_formed:
        return f"damaged receipt (sha256 {str(original.sha256)[:16]}…, {len(str(original.sha256))} chars)"
    got = len(received) if isinstance(received, str) else "?"
    return f"received {got} chars, receipt {original.chars} chars"


class _Checker:
    def __init__(self, trace: Trace, stitched: Stitched, key: bytes | None = None) -> None:
        self.trace = trace
        self.stitched = stitched
        self.key = key
        self.f = Fidelity(partial=trace.partial)

    def alarm(self, span: Span, stage: str, candidate: str, field_name: str, problem: str, detail: str = "") -> None:
        self.f.alarms.append(Alarm(self.trace.trace_id, span.span_id, stage, candidate, field_name, problem, detail))

    # --- receipts ----------------------------------------------------------------------------------
    def payload(self, span: Span, stage: str, candidate: str, attributes: dict[str, Any], prefix: str,
                payload_key: str | None, payload_rules: list[str], upstream: str | None,
                transform_rules: list[str], derived_from: str | None, upstream_chars: Any = None) -> None:
        """Classify one receipt, twice when possible: the received payload against the receipt (transit),
        and the receipt against the same candidate's receipt one stage upstream (handoff). The worse
        verdict counts; ``changed_uncited`` and ``unverifiable`` raise alarms."""
        received = attributes.get(payload_key) if payload_key else None
        if received is None:
            # the two common cases, settled without building a Receipt (100,000 times on a big trace)
            chars_key, bytes_key, sha_key = receipt_keys(prefix)
            sha = attributes.get(sha_key)
            if upstream is not None and sha == upstream and len(upstream) == 64:
                # the same bytes the stage before handed on
                if is_count(attributes.get(chars_key)) and is_count(attributes.get(bytes_key)) \
                        and is_sha256_hex(upstream):
                    self.f.intact += 1
                    return
            elif upstream is None and is_sha256_hex(sha) \
                    and is_count(attributes.get(chars_key)) and is_count(attributes.get(bytes_key)):
                # a well-formed receipt seen for the first time, its payload not captured
                self.f.not_captured += 1
                return
        original = _receipt(attributes, prefix)
        if original is None:
            if received is not None:
                self.f.count(UNVERIFIABLE)
                self.alarm(span, stage, candidate, f"{prefix}.sha256", UNVERIFIABLE, "payload arrived without its receipt")
            return
        if not original.well_formed:
            self.f.count(UNVERIFIABLE)
            self.alarm(span, stage, candidate, f"{prefix}.sha256", UNVERIFIABLE, _describe(received, original))
            return
        verdicts: list[str] = []
        if received is not None:
            verdict = classify(received, original, payload_rules)
            verdicts.append(verdict)
            if verdict == CHANGED_UNCITED:
                self.alarm(span, stage, candidate, payload_key or prefix, CHANGED_UNCITED, _describe(received, original))
        if upstream is not None and len(upstream) == 64:
            if upstream == original.sha256:
                verdicts.append(INTACT)
            elif transform_rules and derived_from == upstream and self.covered(transform_rules[0], original, upstream_chars):
                verdicts.append(CHANGED_CITED)
            else:
                verdicts.append(CHANGED_UNCITED)
                if not transform_rules:
                    why = "content changed between stages with no transform rule"
                elif derived_from != upstream:
                    why = f"rule {transform_rules[0]} but derived_from is not the upstream sha256"
                else:
                    why = (f"rule {transform_rules[0]} does not cover {original.chars} chars from "
                           f"{upstream_chars} upstream")
                self.alarm(span, stage, candidate, f"{prefix}.sha256", CHANGED_UNCITED,
                           f"{why}: upstream {upstream[:12]}…, here {original.sha256[:12]}…")
        if not verdicts:
            self.f.not_captured += 1
            return
        self.f.count(max(verdicts, key=_SEVERITY.index))

    @staticmethod
    def covered(rule_id: str, here: Receipt, upstream_chars: Any) -> bool:
        """A rule with arithmetic between stages (``metadata_header@1:<n>``) must add up; any other
        rule is taken on its ``derived_from``."""
        rule = parse_rule(rule_id)
        return (rule.covers_handoff(here.chars, upstream_chars) if rule is not None else None) is not False

    def receipts(self) -> None:
        latest: dict[str, str] = {}  # candidate id -> content sha256 most recently handed on
        latest_chars: dict[str, Any] = {}  # candidate id -> its content chars
        # candidate id -> the output that handed it on: (start, end, span, stage label, event attributes)
        handed: dict[str, _Handed] = {}
        # outputs of an enclosing stage that differ from what a stage inside it saw, checked when the
        # enclosing stage has ended (see below)
        deferred: dict[tuple[str, str], _Handed] = {}
        hop_sha: dict[int, tuple[str, str]] = {}  # hop -> (sha256, stage label) first seen
        views = [*self.stitched.pipelines[:1], *self.stitched.stages]
        for view in sorted(views, key=lambda v: (v.span.start_ns, v.span.end_ns)):
            start, end = view.span.start_ns, view.span.end_ns
            self._enclosing(deferred, latest, latest_chars, handed, before=start)
            label = view.label
            attrs = view.attributes
            if sc.QUERY_HOP in attrs:
                self.query(view.span, label, attrs, hop_sha)
            outputs: dict[str, tuple[str, Any, dict[str, Any], bool]] = {}
            for span, event in view.events():
                a = event.attributes
                if event.name == sc.EVENT_QUERY:
                    self.query(span, label, a, hop_sha)
                    continue
                cid = str(a.get(sc.CANDIDATE_ID, ""))
                if sc.CANDIDATE_CONTENT_FROM in a and sc.CANDIDATE_CONTENT_SHA256 not in a:
                    self.alarm(span, label, cid, sc.CANDIDATE_CONTENT_FROM, UNVERIFIABLE,
                               f"its content receipt is the one span {str(a[sc.CANDIDATE_CONTENT_FROM])[:16]} wrote, "
                               "which did not arrive or does not hold this candidate")
                    self.f.count(UNVERIFIABLE)
                    continue
                rule = a.get(sc.CANDIDATE_TRANSFORM_RULE)
                rules = [rule] if isinstance(rule, str) else []
                derived = a.get(sc.CANDIDATE_TRANSFORM_DERIVED_FROM)
                upstream = latest.get(cid)
                producer = handed.get(cid)
                if upstream is not None and producer is not None and producer[0] <= start and producer[1] >= end \
                        and producer[5] in _GATHERING and a.get(sc.CANDIDATE_CONTENT_SHA256) != upstream:
                    # handed on by a retrieval still open around this one (a compression retriever
                    # around its base retriever and compressor): it hands on what the stages inside it
                    # produced, when it ends, so its outputs are checked then, against what they handed
                    # on last (a generate stage around its budget hands its nodes down instead: upstream)
                    deferred.setdefault((producer[2].span_id, cid), producer)
                    upstream = None
                if sc.CANDIDATE_CONTENT_PREVIEW in a:
                    key, payload_rules = sc.CANDIDATE_CONTENT_PREVIEW, [PREVIEW_RULE.id]
                elif sc.CANDIDATE_CONTENT_TEXT in a:
                    key, payload_rules = sc.CANDIDATE_CONTENT_TEXT, []
                else:
                    key, payload_rules = None, []
                unchecked = self.f.not_captured
                self.payload(span, label, cid, a, sc.CANDIDATE_CONTENT_PREFIX, key, payload_rules, upstream, rules, derived,
                             latest_chars.get(cid))
                sha = a.get(sc.CANDIDATE_CONTENT_SHA256)
                if event.name == sc.EVENT_CANDIDATE and isinstance(sha, str):
                    # counted as not captured: a deferred check (see below) replaces that count
                    outputs[cid] = (sha, a.get(sc.CANDIDATE_CONTENT_CHARS), a, self.f.not_captured > unchecked)
            for cid, (sha, chars, a, first_unchecked) in outputs.items():
                latest[cid] = sha
                latest_chars[cid] = chars
                handed[cid] = (start, end, view.span, label, a, view.kind, first_unchecked)
        self._enclosing(deferred, latest, latest_chars, handed, before=None)

    def _enclosing(self, deferred: dict[tuple[str, str], _Handed],
                   latest: dict[str, str], latest_chars: dict[str, Any],
                   handed: dict[str, _Handed], before: int | None) -> None:
        """Check each deferred output of an enclosing stage that has ended by ``before`` (all when
        ``None``) against what the last stage inside it handed on for the same candidate."""
        for key in [k for k, p in deferred.items() if before is None or p[1] <= before]:
            p_start, p_end, span, label, a, _, first_unchecked = deferred.pop(key)
            cid = key[1]
            inner = handed.get(cid)
            if inner is None or inner[2] is span or not (p_start <= inner[0] and inner[1] <= p_end):
                continue
            rule = a.get(sc.CANDIDATE_TRANSFORM_RULE)
            if first_unchecked:
                self.f.not_captured -= 1
            self.payload(span, label, cid, a, sc.CANDIDATE_CONTENT_PREFIX, None, [], latest.get(cid),
                         [rule] if isinstance(rule, str) else [], a.get(sc.CANDIDATE_TRANSFORM_DERIVED_FROM),
                         latest_chars.get(cid))

    def query(self, span: Span, label: str, attrs: dict[str, Any], hop_sha: dict[int, tuple[str, str]]) -> None:
        self.payload(span, label, "", attrs, sc.QUERY_RECEIPT_PREFIX, sc.QUERY_TEXT, [], None, [], None)
        sha, hop = attrs.get(sc.QUERY_SHA256), attrs.get(sc.QUERY_HOP)
        if isinstance(sha, str) and isinstance(hop, int):
            seen = hop_sha.setdefault(hop, (sha, label))
            if seen[0] != sha and len(sha) == 64 and len(seen[0]) == 64:
                self.alarm(span, label, "", sc.QUERY_SHA256, CHANGED_UNCITED,
                           f"hop {hop} has another query than at {seen[1]}")

    # --- events and spans --------------------------------------------------------------------------
    def events(self, view: StageView) -> None:
        label = view.label
        attrs = view.attributes
        received = view.events()
        stamped = attrs.get(sc.EVENTS_COUNT)
        announced = attrs.get(sc.EVENTS_SPANS, 1)
        if type(announced) is int and announced > 1:
            have = {i for i in map(continuation_index, view.continuations) if i is not None and 0 < i < announced}
            n_missing = announced - 1 - len(have)  # counted, not listed: the announced number is untrusted
            if n_missing:
                first = [str(i) for i in itertools.islice((i for i in range(1, announced) if i not in have), 5)]
                self.f.missing_spans += n_missing
                self.alarm(view.span, label, "", sc.EVENTS_SPANS, "missing continuation spans",
                           f"{n_missing} of {announced - 1} missing (index {', '.join(first)})")
        for cont in view.continuations:
            own = cont.attributes.get(sc.EVENTS_COUNT)
            got = sum(1 for e in cont.events if e.name in (sc.EVENT_CANDIDATE, sc.EVENT_EXCLUSION, sc.EVENT_QUERY))
            if isinstance(own, int) and got < own:
                self.alarm(cont, label, "", sc.EVENTS_COUNT, "missing events in continuation",
                           f"{got} of {own} arrived")
        if not isinstance(stamped, int):
            self.alarm(view.span, label, "", sc.EVENTS_COUNT, UNVERIFIABLE,
                       "the stage's event count is missing: its events cannot be checked")
            return
        if len(received) < stamped:
            self.f.missing_events += stamped - len(received)
        if len(received) != stamped:
            self.alarm(view.span, label, "", sc.EVENTS_COUNT, "event count mismatch",
                       f"{len(received)} received, {stamped} stamped")
        digest = attrs.get(sc.EVENTS_DIGEST)
        items = [digest_item(event.name, event.attributes) for _, event in received]
        if not (isinstance(digest, str) and len(digest) == 64):
            self.alarm(view.span, label, "", sc.EVENTS_DIGEST, UNVERIFIABLE, "digest missing or damaged")
        elif len(received) == stamped and not _digest_matches(schema_of(view.span), items, received, digest):
            bad_id = _first_bad(items)
            self.alarm(view.span, label, bad_id, sc.EVENTS_DIGEST, "events changed in transit",
                       "ids or content receipts differ from what the stage emitted")

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
        alg = receipt_algorithm(stamped)
        if alg is None:
            self.alarm(view.span, label, "", sc.STAGE_RECEIPT, UNVERIFIABLE,
                       "the stage receipt is missing or damaged: the stage's fields cannot be checked")
            return
        if alg == ALG_HMAC_SHA256 and self.key is None:
            self.f.count(UNVERIFIABLE)
            self.alarm(view.span, label, "", sc.STAGE_RECEIPT, UNVERIFIABLE,
                       "the receipt is keyed (hmac-sha256) and cannot be checked without the key: pass --key-file")
            return
        if alg != ALG_HMAC_SHA256 and self.key is not None:
            # verify was given a key: an unkeyed receipt is what a forger without the key would write
            self.alarm(view.span, label, "", sc.STAGE_RECEIPT, CHANGED_UNCITED,
                       "the receipt is unkeyed (sha256) but a key was given: restamped without the key, "
                       "or the producer ran without RAGTRAIL_RECEIPT_KEY")
            return
        key = self.key if alg == ALG_HMAC_SHA256 else None
        fields = stage_fields(attrs, [(e.name, e.attributes) for _, e in view.wire_events()])
        computed = stage_receipt(fields, key)
        if computed.receipt == stamped:
            received_fields = attrs.get(sc.STAGE_RECEIPT_FIELDS)
            # the field digests only locate a change: one cut by a value-length limit is harmless
            if not (isinstance(received_fields, str) and computed.fields.startswith(received_fields)):
                self.alarm(view.span, label, "", sc.STAGE_RECEIPT_FIELDS, CHANGED_UNCITED,
                           "the per-field digests were changed after the producer (the fields themselves match)")
            return
        stamped_fields = parse_field_digests(attrs.get(sc.STAGE_RECEIPT_FIELDS))
        changed = changed_fields(fields, stamped_fields, key)
        if len(changed) > 1 and len(changed) == len(set(fields) | set(stamped_fields)):
            # not one field digest matches: the digests were made by another key (or none)
            self.alarm(view.span, label, "", sc.STAGE_RECEIPT, CHANGED_UNCITED,
                       "changed after the producer: every field digest differs, the receipt was restamped "
                       + ("without the key" if key is not None else "or damaged"))
            return
        if not changed and named:
            return  # the change is one an earlier check named (the field digests that would say so were cut)
        if not changed:
            why = ("the key does not match the producer's, or the fields and their digests were restamped"
                   if key is not None else "the fields and their digests were restamped")
            self.alarm(view.span, label, "", sc.STAGE_RECEIPT, CHANGED_UNCITED, f"changed after the producer: {why}")
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
            self.alarm(view.span, label, "", field_name, CHANGED_UNCITED,
                       f"{state} after the producer ({where}; stage receipt mismatch)")

    def dropped(self) -> None:
        if not self.trace.keeps_dropped_counts:
            self.f.dropped_attributes = self.f.dropped_events = None
        ragtrail_ids = {v.span.span_id for v in [*self.stitched.stages, *self.stitched.pipelines]}
        ragtrail_ids |= {c.span_id for v in [*self.stitched.stages, *self.stitched.pipelines] for c in v.continuations}
        labels = {v.span.span_id: v.label for v in [*self.stitched.stages, *self.stitched.pipelines]}
        for span in self.trace.spans:
            if not self.trace.keeps_dropped_counts:
                break
            ours = span.span_id in ragtrail_ids
            label = labels.get(span.span_id, span.name)
            if span.dropped_events:
                self.f.dropped_events = (self.f.dropped_events or 0) + span.dropped_events
                if ours:
                    self.alarm(span, label, "", "droppedEventsCount", "events evicted by the SDK",
                               f"{span.dropped_events} dropped")
            if span.dropped_attributes:
                self.f.dropped_attributes = (self.f.dropped_attributes or 0) + span.dropped_attributes
                if ours:
                    self.alarm(span, label, "", "droppedAttributesCount", "attributes evicted by the SDK",
                               f"{span.dropped_attributes} dropped")
            for event in span.events:
                if event.dropped_attributes and ours:
                    self.f.dropped_attributes = (self.f.dropped_attributes or 0) + event.dropped_attributes
                    self.alarm(span, label, str(event.attributes.get(sc.CANDIDATE_ID, "")),
                               "event.droppedAttributesCount", "event attributes evicted by the SDK",
                               f"{event.dropped_attributes} dropped from {event.name}")
            if ours and isinstance(span.attributes.get(sc.STAGE_INSTRUMENTATION_ERRORS), int) \
                    and span.attributes[sc.STAGE_INSTRUMENTATION_ERRORS] > 0:
                self.alarm(span, label, "", sc.STAGE_INSTRUMENTATION_ERRORS, "recorder errors",
                           f"{span.attributes[sc.STAGE_INSTRUMENTATION_ERRORS]} internal errors: the record may be incomplete")

    def span_count(self) -> None:
        """Each exported segment's spans against its stamped count. The count is on the local root
        (``ragtrail.trace.span_count``) and, schema 2, on every other ragtrail span of the segment
        with the root's id: a missing root, a missing span or a lowered count is an alarm even when
        the root never arrived."""
        by_id = {s.span_id: s for s in self.trace.spans}
        children: dict[str, list[Span]] = defaultdict(list)
        for s in self.trace.spans:
            if s.parent_span_id:
                children[s.parent_span_id].append(s)
        claims: dict[str, list[tuple[Span, int]]] = defaultdict(list)
        for s in self.trace.spans:
            root_id, count = s.attributes.get(sc.TRACE_SEGMENT_ROOT), s.attributes.get(sc.TRACE_SEGMENT_SPAN_COUNT)
            if isinstance(root_id, str) and root_id:
                claims[root_id.lower()].append((s, count if type(count) is int else -1))
        roots = {s.span_id: s for s in self.trace.spans if isinstance(s.attributes.get(sc.TRACE_SPAN_COUNT), int)}
        if not roots and not claims:
            self.f.notes.append("no ragtrail.trace.span_count stamped: whole spans lost in export cannot be "
                                "counted (export through ragtrail's whole-trace processor)")
            return
        for root_id in [*roots, *(r for r in claims if r not in roots)]:
            root = roots.get(root_id)
            members = claims.get(root_id, [])
            pin = root or members[0][0]
            label = str(pin.attributes.get(sc.STAGE_KIND, pin.name))
            counts = [(root, root.attributes[sc.TRACE_SPAN_COUNT])] if root is not None else []
            counts += members
            stamped = max(c for _, c in counts)
            if root is None:
                self.f.missing_spans += 1
                present = by_id.get(root_id)
                problem = "root span missing" if present is None else "root span count missing"
                detail = (f"{len(members)} spans name root {root_id}, which did not arrive" if present is None
                          else f"root {root_id} arrived without {sc.TRACE_SPAN_COUNT}")
                self.alarm(pin, label, "", sc.TRACE_SEGMENT_ROOT, problem, detail)
            for span, count in counts:
                if count != stamped:
                    field_name = sc.TRACE_SPAN_COUNT if span is root else sc.TRACE_SEGMENT_SPAN_COUNT
                    self.alarm(span, str(span.attributes.get(sc.STAGE_KIND, span.name)), "", field_name,
                               "span count changed", f"{count} here, {stamped} on another span of the segment")
            key = _resource_key(pin)
            seen = 1 if root is not None or root_id in by_id else 0
            stack = list(children.get(root_id, ()))
            while stack:
                span = stack.pop()
                if _resource_key(span) != key or isinstance(span.attributes.get(sc.TRACE_SPAN_COUNT), int):
                    continue
                other = span.attributes.get(sc.TRACE_SEGMENT_ROOT)
                if isinstance(other, str) and other.lower() != root_id:
                    continue
                seen += 1
                stack.extend(children.get(span.span_id, ()))
            unreached = sum(1 for s, _ in members if s.parent_span_id and s.parent_span_id not in by_id
                            and s.parent_span_id != root_id)
            missing = stamped - seen - (1 if root is None else 0)  # a missing root is counted above
            if missing > 0:
                self.f.missing_spans += missing
                self.alarm(pin, label, "", sc.TRACE_SPAN_COUNT, "missing spans",
                           f"{seen} received, {stamped} stamped"
                           + (f" ({unreached} under a span that did not arrive)" if unreached else ""))
            elif seen > stamped:
                self.f.notes.append(f"span {pin.span_id}: {seen} spans received for {stamped} stamped "
                                    "(late spans, or spans of another process under it)")
        missing_parents = {s.parent_span_id for s in self.trace.spans
                           if s.parent_span_id and s.parent_span_id not in by_id}
        if missing_parents and len(missing_parents) > 1:
            self.f.notes.append(f"{len(missing_parents)} parent spans referenced but not in the trace")

    def orphans(self) -> None:
        for span in self.stitched.orphans:
            self.f.missing_spans += 1
            self.alarm(span, f"{span.attributes.get(sc.STAGE_KIND)} {span.attributes.get(sc.STAGE_COMPONENT)}", "",
                       sc.STAGE_CONTINUATION, "stage span missing",
                       f"continuation {span.attributes.get(sc.STAGE_CONTINUATION_INDEX)} arrived without its stage span")

    def run(self) -> Fidelity:
        if self.trace.partial:
            # pinned on the root the backend returned (a span without a parent), else the first span
            root = next((s for s in self.trace.spans if not s.parent_span_id), self.trace.spans[0] if self.trace.spans else None)
            self.f.alarms.append(Alarm(self.trace.trace_id, root.span_id if root else "-", "", "", "status",
                                       "backend returned a partial trace", self.trace.partial_message or ""))
        for view in [*self.stitched.pipelines, *self.stitched.stages]:
            self.events(view)
        self.orphans()
        self.dropped()
        self.span_count()
        self.receipts()
        for view in [*self.stitched.pipelines, *self.stitched.stages]:
            self.stage_receipt(view)
        self.f.notes.extend(self.trace.notes)
        return self.f


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


def check(trace: Trace, stitched: Stitched, key: bytes | None = None) -> Fidelity:
    """All fidelity checks for one trace (``key``: the receipt key, to check keyed stage receipts)."""
    return _Checker(trace, stitched, key).run()
