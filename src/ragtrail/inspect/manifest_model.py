"""The manifest as typed records: what :func:`ragtrail.inspect.manifest.build` returns and every reader
(terminal, HTML report, diff, doc fate, insights, records, the gate) reads by attribute.

The JSON a user sees (``ragtrail show --json``, the manifest embedded in the HTML report) is
:meth:`Manifest.as_dict`: the same keys in the same order as when the manifest was a dict. A row whose
keys depend on what the trace carried (a candidate with or without a content receipt, a hop seen only
as an embedding hop) remembers which optional keys it had, in the order they arrived, so that its JSON
is the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .fidelity import Fidelity

#: optional groups of keys of a candidate or exclusion row, in the order ``as_dict`` may write them
META, SHA256, PREVIEW, SCORE_RAW, TRANSFORM_RULE, REASON = "meta", "sha256", "preview", "score_raw", "transform_rule", "reason"


@dataclass(slots=True)
class Row:
    """One candidate or exclusion event of a stage. ``keys`` lists the optional groups the event carried
    (``meta``, ``sha256`` with ``chars``, ``preview``, ``score_raw``, ``transform_rule`` with
    ``derived_from``, ``reason`` with ``detail``) in the order its attributes named them."""

    id: str
    rank: int | None = None
    score: Any = None
    score_kind: Any = None
    hop: int | None = None
    meta: dict[str, Any] | None = None
    sha256: Any = None
    chars: Any = None
    preview: Any = None
    score_raw: Any = None
    transform_rule: Any = None
    derived_from: Any = None
    reason: Any = None
    detail: Any = None
    keys: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "rank": self.rank, "score": self.score, "score_kind": self.score_kind, "hop": self.hop}
        for key in self.keys:
            if key == SHA256:
                out["sha256"], out["chars"] = self.sha256, self.chars
            elif key == TRANSFORM_RULE:
                out["transform_rule"], out["derived_from"] = self.transform_rule, self.derived_from
            elif key == REASON:
                out["reason"], out["detail"] = self.reason, self.detail
            else:
                out[key] = getattr(self, key)
        return out


class ExcludedId(NamedTuple):
    """An excluded id and the reason given (what ``ls``, ``compare`` and the gate keep of an exclusion)."""

    id: str
    reason: str | None


@dataclass(slots=True)
class Hop:
    """A query hop as one span or event stated it (``ragtrail.query.*``)."""

    hop: int | None
    parent_hop: int | None = None
    transform: Any = None
    text: Any = None
    sha256: Any = None
    chars: Any = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "hop": self.hop,
            "parent_hop": self.parent_hop,
            "transform": self.transform,
            "text": self.text,
            "sha256": self.sha256,
            "chars": self.chars,
        }


@dataclass(slots=True)
class QueryHop:
    """Every hop once, with the stages that ran on it and the one that produced it. ``keys`` is the
    order its JSON keys arrived in (a hop first seen as an embedding hop has only ``hop`` at first)."""

    hop: int
    parent_hop: int | None = None
    transform: Any = None
    text: Any = None
    sha256: Any = None
    chars: Any = None
    used_by: list[str] = field(default_factory=list)
    produced_by: str | None = None
    hit_index: bool = False
    question: int | None = None  # which run's hop, when the trace holds more than one (manifest.query_hops)
    keys: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.keys}


@dataclass(slots=True)
class Stage:
    """A stage as the manifest shows it: counts, knobs, the query it saw, candidates, exclusions."""

    span_id: str
    parent_span_id: str | None
    kind: Any
    component: Any
    status: Any = None
    failure_class: Any = None
    fallback: Any = None
    n_in: int = 0
    n_out: int = 0
    excluded_count: int = 0
    knobs: dict[str, Any] = field(default_factory=dict)
    query: Hop | None = None
    embedding_hops: list[int] = field(default_factory=list)
    query_variants: list[Hop] = field(default_factory=list)
    candidates: list[Row] = field(default_factory=list)
    excluded: list[Row] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    filter: Any = None
    collection: Any = None
    model: Any = None
    error: str | None = None
    start_ns: int = 0
    duration_ms: float = 0.0

    @property
    def label(self) -> str:
        return f"{self.kind} {self.component}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "span_id": self.span_id,
            "parent_span_id": self.parent_span_id,
            "kind": self.kind,
            "component": self.component,
            "status": self.status,
            "failure_class": self.failure_class,
            "fallback": self.fallback,
            "in": self.n_in,
            "out": self.n_out,
            "excluded_count": self.excluded_count,
            "knobs": self.knobs,
            "query": self.query.as_dict() if self.query is not None else None,
            "embedding_hops": self.embedding_hops,
            "query_variants": [v.as_dict() for v in self.query_variants],
            "candidates": [c.as_dict() for c in self.candidates],
            "excluded": [e.as_dict() for e in self.excluded],
            "findings": self.findings,
            "filter": self.filter,
            "collection": self.collection,
            "model": self.model,
            "error": self.error,
            "start_ns": self.start_ns,
            "duration_ms": self.duration_ms,
        }


@dataclass(slots=True)
class PipelineSummary:
    component: Any
    status: Any
    duration_ms: float

    def as_dict(self) -> dict[str, Any]:
        return {"component": self.component, "status": self.status, "duration_ms": self.duration_ms}


@dataclass(slots=True)
class Retrieved:
    """A document first handed on by a retrieve or fuse stage (``meta`` only when it carried some)."""

    id: str
    score: Any
    hop: int | None
    stage: Any
    component: Any
    meta: dict[str, Any] | None = None
    cited: bool = False

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "score": self.score, "hop": self.hop, "stage": self.stage, "component": self.component}
        if self.meta is not None:
            out["meta"] = self.meta
        out["cited"] = self.cited
        return out


@dataclass(slots=True)
class Excluded:
    """One exclusion of the whole trace, with the stage that made it."""

    id: str
    stage: Any
    component: Any
    reason: Any
    detail: Any

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "stage": self.stage, "component": self.component, "reason": self.reason, "detail": self.detail}


@dataclass(slots=True)
class Survival:
    """One row of the evidence-survival funnel."""

    stage: Any
    component: Any
    n_in: int
    n_out: int
    excluded: int

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "component": self.component, "in": self.n_in, "out": self.n_out, "excluded": self.excluded}


@dataclass(slots=True)
class ClaimVerdict:
    """Whether what was read supports one type of claim (quote, absence, universal, latest, count)."""

    claim: str
    example: str
    supported: bool
    why: str

    def as_dict(self) -> dict[str, Any]:
        return {"claim": self.claim, "example": self.example, "supported": self.supported, "why": self.why}


@dataclass(slots=True)
class AnswerClaim:
    """The verdict for the claim the answer said it made (``why`` is absent for ``none``)."""

    claim: str
    supported: bool | None
    statement: str
    why: str | None = None

    def as_dict(self) -> dict[str, Any]:
        if self.claim == "none":
            return {"claim": self.claim, "supported": self.supported, "statement": self.statement}
        return {"claim": self.claim, "supported": self.supported, "why": self.why, "statement": self.statement}


@dataclass(slots=True)
class Coverage:
    """Counts, ``exhaustive``, one statement, per-claim verdicts and the answer's own claim."""

    corpus_size: int | None = None
    approximate: bool = False
    stores: int | None = None
    retrieved: int = 0
    in_context: int | None = 0  # None: no stage defined what reached the model
    cited: int = 0
    exhaustive: bool = False
    statement: str = ""
    claims: list[ClaimVerdict] = field(default_factory=list)
    answer_claim: AnswerClaim | None = None
    unknown_origin: int = 0  # ids in the context no recorded stage read: never counted as read

    def as_dict(self) -> dict[str, Any]:
        return {
            "corpus_size": self.corpus_size,
            "approximate": self.approximate,
            "stores": self.stores,
            "retrieved": self.retrieved,
            "in_context": self.in_context,
            "unknown_origin": self.unknown_origin,
            "cited": self.cited,
            "exhaustive": self.exhaustive,
            "statement": self.statement,
            "claims": [c.as_dict() for c in self.claims],
            "answer_claim": self.answer_claim.as_dict() if self.answer_claim is not None else None,
        }


@dataclass(slots=True)
class Answer:
    """The answer receipt the app stamped on the pipeline span."""

    sha256: Any = None
    chars: int | None = None
    refused: bool | None = None
    claim: Any = None
    preview: Any = None

    def as_dict(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "chars": self.chars, "refused": self.refused, "claim": self.claim, "preview": self.preview}


@dataclass(slots=True)
class Sampling:
    """How many requests this sampled trace stands for, and where that was read: the head sampler's
    record (``probability``, ``adjusted_count``, ``source``) and the gateway's tail stamp, combined
    into ``weight`` by :func:`ragtrail.inspect.weight.trace_weight` (``basis`` says on what grounds)."""

    probability: Any = None
    adjusted_count: Any = None
    source: str | None = None
    statement: str = ""
    tail_policy: str | None = None
    tail_probability: float | None = None
    weight: float = 1.0
    basis: str = "no_record"

    def as_dict(self) -> dict[str, Any]:
        return {
            "probability": self.probability,
            "adjusted_count": self.adjusted_count,
            "source": self.source,
            "statement": self.statement,
            "tail_policy": self.tail_policy,
            "tail_probability": self.tail_probability,
            "weight": self.weight,
            "basis": self.basis,
        }


@dataclass(slots=True)
class Manifest:
    """The retrieval manifest of one trace (docs/semconv.md §1-5); :meth:`as_dict` is its JSON."""

    trace_id: str
    source: str
    schema: Any = None
    pipeline: PipelineSummary | None = None
    query_hops: list[QueryHop] = field(default_factory=list)
    stages: list[Stage] = field(default_factory=list)
    retrieved: list[Retrieved] = field(default_factory=list)
    excluded: list[Excluded] = field(default_factory=list)
    cited: list[str] = field(default_factory=list)
    in_context: list[str] | None = field(default_factory=list)  # None: unknown (no stage defined the context)
    survival: list[Survival] = field(default_factory=list)
    coverage: Coverage = field(default_factory=Coverage)
    fidelity: Fidelity = field(default_factory=Fidelity)
    findings: list[str] = field(default_factory=list)
    run_status: Any = None
    answer: Answer | None = None
    sampling: Sampling = field(default_factory=Sampling)
    span_count: int = 0

    @property
    def events_checked(self) -> int:
        """The candidate and exclusion events the manifest holds (what ``verify`` says it checked)."""
        return sum(len(s.candidates) + len(s.excluded) for s in self.stages)

    def as_dict(self) -> dict[str, Any]:
        """Exactly the dict (keys and their order) ``ragtrail show --json`` prints."""
        return {
            "trace_id": self.trace_id,
            "source": self.source,
            "schema": self.schema,
            "pipeline": self.pipeline.as_dict() if self.pipeline is not None else None,
            "query_hops": [h.as_dict() for h in self.query_hops],
            "stages": [s.as_dict() for s in self.stages],
            "retrieved": [r.as_dict() for r in self.retrieved],
            "excluded": [e.as_dict() for e in self.excluded],
            "cited": self.cited,
            "in_context": self.in_context,
            "survival": [r.as_dict() for r in self.survival],
            "coverage": self.coverage.as_dict(),
            "fidelity": self.fidelity.as_dict(),
            "findings": self.findings,
            "run_status": self.run_status,
            "answer": self.answer.as_dict() if self.answer is not None else None,
            "sampling": self.sampling.as_dict(),
            "span_count": self.span_count,
        }


@dataclass(slots=True)
class FidelityReport:
    """What ``verify`` needs and nothing more (no candidate tables): the trace's fidelity and sizes."""

    trace_id: str
    source: str
    fidelity: Fidelity
    span_count: int
    events_checked: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "source": self.source,
            "fidelity": self.fidelity.as_dict(),
            "span_count": self.span_count,
            "events_checked": self.events_checked,
        }


__all__ = [
    "Answer",
    "AnswerClaim",
    "ClaimVerdict",
    "Coverage",
    "Excluded",
    "ExcludedId",
    "FidelityReport",
    "Hop",
    "Manifest",
    "PipelineSummary",
    "QueryHop",
    "Retrieved",
    "Row",
    "Sampling",
    "Stage",
    "Survival",
]
