"""Aggregates over a source, per stage kind and component, in constant memory per stage.

Each trace is weighted by the requests it stands for (``weight.trace_weight``: head adjusted count x
1 / the gateway's tail probability; a trace sampled at p=0.1 stands for 10 requests); a trace whose
weight is unknown (no sampling record, or kept by a tail policy that says no probability) counts once,
and the output says how many did and did not, so a weighted figure is never passed off as a plain
count or the reverse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, TypeVar

from ragtrail.contract import semconv as sc

from .records import StageRecord, TraceRecord
from .weight import WeightTally

_K = TypeVar("_K")


class Weights(dict[_K, float]):
    """Totals of sampling weights by key, read like a ``collections.Counter`` (a missing key is 0
    and is not stored; :meth:`most_common` orders the same way). Counter is typed for int counts
    only, and these are float weights."""

    def __missing__(self, key: _K) -> float:
        return 0

    def most_common(self) -> list[tuple[_K, float]]:
        return sorted(self.items(), key=itemgetter(1), reverse=True)


def _quantiles(values: Weights[int]) -> dict[str, Any]:
    """min / median / p90 / max of a weighted integer distribution (weights are the counts)."""
    total = sum(values.values())
    if not total:
        return {"min": None, "median": None, "p90": None, "max": None, "mean": None}
    keys = sorted(values)
    out: dict[str, Any] = {"min": keys[0], "max": keys[-1], "mean": round(sum(k * w for k, w in values.items()) / total, 3)}
    for name, q in (("median", 0.5), ("p90", 0.9)):
        running = 0.0
        for k in keys:
            running += values[k]
            if running >= q * total:
                out[name] = k
                break
    return out


@dataclass
class StageStats:
    kind: str
    component: str
    traces: float = 0.0
    spans: int = 0
    n_in: Weights[int] = field(default_factory=Weights)
    n_out: Weights[int] = field(default_factory=Weights)
    n_excluded: Weights[int] = field(default_factory=Weights)
    reasons: Weights[str] = field(default_factory=Weights)
    statuses: Weights[str] = field(default_factory=Weights)
    failure_classes: Weights[str] = field(default_factory=Weights)
    fallbacks: Weights[str] = field(default_factory=Weights)

    def add(self, s: StageRecord, w: float) -> None:
        self.spans += 1
        self.n_in[s.n_in] += w
        self.n_out[s.n_out] += w
        self.n_excluded[s.n_excluded] += w
        for e in s.excluded:
            self.reasons[str(e.reason)] += w
        self.statuses[s.status or "unknown"] += w
        if s.failure_class:
            self.failure_classes[s.failure_class] += w
        if s.fallback:
            self.fallbacks[s.fallback] += w

    def as_dict(self) -> dict[str, Any]:
        weight = sum(self.statuses.values())
        excluded = sum(self.reasons.values())
        return {
            "kind": self.kind,
            "component": self.component,
            "traces": round(self.traces, 3),
            "spans": self.spans,
            "in": _quantiles(self.n_in),
            "out": _quantiles(self.n_out),
            "excluded": _quantiles(self.n_excluded),
            "exclusion_reasons": dict(self.reasons.most_common()),
            "statuses": dict(self.statuses.most_common()),
            "failure_classes": dict(self.failure_classes.most_common()),
            "fallbacks": dict(self.fallbacks.most_common()),
            "fallback_rate": round(sum(self.fallbacks.values()) / weight, 4) if weight else None,
            "unexplained_rate": round(self.reasons.get(sc.REASON_UNEXPLAINED, 0) / excluded, 4) if excluded else None,
        }


@dataclass
class Stats:
    """Fed one record at a time (:meth:`add`); memory grows with the number of distinct stages only."""

    traces: int = 0
    weighted_traces: int = 0
    requests: float = 0.0
    stages: dict[tuple[str, str], StageStats] = field(default_factory=dict)
    run_statuses: Weights[str] = field(default_factory=Weights)
    refused: float = 0.0
    refusal_known: float = 0.0
    insights: Weights[str] = field(default_factory=Weights)
    exhaustive: float = 0.0
    corpus_known: float = 0.0
    read_fraction_sum: float = 0.0
    alarms: int = 0
    tally: WeightTally = field(default_factory=WeightTally)

    def add(self, r: TraceRecord) -> None:
        w = r.weight
        self.traces += 1
        self.weighted_traces += r.weighted
        self.requests += w
        self.tally.add(w, r.basis, r.tail_stamped)
        self.run_statuses[r.run_status or "not recorded"] += w
        if r.refused is not None:
            self.refusal_known += w
            self.refused += w * r.refused
        for i in r.insights:
            self.insights[i["insight"]] += w
        if r.corpus_size and r.in_context is not None:
            self.corpus_known += w
            self.read_fraction_sum += w * min(1.0, len(r.in_context) / r.corpus_size)
            self.exhaustive += w * (len(r.in_context) >= r.corpus_size)
        self.alarms += r.alarms
        seen: set[tuple[str, str]] = set()
        for s in r.stages:
            key = (s.kind, s.component)
            st = self.stages.get(key)
            if st is None:
                st = self.stages[key] = StageStats(s.kind, s.component)
            if key not in seen:
                st.traces += w
                seen.add(key)
            st.add(s, w)

    def statement(self) -> str:
        return self.tally.statement()

    def as_dict(self) -> dict[str, Any]:
        order = {k: i for i, k in enumerate(sc.STAGE_KINDS)}
        stages = sorted(self.stages.values(), key=lambda s: (order.get(s.kind, 99), s.component))
        return {
            "traces": self.traces,
            "weighted_traces": self.weighted_traces,
            "requests": round(self.requests, 3),
            "sampling": self.statement(),
            "unknown_policy_traces": self.tally.unknown_policy,
            "no_sampling_record_traces": self.tally.no_record,
            "run_statuses": dict(self.run_statuses.most_common()),
            "refusal_rate": round(self.refused / self.refusal_known, 4) if self.refusal_known else None,
            "refusal_known": round(self.refusal_known, 3),
            "insights": dict(self.insights.most_common()),
            "coverage": {
                "corpus_known": round(self.corpus_known, 3),
                "mean_read_fraction": round(self.read_fraction_sum / self.corpus_known, 6) if self.corpus_known else None,
                "exhaustive": round(self.exhaustive, 3),
            },
            "alarms": self.alarms,
            "stages": [s.as_dict() for s in stages],
        }
