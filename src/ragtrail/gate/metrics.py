"""The gate's metrics: deterministic, ID-based, per case and per stage, then per slice.

No judge model and no text similarity: a case's numbers are set arithmetic on document ids.

* ``recall@retrieve``: the share of the case's relevant ids among what the retrieve stages returned
  (did the known-relevant chunk stay in the candidate set at all);
* ``survival@<stage>``: the share of the relevant ids still held after each later evidence stage
  (fuse, rerank, filter, budget), so the stage that lost the evidence is the first one whose
  survival fell, even when recall before it rose (seed 002's reranker fallback before a budget);
* ``in_context``: the share in what reached the model; ``cited``: the share the answer cited;
* ``refusal_rate``: the share of answered cases that refused (a ceiling, not a floor);
* ``rbo``: rank-biased overlap (extrapolated, p = 0.9) of the final context against the baseline's,
  1.0 for the same order, top-weighted so that a reordered tail costs little.

A slice's value is the mean over its cases that could be measured (a case without relevant ids has
no recall; a case without a recorded answer has no refusal).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import fmean

from .model import ALL_SLICE, EvalCase
from .observation import Observation

RBO_P = 0.9
RECALL = "recall@retrieve"
IN_CONTEXT = "in_context"
CITED = "cited"
REFUSAL = "refusal_rate"
RBO = "rbo"
SURVIVAL_PREFIX = "survival@"
#: Metrics where lower is better (their threshold is a ceiling).
CEILINGS = frozenset({REFUSAL})


def survival_metric(stage_key: str) -> str:
    return SURVIVAL_PREFIX + stage_key


def stage_of(metric: str) -> str | None:
    """The stage key a ``survival@`` metric is read at."""
    return metric[len(SURVIVAL_PREFIX) :] if metric.startswith(SURVIVAL_PREFIX) else None


def _share(relevant: tuple[str, ...], held: Iterable[str]) -> float | None:
    if not relevant:
        return None
    have = set(held)
    return sum(1 for r in relevant if r in have) / len(relevant)


def rbo(a: list[str], b: list[str], p: float = RBO_P) -> float:
    """Rank-biased overlap (Webber, Moffat & Zobel 2010, extrapolated, eq. 32) of two *complete*
    rankings: 1.0 only for identical rankings, 0.0 for disjoint ones.

    The paper's uneven-length form assumes the shorter list was cut and that its unseen tail might
    still match, so a context that lost two of its three documents (``['a']`` against ``['a', 'b',
    'c']``) would score 1.0. A stage's output is the whole list it handed on: the shorter one is padded
    with places that match nothing, and the equal-length form is taken at the longer one's depth."""
    if a == b:
        return 1.0
    depth = max(len(a), len(b))
    seen_a: set[object] = set()
    seen_b: set[object] = set()
    total = 0.0
    overlap = 0
    for d in range(1, depth + 1):
        # a padded place is a fresh object: it overlaps nothing
        seen_a.add(a[d - 1] if d <= len(a) else object())
        seen_b.add(b[d - 1] if d <= len(b) else object())
        overlap = len(seen_a & seen_b)
        total += overlap / d * p**d
    value = (1 - p) / p * total + overlap / depth * p**depth
    return max(0.0, min(1.0, value))


def case_values(case: EvalCase, obs: Observation, baseline_top: list[str] | None = None) -> dict[str, float | None]:
    """Every metric of one case (``None`` where the case cannot be measured)."""
    rel = case.relevant
    values: dict[str, float | None] = {RECALL: _share(rel, obs.retrieved)}
    for stage in obs.stages:
        if stage.kind != "retrieve":
            values[survival_metric(stage.key)] = _share(rel, stage.ids)
    values[IN_CONTEXT] = None if obs.in_context is None else _share(rel, obs.in_context)  # unknown: not measured
    values[CITED] = _share(rel, obs.cited) if obs.cites else (0.0 if rel else None)
    values[REFUSAL] = None if obs.refused is None else float(obs.refused)
    values[RBO] = None if baseline_top is None or obs.in_context is None else rbo(obs.in_context, baseline_top)
    return values


def slices_of(case: EvalCase) -> tuple[str, ...]:
    return (ALL_SLICE,) if case.slice is None else (case.slice, ALL_SLICE)


@dataclass(slots=True)
class SliceValue:
    value: float | None
    n: int


def aggregate(cases: list[EvalCase], values: list[dict[str, float | None]]) -> dict[tuple[str, str], SliceValue]:
    """(slice, metric) -> mean over the slice's measured cases."""
    pools: dict[tuple[str, str], list[float]] = defaultdict(list)
    names: set[str] = set()
    for case, row in zip(cases, values, strict=False):
        names.update(row)
        for slice_ in slices_of(case):
            for metric, value in row.items():
                if value is not None:
                    pools[(slice_, metric)].append(value)
    out: dict[tuple[str, str], SliceValue] = {}
    all_slices = {s for c in cases for s in slices_of(c)}
    for slice_ in all_slices:
        for metric in names:
            pool = pools.get((slice_, metric), [])
            out[(slice_, metric)] = SliceValue(fmean(pool) if pool else None, len(pool))
    return out


__all__ = [
    "CEILINGS",
    "CITED",
    "IN_CONTEXT",
    "RBO",
    "RECALL",
    "REFUSAL",
    "SliceValue",
    "aggregate",
    "case_values",
    "rbo",
    "slices_of",
    "stage_of",
    "survival_metric",
]
