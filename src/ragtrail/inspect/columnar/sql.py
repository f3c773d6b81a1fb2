"""The aggregates of ``ragtrail stats`` as ClickHouse SQL over the Collector exporter's ``otel_traces``.

One set of statements serves the embedded engine (chdb) and a ClickHouse server: each function takes
the table name and returns SQL; a :class:`~ragtrail.inspect.columnar.engine.SqlRunner` runs it and
:mod:`.stats` folds the rows into the same :class:`ragtrail.inspect.stats.Stats` the Python path
fills, so the output is formatted by the same code.

A trace's weight is decided in one place, :func:`trace_weights_sql` (the rule of
``ragtrail.inspect.manifest``'s sampling: a span's ``ragtrail.sampling.probability`` or Jaeger's
probabilistic sampler param, with ``ragtrail.sampling.adjusted_count`` when valid, else 1/p, the
pipeline span first, then root spans, then any; else the tracestate's ``ot=th``; else 1, unweighted).
A new weight rule (tail sampling) extends that one statement.
"""

from __future__ import annotations

from ragtrail.contract import semconv as sc

_A = "SpanAttributes"


def _attr(key: str, m: str = _A) -> str:
    return f"{m}['{key}']"


def _has(key: str, m: str = _A) -> str:
    return f"mapContains({m}, '{key}')"


def _probability() -> str:
    """A span's sampling probability, NULL when it states none valid."""
    p = (
        f"if({_has(sc.SAMPLING_PROBABILITY)}, toFloat64OrNull({_attr(sc.SAMPLING_PROBABILITY)}),"
        f" if({_attr(sc.JAEGER_SAMPLER_TYPE)} = 'probabilistic', toFloat64OrNull({_attr(sc.JAEGER_SAMPLER_PARAM)}), NULL))"
    )
    return f"if(({p}) > 0 AND ({p}) <= 1, {p}, NULL)"


def _threshold_probability() -> str:
    """The tracestate's ``ot=th:<hex>`` as a probability, NULL without one."""
    th = "extract(TraceState, '(?:^|,)\\\\s*ot=(?:[^,]*;)?th:([0-9a-fA-F]*)')"
    present = "match(TraceState, '(?:^|,)\\\\s*ot=(?:[^,]*;)?th:')"
    value = f"reinterpretAsUInt64(reverse(unhex(leftPad(substring(rightPad({th}, 14, '0'), 1, 14), 16, '0'))))"
    return f"if({present}, (pow(2, 56) - toFloat64({value})) / pow(2, 56), NULL)"


def trace_weights_sql(table: str) -> str:
    """``TraceId, weight, weighted`` per trace: THE weight rule (extend it here, and only here)."""
    adjusted = _attr(sc.SAMPLING_ADJUSTED_COUNT)
    span_weight = f"if(toFloat64OrNull({adjusted}) > 0, toFloat64OrNull({adjusted}), 1 / p)"
    order = f"(if({_attr(sc.STAGE_KIND)} = '{sc.KIND_PIPELINE}', 0, if(ParentSpanId = '', 1, 2)), Timestamp)"
    return f"""
SELECT TraceId,
    if(countIf(p IS NOT NULL) > 0, argMinIf({span_weight}, {order}, p IS NOT NULL),
       if(countIf(tp IS NOT NULL) > 0, 1 / argMinIf(tp, {order}, tp IS NOT NULL), NULL)) AS adjusted,
    ifNull(adjusted, 1.0) AS weight,
    adjusted IS NOT NULL AS weighted
FROM (SELECT TraceId, ParentSpanId, Timestamp, {_A}, {_probability()} AS p, {_threshold_probability()} AS tp FROM {table})
GROUP BY TraceId
HAVING countIf(mapContains({_A}, '{sc.STAGE_KIND}')) > 0
"""


def run_attributes() -> str:
    """The run's attributes: the first pipeline span's, else a root stage that wrote the run's coverage."""
    return (
        f"argMinIf({_A}, (NOT ({_attr(sc.STAGE_KIND)} = '{sc.KIND_PIPELINE}'), Timestamp),"
        f" {_attr(sc.STAGE_KIND)} = '{sc.KIND_PIPELINE}' OR (ParentSpanId = '' AND {_has(sc.COVERAGE_RETRIEVED)}))"
    )


def traces_sql(table: str) -> str:
    """One row per ragtrail trace: first time, weight, run status, refusal, corpus size, in-context count."""
    corpus_stage = f"maxIf(toInt64OrNull({_attr(sc.COVERAGE_CORPUS_SIZE)}), {_has(sc.STAGE_KIND)})"
    return f"""
SELECT t.TraceId AS TraceId, first, w.weight AS weight, w.weighted AS weighted,
    pa['{sc.RUN_STATUS}'] AS run_status,
    pa['{sc.ANSWER_REFUSED}'] AS refused,
    if(mapContains(pa, '{sc.COVERAGE_CORPUS_SIZE}'), toInt64OrNull(pa['{sc.COVERAGE_CORPUS_SIZE}']), stage_corpus) AS corpus,
    toInt64OrNull(pa['{sc.COVERAGE_IN_CONTEXT}']) AS in_context
FROM (
    SELECT TraceId, min(Timestamp) AS first, {run_attributes()} AS pa, {corpus_stage} AS stage_corpus
    FROM {table} GROUP BY TraceId
) AS t
INNER JOIN ({trace_weights_sql(table)}) AS w ON t.TraceId = w.TraceId
"""


def totals_query(table: str) -> str:
    """Trace counts, requests, refusal and coverage sums over every ragtrail trace (one row)."""
    known = "corpus > 0 AND in_context IS NOT NULL"
    return f"""
SELECT count(), countIf(weighted), sum(weight),
    sumIf(weight, refused IN ('true', 'false')), sumIf(weight, refused = 'true'),
    ifNull(sumIf(weight, {known}), 0), ifNull(sumIf(weight * least(1.0, in_context / corpus), {known}), 0),
    ifNull(sumIf(weight, {known} AND in_context >= corpus), 0)
FROM ({traces_sql(table)})
"""


def run_statuses_query(table: str) -> str:
    """``status, weight`` per run status (``not recorded`` for none), first seen first."""
    return f"""
SELECT if(run_status = '', 'not recorded', run_status) AS status, sum(weight), min(first) AS seen
FROM ({traces_sql(table)}) GROUP BY status ORDER BY seen, status
"""


def _stage_spans(table: str) -> str:
    """Every stage span (no pipeline, no continuation) with its trace's weight and its exclusion events."""
    ids = f"arrayMap(x -> if(mapContains(x, '{sc.COLUMN_IDS}'), JSONLength(x['{sc.COLUMN_IDS}']), 1), ex)"
    return f"""
SELECT s.TraceId AS TraceId, s.Timestamp AS Timestamp, kind, component, status, failure_class, fallback, w.weight AS weight,
    if(mapContains(a, '{sc.CANDIDATES_OUT}'), toInt64(a['{sc.CANDIDATES_OUT}']), JSONLength(a['{sc.COLUMN_IDS}'])) AS n_out,
    if(mapContains(a, '{sc.CANDIDATES_EXCLUDED}'), toInt64(a['{sc.CANDIDATES_EXCLUDED}']), arraySum(ex_n)) AS n_excluded,
    if(mapContains(a, '{sc.CANDIDATES_IN}'), toInt64(a['{sc.CANDIDATES_IN}']), JSONLength(a['{sc.COLUMN_IDS}']) + arraySum(ex_n)) AS n_in,
    arrayMap(x -> if(mapContains(x, '{sc.EXCLUSION_REASON}'), x['{sc.EXCLUSION_REASON}'], 'None'), ex) AS ex_reasons, ex_n
FROM (
    SELECT TraceId, Timestamp, {_A} AS a, a['{sc.STAGE_KIND}'] AS kind, a['{sc.STAGE_COMPONENT}'] AS component,
        a['{sc.STAGE_STATUS}'] AS status, a['{sc.STAGE_FAILURE_CLASS}'] AS failure_class, a['{sc.STAGE_FALLBACK}'] AS fallback,
        arrayFilter((x, n) -> n = '{sc.EVENT_EXCLUSION}', `Events.Attributes`, `Events.Name`) AS ex, {ids} AS ex_n
    FROM {table}
    WHERE mapContains({_A}, '{sc.STAGE_KIND}') AND {_attr(sc.STAGE_KIND)} != '{sc.KIND_PIPELINE}'
        AND {_attr(sc.STAGE_CONTINUATION)} != 'true'
) AS s
INNER JOIN ({trace_weights_sql(table)}) AS w ON s.TraceId = w.TraceId
"""


def stages_query(table: str) -> str:
    """``kind, component, spans, traces (weighted)`` per stage."""
    return f"""
SELECT kind, component, sum(spans), sum(weight) FROM (
    SELECT TraceId, kind, component, count() AS spans, any(weight) AS weight FROM ({_stage_spans(table)}) GROUP BY TraceId, kind, component
) GROUP BY kind, component
"""


def stage_values_query(table: str) -> str:
    """``kind, component, field, value, weight`` per stage: the distributions (``in``, ``out``,
    ``excluded``) and the weighted counts (``status``, ``failure``, ``fallback``, ``reason``), first seen first."""
    return f"""
SELECT kind, component, field, value, sum(wt), min(Timestamp) AS seen FROM (
    SELECT kind, component, Timestamp, arrayJoin([
        ('in', toString(n_in), weight), ('out', toString(n_out), weight), ('excluded', toString(n_excluded), weight),
        ('status', if(status = '', 'unknown', status), weight),
        ('failure', failure_class, if(failure_class = '', 0, weight)), ('fallback', fallback, if(fallback = '', 0, weight))
    ]) AS t, t.1 AS field, t.2 AS value, t.3 AS wt
    FROM ({_stage_spans(table)}) WHERE NOT (t.1 IN ('failure', 'fallback') AND t.2 = '')
    UNION ALL
    SELECT kind, component, Timestamp, ('reason', r.1, weight * r.2) AS t, 'reason' AS field, r.1 AS value, weight * r.2 AS wt
    FROM ({_stage_spans(table)}) ARRAY JOIN arrayZip(ex_reasons, ex_n) AS r
) GROUP BY kind, component, field, value ORDER BY seen, value
"""
