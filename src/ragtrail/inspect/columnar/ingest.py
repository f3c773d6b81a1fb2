"""Incremental ingest of a local store's OTLP JSON lines into the embedded engine's ``otel_traces``.

Each store file is read from the byte offset ingested last (kept per file in ``ragtrail_ingested``)
to its last complete line, so each line is ingested once and a store that grew since is caught up on
the next read. The OTLP JSON is turned into rows by the engine itself (``LineAsString`` and the JSON
functions): Python only slices bytes. Attribute values are stored as the Collector's ClickHouse
exporter stores them (see :mod:`.schema`). After each file's new lines, the per-trace compare records
(:mod:`.per_trace`) of the traces those lines touched are computed again.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ragtrail.contract import semconv as sc

from . import per_trace, spans
from .engine import Engine
from .schema import INGEST_DDL, INGEST_TABLE, LINES_DDL, LINES_TABLE, OTEL_TRACES_DDL, SCOPE_DDL, SCOPE_TABLE, TABLE


def _scalar(v: str) -> str:
    """The exporter's string of one OTLP ``AnyValue`` (raw JSON ``v``), arrays excepted."""
    return (
        f"multiIf(JSONHas({v}, 'stringValue'), JSONExtractString({v}, 'stringValue'),"
        f" JSONHas({v}, 'intValue'), trim(BOTH '\"' FROM JSONExtractRaw({v}, 'intValue')),"
        f" JSONHas({v}, 'boolValue'), JSONExtractRaw({v}, 'boolValue'),"
        f" JSONHas({v}, 'doubleValue'), JSONExtractRaw({v}, 'doubleValue'),"
        f" JSONHas({v}, 'bytesValue'), JSONExtractString({v}, 'bytesValue'),"
        f" JSONHas({v}, 'kvlistValue'), JSONExtractRaw({v}, 'kvlistValue'), '')"
    )


def _element(x: str) -> str:
    """One array element as JSON (strings quoted, numbers and booleans bare), as ``AsString`` writes a slice."""
    return (
        f"multiIf(JSONHas({x}, 'stringValue'), JSONExtractRaw({x}, 'stringValue'),"
        f" JSONHas({x}, 'intValue'), trim(BOTH '\"' FROM JSONExtractRaw({x}, 'intValue')),"
        f" JSONHas({x}, 'doubleValue'), JSONExtractRaw({x}, 'doubleValue'),"
        f" JSONHas({x}, 'boolValue'), JSONExtractRaw({x}, 'boolValue'), 'null')"
    )


_KV_VALUE = "JSONExtractRaw(kv, 'value')"


def attributes_map(raw: str) -> str:
    """SQL for ``Map(String, String)`` from the raw JSON array of OTLP ``KeyValue`` in ``raw``."""
    value = (
        "if(JSONHas(JSONExtractRaw(kv, 'value'), 'arrayValue'),"
        f" concat('[', arrayStringConcat(arrayMap(x -> {_element('x')},"
        " JSONExtractArrayRaw(JSONExtractRaw(kv, 'value'), 'arrayValue', 'values')), ','), ']'),"
        f" {_scalar(_KV_VALUE)})"
    )
    return f"mapFromArrays(arrayMap(kv -> JSONExtractString(kv, 'key'), {raw}), arrayMap(kv -> {value}, {raw}))"


_SPAN_KINDS = "['Unspecified', 'Internal', 'Server', 'Client', 'Producer', 'Consumer']"
_STATUS_CODES = "['Unset', 'Ok', 'Error']"


def insert_sql(table: str, path: str) -> str:
    """``INSERT … SELECT`` of every span of the OTLP JSON lines in ``path`` into ``table``."""
    start = "toInt64(JSONExtractString(sp, 'startTimeUnixNano'))"
    end = "toInt64(JSONExtractString(sp, 'endTimeUnixNano'))"
    return f"""
INSERT INTO {table} (Timestamp, TraceId, SpanId, ParentSpanId, TraceState, SpanName, SpanKind, ServiceName,
    ResourceAttributes, ScopeName, ScopeVersion, SpanAttributes, Duration, StatusCode, StatusMessage,
    `Events.Timestamp`, `Events.Name`, `Events.Attributes`, `Links.TraceId`, `Links.SpanId`, `Links.TraceState`, `Links.Attributes`)
SELECT
    fromUnixTimestamp64Nano({start}), JSONExtractString(sp, 'traceId'), JSONExtractString(sp, 'spanId'),
    JSONExtractString(sp, 'parentSpanId'), JSONExtractString(sp, 'traceState'), JSONExtractString(sp, 'name'),
    {_SPAN_KINDS}[JSONExtractInt(sp, 'kind') + 1], res['service.name'], res,
    JSONExtractString(ss, 'scope', 'name'), JSONExtractString(ss, 'scope', 'version'),
    {attributes_map("JSONExtractArrayRaw(sp, 'attributes')")},
    toUInt64(greatest({end} - {start}, 0)),
    {_STATUS_CODES}[JSONExtractInt(sp, 'status', 'code') + 1], JSONExtractString(sp, 'status', 'message'),
    arrayMap(e -> fromUnixTimestamp64Nano(toInt64(JSONExtractString(e, 'timeUnixNano'))), JSONExtractArrayRaw(sp, 'events')),
    arrayMap(e -> JSONExtractString(e, 'name'), JSONExtractArrayRaw(sp, 'events')),
    arrayMap(e -> {attributes_map("JSONExtractArrayRaw(e, 'attributes')")}, JSONExtractArrayRaw(sp, 'events')),
    arrayMap(l -> JSONExtractString(l, 'traceId'), JSONExtractArrayRaw(sp, 'links')),
    arrayMap(l -> JSONExtractString(l, 'spanId'), JSONExtractArrayRaw(sp, 'links')),
    arrayMap(l -> JSONExtractString(l, 'traceState'), JSONExtractArrayRaw(sp, 'links')),
    arrayMap(l -> {attributes_map("JSONExtractArrayRaw(l, 'attributes')")}, JSONExtractArrayRaw(sp, 'links'))
FROM (
    SELECT rs, {attributes_map("JSONExtractArrayRaw(rs, 'resource', 'attributes')")} AS res
    FROM file('{path}', 'LineAsString') ARRAY JOIN JSONExtractArrayRaw(line, 'resourceSpans') AS rs
)
ARRAY JOIN JSONExtractArrayRaw(rs, 'scopeSpans') AS ss
ARRAY JOIN JSONExtractArrayRaw(ss, 'spans') AS sp
"""


def lines_sql(table: str, path: str) -> str:
    """``INSERT … SELECT`` of (file, line, place, trace id) for each trace first seen in each line of ``path``."""
    ids = 'arrayDistinct(extractAll(line, \'"traceId":\\\\s*"([0-9a-fA-F]+)"\'))'
    return f"""
INSERT INTO {table} (File, Line, Pos, TraceId)
SELECT {{file:String}}, {{first:UInt64}} + n, pos, tid FROM (SELECT rowNumberInAllBlocks() AS n, line FROM file('{path}', 'LineAsString'))
ARRAY JOIN {ids} AS tid, arrayEnumerate({ids}) AS pos
SETTINGS max_threads = 1
"""


def scope_sql(table: str, path: str) -> str:
    """``INSERT … SELECT`` of (trace id, start, policy) for each span of ``path`` whose scope carries
    ``tailsampling.policy`` (``''`` when not a string: no policy, as the Python reader's fallback reads it);
    lines without the key are not parsed."""
    key = sc.TAILSAMPLING_POLICY
    attrs = "JSONExtractArrayRaw(ss, 'scope', 'attributes')"
    policy = f"JSONExtractString(arrayFirst(kv -> JSONExtractString(kv, 'key') = '{key}', {attrs}), 'value', 'stringValue')"
    return f"""
INSERT INTO {table} (TraceId, Timestamp, Policy)
SELECT JSONExtractString(sp, 'traceId'), fromUnixTimestamp64Nano(toInt64(JSONExtractString(sp, 'startTimeUnixNano'))), policy
FROM (
    SELECT ss, {policy} AS policy, arrayExists(kv -> JSONExtractString(kv, 'key') = '{key}', {attrs}) AS carried
    FROM file('{path}', 'LineAsString') ARRAY JOIN JSONExtractArrayRaw(line, 'resourceSpans') AS rs
    ARRAY JOIN JSONExtractArrayRaw(rs, 'scopeSpans') AS ss
    WHERE position(line, '"{key}"') > 0
)
ARRAY JOIN JSONExtractArrayRaw(ss, 'spans') AS sp
WHERE carried
"""


@dataclass(frozen=True)
class Caught:
    """What one catch-up read: new lines and bytes, over how many files."""

    files: int
    lines: int
    bytes: int


def trace_files(store: Path) -> list[Path]:
    """The store's line files, as the files source reads them (every ``*.jsonl`` below it), in name order."""
    return sorted(p for p in store.rglob("*.jsonl") if p.is_file())


def _complete(path: Path, offset: int) -> bytes:
    """The bytes of ``path`` from ``offset`` to its last newline (a line being written is left for later)."""
    with path.open("rb") as fh:
        fh.seek(offset)
        data = fh.read()
    cut = data.rfind(b"\n")
    return data[: cut + 1] if cut >= 0 else b""


def _quoted(path: str) -> str:
    return path.replace("\\", "\\\\").replace("'", "\\'")


def _insert(engine: Engine, path: Path, chunk: bytes, whole: bool, line: dict[str, object]) -> None:
    """Insert ``chunk``: straight from the store file when it is the whole file, else from a copy."""
    if whole:
        engine.run_sql(insert_sql(TABLE, _quoted(str(path.resolve()))))
        engine.run_sql(lines_sql(LINES_TABLE, _quoted(str(path.resolve()))), line)
        engine.run_sql(scope_sql(SCOPE_TABLE, _quoted(str(path.resolve()))))
        return
    fd, tmp = tempfile.mkstemp(suffix=".jsonl", prefix="ragtrail-ingest-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(chunk)
        engine.run_sql(insert_sql(TABLE, _quoted(tmp)))
        engine.run_sql(lines_sql(LINES_TABLE, _quoted(tmp)), line)
        engine.run_sql(scope_sql(SCOPE_TABLE, _quoted(tmp)))
    finally:
        os.unlink(tmp)


def catch_up(engine: Engine, store: Path) -> Caught:
    """Ingest every line of ``store`` not ingested yet; return what was new."""
    engine.run_sql(OTEL_TRACES_DDL.format(table=TABLE))
    backfill = not engine.run_sql(f"EXISTS TABLE {spans.SPANS_TABLE}")[0][0]
    engine.run_sql(spans.table_ddl())
    engine.run_sql(spans.view_ddl(TABLE))
    if backfill:  # an engine directory from before the slim table: fill it from what was ingested
        engine.run_sql(f"INSERT INTO {spans.SPANS_TABLE} {spans.select_sql(TABLE)}")
    engine.run_sql(INGEST_DDL.format(table=INGEST_TABLE))
    engine.run_sql(LINES_DDL.format(table=LINES_TABLE))
    engine.run_sql(SCOPE_DDL.format(table=SCOPE_TABLE))
    per_trace.ensure(engine, spans.SPANS_TABLE, SCOPE_TABLE)  # a directory from before the records: built from what was ingested
    done = {str(f): (int(o), int(n)) for f, o, n in engine.run_sql(f"SELECT File, max(Offset), sum(Lines) FROM {INGEST_TABLE} GROUP BY File")}
    files = lines = size = 0
    for path in trace_files(store):
        name = str(path.relative_to(store))
        offset, lines_before = done.get(name, (0, 0))
        if path.stat().st_size <= offset:
            continue
        chunk = _complete(path, offset)
        if not chunk:
            continue
        _insert(engine, path, chunk, offset == 0 and len(chunk) == path.stat().st_size, {"file": name, "first": lines_before})
        touched = f"SELECT TraceId FROM {LINES_TABLE} WHERE File = {{file:String}} AND Line >= {{first:UInt64}}"
        per_trace.refresh(engine, spans.SPANS_TABLE, SCOPE_TABLE, touched, {"file": name, "first": lines_before})
        n = chunk.count(b"\n")
        engine.run_sql(
            f"INSERT INTO {INGEST_TABLE} (File, Offset, Lines) VALUES ({{file:String}}, {{offset:UInt64}}, {{lines:UInt64}})",
            {"file": name, "offset": offset + len(chunk), "lines": n},
        )
        files, lines, size = files + 1, lines + n, size + len(chunk)
    return Caught(files, lines, size)
