"""What a gate run decides, as plain data: the one shape every gate output (terminal, JSON, JUnit,
markdown, GitHub annotations, diff files) is rendered from.

The gate's evaluation (``ragtrail.gate.evaluate``) produces a :class:`GateReport`; the renderers only
read it. Keeping the decision and its presentation apart is what lets the CI outputs agree with each
other: a slice that fails in the JUnit file fails in the markdown summary, with the same numbers.

Verdicts and exit codes are fixed here once. ``INCONCLUSIVE`` is never a pass: evidence the gate
cannot trust (a missing query, a failed or sampled-out trace, a receipt alarm, a truncated trace, a
corpus or index that changed since the baseline) is named as a :class:`Problem`, and a report with any
problem cannot be PASS.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Verdict = Literal["PASS", "REGRESSION", "INCONCLUSIVE"]

PASS: Verdict = "PASS"
REGRESSION: Verdict = "REGRESSION"
INCONCLUSIVE: Verdict = "INCONCLUSIVE"

#: Exit codes. 2 is left to click (usage errors); 1 is a REGRESSION so that a bare ``ragtrail gate run``
#: in a shell script fails the step the ordinary way, 3 says "the gate could not decide".
EXIT_CODES: dict[str, int] = {PASS: 0, REGRESSION: 1, INCONCLUSIVE: 3}

#: The slice every case belongs to in addition to its own: the aggregate.
ALL_SLICE = "(all)"

#: Problem kinds. Each one makes the verdict INCONCLUSIVE and is named in every output.
PROBLEM_KINDS = (
    "missing_query",  # a case of the set has no trace (not run, not found among --traces)
    "pipeline_error",  # the user's pipeline raised for this case
    "failed_trace",  # the run status or a stage status is failed
    "sampled_out",  # the trace was sampled away (adjusted count > 1, or no stage spans at all)
    "receipt_alarm",  # ragtrail verify raised an alarm on the trace
    "truncated",  # the trace or a segment is incomplete (split, lost spans, cut attributes)
    "corpus_changed",  # a store's size, or a relevant document's content hash, differs from the baseline
    "index_changed",  # the index identity (store names/collections) differs from the baseline
    "version_changed",  # a component version differs from the baseline
    "unknown_relevance",  # a relevant id of the set was never seen by any stage and the corpus size is unknown
    "baseline_mismatch",  # the baseline was frozen from a different eval set (its digest differs)
)


@dataclass(slots=True)
class EvalCase:
    """One line of the eval set (JSONL): a query, the ids known to be relevant, an optional slice and claim."""

    id: str
    query: str
    relevant: tuple[str, ...]
    slice: str | None = None
    claim: str | None = None  # an expected claim, compared with the answer's recorded claim when present


@dataclass(slots=True)
class StageSurvival:
    """How many of a case's relevant ids one stage still held, and where the others went."""

    index: int  # position of the stage in the pipeline, 0 = first retrieval
    kind: str  # retrieve, filter, rerank, budget, ... (ragtrail.stage.kind)
    component: str
    k: int  # how many ids the stage handed on
    relevant_kept: tuple[str, ...]
    relevant_lost: tuple[tuple[str, str | None], ...]  # (id, exclusion reason or None when unknown)
    status: str | None = None
    key: str | None = None  # "kind component" (+ " #n" for the n-th of the same): what checks name as ``stage``


@dataclass(slots=True)
class Movement:
    """How far a case's final top-k moved against the baseline."""

    rbo: float | None  # rank-biased overlap with the baseline's top-k, None if no baseline
    entered: tuple[str, ...] = ()  # ids in the top-k now, not in the baseline's
    left: tuple[tuple[str, str | None, str | None], ...] = ()  # (id, stage label that removed it, reason)


@dataclass(slots=True)
class CaseResult:
    """Everything the gate measured for one case of the set."""

    case: EvalCase
    trace_id: str | None
    stages: list[StageSurvival] = field(default_factory=list)
    in_context: tuple[str, ...] = ()
    cited: tuple[str, ...] = ()
    refused: bool | None = None
    movement: Movement | None = None
    problems: list[Problem] = field(default_factory=list)
    diff_text: str | None = None  # the full manifest diff against the baseline's trace, for a human


@dataclass(slots=True)
class Check:
    """One metric on one slice, compared with its floor or ceiling from the baseline.

    ``metric`` names the quantity and, where it has one, the stage: ``recall@retrieve``,
    ``survival@rerank``, ``in_context``, ``cited``, ``refusal_rate``, ``rbo``.
    """

    slice: str
    metric: str
    value: float | None  # None when no case of the slice could be measured
    threshold: float | None  # the floor (or, for refusal_rate, the ceiling); None without a baseline
    baseline_mean: float | None
    n: int  # cases measured in the slice
    passed: bool
    stage: str | None = None  # the stage label the metric is read at, when it has one
    message: str = ""  # one line: why it failed, or which stage lost the evidence
    warning: str | None = None  # e.g. "slice too small to be statistically boring (n=3)"


@dataclass(slots=True)
class Problem:
    """Evidence the gate cannot trust. Any problem makes the verdict INCONCLUSIVE."""

    kind: str  # one of PROBLEM_KINDS
    case_id: str | None
    detail: str
    trace_id: str | None = None


@dataclass(slots=True)
class GateReport:
    """The whole decision of one ``ragtrail gate run``."""

    verdict: Verdict
    checks: list[Check]
    problems: list[Problem]
    cases: list[CaseResult]
    warnings: list[str] = field(default_factory=list)
    set_path: str | None = None
    baseline_path: str | None = None
    pipeline: str | None = None  # pkg.module:function, or None with --traces
    started_at: str | None = None  # ISO 8601 UTC
    duration_s: float | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document: every field, plain JSON types."""
        out = asdict(self)
        out["exit_code"] = self.exit_code
        return out


def decide(checks: list[Check], problems: list[Problem]) -> Verdict:
    """The one verdict rule: any problem is INCONCLUSIVE, else any failed check is a REGRESSION."""
    if problems:
        return INCONCLUSIVE
    if any(not c.passed for c in checks):
        return REGRESSION
    return PASS
