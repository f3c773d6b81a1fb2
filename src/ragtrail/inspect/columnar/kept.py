"""``compare``'s per-trace records kept on a ClickHouse server, beside the exporter's ``otel_traces``
(``ragtrail compare --keep-records``: the only ragtrail step that writes to the user's trace database).

Two tables in each side's database: :data:`.per_trace.TABLE` (one record per ragtrail trace, as the
embedded engine keeps them) and :data:`SEEN` (per trace of ``otel_traces``: how many spans and which
last end time its record was computed from, and its newest span carrying ``ragtrail.schema``, for the
lookback). Each ``compare`` first reads that fingerprint of every trace ``otel_traces`` holds now (a
group over two narrow columns, no attribute map) and recomputes just the traces whose fingerprint
differs from the kept one: new traces, traces the Collector's later inserts added spans to, traces
whose spans left the table. A trace is recomputed from all its spans, as one read, its fingerprint
taken from that same read, so a record never claims spans it was not computed from. The writes come
before anything is read for the comparison; stopped between them, a trace is left with no
fingerprint (recomputed next time) or a record and no fingerprint (deleted and recomputed next time).
Two compares refreshing one database at the same time are not serialized: a trace either holds twice
is recomputed by the next refresh, and a refresh that still finds one twice reads nothing kept (the
session path instead, said in one line); run one ``--keep-records`` compare per database at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragtrail.contract import semconv as sc

from . import per_trace, spans
from .engine import COMPACT, scratch_table
from .paired import PairingRunner

SEEN = f"{per_trace.TABLE}_seen"
"""Per trace: the fingerprint its kept record was computed from."""

_SEEN_DDL = (
    f"CREATE TABLE IF NOT EXISTS {SEEN} (TraceId String, spans UInt64, end_ns Int64, schema_spans UInt64, schema_ns Int64)"
    " ENGINE = MergeTree ORDER BY TraceId"
)


def _fingerprint(end: str) -> str:
    """The fingerprint's columns over spans whose end time is ``end`` (one expression, both sides of the test)."""
    return f"count() AS spans, max(toUnixTimestamp64Nano({end})) AS end_ns"


@dataclass(frozen=True)
class Refreshed:
    """What one side's refresh did: the traces whose records are kept, and how many were recomputed."""

    traces: int
    recomputed: int
    # each trace's record and fingerprint held once after the refresh: ``False`` when another compare
    # refreshing the same database at the same time left one twice (the caller then reads nothing kept)
    whole: bool = True


def refresh(runner: PairingRunner, database: str, raw: str) -> Refreshed:
    """The kept records of ``database`` (the one ``runner`` reads; ``raw``: its ``otel_traces``) brought
    up to what ``raw`` holds now. Raises the server's error when the tables cannot be created or written
    (a read-only user): the caller computes the records in its session instead. The traces to recompute
    are listed in a table of ``database`` (dropped after), not the session's: a ``DELETE`` runs as a
    mutation, which sees no temporary table."""
    per_trace.ensure(runner, f"({spans.select_sql(raw)} WHERE 0)", None)
    runner.run_sql(_SEEN_DDL)
    now = f"SELECT TraceId, {_fingerprint('Timestamp + toIntervalNanosecond(Duration)')} FROM {raw} WHERE TraceId != '' GROUP BY TraceId"
    changed = (
        f"SELECT if(n.TraceId != '', n.TraceId, k.TraceId) AS TraceId FROM ({now}) AS n"
        f" FULL OUTER JOIN {SEEN} AS k ON n.TraceId = k.TraceId WHERE n.spans != k.spans OR n.end_ns != k.end_ns"
        f" UNION DISTINCT {_twice(SEEN)} UNION DISTINCT {_twice(per_trace.TABLE)}"
        " SETTINGS join_use_nulls = 0"
    )
    with scratch_table(runner, changed, None, "TABLE", COMPACT) as stale:
        recomputed = int(runner.run_sql(f"SELECT count() FROM {stale}")[0][0])
        if recomputed:
            _recompute(runner, raw, f"{database}.{stale}")
    traces, repeats = (int(v) for v in runner.run_sql(f"SELECT count(), ({_repeats(SEEN)}) + ({_repeats(per_trace.TABLE)}) FROM {SEEN}")[0])
    return Refreshed(traces, recomputed, repeats == 0)


def _twice(table: str) -> str:
    """The traces ``table`` holds more than once (two compares refreshing one database at the same
    time can each insert a trace's record): recomputed, so they hold it once again."""
    return f"SELECT TraceId FROM {table} GROUP BY TraceId HAVING count() > 1"


def _repeats(table: str) -> str:
    return f"SELECT count() - uniqExact(TraceId) FROM {table}"


def _recompute(runner: PairingRunner, raw: str, stale: str) -> None:
    """The records and fingerprints of the traces ``stale`` lists deleted, then computed again from one read of their spans."""
    touched = f"SELECT TraceId FROM {stale}"
    read = f"{spans.select_sql(raw)} WHERE TraceId IN ({touched})".replace(
        "\nFROM", f",\n    mapContains(SpanAttributes, '{sc.SCHEMA}') AS HasSchema\nFROM", 1
    )
    with runner.temporary_table(read, None, COMPACT) as slim:
        runner.run_sql(f"DELETE FROM {SEEN} WHERE TraceId IN ({touched})")
        per_trace.refresh(runner, slim, None, touched)
        runner.run_sql(
            f"INSERT INTO {SEEN} SELECT TraceId, {_fingerprint('EndTimestamp')}, countIf(HasSchema) AS schema_spans,"
            f" maxIf(toUnixTimestamp64Nano(Timestamp), HasSchema) AS schema_ns FROM {slim} GROUP BY TraceId"
        )


def window(runner: PairingRunner, database: str, lo_ns: int) -> str:
    """The kept records of ``database``'s traces in the lookback (a ``FROM`` target): as
    ``ClickHouseSource.window_table`` cuts ``otel_traces``, a trace with a span carrying ``ragtrail.schema``
    that starts at ``lo_ns`` or later. The records are cut by the traces outside it (a trace gone from
    ``otel_traces`` was dropped by :func:`refresh`); when there are none the table is read whole, with
    no set of a million ids to build and probe."""
    older = f"SELECT TraceId FROM {database}.{SEEN} WHERE schema_spans = 0 OR schema_ns < {int(lo_ns)}"
    if not int(runner.run_sql(f"SELECT count() FROM ({older})")[0][0]):
        return f"{database}.{per_trace.TABLE}"
    return f"(SELECT * FROM {database}.{per_trace.TABLE} WHERE TraceId NOT IN ({older}))"
