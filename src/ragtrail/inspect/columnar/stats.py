"""``ragtrail stats`` from SQL rows: the rows of :mod:`.sql` folded into :class:`ragtrail.inspect.stats.Stats`.

The SQL does the work per span; the fold fills the same dataclasses the Python path fills, in the
order keys were first seen, so ``as_dict`` formats (rounds, orders, quantiles) both the same way.
What SQL cannot compute is said: insights and fidelity alarms need each trace's receipts checked and
its insights derived by the Python reader (``--engine python``).
"""

from __future__ import annotations

from typing import Any

from ragtrail.inspect.stats import StageStats, Stats, Weights
from ragtrail.inspect.weight import WeightTally

from . import sql
from .engine import SqlRunner

NOT_COMPUTED = ("insights", "alarms")
_FIELDS = {
    "in": "n_in",
    "out": "n_out",
    "excluded": "n_excluded",
    "status": "statuses",
    "failure": "failure_classes",
    "fallback": "fallbacks",
    "reason": "reasons",
}


def stats(runner: SqlRunner, spans: str, scope: str | None = None) -> Stats:
    """The aggregates of every ragtrail trace in ``spans`` (the slim table of :mod:`.spans`, or its
    ``SELECT`` over ``otel_traces`` in parentheses), as the Python path's :class:`Stats`; ``scope``: the
    embedded ingest's scope policies (see :mod:`.sql`)."""
    out = Stats()
    rows = runner.run_sql(sql.totals_query(spans, scope))
    traces, weighted, requests, refusal_known, refused, corpus_known, read_sum, exhaustive, by_status, first_seen, by_basis, stamped = rows[0]
    out.traces, out.weighted_traces, out.requests = int(traces), int(weighted), float(requests)
    bases = {str(b): int(n) for b, n in zip(by_basis[0], by_basis[1], strict=True)}
    out.tally = WeightTally(out.traces, out.requests, bases, int(stamped))  # the Python path's own sentence
    out.refusal_known, out.refused = float(refusal_known), float(refused)
    out.corpus_known, out.read_fraction_sum, out.exhaustive = float(corpus_known), float(read_sum), float(exhaustive)
    seen = dict(zip(first_seen[0], (int(t) for t in first_seen[1]), strict=True))
    for status, weight in sorted(zip(by_status[0], by_status[1], strict=True), key=lambda sw: (seen[sw[0]], sw[0])):
        out.run_statuses[str(status)] = float(weight)
    for kind, component, n_spans, weight in runner.run_sql(sql.stages_query(spans, scope)):
        out.stages[(str(kind), str(component))] = StageStats(str(kind), str(component), traces=float(weight), spans=int(n_spans))
    for kind, component, field, value, weight, _seen in runner.run_sql(sql.stage_values_query(spans, scope)):
        st = out.stages[(str(kind), str(component))]
        counts: Weights[Any] = getattr(st, _FIELDS[str(field)])
        counts[int(value) if field in ("in", "out", "excluded") else str(value)] += float(weight)
    return out


def as_dict(s: Stats) -> dict[str, Any]:
    """``Stats.as_dict`` with what SQL did not compute set to ``None`` and named."""
    result = s.as_dict()
    for key in NOT_COMPUTED:
        result[key] = None
    result["not_computed"] = list(NOT_COMPUTED)
    return result
