"""Compare two runs question by question: paired samples, not averages (seed 003).

Two sets of traces (two stores, or two selections of one source: time ranges, service versions, tags)
are paired by the receipt of the question (``ragtrail.query.sha256`` of hop 0). For each question the
verdict is *same evidence*, *same evidence, different answer* (the answer receipt differs), or
*different evidence*, with the first stage where it differs and, for every stage that differs, what
changed: its status (``rerank: ok → degraded (parse_error, fallback input_order)``), which documents
entered and which left and why. Totals put the refusal rate beside survival, degraded and fallback
rates; questions found on one side only are listed, never dropped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ragtrail.contract import receipts
from ragtrail.contract import semconv as sc

from .records import StageRecord, TraceRecord
from .weight import WeightTally

_MODEL_KINDS = {sc.KIND_GENERATE, sc.KIND_CITE}


@dataclass
class SideSummary:
    """One side, as read: the latest trace per question, and what could not be paired."""

    name: str
    by_query: dict[str, TraceRecord] = field(default_factory=dict)
    repeats: int = 0  # traces of a question already seen (the latest is compared)
    no_query: int = 0  # traces whose hop 0 carries no query receipt (capture off)
    traces: int = 0
    notes: list[str] = field(default_factory=list)
    tally: WeightTally = field(default_factory=WeightTally)  # every trace read, weighted (weight.trace_weight)

    def add(self, r: TraceRecord) -> None:
        self.traces += 1
        self.tally.add(r.weight, r.basis, r.tail_stamped)
        if not r.query_sha256:
            self.no_query += 1
            return
        old = self.by_query.get(r.query_sha256)
        if old is not None:
            self.repeats += 1
            if old.start_ns >= r.start_ns:
                return
        # what a pairing needs, not what ls shows: 100,000 questions a side must fit in memory
        self.by_query[r.query_sha256] = replace(
            r, resource={}, findings=[], insights=[], notes=[], stages=[replace(st, span_id="", parent_span_id=None) for st in r.stages]
        )


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


def totals(side: SideSummary, other: SideSummary) -> dict[str, Any]:
    """Refusal, degraded and fallback rates, and how far the other side's cited and in-context
    documents survived each of this side's stages (paired questions only)."""
    rs = list(side.by_query.values())
    known = [r for r in rs if r.refused is not None]
    refused = sum(1 for r in known if r.refused)
    return {**_rates(side, rs, known, refused), "survival": survival_shares(side, other), "notes": side.notes}


def survival_shares(side: SideSummary, other: SideSummary) -> list[dict[str, Any]]:
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
    for q, r in side.by_query.items():
        base = other.by_query.get(q)
        if base is None:
            continue
        cited, context = set(base.cited), set(base.in_context or ())
        cited_total += len(cited)
        context_total += len(context)
        handed_on: dict[str, set[str]] = {}
        for s in r.stages:
            if s.kind in _MODEL_KINDS or s.kind == sc.KIND_QUERY_TRANSFORM:
                continue
            handed_on.setdefault(s.label, set()).update(s.out_ids)
        for label, out in handed_on.items():
            stage_counts[label] += 1
            survived_cited[label] += len(cited & out)
            survived_context[label] += len(context & out)
    return [
        {
            "stage": label,
            "traces": n,
            "other_cited_present": _rate(survived_cited[label], cited_total),
            "other_in_context_present": _rate(survived_context[label], context_total),
        }
        for label, n in stage_counts.items()
    ]


def _rates(side: SideSummary, rs: list[TraceRecord], known: list[TraceRecord], refused: int) -> dict[str, Any]:
    """The side's counts (traces) and rates of refusal, degraded runs and fallbacks; the rates weigh
    each question's trace by the requests it stands for (weight.trace_weight), so a tail sampler that
    kept every degraded trace and a tenth of the rest does not multiply the degraded rate."""
    weight = sum(r.weight for r in rs)
    degraded = [r for r in rs if r.degraded()]
    fallback = [r for r in rs if r.fallback()]
    return {
        "name": side.name,
        "traces": side.traces,
        "requests": round(side.tally.requests, 3),
        "sampling": side.tally.statement(),
        "questions": len(rs),
        "repeats": side.repeats,
        "no_query_receipt": side.no_query,
        "refused": refused,
        "refusal_known": len(known),
        "refusal_rate": _rate(sum(r.weight for r in known if r.refused), sum(r.weight for r in known)),
        "degraded": len(degraded),
        "degraded_rate": _rate(sum(r.weight for r in degraded), weight),
        "fallback": len(fallback),
        "fallback_rate": _rate(sum(r.weight for r in fallback), weight),
    }


def compare(a: SideSummary, b: SideSummary) -> dict[str, Any]:
    """The whole comparison: per question (paired), totals per side, and questions on one side only."""
    both = [q for q in a.by_query if q in b.by_query]
    pairs = [pair(a.by_query[q], b.by_query[q]) for q in both]
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
        "only_in_a": [{"query_sha256": q, "trace_id": r.trace_id} for q, r in a.by_query.items() if q not in b.by_query],
        "only_in_b": [{"query_sha256": q, "trace_id": r.trace_id} for q, r in b.by_query.items() if q not in a.by_query],
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
