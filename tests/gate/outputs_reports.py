"""GateReports built from the model's dataclasses for the output tests: a pass, a regression whose
evidence was lost at a named stage, an inconclusive run with several problem kinds, and one whose
every string is hostile."""

from __future__ import annotations

from ragtrail.gate.model import (
    ALL_SLICE,
    INCONCLUSIVE,
    PASS,
    REGRESSION,
    CaseResult,
    Check,
    EvalCase,
    GateReport,
    Movement,
    Problem,
    StageSurvival,
    decide,
)

#: what the gate says of the regression() report's failed check (evaluate.py's wording)
MESSAGE = (
    "survival@budget app.budget fell to 0.500 (floor 0.800, baseline 0.850); relevant ids lost at budget app.budget: "
    "2 (budget_exceeded ×2); recall@retrieve rose to 1.000 (baseline 0.900)"
)
HOSTILE = "a\x00\u202e\ufffe|b `tick`` <script>alert(1)</script>\n::error::forged\r%0A ##[stop-commands]tok @everyone #12 </details> x:y,z"


def _stages(relevant: tuple[str, ...], lost_at_budget: tuple[str, ...] = ()) -> list[StageSurvival]:
    kept = tuple(r for r in relevant if r not in lost_at_budget)
    return [
        StageSurvival(0, "retrieve", "app.search", 20, relevant, ()),
        StageSurvival(1, "rerank", "app.rerank", 5, relevant, ()),
        StageSurvival(2, "budget", "app.budget", 3, kept, tuple((r, "budget_exceeded") for r in lost_at_budget)),
    ]


def _case(
    ident: str, slice_: str | None, relevant: tuple[str, ...], rbo: float = 1.0, lost: tuple[str, ...] = (), diff: str | None = None
) -> CaseResult:
    case = EvalCase(id=ident, query=f"question {ident}?", relevant=relevant, slice=slice_)
    left = tuple((r, "budget app.budget", "budget_exceeded") for r in lost)
    return CaseResult(
        case=case,
        trace_id=f"{ident}-trace",
        stages=_stages(relevant, lost),
        in_context=tuple(r for r in relevant if r not in lost),
        cited=(),
        refused=False,
        movement=Movement(rbo=rbo, entered=("new-doc",) if lost else (), left=left),
        diff_text=diff,
    )


def _check(
    slice_: str, metric: str, value: float, threshold: float, passed: bool, message: str = "", warning: str | None = None, n: int = 12
) -> Check:
    stage = metric[len("survival@") :] if metric.startswith("survival@") else None
    return Check(
        slice=slice_,
        metric=metric,
        value=value,
        threshold=threshold,
        baseline_mean=round(threshold + 0.05, 3),
        n=n,
        passed=passed,
        stage=stage,
        message=message,
        warning=warning,
    )


def passing() -> GateReport:
    checks = [
        _check(ALL_SLICE, "recall@retrieve", 1.0, 0.95, True),
        _check(ALL_SLICE, "refusal_rate", 0.0, 0.1, True),
        _check("tables", "recall@retrieve", 1.0, 0.9, True, warning="slice too small to be statistically boring (n=3)", n=3),
    ]
    cases = [_case("q1", "tables", ("doc-1",), rbo=0.98), _case("q2", None, ("doc-2",))]
    return GateReport(
        verdict=decide(checks, []),
        checks=checks,
        problems=[],
        cases=cases,
        set_path="eval.jsonl",
        baseline_path="gate-baseline.json",
        pipeline="app.rag:answer",
        started_at="2026-12-01T23:50:00+00:00",
        duration_s=1.25,
    )


def regression() -> GateReport:
    """Recall at retrieve rose, but the budget stage lost the evidence on the tables slice."""
    checks = [
        _check(ALL_SLICE, "recall@retrieve", 1.0, 0.85, True),
        _check(ALL_SLICE, "survival@budget app.budget", 0.9, 0.85, True),
        _check("tables", "recall@retrieve", 1.0, 0.85, True),
        _check("tables", "survival@budget app.budget", 0.5, 0.8, False, message=MESSAGE),
    ]
    cases = [
        _case("t1", "tables", ("tbl-1",), rbo=0.62, lost=("tbl-1",), diff="budget app.budget: left tbl-1 budget_exceeded"),
        _case("t2", "tables", ("tbl-2",), rbo=0.7, lost=("tbl-2",)),
        _case("l1", "long", ("long-1",)),
    ]
    report = GateReport(
        verdict=decide(checks, []),
        checks=checks,
        problems=[],
        cases=cases,
        set_path="eval.jsonl",
        baseline_path="gate-baseline.json",
        pipeline="app.rag:answer",
        duration_s=2.0,
    )
    assert report.verdict == REGRESSION
    return report


def inconclusive() -> GateReport:
    checks = [_check(ALL_SLICE, "recall@retrieve", 0.95, 0.9, True)]
    problems = [
        Problem("sampled_out", "q3", "adjusted count 10: the trace was sampled", "t-q3"),
        Problem("truncated", "q4", "2 spans lost of 5", "t-q4"),
        Problem("receipt_alarm", "q5", "stage rerank: content receipt differs", "t-q5"),
        Problem("receipt_alarm", "q5", "stage budget: events digest differs", "t-q5"),
        Problem("corpus_changed", None, "store app.store: 120 documents, baseline 118"),
    ]
    cases = [_case("q3", None, ("d3",)), _case("q4", None, ("d4",))]
    cases[0].problems = problems[:1]
    report = GateReport(
        verdict=decide(checks, problems),
        checks=checks,
        problems=problems,
        cases=cases,
        warnings=["baseline frozen from 3 runs only"],
        set_path="eval.jsonl",
    )
    assert report.verdict == INCONCLUSIVE
    return report


def hostile(value: str = HOSTILE) -> GateReport:
    """Every string that comes from the eval set or a trace is hostile (``value``)."""
    checks = [_check(value, "recall@retrieve", 0.2, 0.9, False, message=value, warning=value)]
    problems = [Problem("missing_query", value, value, value)]
    case = _case(value, value, (value,), rbo=0.1, lost=(value,), diff=value + "\n\x1b[2J\x00\ufffe\ud800")
    case.case.query = value + "\x00\u202e" if value != "x" else value
    report = GateReport(
        verdict=decide(checks, problems), checks=checks, problems=problems, cases=[case], warnings=[value], set_path=value, pipeline=value
    )
    return report


assert passing().verdict == PASS
