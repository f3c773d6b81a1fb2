"""``ragtrail compare`` from SQL rows: each trace's record read by one statement, paired by the Python code.

The statement does what costs (parsing every span and event, picking hop 0's query receipt, the run's
attributes, each stage's ids and exclusions); the rows become the same
:class:`ragtrail.inspect.records.TraceRecord` the Python path builds, fed in the store's reading order
to the same :class:`ragtrail.inspect.compare.SideSummary`, so ``compare`` itself is the reference code.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.inspect.manifest_model import ExcludedId
from ragtrail.inspect.records import StageRecord, TraceRecord

from . import sql
from .engine import SqlRunner

_CONTEXT_KINDS = (sc.KIND_RERANK, sc.KIND_FILTER, sc.KIND_BUDGET, sc.KIND_GENERATE)


def records_query(spans: str, order: str | None = None, scope: str | None = None) -> str:
    """One row per ragtrail trace of ``spans`` (see :mod:`.spans`): what :class:`TraceRecord` holds for
    ``compare``, weighed by :func:`.sql.trace_weights_sql` (``scope``: see :mod:`.sql`); in the order of
    ``order`` (a subquery of ``TraceId, OrderKey``) when given."""
    pipeline = f"Kind = '{sc.KIND_PIPELINE}'"
    is_stage = f"IsStage AND NOT ({pipeline}) AND NOT Continuation"
    hop0 = "QueryHop = '0' AND QuerySha256 != ''"
    stage = (
        "tuple(Timestamp, EndTimestamp, Kind, Component, Status, FailureClass, Fallback, NIn, NOut, NExcluded,"
        " Ids, ExcludedIds, ExcludedReasons, CitedIds)"
    )
    run = sql.run_attributes()
    inner = f"""
SELECT TraceId, toInt64(toUnixTimestamp64Nano(minIf(Timestamp, {is_stage}))) AS start_ns,
    argMinIf(QuerySha256, (NOT ({pipeline}), Timestamp), {hop0}) AS query_sha256, countIf({hop0}) > 0 AS has_query,
    argMinIf(AnswerSha256, {run}), argMinIf(Refused, {run}), argMinIf(RunStatus, {run}), argMinIf(CitedIds, {run}),
    argMinIf(Ids, Timestamp, {pipeline}) AS pipeline_ids,
    arraySort(s -> (s.1, s.2), groupArrayIf({stage}, {is_stage})) AS stages
FROM {spans} GROUP BY TraceId
HAVING countIf(IsStage) > 0
"""
    weights = sql.trace_weights_sql(spans, scope)
    weighed = f"SELECT r.*, w.weight, w.basis, w.tail_stamped FROM ({inner}) AS r INNER JOIN ({weights}) AS w ON r.TraceId = w.TraceId"
    if order is None:
        return weighed
    return f"SELECT q.* FROM ({weighed}) AS q LEFT JOIN ({order}) AS o ON q.TraceId = o.TraceId ORDER BY o.OrderKey, q.TraceId"


def _list(raw: str) -> list[str]:
    if not raw:
        return []
    value = json.loads(raw)
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _int(raw: int | None, default: int) -> int:
    return default if raw is None else int(raw)


def _stage(s: list[Any]) -> StageRecord:
    _start, _end, kind, component, status, failure, fallback, n_in, n_out, n_ex, ids, ex_ids, ex_reasons, _cited = s
    out_ids = tuple(_list(ids))
    excluded = tuple(ExcludedId(i, r) for group, r in zip(ex_ids, ex_reasons, strict=True) for i in _list(group))
    return StageRecord(
        kind=kind,
        component=component,
        status=status or None,
        failure_class=failure or None,
        fallback=fallback or None,
        n_in=_int(n_in, len(out_ids) + len(excluded)),
        n_out=_int(n_out, len(out_ids)),
        n_excluded=_int(n_ex, len(excluded)),
        out_ids=out_ids,
        excluded=excluded,
    )


def _in_context(stages: list[StageRecord], pipeline_ids: list[str]) -> tuple[str, ...] | None:
    """What reached the model (the manifest's rule, over the records): the last defining stage's ids."""
    defining = [s for s in stages if s.kind in _CONTEXT_KINDS and (s.kind != sc.KIND_GENERATE or s.n_in or s.out_ids or s.excluded)]
    if defining:
        earlier = [i for s in defining[:-1] if s.kind == sc.KIND_GENERATE for i in s.out_ids]
        return tuple(dict.fromkeys([*defining[-1].out_ids, *earlier]))
    return tuple(pipeline_ids) if pipeline_ids else None


def record(row: tuple[Any, ...]) -> TraceRecord:
    """The :class:`TraceRecord` of one row of :func:`records_query`."""
    trace_id, start_ns, query, has_query, answer, refused, run_status, pipeline_cited, pipeline_ids, raw_stages, weight, basis, stamped = row
    stages = [_stage(s) for s in raw_stages]
    cited = dict.fromkeys([*_list(pipeline_cited), *(i for s in raw_stages for i in _list(s[13]))])
    cited.update(dict.fromkeys(i for st in stages if st.kind == sc.KIND_CITE for i in st.out_ids))
    return TraceRecord(
        trace_id=trace_id,
        start_ns=int(start_ns),
        end_ns=0,
        service=None,
        service_version=None,
        pipeline=None,
        run_status=run_status or None,
        query_sha256=query if has_query else None,
        answer_sha256=answer or None,
        refused={"true": True, "false": False}.get(refused),
        weight=float(weight),
        basis=str(basis),
        tail_stamped=bool(stamped),
        stages=stages,
        cited=tuple(cited),
        in_context=_in_context(stages, _list(pipeline_ids)),
        corpus_size=None,
        findings=[],
        insights=[],
        alarms=0,
    )


def records(
    runner: SqlRunner, spans: str, order: str | None = None, params: dict[str, Any] | None = None, scope: str | None = None
) -> Iterator[TraceRecord]:
    """Every ragtrail trace's record, in ``order`` (see :func:`records_query`), streamed when the
    runner can (``stream_sql``), so a million rows are never one answer in memory."""
    query = records_query(spans, order, scope)
    stream = getattr(runner, "stream_sql", None)
    rows: Iterable[tuple[Any, ...]] = stream(query, params) if stream is not None else runner.run_sql(query, params)
    for row in rows:
        yield record(row)
