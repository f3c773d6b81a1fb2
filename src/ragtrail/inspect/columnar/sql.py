"""The aggregates of ``ragtrail stats`` as ClickHouse SQL over the slim spans of ``otel_traces``.

One set of statements serves the embedded engine (chdb) and a ClickHouse server: each function takes
``spans``, the table :mod:`.spans` fills (``ragtrail_spans``) or the subquery
``(spans.select_sql('otel_traces'))`` in its place, and returns SQL; a
:class:`~ragtrail.inspect.columnar.engine.SqlRunner` runs it and :mod:`.stats` folds the rows into the
same :class:`ragtrail.inspect.stats.Stats` the Python path fills, so one formatter prints both.

A trace's weight is decided in one place, :func:`trace_weights_sql`: its inputs as
``ragtrail.inspect.manifest``'s sampling reads them (the head: a span's probability, with its adjusted
count when valid, else 1/p, the pipeline span first, then root spans, then any; else the tracestate's
``ot=th``; the tail: ``ragtrail.sampling.tail.policy`` and ``.probability`` of the first span carrying
the policy, else the scope attribute ``tailsampling.policy``), combined by :func:`weight_sql`, the SQL
twin of :func:`ragtrail.inspect.weight.trace_weight` (tests/test_columnar_stats.py holds them equal).

Two differences the exporter's table forces, said here: "first span" is the earliest span (the Python
reader takes the first span read; the gateway stamps every span of a trace alike), and the exporter's
``otel_traces`` keeps no scope attributes, so the ``tailsampling.policy`` fallback needs ``scope``, a
table of ``TraceId, Timestamp, Policy`` the embedded ingest fills (:data:`.schema.SCOPE_TABLE`); a
ClickHouse server has none, and a trace kept by the tail sampler's own record alone reads as unstamped.
"""

from __future__ import annotations

from ragtrail.contract import semconv as sc

_PIPELINE = f"Kind = '{sc.KIND_PIPELINE}'"
_STAGE = f"IsStage AND NOT ({_PIPELINE}) AND NOT Continuation"


def _threshold_probability() -> str:
    """The tracestate's ``ot=th:<hex>`` as a probability, NULL without one."""
    th = "extract(TraceState, '(?:^|,)\\\\s*ot=(?:[^,]*;)?th:([0-9a-fA-F]*)')"
    present = "match(TraceState, '(?:^|,)\\\\s*ot=(?:[^,]*;)?th:')"
    value = f"reinterpretAsUInt64(reverse(unhex(leftPad(substring(rightPad({th}, 14, '0'), 1, 14), 16, '0'))))"
    return f"if({present}, (pow(2, 56) - toFloat64({value})) / pow(2, 56), NULL)"


def weight_sql(head: str, policy: str, probability: str) -> str:
    """``weight, basis, tail_stamped`` of one trace from SQL expressions of its head adjusted count
    (NULL: no head record), its tail policy and its tail probability: ``weight.trace_weight`` in SQL."""
    h = f"if(({head}) > 0, toFloat64({head}), NULL)"
    pol = f"if(({policy}) != '', {policy}, NULL)"
    t = f"if(({probability}) > 0 AND ({probability}) <= 1, toFloat64({probability}), NULL)"
    unknown, none = f"{pol} IS NOT NULL AND {t} IS NULL", f"{h} IS NULL AND {t} IS NULL"
    basis = f"multiIf({unknown}, 'unknown_policy', {none}, 'no_record', {h} IS NOT NULL, 'sampled', 'tail_only')"
    weight = f"if(({unknown}) OR ({none}), 1.0, ifNull({h}, 1.0) / ifNull({t}, 1.0))"
    return f"{weight} AS weight, {basis} AS basis, {pol} IS NOT NULL AS tail_stamped"


def trace_weights_sql(spans: str, scope: str | None = None) -> str:
    """``TraceId, weight, weighted, basis, tail_stamped`` per ragtrail trace: THE weight rule's inputs,
    weighed by :func:`weight_sql` (extend it here, and only here); ``scope``: see the module's docstring."""
    span_weight = "ifNull(AdjustedCount, 1 / Probability)"
    order = f"(if({_PIPELINE}, 0, if(ParentSpanId = '', 1, 2)), Timestamp)"
    head = f"""if(countIf(Probability IS NOT NULL) > 0, argMinIf({span_weight}, {order}, Probability IS NOT NULL),
       if(countIf(tp IS NOT NULL) > 0, 1 / argMinIf(tp, {order}, tp IS NOT NULL), NULL))"""
    stamp = "argMinIf(tuple(TailPolicy, TailProbability), Timestamp, HasTailPolicy)"
    scoped = "''" if scope is None else "any(sp.ScopePolicy)"
    join = (
        ""
        if scope is None
        else f"LEFT JOIN (SELECT TraceId, argMin(Policy, Timestamp) AS ScopePolicy FROM {scope} GROUP BY TraceId) AS sp ON s.TraceId = sp.TraceId"
    )
    return f"""
SELECT TraceId, {weight_sql("head", "tail_policy", "tail_probability")}, basis IN ('sampled', 'tail_only') AS weighted
FROM (
    SELECT s.TraceId AS TraceId, {head} AS head,
        if(countIf(HasTailPolicy) > 0, {stamp}.1, {scoped}) AS tail_policy, {stamp}.2 AS tail_probability
    FROM (SELECT *, if(TraceState = '', NULL, {_threshold_probability()}) AS tp FROM {spans}) AS s {join}
    GROUP BY s.TraceId
    HAVING countIf(IsStage) > 0
)
"""


def run_attributes() -> str:
    """Which span speaks for the run: the first pipeline span, else a root stage that wrote the run's coverage."""
    return f"(NOT ({_PIPELINE}), Timestamp), {_PIPELINE} OR (ParentSpanId = '' AND HasRetrievedCount)"


def traces_sql(spans: str, scope: str | None = None) -> str:
    """One row per ragtrail trace: first time, weight, run status, refusal, corpus size, in-context count."""
    run = run_attributes()
    return f"""
SELECT t.TraceId AS TraceId, first, w.weight AS weight, w.weighted AS weighted, w.basis AS basis, w.tail_stamped AS tail_stamped, run_status, refused,
    if(run_corpus IS NOT NULL, run_corpus, stage_corpus) AS corpus, in_context
FROM (
    SELECT TraceId, min(Timestamp) AS first, argMinIf(RunStatus, {run}) AS run_status, argMinIf(Refused, {run}) AS refused,
        argMinIf(CorpusSize, {run}) AS run_corpus, argMinIf(InContext, {run}) AS in_context, maxIf(CorpusSize, IsStage) AS stage_corpus
    FROM {spans} GROUP BY TraceId
) AS t
INNER JOIN ({trace_weights_sql(spans, scope)}) AS w ON t.TraceId = w.TraceId
"""


def totals_query(spans: str, scope: str | None = None) -> str:
    """Trace counts, requests, refusal and coverage sums over every ragtrail trace, the weight and
    first time of each run status (``not recorded`` for none) as two maps, the traces per weight basis
    as a map and the tail-stamped ones: one row, one pass."""
    known = "corpus > 0 AND in_context IS NOT NULL"
    status = "[if(run_status = '', 'not recorded', run_status)]"
    return f"""
SELECT count(), countIf(weighted), sum(weight),
    sumIf(weight, refused IN ('true', 'false')), sumIf(weight, refused = 'true'),
    ifNull(sumIf(weight, {known}), 0), ifNull(sumIf(weight * least(1.0, in_context / corpus), {known}), 0),
    ifNull(sumIf(weight, {known} AND in_context >= corpus), 0),
    sumMap({status}, [weight]), minMap({status}, [toUnixTimestamp64Nano(first)]),
    sumMap([basis], [toUInt64(1)]), countIf(tail_stamped)
FROM ({traces_sql(spans, scope)})
"""


def _stage_spans(spans: str, scope: str | None) -> str:
    """Every stage span (no pipeline, no continuation) with its trace's weight and its counts."""
    return f"""
SELECT s.TraceId AS TraceId, Timestamp, Kind, Component, Status, FailureClass, Fallback, w.weight AS weight,
    ifNull(NOut, JSONLength(Ids)) AS n_out, ifNull(NExcluded, arraySum(ExcludedCounts)) AS n_excluded,
    ifNull(NIn, JSONLength(Ids) + arraySum(ExcludedCounts)) AS n_in, ExcludedReasons, ExcludedCounts
FROM (SELECT * FROM {spans} WHERE {_STAGE}) AS s
INNER JOIN ({trace_weights_sql(spans, scope)}) AS w ON s.TraceId = w.TraceId
"""


def stages_query(spans: str, scope: str | None = None) -> str:
    """``kind, component, spans, traces (weighted)`` per stage."""
    return f"""
SELECT Kind, Component, sum(n), sum(weight) FROM (
    SELECT TraceId, Kind, Component, count() AS n, any(weight) AS weight FROM ({_stage_spans(spans, scope)}) GROUP BY TraceId, Kind, Component
) GROUP BY Kind, Component
"""


def stage_values_query(spans: str, scope: str | None = None) -> str:
    """``kind, component, field, value, weight`` per stage: the distributions (``in``, ``out``,
    ``excluded``) and the weighted counts (``status``, ``failure``, ``fallback``, ``reason``), first
    seen first; one pass over the stage spans."""
    return f"""
SELECT Kind, Component, t.1 AS field, t.2 AS value, sum(t.3), min(Timestamp) AS seen
FROM ({_stage_spans(spans, scope)})
ARRAY JOIN arrayConcat(
    [('in', toString(n_in), weight), ('out', toString(n_out), weight), ('excluded', toString(n_excluded), weight),
     ('status', if(Status = '', 'unknown', Status), weight), ('failure', FailureClass, weight), ('fallback', Fallback, weight)],
    arrayMap(r -> ('reason', r.1, weight * r.2), arrayZip(ExcludedReasons, ExcludedCounts))
) AS t
WHERE NOT (t.1 IN ('failure', 'fallback') AND t.2 = '')
GROUP BY Kind, Component, field, value ORDER BY seen, value
"""
