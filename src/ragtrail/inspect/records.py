"""One small record per trace: what ``ls``, ``stats`` and ``compare`` need, without the candidate tables.

A manifest holds every candidate's row; 100,000 of them do not fit in memory. A record keeps, per stage,
the ids it handed on (in order), what it excluded and why, its status, and per trace the run status,
the query receipt of hop 0 (how ``compare`` pairs runs), the answer receipt and refusal, and findings
and insights. Strings repeated across traces (ids, components, reasons) are interned.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from ragtrail.contract import semconv as sc

from .diff import status_text
from .insights import InsightSettings, insights
from .manifest import build
from .manifest_model import Answer, ExcludedId, Manifest, Stage
from .model import Trace

_i = sys.intern


def _s(value: Any) -> str | None:
    return None if value is None else _i(str(value))


@dataclass(slots=True)
class StageRecord:
    kind: str
    component: str
    status: str | None
    failure_class: str | None
    fallback: str | None
    n_in: int
    n_out: int
    n_excluded: int
    out_ids: tuple[str, ...]
    excluded: tuple[ExcludedId, ...]
    span_id: str = ""
    parent_span_id: str | None = None

    @property
    def label(self) -> str:
        return f"{self.kind} {self.component}"

    def status_text(self) -> str:
        """``ok``, or ``degraded (parse_error, fallback input_order)``."""
        return status_text(self.status, self.failure_class, self.fallback)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "component": self.component,
            "status": self.status,
            "failure_class": self.failure_class,
            "fallback": self.fallback,
            "in": self.n_in,
            "out": self.n_out,
            "excluded_count": self.n_excluded,
            "out_ids": list(self.out_ids),
            "excluded": [{"id": e.id, "reason": e.reason} for e in self.excluded],
        }


@dataclass(slots=True)
class TraceRecord:
    trace_id: str
    start_ns: int
    end_ns: int
    service: str | None
    service_version: str | None
    pipeline: str | None
    run_status: str | None
    query_sha256: str | None
    answer_sha256: str | None
    refused: bool | None
    weight: float  # the requests this trace stands for (inspect/weight.py: head x tail; 1 when not known)
    basis: str  # on what grounds (weight.Basis): "sampled", "tail_only", "unknown_policy", "no_record"
    tail_stamped: bool  # a gateway's tail sampler stamped the trace (ragtrail.sampling.tail.policy)
    stages: list[StageRecord]
    cited: tuple[str, ...]
    in_context: tuple[str, ...] | None  # None: no stage defined what reached the model
    corpus_size: int | None
    findings: list[str]
    insights: list[dict[str, Any]]
    alarms: int
    notes: list[str] = field(default_factory=list)
    resource: dict[str, Any] = field(default_factory=dict)
    query_text: str | None = None  # hop 0's text where it was recorded (text mode): compare --key-file keys it

    @property
    def weighted(self) -> bool:
        """The weight is known (a head record, a tail stamp with its probability, or both)."""
        return self.basis in ("sampled", "tail_only")

    def stage_statuses(self) -> set[str]:
        return {s.status for s in self.stages if s.status}

    def degraded(self) -> bool:
        return self.run_status in (sc.RUN_DEGRADED, sc.RUN_FAILED) or bool(self.stage_statuses() & {sc.STATUS_DEGRADED, sc.STATUS_FAILED})

    def fallback(self) -> bool:
        return any(s.fallback for s in self.stages)

    def doc_ids(self) -> set[str]:
        ids = set(self.cited)
        for s in self.stages:
            ids.update(s.out_ids)
            ids.update(e.id for e in s.excluded)
        return ids

    def as_dict(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "service": self.service,
            "service_version": self.service_version,
            "pipeline": self.pipeline,
            "run_status": self.run_status,
            "query_sha256": self.query_sha256,
            "answer_sha256": self.answer_sha256,
            "refused": self.refused,
            "adjusted_count": self.weight if self.weighted else None,
            "sampling_basis": self.basis,
            "stages": [s.as_dict() for s in self.stages],
            "cited": list(self.cited),
            "in_context": None if self.in_context is None else list(self.in_context),
            "findings": self.findings,
            "insights": self.insights,
            "alarms": self.alarms,
            "notes": self.notes,
        }


def _stage_record(s: Stage) -> StageRecord:
    return StageRecord(
        kind=_i(s.kind),
        component=_i(s.component),
        status=_s(s.status),
        failure_class=_s(s.failure_class),
        fallback=_s(s.fallback),
        n_in=s.n_in,
        n_out=s.n_out,
        n_excluded=s.excluded_count,
        out_ids=tuple(_i(c.id) for c in sorted(s.candidates, key=lambda c: (c.rank is None, c.rank or 0))),
        excluded=tuple(ExcludedId(_i(e.id), _s(e.reason)) for e in s.excluded),
        span_id=s.span_id,
        parent_span_id=s.parent_span_id,
    )


def from_manifest(m: Manifest, trace: Trace | None = None, settings: InsightSettings | None = None) -> TraceRecord:
    """The record of one manifest (and of its trace's resource, for service name and version)."""
    hop0 = next((h for h in m.query_hops if h.hop == 0), None)
    answer = m.answer or Answer()
    resource: dict[str, Any] = {}
    if trace is not None:
        root = min(trace.spans, key=lambda s: (s.parent_span_id is not None, s.start_ns))
        resource = {k: v for k, v in root.resource.items() if isinstance(v, (str, int, float, bool))}
    starts = [s.start_ns for s in m.stages]
    end = max((sp.end_ns for sp in trace.spans), default=0) if trace is not None else 0
    return TraceRecord(
        trace_id=m.trace_id,
        start_ns=min(starts) if starts else 0,
        end_ns=end,
        service=_s(resource.get("service.name")),
        service_version=_s(resource.get("service.version")),
        pipeline=_s(m.pipeline.component if m.pipeline else None),
        run_status=_s(m.run_status),
        query_sha256=hop0.sha256 if hop0 else None,
        answer_sha256=answer.sha256,
        refused=answer.refused,
        weight=m.sampling.weight,
        basis=m.sampling.basis,
        tail_stamped=m.sampling.tail_policy is not None,
        stages=[_stage_record(s) for s in m.stages],
        cited=tuple(_i(c) for c in m.cited),
        in_context=None if m.in_context is None else tuple(_i(c) for c in m.in_context),
        corpus_size=m.coverage.corpus_size,
        findings=m.findings,
        insights=insights(m, settings),
        alarms=len(m.fidelity.alarms),
        notes=list(trace.notes) if trace is not None else [],
        resource=resource,
        query_text=hop0.text if hop0 is not None and isinstance(hop0.text, str) else None,
    )


def from_trace(trace: Trace, settings: InsightSettings | None = None) -> TraceRecord:
    return from_manifest(build(trace), trace, settings)
