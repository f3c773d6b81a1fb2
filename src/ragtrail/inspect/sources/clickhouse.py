"""ClickHouse as a trace source: ``clickhouse+http://HOST:8123[/DATABASE]`` over the table the
Collector's ClickHouse exporter writes (``otel_traces``; DATABASE defaults to ``otel``, the one
collector-config/clickhouse.yaml writes).

Read over ClickHouse's HTTP interface: one POST per SQL statement, values bound as ClickHouse query
parameters (``{name:Type}`` in the SQL, ``param_name`` in the URL; nothing a user typed is pasted
into SQL text), answers in ``JSONEachRow`` read line by line. :meth:`ClickHouseSource.run_sql`
(rows as tuples) is the executor aggregation SQL runs through (pushdown: ``inspect.columnar``'s
``SqlRunner``). A search reads every matching trace id of the
time range in keyset pages (newest first, up to ``--limit``): SQL answers are not cut by the server,
so the read is complete unless a page is refused. Traces are fetched in batches of ids
(:meth:`ClickHouseSource.traces`), not one request per trace.

The table's schema is checked once, before the first read: a missing table or column, or a column
of another type, is one line naming it (exit 4), never a read of something else.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ragtrail.contract import semconv as sc

from ..errors import HttpStatusError, MalformedInput, SourceUnreachable, TraceNotFound, UsageError
from ..model import Span, Trace, normalize_trace_id
from ..otlp import DECODE_ERRORS
from .base import DEFAULT_TIMEOUT, lookback_seconds
from .clickhouse_rows import COLUMNS, SPAN_SELECT, span_from_row
from .documents import group_traces
from .http import HttpSource
from .paging import SearchResult

if TYPE_CHECKING:
    import httpx

__all__ = ["DEFAULT_DATABASE", "TABLE", "ClickHouseSource"]

DEFAULT_DATABASE = "otel"
TABLE = "otel_traces"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_FETCH_BATCH = 500
"""Trace ids per fetch: one query reads the spans of this many traces."""

_NO_DROPPED = "ClickHouse's otel_traces table does not carry dropped counts: SDK evictions cannot be seen from this source"


def _column_type(reported: str) -> str:
    """A column type without ``LowCardinality(...)`` wrappers (the reader does not care how it is stored)."""
    while "LowCardinality(" in reported:
        reported = re.sub(r"LowCardinality\(([^()]*)\)", r"\1", reported)
    return reported


def _exception_line(body: str) -> str:
    """The first line of a ClickHouse exception, without its stack trace or version suffix."""
    line = " ".join(body.strip().splitlines()[0].split()) if body.strip() else "(empty body)"
    return line[:240]


class ClickHouseSource(HttpSource):
    """ClickHouse over HTTP, reading the Collector exporter's ``otel_traces`` table."""

    name = "ClickHouse"
    page_size = 10_000

    def __init__(self, base_url: str, timeout: float = DEFAULT_TIMEOUT, transport: httpx.BaseTransport | None = None) -> None:
        parts = urlsplit(base_url)
        database = parts.path.strip("/") or DEFAULT_DATABASE
        if not _NAME.match(database):
            raise UsageError(f"bad ClickHouse database name {database!r}", "use clickhouse+http://HOST:8123/DATABASE (letters, digits, _)")
        self.database = database
        super().__init__(f"{parts.scheme}://{parts.netloc}", timeout=timeout, transport=transport)
        self.description = f"ClickHouse at {self.base_url} ({database}.{TABLE})"
        self._checked = False
        self._session: str | None = None

    # --- the executor -------------------------------------------------------------------------------
    def run_sql(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """Rows of one SQL statement as tuples (a statement that returns none, ``[]``), values bound by
        name: ``{name:Type}`` in ``sql``, ``params[name]`` sent as ClickHouse's ``param_name``. The
        executor the columnar aggregation SQL runs through (``inspect.columnar``'s ``SqlRunner``);
        unqualified table names are in this source's database."""
        return [tuple(row) for row in self._stream(sql, params, "JSONCompactEachRow")]

    def stream_tuples(self, sql: str, params: Mapping[str, Any] | None = None) -> Iterator[tuple[Any, ...]]:
        """:meth:`run_sql`'s rows one at a time as the server sends them (bounded memory)."""
        for row in self._stream(sql, params, "JSONCompactEachRow"):
            yield tuple(row)

    def rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """:meth:`run_sql`'s rows as objects keyed by column name."""
        return list(self.stream_sql(sql, params))

    def stream_sql(self, sql: str, params: Mapping[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """:meth:`rows`, one row at a time as the server sends it (bounded memory)."""
        for row in self._stream(sql, params, "JSONEachRow"):
            if not isinstance(row, dict):
                raise MalformedInput(f"{self.description} answered a row that is not an object", "check the server version")
            yield row

    @contextlib.contextmanager
    def temporary_table(self, select: str, params: Mapping[str, Any] | None = None, engine: str = "") -> Iterator[str]:
        """The rows of ``select`` computed once into a temporary table of this source's HTTP session
        (``session_id``: the server keeps it for this client alone and drops it with the session);
        yields its name, drops it on the way out. Pushdown statements that read the same slim spans
        several times read them from here instead of parsing ``otel_traces``' maps again each time.
        ``engine``: the table's (default ``Memory``; ``inspect.columnar.engine.COMPACT`` for large ones)."""
        from ragtrail.inspect.columnar.engine import scratch_table

        self._session = self._session or uuid.uuid4().hex
        with scratch_table(self, select, params, "TEMPORARY TABLE", engine) as name:
            yield name

    def _stream(self, sql: str, params: Mapping[str, Any] | None, fmt: str) -> Iterator[Any]:
        import httpx

        query = {
            **({"session_id": self._session} if self._session else {}),
            "database": self.database,
            "output_format_json_quote_64bit_integers": "0",  # counts as numbers, as the embedded engine answers them
            "default_format": fmt,  # not a FORMAT clause: a DELETE takes none
            **{f"param_{k}": _param_text(v) for k, v in (params or {}).items()},
        }
        try:
            with self.client.stream("POST", "/", params=query, content=sql.encode()) as response:
                if response.status_code >= 400:
                    response.read()
                    raise HttpStatusError(
                        f"{self.description} answered HTTP {response.status_code}: {_exception_line(response.text)}",
                        "check the URL in --source and the server's logs",
                    )
                for line in response.iter_lines():
                    if line.strip():
                        yield self._row(line)
        except httpx.TimeoutException:
            raise SourceUnreachable(f"{self.description} timed out", "check the server is up and not overloaded, or raise --timeout") from None
        except httpx.TransportError as exc:
            raise SourceUnreachable(
                f"cannot reach {self.description} ({type(exc).__name__})", "start the server or fix --source / RAGTRAIL_SOURCE"
            ) from None

    def _row(self, line: str) -> Any:
        try:
            row = json.loads(line)
        except ValueError:
            raise MalformedInput(f"{self.description} answered something else than JSON rows: {line[:80]!r}", "check the server version") from None
        if not isinstance(row, (dict, list)):
            raise MalformedInput(f"{self.description} answered a row that is neither an object nor an array", "check the server version")
        return row

    # --- the schema ---------------------------------------------------------------------------------
    def check_schema(self) -> None:
        """Refuse a table that is not the exporter's, naming what differs (once per source)."""
        if self._checked:
            return
        rows = self.rows(
            "SELECT name, type FROM system.columns WHERE database = {db:String} AND table = {table:String}",
            {"db": self.database, "table": TABLE},
        )
        if not rows:
            raise MalformedInput(
                f"{self.description}: no table {self.database}.{TABLE}",
                "point --source at the database the Collector's clickhouse exporter writes (collector-config/clickhouse.yaml)",
            )
        found = {str(r.get("name")): _column_type(str(r.get("type"))) for r in rows}
        for column, wanted in COLUMNS.items():
            got = found.get(column)
            if got is None:
                raise MalformedInput(
                    f"{self.description}: column {column} is missing", "the table is not the Collector clickhouse exporter's otel_traces schema"
                )
            if got != wanted and not (column == "Duration" and got == "Int64"):
                raise MalformedInput(
                    f"{self.description}: column {column} is {got}, not {wanted}",
                    "the table is not the Collector clickhouse exporter's otel_traces schema",
                )
        self._checked = True

    def window_table(self, lookback: str | None = "1h") -> str:
        """``otel_traces`` cut to the traces :meth:`search_all` would read with no query and no limit
        (every span of each trace carrying ``ragtrail.schema`` with a span in the lookback), as a
        ``FROM`` target for pushdown SQL (``inspect.columnar.spans.subquery``). The schema is checked
        first; the database name was validated and the bound is an integer, so nothing typed is pasted."""
        lo = self.window_start_ns(lookback)
        table = self.table
        ids = (
            f"SELECT TraceId FROM {table} WHERE toUnixTimestamp64Nano(Timestamp) >= {int(lo)} AND TraceId != '' "
            f"AND mapContains(SpanAttributes, '{sc.SCHEMA}')"
        )
        return f"{table} WHERE TraceId IN ({ids})"

    def window_start_ns(self, lookback: str | None = "1h") -> int:
        """Where :meth:`window_table`'s lookback starts (ns; 0: no bound), the schema checked first."""
        self.check_schema()
        seconds = lookback_seconds(lookback or "1h")
        return time.time_ns() - seconds * 1_000_000_000 if seconds else 0

    @property
    def table(self) -> str:
        """The exporter's ``otel_traces`` of this source's database, qualified."""
        return f"{self.database}.{TABLE}"

    def recency_order(self) -> str:
        """``TraceId, OrderKey`` per trace, newest first as :meth:`search_all` reads them (the order
        subquery ``inspect.columnar.pairing.winners_query`` takes)."""
        from ragtrail.inspect.columnar.pairing import order_key, signed_key

        newest = order_key((signed_key("-max(toUnixTimestamp64Nano(Timestamp))"), 16))
        return f"SELECT TraceId, {newest} AS OrderKey FROM {self.table} GROUP BY TraceId"

    # --- reading traces -----------------------------------------------------------------------------
    def traces(self, trace_ids: list[str]) -> Iterator[Trace]:
        """The traces ``trace_ids``, in that order, read in batches (an id with no span is skipped)."""
        self.check_schema()
        for i in range(0, len(trace_ids), _FETCH_BATCH):
            batch = [normalize_trace_id(t) for t in trace_ids[i : i + _FETCH_BATCH]]
            spans = self._spans("TraceId IN {ids:Array(String)}", {"ids": batch})
            found = group_traces(spans, self.description)
            for trace_id in batch:
                trace = found.get(trace_id)
                if trace is not None:
                    trace.keeps_dropped_counts = False
                    trace.notes.append(_NO_DROPPED)
                    yield trace

    def _spans(self, where: str, params: Mapping[str, Any]) -> list[Span]:
        sql = f"SELECT {SPAN_SELECT} FROM {{db:Identifier}}.{{table:Identifier}} WHERE {where} ORDER BY TraceId, start_ns, SpanId"
        spans: list[Span] = []
        for row in self.stream_sql(sql, {"db": self.database, "table": TABLE, **params}):
            try:
                spans.append(span_from_row(row))
            except DECODE_ERRORS as exc:
                raise MalformedInput(
                    f"{self.description} answered a span row ragtrail cannot read ({type(exc).__name__}: {str(exc)[:120]})",
                    "the table is not the Collector clickhouse exporter's otel_traces schema",
                ) from None
        return spans

    def get(self, trace_id: str) -> Trace:
        trace_id = normalize_trace_id(trace_id)
        for trace in self.traces([trace_id]):
            return trace
        raise TraceNotFound(
            f"trace {trace_id} not found in {self.description}", "check the id, or that the Collector has exported it (batching delay)"
        )

    def latest(self) -> str:
        found = self.search(1, None, "24h")
        if not found:
            raise TraceNotFound(f"no ragtrail traces in the last 24h in {self.description}", "run your app with OTLP export to the Collector")
        return found[0]

    def search(self, limit: int, query: str | None = None, lookback: str | None = "1h") -> list[str]:
        """Recent traces carrying ragtrail spans (or a span attribute ``key=value`` from ``query``), newest first."""
        return self.search_all(limit, query, lookback).trace_ids

    def search_all(self, limit: int | None, query: str | None = None, lookback: str | None = "1h") -> SearchResult:
        """Every matching trace of the lookback (up to ``limit``), newest first, in keyset pages of
        ``page_size`` ids: ClickHouse does not cut an answer, so the read is complete."""
        self.check_schema()
        key, value = _attribute_filter(query)
        seconds = lookback_seconds(lookback or "1h")
        now_ns = time.time_ns()
        params: dict[str, Any] = {
            "db": self.database,
            "table": TABLE,
            "key": key,
            "value": value,
            "lo": now_ns - seconds * 1_000_000_000 if seconds else 0,
        }
        match = "SpanAttributes[{key:String}] = {value:String}" if value is not None else "mapContains(SpanAttributes, {key:String})"
        ids: list[str] = []
        requests = 0
        after: tuple[int, str] | None = None
        while limit is None or len(ids) < limit:
            want = self.page_size if limit is None else min(self.page_size, limit - len(ids))
            page_params = {**params, "want": want, "after_start": after[0] if after else 0, "after_id": after[1] if after else ""}
            rows = self.rows(
                _SEARCH_SQL.format(match=match, after="AND (start, TraceId) < ({after_start:UInt64}, {after_id:String})" if after else ""),
                page_params,
            )
            requests += 1
            for row in rows:
                ids.append(normalize_trace_id(str(row["TraceId"])))
            if len(rows) < want:
                break
            last = rows[-1]
            after = (int(last["start"]), str(last["TraceId"]))
        return SearchResult(ids, capped=False, requests=requests)


_SEARCH_SQL = (
    "SELECT TraceId, max(toUnixTimestamp64Nano(Timestamp)) AS start FROM {{db:Identifier}}.{{table:Identifier}} "
    "WHERE toUnixTimestamp64Nano(Timestamp) >= {{lo:UInt64}} AND TraceId != '' AND {match} "
    "GROUP BY TraceId HAVING 1 {after} ORDER BY start DESC, TraceId DESC LIMIT {{want:UInt64}}"
)


def _attribute_filter(query: str | None) -> tuple[str, str | None]:
    """``key=value`` (a span attribute equal to a text) or, with no query, spans that carry ``ragtrail.schema``."""
    if not query:
        return sc.SCHEMA, None
    key, sep, value = query.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"ClickHouse search wants key=value, got {query!r}", "e.g. --query ragtrail.stage.status=degraded")
    return key.strip(), value.strip()


def _param_text(value: Any) -> str:
    """A query parameter as ClickHouse's HTTP interface reads it: arrays in ClickHouse's literal syntax."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_quote(str(v)) for v in value) + "]"
    return str(value)


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
