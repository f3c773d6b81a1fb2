"""The words every gate output uses for a verdict, a check, a problem and a loss.

The JUnit file, the markdown comment, the GitHub annotations and the terminal table are read by
different people at different moments of a review; they must say the same thing with the same
numbers. So the sentences are built here once, from the :class:`~ragtrail.gate.model.GateReport`
alone, and each renderer only escapes them for its medium.

Everything returned here is **raw**: ids, queries, slice names, stage labels, reasons and messages
come from the eval set and from traces, which are untrusted. A renderer must escape what it shows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .metrics import CEILINGS
from .model import ALL_SLICE, EXIT_CODES, CaseResult, Check, GateReport, Problem, StageSurvival


def number(value: float | None) -> str:
    """A metric value as shown everywhere: three decimals, ``n/a`` when it could not be measured."""
    return "n/a" if value is None else f"{value:.3f}"


def check_name(check: Check) -> str:
    """``metric@stage``: the metric as named by the gate, with the stage it is read at when it has one."""
    if check.stage and "@" not in check.metric:
        return f"{check.metric}@{check.stage}"
    return check.metric


def is_ceiling(check: Check) -> bool:
    """True when the check's threshold is a ceiling (refusal rate), False for a floor."""
    return check.metric in CEILINGS


def comparison(check: Check) -> str:
    """``0.600 < floor 0.800 (baseline 0.950, n=12)``: the value against its threshold, in one phrase."""
    bound = "ceiling" if is_ceiling(check) else "floor"
    if check.threshold is None:
        head = f"{number(check.value)}, no {bound} (no baseline)"
    elif check.value is None:
        head = f"n/a, {bound} {number(check.threshold)}"
    elif is_ceiling(check):
        head = f"{number(check.value)} {'>' if check.value > check.threshold else '<='} {bound} {number(check.threshold)}"
    else:
        head = f"{number(check.value)} {'<' if check.value < check.threshold else '>='} {bound} {number(check.threshold)}"
    tail = [f"baseline {number(check.baseline_mean)}"] if check.baseline_mean is not None else []
    tail.append(f"n={check.n}")
    return f"{head} ({', '.join(tail)})"


def check_status(check: Check) -> str:
    return "pass" if check.passed else "FAIL"


def failure_message(check: Check) -> str:
    """What a failed check says in one line: the gate's message (which names the stage that lost the
    evidence), or the value against its threshold when the gate gave none."""
    return check.message or comparison(check)


def check_line(check: Check) -> str:
    """One line for a check: ``slice metric@stage: FAIL 0.600 < floor 0.800 (...): message``."""
    line = f"{check.slice} {check_name(check)}: {check_status(check)} {comparison(check)}"
    return f"{line}: {check.message}" if check.message else line


def failed_first_by_slice(report: GateReport) -> list[Check]:
    """The failed checks, the slices' before the aggregate's: a loss concentrated in one slice is the
    finding, the aggregate only echoes it (and GitHub shows only the first ten annotations)."""
    return sorted(report.failed_checks(), key=lambda c: c.slice == ALL_SLICE)


def problem_name(problem: Problem) -> str:
    """``kind: case`` (or the kind alone when the problem is about the whole run)."""
    return f"{problem.kind}: {problem.case_id}" if problem.case_id is not None else problem.kind


def problem_line(problem: Problem) -> str:
    """One line for a problem: its name, its detail, and the trace it was read from when there is one."""
    line = f"{problem_name(problem)}: {problem.detail}"
    return f"{line} (trace {problem.trace_id})" if problem.trace_id else line


def verdict_line(report: GateReport) -> str:
    """``ragtrail gate: REGRESSION (exit 1): 14 checks, 2 failed, 0 problems, 30 cases``: the one verdict
    line every output (terminal, markdown, annotations) says."""
    return (
        f"ragtrail gate: {report.verdict} (exit {EXIT_CODES[report.verdict]}): {len(report.checks)} checks, "
        f"{len(report.failed_checks())} failed, {len(report.problems)} problems, {len(report.cases)} cases"
    )


def warnings(report: GateReport) -> list[str]:
    """Every warning once: a slice's warning (carried by each of its checks) as ``slice: warning``, then the
    report's own, in order, without repeats (a warning said forty times is a warning nobody reads)."""
    seen: dict[str, None] = {}
    for c in report.checks:
        if c.warning:
            seen.setdefault(f"{c.slice}: {c.warning}", None)
    for w in report.warnings:
        seen.setdefault(w, None)
    return list(seen)


def stage_label(stage: StageSurvival) -> str:
    """``rerank my.rerank``: the label ``ragtrail compare`` uses for a stage."""
    return f"{stage.kind} {stage.component}"


def in_slice(case: CaseResult, slice_name: str) -> bool:
    """Every case is in the aggregate slice, and in its own slice when it names one."""
    return slice_name == ALL_SLICE or case.case.slice == slice_name


@dataclass(slots=True)
class Loss:
    """Relevant ids one stage removed, over the cases of one slice: the stage that lost the evidence."""

    stage: str
    count: int
    reasons: Counter[str]  # reason code -> count; "unknown" when the trace did not say

    def line(self) -> str:
        reasons = ", ".join(f"{r} ×{n}" for r, n in sorted(self.reasons.items(), key=lambda kv: (-kv[1], kv[0])))
        return f"{self.stage}: {self.count} relevant lost ({reasons})"


def losses(report: GateReport, slice_name: str) -> list[Loss]:
    """Where the relevant ids of a slice's cases were lost, stage by stage in pipeline order."""
    by_stage: dict[tuple[int, str], Loss] = {}
    for case in report.cases:
        if not in_slice(case, slice_name):
            continue
        for stage in case.stages:
            if not stage.relevant_lost:
                continue
            key = (stage.index, stage_label(stage))
            loss = by_stage.setdefault(key, Loss(key[1], 0, Counter()))
            for _id, reason in stage.relevant_lost:
                loss.count += 1
                loss.reasons[reason or "unknown"] += 1
    return [by_stage[k] for k in sorted(by_stage)]


def slices(report: GateReport) -> list[str]:
    """The slices of the report's checks, in the order the gate listed them (the aggregate first if present)."""
    seen: dict[str, None] = {}
    for c in report.checks:
        seen.setdefault(c.slice, None)
    names = list(seen)
    if ALL_SLICE in seen:
        names.remove(ALL_SLICE)
        names.insert(0, ALL_SLICE)
    return names


def movement_line(case: CaseResult) -> str:
    """``rbo 0.912; entered: a, b; left: c (budget my.budget, budget_exceeded)`` for one case."""
    m = case.movement
    if m is None:
        return "no movement measured"
    parts = [f"rbo {number(m.rbo)}" if m.rbo is not None else "rbo n/a (no baseline)"]
    if m.entered:
        parts.append("entered: " + ", ".join(m.entered))
    if m.left:
        gone = []
        for ident, stage, reason in m.left:
            where = ", ".join(x for x in (stage, reason) if x) or "in no stage now"
            gone.append(f"{ident} ({where})")
        parts.append("left: " + ", ".join(gone))
    return "; ".join(parts)
