"""``ragtrail compare``'s record of a trace in SQL, and the Python records made of its rows.

:func:`records_query` does what costs (parsing every span and event, picking hop 0's query receipt,
the run's attributes, each stage's ids and exclusions), one row per trace; :mod:`.per_trace` keeps what
pairing reads of it, and :mod:`.pairing` pairs those records in SQL. The few pairs a listing prints
become :class:`ragtrail.inspect.records.TraceRecord` records (:func:`bare`, :func:`stage_record`) for
the reference ``inspect.compare.pair`` to describe.
"""

from __future__ import annotations

import json
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.inspect.manifest_model import ExcludedId
from ragtrail.inspect.records import StageRecord, TraceRecord

from . import sql

_PIPELINE = f"Kind = '{sc.KIND_PIPELINE}'"
_STAGE = f"IsStage AND NOT ({_PIPELINE}) AND NOT Continuation"
_HOP0 = "QueryHop = '0' AND QuerySha256 != ''"
_KEYS = f"""TraceId, toInt64(toUnixTimestamp64Nano(minIf(Timestamp, {_STAGE}))) AS start_ns,
    argMinIf(QuerySha256, (NOT ({_PIPELINE}), Timestamp), {_HOP0}) AS query_sha256, countIf({_HOP0}) > 0 AS has_query"""
"""What pairs a trace: when its first stage started, and hop 0's query receipt."""


def records_query(spans: str, where: str = "") -> str:
    """One row per ragtrail trace of ``spans`` (``where``: a condition on its spans' ``TraceId``): what
    :class:`TraceRecord` holds for ``compare``, each stage a tuple (:func:`stage_record` reads it)."""
    stage = (
        "tuple(Timestamp, EndTimestamp, Kind, Component, Status, FailureClass, Fallback, NIn, NOut, NExcluded,"
        " Ids, ExcludedIds, ExcludedReasons, CitedIds)"
    )
    run = sql.run_attributes()
    return f"""
SELECT {_KEYS},
    argMinIf(AnswerSha256, {run}) AS answer, argMinIf(Refused, {run}) AS refused, argMinIf(RunStatus, {run}) AS run_status,
    argMinIf(CitedIds, {run}) AS pipeline_cited,
    argMinIf(Ids, Timestamp, {_PIPELINE}) AS pipeline_ids,
    arraySort(s -> (s.1, s.2), groupArrayIf({stage}, {_STAGE})) AS stages
FROM {spans} {f"WHERE {where}" if where else ""} GROUP BY TraceId
HAVING countIf(IsStage) > 0
"""


def _list(raw: str) -> list[str]:
    if not raw:
        return []
    value = json.loads(raw)
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _int(raw: int | None, default: int) -> int:
    return default if raw is None else int(raw)


def stage_record(s: list[Any]) -> StageRecord:
    """One stage tuple of :func:`records_query` as a :class:`StageRecord`."""
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


def bare(
    trace_id: str, query: str | None, answer: str, refused: str, run_status: str, stages: list[StageRecord], cited: tuple[str, ...]
) -> TraceRecord:
    """A :class:`TraceRecord` of what SQL rows say of a trace (answer, refusal, run status as the slim
    spans hold them: ``''`` for none); what they do not say is unknown or empty."""
    return TraceRecord(
        trace_id=trace_id,
        start_ns=0,
        end_ns=0,
        service=None,
        service_version=None,
        pipeline=None,
        run_status=run_status or None,
        query_sha256=query,
        answer_sha256=answer or None,
        refused={"true": True, "false": False}.get(refused),
        weight=1.0,
        basis="no_record",
        tail_stamped=False,
        stages=stages,
        cited=cited,
        in_context=None,
        corpus_size=None,
        findings=[],
        insights=[],
        alarms=0,
    )
