"""Compare two runs question by question: paired samples, not averages (seed 003).

Two sets of traces (two stores, or two selections of one source: time ranges, service versions, tags)
are paired by the receipt of the question (``ragtrail.query.sha256`` of hop 0). For each question the
verdict is *same evidence*, *same evidence, different answer* (the answer receipt differs), or
*different evidence*, with the first stage where it differs and, for every stage that differs, what
changed: its status (``rerank: ok → degraded (parse_error, fallback input_order)``), which documents
entered and which left and why. Totals put the refusal rate beside survival, degraded and fallback
rates; questions found on one side only are listed, never dropped.

Side A is held (one compact record per question: pairing needs it); side B streams past it
(:class:`StreamedSide`): each B trace is paired with A's record of its question as it is read, and
only what the result needs of it is kept (its outcome, the evidence A's survival shares read, its
own survival shares and the pair), so memory grows with A's questions, not with B's traces.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from ragtrail.contract import receipts
from ragtrail.contract import semconv as sc

from .records import StageRecord, TraceRecord
from .weight import WeightTally

_MODEL_KINDS = {sc.KIND_GENERATE, sc.KIND_CITE}


class Evidence(NamedTuple):
    """What the other side's survival shares read of one question: its cited documents and what
    reached its model (empty when unknown: it adds nothing to the in-context share), each id once.
    Tuples, not sets: kept per question of a streamed side, a tuple is a fifth of a set's size."""

    cited: tuple[str, ...]
    in_context: tuple[str, ...]

    @classmethod
    def of(cls, r: TraceRecord) -> Evidence:
        return cls(tuple(dict.fromkeys(r.cited)), tuple(dict.fromkeys(r.in_context or ())))


class Outcome(NamedTuple):
    """One question's outcome as the side's rates count it."""

    refused: bool | None
    degraded: bool
    fallback: bool
    weight: float  # the requests the trace stands for (weight.trace_weight)

    @classmethod
    def of(cls, r: TraceRecord) -> Outcome:
        return cls(r.refused, r.degraded(), r.fallback(), r.weight)


class StageShare(NamedTuple):
    """One question's part of a stage's survival share: how many of the other side's cited and
    in-context documents the stage (all its runs) handed on."""

    label: str
    cited: int
    in_context: int


@dataclass
class SideCounts:
    """What every side counts of each trace it reads, before it keeps the latest trace per question."""

    name: str
    repeats: int = 0  # traces of a question already seen (the latest is compared)
    no_query: int = 0  # traces whose hop 0 carries no query receipt (capture off)
    traces: int = 0
    notes: list[str] = field(default_factory=list)
    tally: WeightTally = field(default_factory=WeightTally)  # every trace read, weighted (weight.trace_weight)

    def counted(self, r: TraceRecord, seen_start_ns: int | None) -> bool:
        """Count ``r`` (``seen_start_ns``: when the question's kept trace started, if one is kept);
        True when the side keeps ``r``: it has a question and is its latest trace so far."""
        self.traces += 1
        self.tally.add(r.weight, r.basis, r.tail_stamped)
        if not r.query_sha256:
            self.no_query += 1
            return False
        if seen_start_ns is not None:
            self.repeats += 1
            return seen_start_ns < r.start_ns
        return True


@dataclass
class SideSummary(SideCounts):
    """One side, as read: the latest trace per question, and what could not be paired."""

    by_query: dict[str, TraceRecord] = field(default_factory=dict)

    def add(self, r: TraceRecord) -> None:
        old = self.by_query.get(r.query_sha256) if r.query_sha256 else None
        if not self.counted(r, None if old is None else old.start_ns):
            return
        assert r.query_sha256 is not None  # counted() keeps only traces with a question
        # what a pairing needs, not what ls shows: 100,000 questions a side must fit in memory
        self.by_query[r.query_sha256] = replace(
            r, resource={}, findings=[], insights=[], notes=[], stages=[replace(st, span_id="", parent_span_id=None) for st in r.stages]
        )

    def evidence(self, query_sha256: str) -> Evidence | None:
        r = self.by_query.get(query_sha256)
        return None if r is None else Evidence.of(r)

    def outcomes(self) -> list[Outcome]:
        return [Outcome.of(r) for r in self.by_query.values()]

    def shares(self, other: SideSummary | StreamedSide) -> Iterator[tuple[Evidence, tuple[StageShare, ...]]]:
        """Per paired question (this side's order): the other side's evidence and this side's shares of it."""
        for q, r in self.by_query.items():
            base = other.evidence(q)
            if base is not None:
                yield base, stage_shares(r, base)


@dataclass(slots=True)
class StreamedQuestion:
    """What is kept of side B's latest trace of a question: never the record itself."""

    start_ns: int
    trace_id: str
    outcome: Outcome
    evidence: Evidence
    shares: tuple[StageShare, ...] | None  # None: A has no such question
    pair: dict[str, Any] | None


@dataclass
class StreamedSide(SideCounts):
    """Side B, paired with side A's records as it streams past them (see the module docstring): the
    counts and rates of :class:`SideSummary`, with the latest trace per question compared."""

    against: SideSummary = field(kw_only=True)
    questions: dict[str, StreamedQuestion] = field(default_factory=dict)

    def add(self, r: TraceRecord) -> None:
        old = self.questions.get(r.query_sha256) if r.query_sha256 else None
        if not self.counted(r, None if old is None else old.start_ns):
            return
        assert r.query_sha256 is not None  # counted() keeps only traces with a question
        a = self.against.by_query.get(r.query_sha256)
        shares = None if a is None else stage_shares(r, Evidence.of(a))
        kept = StreamedQuestion(r.start_ns, r.trace_id, Outcome.of(r), Evidence.of(r), shares, None if a is None else pair(a, r))
        self.questions[r.query_sha256] = kept

    def evidence(self, query_sha256: str) -> Evidence | None:
        q = self.questions.get(query_sha256)
        return None if q is None else q.evidence

    def outcomes(self) -> list[Outcome]:
        return [q.outcome for q in self.questions.values()]

    def shares(self, other: SideSummary | StreamedSide) -> Iterator[tuple[Evidence, tuple[StageShare, ...]]]:
        for q, kept in self.questions.items():
            base = other.evidence(q)
            if base is not None and kept.shares is not None:
                yield base, kept.shares

    @classmethod
    def of(cls, side: SideSummary, against: SideSummary) -> StreamedSide:
        """A side read whole, streamed past ``against`` (its latest trace per question)."""
        streamed = cls(side.name, against=against, repeats=side.repeats, no_query=side.no_query, notes=side.notes)
        for r in side.by_query.values():
            streamed.add(r)
        streamed.traces, streamed.tally = side.traces, side.tally
        return streamed


def paired_by_key(r: TraceRecord, key: bytes | None) -> TraceRecord:
    """``r`` as compare pairs it under the producer's receipt key: a trace whose hop-0 question was
    recorded as text (``text`` mode) by the keyed receipt of that text, so it pairs with a run recorded
    in ``hash`` mode under the key; any other trace as recorded."""
    if key is None or r.query_text is None:
        return r
    return replace(r, query_sha256=receipts.keyed_receipt(r.query_text, key).sha256)


def _keyed(stages: Iterable[StageRecord]) -> list[tuple[tuple[str, str, int], StageRecord]]:
    seen: Counter[tuple[str, str]] = Counter()
    out = []
    for s in stages:
        base = (s.kind, s.component)
        out.append(((*base, seen[base]), s))
        seen[base] += 1
    return out


def stage_change(a: StageRecord | None, b: StageRecord | None) -> dict[str, Any] | None:
    """What differs at one stage between A and B (``None`` when nothing does)."""
    base = a or b
    assert base is not None
    out: dict[str, Any] = {"stage": base.label, "kind": base.kind, "component": base.component}
    if a is None or b is None:
        out["only_in"] = "A" if a else "B"
        return out
    changed = False
    if (a.status, a.failure_class, a.fallback) != (b.status, b.failure_class, b.fallback):
        out["status"] = f"{a.status_text()} → {b.status_text()}"
        changed = True
    ids_a, ids_b = set(a.out_ids), set(b.out_ids)
    reasons_b = {e.id: e.reason for e in b.excluded}
    reasons_a = {e.id: e.reason for e in a.excluded}
    left = [{"id": i, "reason": reasons_b.get(i, "not in B's input" if i not in reasons_b else None)} for i in a.out_ids if i not in ids_b]
    entered = [{"id": i, "was": reasons_a.get(i, "not in A's input")} for i in b.out_ids if i not in ids_a]
    if left or entered:
        out["left"], out["entered"] = left, entered
        changed = True
    elif a.out_ids != b.out_ids:
        out["order"] = "same documents, other order"
        changed = True
    return out if changed else None


def _cause(chain: list[dict[str, Any]]) -> str:
    """The per-question line: each stage that differs, in pipeline order."""
    parts = []
    for c in chain:
        bits = []
        if c.get("only_in"):
            bits.append(f"only in {c['only_in']}")
        if c.get("status"):
            bits.append(c["status"])
        if c.get("left"):
            why = Counter(str(x["reason"]) for x in c["left"])
            bits.append("left: " + ", ".join(f"{n} {r}" for r, n in why.most_common()))
        if c.get("entered"):
            bits.append(f"entered: {len(c['entered'])}")
        if c.get("order"):
            bits.append(c["order"])
        parts.append(f"{c['stage']} {'; '.join(bits)}")
    return " → ".join(parts)


def pair(a: TraceRecord, b: TraceRecord) -> dict[str, Any]:
    """One question: the verdict, the first differing stage, and the chain of stages that differ."""
    ka, kb = _keyed(a.stages), _keyed(b.stages)
    index_b = dict(kb)
    keys_a = {k for k, _ in ka}
    chain = [c for c in (stage_change(s, index_b.get(k)) for k, s in ka) if c is not None]
    chain += [c for c in (stage_change(None, s) for k, s in kb if k not in keys_a) if c is not None]
    evidence = [c for c in chain if c["kind"] not in _MODEL_KINDS and (set(c) - {"stage", "kind", "component", "status"})]
    if evidence:
        verdict = "different evidence"
    elif a.answer_sha256 and b.answer_sha256 and a.answer_sha256 != b.answer_sha256:
        verdict = "same evidence, different answer"
    elif a.answer_sha256 and b.answer_sha256:
        verdict = "same evidence, same answer"
    else:
        verdict = "same evidence"
    return {
        "query_sha256": a.query_sha256,
        "a": a.trace_id,
        "b": b.trace_id,
        "verdict": verdict,
        "first_difference": evidence[0]["stage"] if evidence else None,
        "refused_a": a.refused,
        "refused_b": b.refused,
        "run_status_a": a.run_status,
        "run_status_b": b.run_status,
        "chain": chain,
        "cause": _cause(chain) if chain else "",
        "cited_a": list(a.cited),
        "cited_b": list(b.cited),
    }


def _rate(n: float, d: float) -> float | None:
    return None if d == 0 else round(n / d, 4)


def totals(side: SideSummary | StreamedSide, other: SideSummary | StreamedSide) -> dict[str, Any]:
    """Refusal, degraded and fallback rates, and how far the other side's cited and in-context
    documents survived each of this side's stages (paired questions only)."""
    return {**_rates(side, side.outcomes()), "survival": survival_shares(side, other), "notes": side.notes}


def stage_shares(r: TraceRecord, base: Evidence) -> tuple[StageShare, ...]:
    """How many of ``base``'s documents each stage of ``r`` handed on (a stage that ran several times
    for the question counts a document once, if any of its runs handed it on)."""
    handed_on: dict[str, set[str]] = {}
    for s in r.stages:
        if s.kind in _MODEL_KINDS or s.kind == sc.KIND_QUERY_TRANSFORM:
            continue
        handed_on.setdefault(s.label, set()).update(s.out_ids)
    return tuple(StageShare(label, len(out.intersection(base.cited)), len(out.intersection(base.in_context))) for label, out in handed_on.items())


def survival_shares(side: SideSummary | StreamedSide, other: SideSummary | StreamedSide) -> list[dict[str, Any]]:
    """Per stage of this side, the share of the other side's evidence (its cited documents, and what
    reached its model where that is known) that the stage handed on, over the paired questions.

    A share of the other side's evidence, never above 1: a component that runs several times for one
    question (one run per hop) counts a document once, if any of its runs handed it on. ``traces``
    is how many paired questions ran the stage; a question whose in-context set is unknown adds
    nothing to the in-context share (``None`` when no question's is known)."""
    stage_counts: Counter[str] = Counter()
    survived_cited: Counter[str] = Counter()
    survived_context: Counter[str] = Counter()
    cited_total = context_total = 0
    for base, shares in side.shares(other):
        cited_total += len(base.cited)
        context_total += len(base.in_context)
        for share in shares:
            stage_counts[share.label] += 1
            survived_cited[share.label] += share.cited
            survived_context[share.label] += share.in_context
    return [survival_entry(label, n, survived_cited[label], survived_context[label], cited_total, context_total) for label, n in stage_counts.items()]


def survival_entry(label: str, traces: int, cited: int, in_context: int, cited_total: int, context_total: int) -> dict[str, Any]:
    """One stage's survival share (``cited``/``in_context``: the other side's documents it handed on,
    summed over the ``traces`` paired questions that ran it; the totals: the other side's, over every pair)."""
    return {
        "stage": label,
        "traces": traces,
        "other_cited_present": _rate(cited, cited_total),
        "other_in_context_present": _rate(in_context, context_total),
    }


class Rates(NamedTuple):
    """A side's questions' outcomes summed: how many, and the requests they stand for (weight.trace_weight)."""

    questions: int
    refused: int
    refusal_known: int
    refused_weight: float
    known_weight: float
    weight: float
    degraded: int
    degraded_weight: float
    fallback: int
    fallback_weight: float

    @classmethod
    def of(cls, outcomes: list[Outcome]) -> Rates:
        known = [o for o in outcomes if o.refused is not None]
        degraded = [o for o in outcomes if o.degraded]
        fallback = [o for o in outcomes if o.fallback]
        return cls(
            len(outcomes),
            sum(1 for o in known if o.refused),
            len(known),
            sum(o.weight for o in known if o.refused),
            sum(o.weight for o in known),
            sum(o.weight for o in outcomes),
            len(degraded),
            sum(o.weight for o in degraded),
            len(fallback),
            sum(o.weight for o in fallback),
        )


def _rates(side: SideCounts, outcomes: list[Outcome]) -> dict[str, Any]:
    return side_rates(side, Rates.of(outcomes))


def side_rates(side: SideCounts, r: Rates) -> dict[str, Any]:
    """The side's counts (traces) and rates of refusal, degraded runs and fallbacks; the rates weigh
    each question's trace by the requests it stands for (weight.trace_weight), so a tail sampler that
    kept every degraded trace and a tenth of the rest does not multiply the degraded rate."""
    return {
        "name": side.name,
        "traces": side.traces,
        "requests": round(side.tally.requests, 3),
        "sampling": side.tally.statement(),
        "questions": r.questions,
        "repeats": side.repeats,
        "no_query_receipt": side.no_query,
        "refused": r.refused,
        "refusal_known": r.refusal_known,
        "refusal_rate": _rate(r.refused_weight, r.known_weight),
        "degraded": r.degraded,
        "degraded_rate": _rate(r.degraded_weight, r.weight),
        "fallback": r.fallback,
        "fallback_rate": _rate(r.fallback_weight, r.weight),
    }


def compare(a: SideSummary, b: SideSummary | StreamedSide) -> dict[str, Any]:
    """The whole comparison: per question (paired), totals per side, and questions on one side only.
    ``b`` is best streamed past ``a`` (:class:`StreamedSide`); a side read whole is streamed here."""
    if isinstance(b, SideSummary):
        b = StreamedSide.of(b, a)
    pairs = [kept.pair for q in a.by_query if (kept := b.questions.get(q)) is not None and kept.pair is not None]
    verdicts = Counter(p["verdict"] for p in pairs)
    newly_refused = [p for p in pairs if p["refused_b"] and not p["refused_a"]]
    causes = Counter(p["first_difference"] or p["verdict"] for p in newly_refused)
    return {
        "a": totals(a, b),
        "b": totals(b, a),
        "paired": len(pairs),
        "verdicts": dict(verdicts),
        "newly_refused": len(newly_refused),
        "newly_refused_first_difference": dict(causes),
        "only_in_a": [{"query_sha256": q, "trace_id": r.trace_id} for q, r in a.by_query.items() if q not in b.questions],
        "only_in_b": [{"query_sha256": q, "trace_id": kept.trace_id} for q, kept in b.questions.items() if q not in a.by_query],
        "questions": pairs,
    }


def markdown(result: dict[str, Any], limit: int = 50) -> str:
    """The comparison as a Markdown report (for a PR or an experiment review)."""
    from .safe import plain

    def cell(v: Any) -> str:
        return plain("" if v is None else v).replace("|", "\\|")

    a, b = result["a"], result["b"]
    lines = ["# ragtrail compare", "", "| | A | B |", "|---|---|---|"]
    for label, key in (
        ("traces", "traces"),
        ("questions", "questions"),
        ("requests they stand for", "requests"),
        ("refused", "refused"),
        ("refusal rate", "refusal_rate"),
        ("degraded", "degraded"),
        ("fallback", "fallback"),
        ("no query receipt", "no_query_receipt"),
    ):
        lines.append(f"| {label} | {cell(a[key])} | {cell(b[key])} |")
    lines += [
        "",
        f"{result['paired']} questions paired: " + ", ".join(f"{n} {v}" for v, n in sorted(result["verdicts"].items())),
        f"only in A: {len(result['only_in_a'])}, only in B: {len(result['only_in_b'])}",
        "",
    ]
    changed = [p for p in result["questions"] if p["verdict"] != "same evidence, same answer" and p["verdict"] != "same evidence"]
    if changed:
        lines += ["| question (sha256) | verdict | refused A → B | first difference | what changed |", "|---|---|---|---|---|"]
        for p in changed[:limit]:
            lines.append(
                f"| {cell(p['query_sha256'][:16])} | {cell(p['verdict'])} | {cell(p['refused_a'])} → "
                f"{cell(p['refused_b'])} | {cell(p['first_difference'])} | {cell(p['cause'])} |"
            )
        if len(changed) > limit:
            lines.append(f"\n… {len(changed) - limit} more (--json has every one)")
    return "\n".join(lines) + "\n"
