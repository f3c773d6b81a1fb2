"""``ragtrail compare`` from SQL rows: each trace's record read by one statement, paired by the Python code.

The statement does what costs (parsing every span and event, picking hop 0's query receipt, the run's
attributes, each stage's ids and exclusions); the rows become the same
:class:`ragtrail.inspect.records.TraceRecord` the Python path builds, fed in the store's reading order
to the same :class:`ragtrail.inspect.compare.SideSummary`, so ``compare`` itself is the reference code.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.inspect.manifest_model import ExcludedId
from ragtrail.inspect.records import StageRecord, TraceRecord

from . import sql
from .engine import SqlRunner

_A = "SpanAttributes"
_CONTEXT_KINDS = (sc.KIND_RERANK, sc.KIND_FILTER, sc.KIND_BUDGET, sc.KIND_GENERATE)


def _ids(attrs: str) -> str:
    """A span's or event's candidate ids as a JSON array string (schema 3+ column, else the one id)."""
    one = f"if(mapContains({attrs}, '{sc.CANDIDATE_ID}'), toJSONString([{attrs}['{sc.CANDIDATE_ID}']]), '[]')"
    return f"if(mapContains({attrs}, '{sc.COLUMN_IDS}'), {attrs}['{sc.COLUMN_IDS}'], {one})"


def records_query(table: str) -> str:
    """One row per ragtrail trace: what :class:`TraceRecord` holds for ``compare``."""
    kind = f"{_A}['{sc.STAGE_KIND}']"
    is_pipeline = f"{kind} = '{sc.KIND_PIPELINE}'"
    is_stage = f"mapContains({_A}, '{sc.STAGE_KIND}') AND NOT ({is_pipeline}) AND {_A}['{sc.STAGE_CONTINUATION}'] != 'true'"
    hop0 = f"{_A}['{sc.QUERY_HOP}'] = '0' AND mapContains({_A}, '{sc.QUERY_SHA256}')"
    ex = f"arrayFilter((x, n) -> n = '{sc.EVENT_EXCLUSION}', `Events.Attributes`, `Events.Name`)"
    stage = (
        f"tuple(Timestamp, Timestamp + toIntervalNanosecond(Duration), {kind}, {_A}['{sc.STAGE_COMPONENT}'], {_A}['{sc.STAGE_STATUS}'],"
        f" {_A}['{sc.STAGE_FAILURE_CLASS}'], {_A}['{sc.STAGE_FALLBACK}'], {_A}['{sc.CANDIDATES_IN}'], {_A}['{sc.CANDIDATES_OUT}'],"
        f" {_A}['{sc.CANDIDATES_EXCLUDED}'], {_ids(_A)}, arrayMap(x -> {_ids('x')}, {ex}),"
        f" arrayMap(x -> if(mapContains(x, '{sc.EXCLUSION_REASON}'), x['{sc.EXCLUSION_REASON}'], 'None'), {ex}), {_A}['{sc.CITED_IDS}'])"
    )
    return f"""
SELECT t.TraceId, start_ns, query_sha256, has_query, pa['{sc.ANSWER_SHA256}'], pa['{sc.ANSWER_REFUSED}'], pa['{sc.RUN_STATUS}'],
    pa['{sc.CITED_IDS}'], pipeline_ids, stages
FROM (
    SELECT TraceId, toInt64(toUnixTimestamp64Nano(minIf(Timestamp, {is_stage}))) AS start_ns,
        argMinIf({_A}['{sc.QUERY_SHA256}'], (NOT ({is_pipeline}), Timestamp), {hop0}) AS query_sha256,
        countIf({hop0}) > 0 AS has_query,
        argMinIf({_ids(_A)}, Timestamp, {is_pipeline}) AS pipeline_ids,
        arraySort(s -> (s.1, s.2), groupArrayIf({stage}, {is_stage})) AS stages,
        {sql.run_attributes()} AS pa
    FROM {table} GROUP BY TraceId
    HAVING countIf(mapContains({_A}, '{sc.STAGE_KIND}')) > 0
) AS t
"""


def _list(raw: str) -> list[str]:
    if not raw:
        return []
    value = json.loads(raw)
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _int(raw: str, default: int) -> int:
    try:
        return int(raw)
    except ValueError:
        return default


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
    trace_id, start_ns, query, has_query, answer, refused, run_status, pipeline_cited, pipeline_ids, raw_stages = row
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
        weight=1.0,
        weighted=False,
        stages=stages,
        cited=tuple(cited),
        in_context=_in_context(stages, _list(pipeline_ids)),
        corpus_size=None,
        findings=[],
        insights=[],
        alarms=0,
    )


def records(runner: SqlRunner, table: str, order: dict[str, tuple[Any, ...]] | None = None) -> Iterator[TraceRecord]:
    """Every ragtrail trace's record, in ``order`` (trace id -> sort key: the store's reading order)."""
    rows = runner.run_sql(records_query(table))
    if order is not None:
        rows.sort(key=lambda r: order.get(str(r[0]), ()))
    for row in rows:
        yield record(row)
