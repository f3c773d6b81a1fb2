"""``compare``'s record of each trace, computed once per trace and kept beside the slim spans.

What pairing reads of a trace (its question, start and weight; its stages' keys, states and handed-on
ids; cited and in-context ids; survival of its own evidence; the stages themselves) costs a group and a
sort of every span of the trace and a parse of its id lists. :func:`select_sql` computes it; the
embedded engine keeps its rows in :data:`TABLE`, one row per trace, refreshed by the ingest for the
traces each new line touches (:func:`refresh`: a trace split over several lines is computed again
from all its spans, so it folds), and built whole for an engine directory filled before the table
existed (:func:`ensure`). A ClickHouse server computes the same rows into a scratch table.

``sig`` is a 128-bit hash of everything pairing compares (keys, states, ids, cited, in context): two traces
with one signature pair as "no stage differs", their survival shares their own (``self_shares``), so
the stage arrays are compared only where signatures differ.
"""

from __future__ import annotations

from ragtrail.contract import semconv as sc

from . import sql
from .compare import records_query
from .engine import SqlRunner

TABLE = "ragtrail_compare_v1"
"""The kept records. A change of its columns takes a new name, so a directory holding the older table
builds the new one from its spans (:func:`ensure`) rather than reading columns it lacks."""

_NOT_HANDED_ON = f"['{sc.KIND_GENERATE}', '{sc.KIND_CITE}', '{sc.KIND_QUERY_TRANSFORM}']"
_CONTEXT = f"('{sc.KIND_RERANK}', '{sc.KIND_FILTER}', '{sc.KIND_BUDGET}', '{sc.KIND_GENERATE}')"
_BAD_RUN = f"('{sc.RUN_DEGRADED}', '{sc.RUN_FAILED}')"
_BAD_STAGE = f"('{sc.STATUS_DEGRADED}', '{sc.STATUS_FAILED}')"

_COMPUTED = (
    "TraceId, start_ns, q, weight, basis, tail_stamped, answer, refused, run_status, degraded, fallback, cited, in_context,"
    " keys, states, ids, handed_labels, handed_ids, raw_stages"
)
COLUMNS = f"{_COMPUTED}, self_shares, sig"
"""The columns of :func:`select_sql`."""


def _ids(json_list: str) -> str:
    """A JSON id list (a string column) as ``Array(String)``; not a list: empty."""
    return f"JSONExtract({json_list}, 'Array(String)')"


def shares(x: str, y: str) -> str:
    """Per stage label of ``x``: how many of ``y``'s cited and in-context ids it handed on."""
    return (
        f"arrayMap((l, i) -> (l, arrayCount(d -> has({y}.cited, d), i), arrayCount(d -> has({y}.in_context, d), i)),"
        f" {x}.handed_labels, {x}.handed_ids)"
    )


def select_sql(spans: str, scope: str | None = None) -> str:
    """One row per ragtrail trace of ``spans`` (a table or subquery of :mod:`.spans`), :data:`COLUMNS`."""
    generate = f"'{sc.KIND_GENERATE}'"
    return f"""
SELECT {_COMPUTED}, {shares("t", "t")} AS self_shares, sipHash128(keys, states, ids, cited, in_context) AS sig FROM (
SELECT r.TraceId AS TraceId, start_ns, if(has_query, query_sha256, '') AS q, w.weight AS weight, w.basis AS basis, w.tail_stamped AS tail_stamped,
    answer, refused, run_status, stages AS raw_stages,
    arrayMap(s -> {_ids("s.11")}, stages) AS ids,
    arrayMap(s -> s.3, stages) AS kinds,
    arrayMap(s -> concat(s.3, ' ', s.4), stages) AS labels,
    arrayMap((s, n) -> (s.3, s.4, n), stages, arrayEnumerateUniq(kinds, arrayMap(s -> s.4, stages))) AS keys,
    arrayMap(s -> (s.5, s.6, s.7), stages) AS states,
    arrayMap(s -> arraySum(arrayMap(g -> JSONLength(g), s.12)), stages) AS excluded_n,
    arrayFilter(i -> kinds[i] IN {_CONTEXT} AND (kinds[i] != {generate} OR ifNull(stages[i].8, length(ids[i]) + excluded_n[i]) != 0
        OR length(ids[i]) > 0 OR excluded_n[i] > 0), arrayEnumerate(kinds)) AS defining,
    if(length(defining) > 0,
       arrayDistinct(arrayConcat(ids[defining[-1]], arrayFlatten(arrayMap(i -> if(kinds[i] = {generate}, ids[i], []), arrayPopBack(defining))))),
       {_ids("pipeline_ids")}) AS in_context,
    arrayDistinct(arrayConcat({_ids("pipeline_cited")}, arrayFlatten(arrayMap(s -> {_ids("s.14")}, stages)),
        arrayFlatten(arrayFilter((i, k) -> k = '{sc.KIND_CITE}', ids, kinds)))) AS cited,
    run_status IN {_BAD_RUN} OR arrayExists(s -> s.5 IN {_BAD_STAGE}, stages) AS degraded,
    arrayExists(s -> s.7 != '', stages) AS fallback,
    arrayDistinct(arrayFilter((l, k) -> NOT has({_NOT_HANDED_ON}, k), labels, kinds)) AS handed_labels,
    arrayMap(l -> arrayDistinct(arrayFlatten(arrayFilter((i, m) -> m = l, ids, labels))), handed_labels) AS handed_ids
FROM ({records_query(spans)}) AS r
INNER JOIN ({sql.trace_weights_sql(spans, scope)}) AS w ON r.TraceId = w.TraceId
) AS t
"""


def ensure(engine: SqlRunner, spans: str, scope: str | None) -> None:
    """:data:`TABLE`, built from every trace already in ``spans`` when it is missing (an engine
    directory filled before it existed, or an empty one)."""
    engine.run_sql(f"CREATE TABLE IF NOT EXISTS {TABLE} ENGINE = MergeTree ORDER BY TraceId AS {select_sql(spans, scope)}")


def refresh(engine: SqlRunner, spans: str, scope: str | None, touched: str, params: dict[str, object] | None = None) -> None:
    """The records of the traces ``touched`` (a subquery of trace ids) computed again from all their
    spans: a trace split over several lines folds into one record."""
    engine.run_sql(f"DELETE FROM {TABLE} WHERE TraceId IN ({touched})", params)
    narrowed = f"(SELECT * FROM {spans} WHERE TraceId IN ({touched}))"
    engine.run_sql(f"INSERT INTO {TABLE} ({COLUMNS}) {select_sql(narrowed, scope)}", params)


def rebuild(engine: SqlRunner, spans: str, scope: str | None) -> None:
    """:data:`TABLE` computed again from every trace (after rows reached ``spans`` other than through the ingest)."""
    engine.run_sql(f"DROP TABLE IF EXISTS {TABLE}")
    ensure(engine, spans, scope)
