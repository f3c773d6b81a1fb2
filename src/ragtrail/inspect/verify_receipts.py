"""Receipt checks: every query and content receipt against what arrived with it and what was handed on.

Each receipt is classified twice when possible (:func:`ragtrail.contract.receipts.classify`): the received
preview or text against the receipt (transit), and the receipt against the same candidate's receipt one
stage upstream (handoff: a change there needs a transform rule whose ``derived_from`` is the upstream
sha256). The worse verdict counts; ``changed_uncited`` and ``unverifiable`` raise alarms.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import (
    ALG_HMAC_SHA256,
    CHANGED_CITED,
    CHANGED_UNCITED,
    INTACT,
    PREVIEW_RULE,
    UNVERIFIABLE,
    Receipt,
    classify,
    is_count,
    is_sha256_hex,
    parse_rule,
    receipt_algorithm,
    receipt_keys,
)

from .fidelity import Ledger, Where
from .model import Event, Span
from .stages import StageTree, StageView, Stitched, stage_tree

_SEVERITY = (INTACT, CHANGED_CITED, UNVERIFIABLE, CHANGED_UNCITED)
# stages whose outputs are what the stages inside them produced (checked after those, see receipts)
_GATHERING = (sc.KIND_RETRIEVE, sc.KIND_FUSE)


class Payload(NamedTuple):
    """A receipt (the attributes under ``prefix``) and the payload that may have arrived with it."""

    attributes: dict[str, Any]
    prefix: str
    key: str | None = None  # the attribute holding the received preview or text
    rules: tuple[str, ...] = ()  # rules the received payload may differ from its receipt under


class Upstream(NamedTuple):
    """What the stage before handed on for the same candidate, and the rule this stage cites for a change."""

    sha256: str | None = None
    chars: Any = None
    rules: tuple[str, ...] = ()
    derived_from: Any = None


class Handed(NamedTuple):
    """An output handed on: its content receipt, the stage's span and times, its event's attributes,
    and whether it was first counted as not captured (a deferred check replaces that count)."""

    sha256: str
    chars: Any
    start: int
    end: int
    span: Span
    label: str
    attributes: dict[str, Any]
    kind: str
    first_unchecked: bool


class HopSeen(NamedTuple):
    """A hop's query receipt where it was first stated."""

    sha256: str
    stage: str


class Deferred(NamedTuple):
    """An enclosing stage's output, checked when that stage has ended."""

    span_id: str
    candidate: str


class Output(NamedTuple):
    """A candidate a stage handed on: its content receipt, and whether it was first counted as not captured."""

    candidate: str
    sha256: str
    chars: Any
    attributes: dict[str, Any]
    first_unchecked: bool


@dataclass
class Chain:
    """What the stages so far handed on, by candidate id, in start order, each on its branch of the
    stage tree: a candidate's upstream is the latest output on its own branch (see :meth:`visible`)."""

    tree: StageTree = field(default_factory=lambda: StageTree({}, {}))
    handed: dict[str, list[Handed]] = field(default_factory=dict)  # every output that handed each id on
    # outputs of an enclosing stage that differ from what a stage inside it saw, checked when the
    # enclosing stage has ended (see ReceiptChecks.candidate)
    deferred: dict[Deferred, Handed] = field(default_factory=dict)
    # (the run numbering it, hop) -> its query receipt first seen: hops of two runs are apart
    hop_sha: dict[tuple[str, int], HopSeen] = field(default_factory=dict)
    _branches: dict[tuple[str, bool], frozenset[str]] = field(default_factory=dict)
    _handers: dict[str, set[str]] = field(default_factory=dict)  # the stages that handed each id on
    here: frozenset[str] = frozenset()  # the enclosing stages of the stage being checked

    def hand(self, cid: str, handed: Handed) -> None:
        self.handed.setdefault(cid, []).append(handed)
        self._handers.setdefault(cid, set()).add(handed.span.span_id)

    def first(self, cid: str, on_branch: frozenset[str]) -> Handed | None:
        """The latest output of ``cid`` on the branch (:meth:`visible`), the common cases first: the
        latest output is an enclosing stage's, or that of a stage under one and not under a fuse."""
        hands = self.handed.get(cid)
        if not hands:
            return None
        h = hands[-1]
        sid = h.span.span_id
        if sid in on_branch:
            return h
        path = self.tree.ancestors.get(sid, ())
        if not path or (path[-1] in on_branch and self.tree.kinds.get(path[-1]) != sc.KIND_FUSE and on_branch.issuperset(path)):
            return h
        return next(self.visible(cid, on_branch), None)

    def branch(self, span_id: str, inside: bool = False) -> frozenset[str]:
        """The enclosing stages of a stage (and the stage itself when ``inside``: what the stages
        inside it see), once per stage."""
        key = (span_id, inside)
        found = self._branches.get(key)
        if found is None:
            path = self.tree.path(span_id)
            found = self._branches[key] = frozenset((*path, span_id) if inside else path)
        return found

    def visible(self, cid: str, on_branch: frozenset[str], exclude: str | None = None, gathering: bool = False) -> Iterator[Handed]:
        """The outputs of ``cid`` on the branch whose enclosing stages are ``on_branch``, latest
        first: an enclosing stage's, or one under an enclosing stage whose own enclosing stages off
        the branch did not hand ``cid`` on (a generate stage's output, not the budget inside it, is
        what the run went on with). A fuse's inputs are each their own branch, unless ``gathering``
        (the fuse's outputs, which take any of them)."""
        hands = self.handed.get(cid)
        if not hands:
            return
        handers = self._handers.get(cid, set())
        for h in reversed(hands):
            sid = h.span.span_id
            if sid == exclude:
                continue
            if sid not in on_branch:
                path = self.tree.path(sid)
                if path and not on_branch.issuperset(path):
                    if self._off_branch(path, on_branch, handers, gathering):
                        continue
                elif path and not gathering and self.tree.kinds.get(path[-1]) == sc.KIND_FUSE:
                    continue  # a sibling input of the same fuse
            yield h

    def _off_branch(self, path: tuple[str, ...], on_branch: frozenset[str], handers: set[str], gathering: bool) -> bool:
        """Whether an output whose stage's enclosing stages are ``path`` is off the branch: an enclosing
        stage off the branch handed the same id on itself, or the two meet under a fuse."""
        for up in reversed(path):
            if up in on_branch:
                return not gathering and self.tree.kinds.get(up) == sc.KIND_FUSE
            if up in handers:
                return True
        return False

    def upstream(self, cid: str, handed: Handed | None, attributes: dict[str, Any]) -> Upstream:
        rule = attributes.get(sc.CANDIDATE_TRANSFORM_RULE)
        return Upstream(
            handed.sha256 if handed is not None else None,
            handed.chars if handed is not None else None,
            (rule,) if isinstance(rule, str) else (),
            attributes.get(sc.CANDIDATE_TRANSFORM_DERIVED_FROM),
        )


def keyed_query_receipt(attrs: dict[str, Any]) -> bool:
    """A well-formed keyed query receipt (``hmac-sha256:<64 hex>``, chars and bytes) with no text beside it."""
    chars_key, bytes_key, sha_key = receipt_keys(sc.QUERY_RECEIPT_PREFIX)
    return (
        sc.QUERY_TEXT not in attrs
        and receipt_algorithm(attrs.get(sha_key)) == ALG_HMAC_SHA256
        and is_count(attrs.get(chars_key))
        and is_count(attrs.get(bytes_key))
    )


def _whole(digest: str) -> bool:
    """A query digest that arrived uncut: 64 characters, or a well-formed keyed one."""
    return len(digest) == 64 or receipt_algorithm(digest) == ALG_HMAC_SHA256


def _describe(received: Any, original: Receipt | None) -> str:
    if original is None:
        return "no receipt"
    if not original.well_formed:
        return f"damaged receipt (sha256 {str(original.sha256)[:16]}…, {len(str(original.sha256))} chars)"
    got = len(received) if isinstance(received, str) else "?"
    return f"received {got} chars, receipt {original.chars} chars"


def covered(rule_id: str, here: Receipt, upstream_chars: Any) -> bool:
    """A rule with arithmetic between stages (``metadata_header@1:<n>``) must add up; any other
    rule is taken on its ``derived_from``."""
    rule = parse_rule(rule_id)
    return (rule.covers_handoff(here.chars, upstream_chars) if rule is not None else None) is not False


class ReceiptChecks:
    """The receipt checks of one trace, written to its ledger."""

    def __init__(self, ledger: Ledger, stitched: Stitched) -> None:
        self.ledger = ledger
        self.f = ledger.f
        self.stitched = stitched

    def _settled(self, a: dict[str, Any], prefix: str, upstream: str | None) -> bool:
        """The two common cases, settled without building a Receipt (100,000 times on a big trace)."""
        chars_key, bytes_key, sha_key = receipt_keys(prefix)
        sha = a.get(sha_key)
        if upstream is not None and sha == upstream and len(upstream) == 64:
            # the same bytes the stage before handed on
            if is_count(a.get(chars_key)) and is_count(a.get(bytes_key)) and is_sha256_hex(upstream):
                self.f.intact += 1
                return True
        elif upstream is None and is_sha256_hex(sha) and is_count(a.get(chars_key)) and is_count(a.get(bytes_key)):
            # a well-formed receipt seen for the first time, its payload not captured
            self.f.not_captured += 1
            return True
        return False

    def payload(self, where: Where, payload: Payload, upstream: Upstream) -> None:
        """Classify one receipt, twice when possible: the received payload against the receipt (transit),
        and the receipt against the same candidate's receipt one stage upstream (handoff). The worse
        verdict counts; ``changed_uncited`` and ``unverifiable`` raise alarms."""
        if payload.key is None and self._settled(payload.attributes, payload.prefix, upstream.sha256):
            return
        self.classified(where, payload, upstream)

    def classified(self, where: Where, payload: Payload, upstream: Upstream) -> None:
        """:meth:`payload` past its fast path: the receipt built and classified."""
        received = payload.attributes.get(payload.key) if payload.key else None
        if received is None and self._settled(payload.attributes, payload.prefix, upstream.sha256):
            return
        original = Receipt.from_attributes(payload.attributes, payload.prefix)
        if original is None:
            if received is not None:
                self.f.count(UNVERIFIABLE)
                self.ledger.alarm(where, f"{payload.prefix}.sha256", UNVERIFIABLE, "payload arrived without its receipt")
            return
        if not original.well_formed:
            self.f.count(UNVERIFIABLE)
            self.ledger.alarm(where, f"{payload.prefix}.sha256", UNVERIFIABLE, _describe(received, original))
            return
        verdicts: list[str] = []
        if received is not None:
            verdict = classify(received, original, list(payload.rules))
            verdicts.append(verdict)
            if verdict == CHANGED_UNCITED:
                self.ledger.alarm(where, payload.key or payload.prefix, CHANGED_UNCITED, _describe(received, original))
        if upstream.sha256 is not None and len(upstream.sha256) == 64:
            verdicts.append(self._handoff(where, payload.prefix, original, upstream))
        if not verdicts:
            self.f.not_captured += 1
            return
        self.f.count(max(verdicts, key=_SEVERITY.index))

    def _handoff(self, where: Where, prefix: str, original: Receipt, upstream: Upstream) -> str:
        """The receipt against the one upstream: the same, changed under a rule that covers it, or not."""
        up = str(upstream.sha256)
        if up == original.sha256:
            return INTACT
        rules = upstream.rules
        if rules and upstream.derived_from == up and covered(rules[0], original, upstream.chars):
            return CHANGED_CITED
        if not rules:
            why = "content changed between stages with no transform rule"
        elif upstream.derived_from != up:
            why = f"rule {rules[0]} but derived_from is not the upstream sha256"
        else:
            why = f"rule {rules[0]} does not cover {original.chars} chars from {upstream.chars} upstream"
        self.ledger.alarm(where, f"{prefix}.sha256", CHANGED_UNCITED, f"{why}: upstream {up[:12]}…, here {original.sha256[:12]}…")
        return CHANGED_UNCITED

    def receipts(self) -> None:
        """Every stage's receipts in start order, each candidate's against what was handed on before."""
        stitched = self.stitched
        chain = Chain(stage_tree(self.ledger.trace.spans, [*stitched.pipelines, *stitched.stages]))
        views = [*stitched.pipelines[:1], *stitched.stages]
        for view in sorted(views, key=lambda v: (v.span.start_ns, v.span.end_ns)):
            self._enclosing(chain, before=view.span.start_ns)
            self.stage(view, chain)
        self._enclosing(chain, before=None)

    def stage(self, view: StageView, chain: Chain) -> None:
        label = view.label
        chain.here = chain.branch(view.span.span_id)
        run = chain.tree.question(view.span.span_id)
        if sc.QUERY_HOP in view.attributes:
            self.query(Where(view.span, label), view.attributes, chain.hop_sha, run)
        outputs: dict[str, Output] = {}
        for span, event in view.events():
            if event.name == sc.EVENT_QUERY:
                self.query(Where(span, label), event.attributes, chain.hop_sha, run)
                continue
            out = self.candidate(view, label, span, event, chain)
            if out is not None:
                outputs[out.candidate] = out
        for cid, out in outputs.items():
            chain.hand(
                cid,
                Handed(out.sha256, out.chars, view.span.start_ns, view.span.end_ns, view.span, label, out.attributes, view.kind, out.first_unchecked),
            )

    def candidate(self, view: StageView, label: str, span: Span, event: Event, chain: Chain) -> Output | None:
        """One candidate or exclusion event's content receipt; the output it hands on, if it is one.
        (The hot path of a big trace: the named records are built only when the receipt needs more
        than the two common cases of :meth:`_settled`.)"""
        a = event.attributes
        cid = str(a.get(sc.CANDIDATE_ID, ""))
        if sc.CANDIDATE_CONTENT_FROM in a and sc.CANDIDATE_CONTENT_SHA256 not in a:
            self.ledger.alarm(
                Where(span, label, cid),
                sc.CANDIDATE_CONTENT_FROM,
                UNVERIFIABLE,
                f"its content receipt is the one span {str(a[sc.CANDIDATE_CONTENT_FROM])[:16]} wrote, "
                "which did not arrive or does not hold this candidate",
            )
            self.f.count(UNVERIFIABLE)
            return None
        producer = chain.first(cid, chain.here)
        upstream = producer.sha256 if producer is not None else None
        if (
            producer is not None
            and producer.start <= view.span.start_ns
            and producer.end >= view.span.end_ns
            and producer.kind in _GATHERING
            and a.get(sc.CANDIDATE_CONTENT_SHA256) != upstream
        ):
            # handed on by a retrieval still open around this one (a compression retriever
            # around its base retriever and compressor): it hands on what the stages inside it
            # produced, when it ends, so its outputs are checked then, against what they handed
            # on last (a generate stage around its budget hands its nodes down instead: upstream)
            chain.deferred.setdefault(Deferred(producer.span.span_id, cid), producer)
            upstream = producer = None
        unchecked = self.f.not_captured
        if sc.CANDIDATE_CONTENT_PREVIEW in a:
            payload = Payload(a, sc.CANDIDATE_CONTENT_PREFIX, sc.CANDIDATE_CONTENT_PREVIEW, (PREVIEW_RULE.id,))
        elif sc.CANDIDATE_CONTENT_TEXT in a:
            payload = Payload(a, sc.CANDIDATE_CONTENT_PREFIX, sc.CANDIDATE_CONTENT_TEXT)
        elif self._settled(a, sc.CANDIDATE_CONTENT_PREFIX, upstream):
            payload = None
        else:
            payload = Payload(a, sc.CANDIDATE_CONTENT_PREFIX)
        if payload is not None:
            self.classified(Where(span, label, cid), payload, chain.upstream(cid, producer, a))
        sha = a.get(sc.CANDIDATE_CONTENT_SHA256)
        if event.name == sc.EVENT_CANDIDATE and isinstance(sha, str):
            # counted as not captured: a deferred check (see _enclosing) replaces that count
            return Output(cid, sha, a.get(sc.CANDIDATE_CONTENT_CHARS), a, self.f.not_captured > unchecked)
        return None

    def _enclosing(self, chain: Chain, before: int | None) -> None:
        """Check each deferred output of an enclosing stage that has ended by ``before`` (all when
        ``None``) against what the last stage inside it handed on for the same candidate."""
        for key in [k for k, p in chain.deferred.items() if before is None or p.end <= before]:
            p = chain.deferred.pop(key)
            cid = key.candidate
            sid = p.span.span_id
            inside = list(chain.visible(cid, chain.branch(sid, inside=True), exclude=sid, gathering=True))
            # a fuse hands on one of its inputs' copies: the one it matches, else the latest
            inner = next((h for h in inside if h.sha256 == p.sha256), inside[0] if inside else None)
            if inner is None or not (p.start <= inner.start and inner.end <= p.end):
                continue
            if p.first_unchecked:
                self.f.not_captured -= 1
            self.payload(Where(p.span, p.label, cid), Payload(p.attributes, sc.CANDIDATE_CONTENT_PREFIX), chain.upstream(cid, inner, p.attributes))

    def query(self, where: Where, attrs: dict[str, Any], hop_sha: dict[tuple[str, int], HopSeen], run: str) -> None:
        """A query receipt, and the same hop's query everywhere its run states it (``run``: the span
        numbering the hops, :meth:`StageTree.question`). A keyed one (``hash`` mode under a receipt
        key: no text on the wire to check it against) is checked for its form only."""
        if keyed_query_receipt(attrs):
            self.f.not_captured += 1
        else:
            self.payload(where, Payload(attrs, sc.QUERY_RECEIPT_PREFIX, sc.QUERY_TEXT), Upstream())
        sha, hop = attrs.get(sc.QUERY_SHA256), attrs.get(sc.QUERY_HOP)
        if isinstance(sha, str) and isinstance(hop, int):
            seen = hop_sha.setdefault((run, hop), HopSeen(sha, where.stage))
            if seen.sha256 != sha and _whole(sha) and _whole(seen.sha256):
                self.ledger.alarm(where, sc.QUERY_SHA256, CHANGED_UNCITED, f"hop {hop} has another query than at {seen.stage}")


__all__ = ["Chain", "Deferred", "Handed", "HopSeen", "Output", "Payload", "ReceiptChecks", "Upstream", "covered", "keyed_query_receipt"]
