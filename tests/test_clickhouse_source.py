"""``--source clickhouse+http://...``: values typed back by the contract's rule, the schema checked
before any read, and every failure one line with its documented exit code.

A ClickHouse engine (chdb behind ClickHouse's HTTP interface, tests/chfront.py) runs on a free
127.0.0.1 port for the module; tables are made here by hand (the Collector writes them in the e2e
tier, tests/e2e/test_clickhouse.py).
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ragtrail.inspect.errors import EXIT_MALFORMED, EXIT_UNREACHABLE, EXIT_USAGE, HttpStatusError
from ragtrail.inspect.sources import ClickHouseSource, open_source
from ragtrail.inspect.sources.clickhouse_rows import attribute_value

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))
import ragtrail_backends as rb  # noqa: E402

pytest.importorskip("chdb")

# the columns the Collector's ClickHouse exporter v0.161.0 creates (internal/sqltemplates/traces_table.sql), codecs and indexes left out
EXPORTER_COLUMNS = """
    Timestamp DateTime64(9), TraceId String, SpanId String, ParentSpanId String, TraceState String,
    SpanName LowCardinality(String), SpanKind LowCardinality(String), ServiceName LowCardinality(String),
    ResourceAttributes Map(LowCardinality(String), String), ScopeName String, ScopeVersion String,
    SpanAttributes Map(LowCardinality(String), String), Duration UInt64, StatusCode LowCardinality(String), StatusMessage String,
    Events Nested (Timestamp DateTime64(9), Name LowCardinality(String), Attributes Map(LowCardinality(String), String)),
    Links Nested (TraceId String, SpanId String, TraceState String, Attributes Map(LowCardinality(String), String))
"""
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
ENGINE = "ENGINE = MergeTree ORDER BY TraceId"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ragtrail", *args], capture_output=True, text=True, timeout=120)


def _sql(url: str, statement: str) -> str:
    request = urllib.request.Request(url + "/?default_format=TabSeparated", data=statement.encode(), method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - loopback only
        return response.read().decode()


@pytest.fixture(scope="module")
def clickhouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("chfront")
    port = rb.free_port()
    front = rb.ManagedProcess(
        "chfront", [sys.executable, str(Path(__file__).parent / "chfront.py"), "--port", str(port), "--path", str(tmp / "data")], {}, [port], tmp
    )
    front.start()
    url = f"http://127.0.0.1:{port}"
    for database in ("good", "no_events", "bad_type"):
        _sql(url, f"CREATE DATABASE {database}")
    _sql(url, f"CREATE TABLE good.otel_traces ({EXPORTER_COLUMNS}) {ENGINE}")
    _sql(
        url,
        f"CREATE TABLE no_events.otel_traces ({EXPORTER_COLUMNS.replace('Events Nested', 'Happenings Nested')}) {ENGINE}",
    )
    text_attributes = EXPORTER_COLUMNS.replace("SpanAttributes Map(LowCardinality(String), String)", "SpanAttributes String")
    _sql(url, f"CREATE TABLE bad_type.otel_traces ({text_attributes}) {ENGINE}")
    _sql(
        url,
        "INSERT INTO good.otel_traces (Timestamp, TraceId, SpanId, ParentSpanId, TraceState, SpanName, ServiceName, ResourceAttributes, ScopeName, "
        "SpanAttributes, Duration, StatusCode, StatusMessage, `Events.Timestamp`, `Events.Name`, `Events.Attributes`) VALUES "
        f"(now64(9), '{TRACE_ID}', 'b7ad6b7169203331', '', 'ot=th:8', 'retrieve', 'svc', "
        "map('service.name', 'svc', 'service.version', '1.0'), 'bench', "
        "map('ragtrail.schema', '5', 'ragtrail.stage.kind', 'retrieve', 'ragtrail.candidates.ids', '[\"1\",\"b\"]', "
        "'ragtrail.candidates.scores', '[1,0.5]', "
        "'ragtrail.query.text', '42', 'ragtrail.stage.continuation', 'true', 'app.count', '7'), 1500, 'Error', 'boom', "
        "[now64(9)], ['ragtrail.exclusion'], [map('ragtrail.exclusion.reason', 'top_k', 'ragtrail.candidates.ranks', '[3,4]')])",
    )
    yield url
    front.stop()


def test_values_are_typed_back_by_the_contract_not_by_their_look() -> None:
    assert attribute_value("ragtrail.candidates.in", "12") == 12
    assert attribute_value("ragtrail.candidates.scores", "[1,0.25]") == [1.0, 0.25]
    assert type(attribute_value("ragtrail.candidates.scores", "[1,0.25]")[0]) is float
    assert type(attribute_value("ragtrail.sampling.adjusted_count", "10")) is float
    assert attribute_value("ragtrail.candidates.ids", '["1","2"]') == ["1", "2"]
    assert attribute_value("ragtrail.stage.continuation", "true") is True
    assert attribute_value("ragtrail.query.text", "42") == "42"  # the contract types it str
    assert attribute_value("ragtrail.stage.filter", "[1]") == "[1]"
    assert attribute_value("ragtrail.candidate.meta.year", "2024") == "2024"
    assert attribute_value("service.version", "1.0") == "1.0"  # outside ragtrail's namespace: text
    assert attribute_value("ragtrail.stage.status", "ok") == "ok"
    assert attribute_value("ragtrail.candidates.ranks", "[1,") == "[1,"  # not JSON: the text as it is


def test_one_trace_read_back_from_the_exporter_columns(clickhouse: str) -> None:
    source = open_source(f"clickhouse+{clickhouse}/good")
    assert isinstance(source, ClickHouseSource)
    trace = source.get(TRACE_ID.upper())
    (span,) = trace.spans
    assert (span.trace_id, span.span_id, span.parent_span_id, span.name) == (TRACE_ID, "b7ad6b7169203331", None, "retrieve")
    assert span.end_ns - span.start_ns == 1500
    assert span.attributes == {
        "ragtrail.schema": 5,
        "ragtrail.stage.kind": "retrieve",
        "ragtrail.candidates.ids": ["1", "b"],
        "ragtrail.candidates.scores": [1.0, 0.5],
        "ragtrail.query.text": "42",
        "ragtrail.stage.continuation": True,
        "app.count": "7",
    }
    assert span.resource == {"service.name": "svc", "service.version": "1.0"}
    assert (span.trace_state, span.scope_name, span.status_code, span.status_message) == ("ot=th:8", "bench", "ERROR", "boom")
    assert [(e.name, e.attributes) for e in span.events] == [
        ("ragtrail.exclusion", {"ragtrail.exclusion.reason": "top_k", "ragtrail.candidates.ranks": [3, 4]})
    ]
    assert (span.dropped_attributes, span.dropped_events, span.dropped_links, trace.keeps_dropped_counts) == (None, None, None, False)
    assert source.search(10, None, "1h") == [TRACE_ID]
    assert source.search(10, "ragtrail.stage.kind=retrieve' OR 1=1 --", "1h") == []  # bound as a value, never pasted into SQL
    assert source.run_sql("SELECT {n:UInt8} + 1 AS m, {s:String} AS s", {"n": 2, "s": "it's"}) == [(3, "it's")]
    assert source.rows("SELECT {n:UInt8} + 1 AS m, {s:String} AS s", {"n": 2, "s": "it's"}) == [{"m": 3, "s": "it's"}]
    assert source.run_sql("SELECT {yes:Bool}, {no:Bool}", {"yes": True, "no": False}) == [(True, False)]
    assert source.run_sql("SELECT count() FROM otel_traces WHERE has({ids:Array(String)}, TraceId)", {"ids": [TRACE_ID, "x'y"]}) == [(1,)]
    source.close()


@pytest.mark.parametrize(
    ("database", "line"),
    [
        (
            "missing",
            "ClickHouse at {url} (missing.otel_traces): no table missing.otel_traces: point --source at the database the "
            "Collector's clickhouse exporter writes (collector-config/clickhouse.yaml)",
        ),
        (
            "no_events",
            "ClickHouse at {url} (no_events.otel_traces): column Events.Timestamp is missing: the table is not the Collector "
            "clickhouse exporter's otel_traces schema",
        ),
        (
            "bad_type",
            "ClickHouse at {url} (bad_type.otel_traces): column SpanAttributes is String, not Map(String, String): the table is not the "
            "Collector clickhouse exporter's otel_traces schema",
        ),
    ],
)
@pytest.mark.parametrize("engine", ["python", "columnar"])
def test_a_table_of_another_schema_is_one_line_and_exit_4(clickhouse: str, database: str, line: str, engine: str) -> None:
    result = _cli("stats", "--source", f"clickhouse+{clickhouse}/{database}", "--engine", engine)
    assert result.returncode == EXIT_MALFORMED
    assert result.stderr == f"ragtrail: error: {line.format(url=clickhouse)}\n"
    side = f"clickhouse+{clickhouse}/{database}"
    result = _cli("compare", side, side, "--engine", engine)
    assert result.returncode == EXIT_MALFORMED
    assert result.stderr == f"ragtrail: error: {line.format(url=clickhouse)}\n"


def test_a_clickhouse_that_is_down_is_one_line_and_exit_5() -> None:
    port = rb.free_port()
    result = _cli("ls", "--source", f"clickhouse+http://127.0.0.1:{port}/otel")
    assert result.returncode == EXIT_UNREACHABLE
    assert result.stderr == (
        f"ragtrail: error: cannot reach ClickHouse at http://127.0.0.1:{port} (otel.otel_traces) (ConnectError): "
        "start the server or fix --source / RAGTRAIL_SOURCE\n"
    )


@pytest.mark.parametrize("command", ["stats", "compare"])
def test_a_clickhouse_that_is_down_is_one_line_and_exit_5_through_the_pushdown(command: str) -> None:
    port = rb.free_port()
    side = f"clickhouse+http://127.0.0.1:{port}/otel"
    args = ("stats", "--source", side) if command == "stats" else ("compare", side, side)
    result = _cli(*args, "--engine", "columnar")
    assert result.returncode == EXIT_UNREACHABLE
    assert result.stderr == (
        f"ragtrail: error: cannot reach ClickHouse at http://127.0.0.1:{port} (otel.otel_traces) (ConnectError): "
        "start the server or fix --source / RAGTRAIL_SOURCE\n"
    )


def test_the_pushdown_takes_no_filter_but_the_lookback() -> None:
    result = _cli("stats", "--source", "clickhouse+http://127.0.0.1:1/otel", "--engine", "columnar", "--component", "bm25")
    assert result.returncode == EXIT_USAGE
    assert result.stderr == (
        "ragtrail: error: --engine columnar over ClickHouse takes no filter but --lookback: drop the filters and --limit, or use --engine python\n"
    )


def test_keep_records_without_the_columnar_server_path_is_a_usage_error() -> None:
    """``--keep-records`` writes to a ClickHouse server only on the path that reads it: elsewhere it is
    refused before anything is read, never silently ignored."""
    a, b = "clickhouse+http://127.0.0.1:1/a", "clickhouse+http://127.0.0.1:1/b"
    result = _cli("compare", a, b, "--engine", "python", "--keep-records")
    assert result.returncode == EXIT_USAGE
    assert result.stderr == (
        "ragtrail: error: --keep-records keeps records on a ClickHouse server: compare two clickhouse+http sides with --engine columnar\n"
    )


def test_a_database_name_that_is_not_a_name_is_a_usage_error() -> None:
    result = _cli("ls", "--source", "clickhouse+http://127.0.0.1:8123/otel;DROP")
    assert result.returncode == EXIT_USAGE
    assert (
        result.stderr == "ragtrail: error: bad ClickHouse database name 'otel;DROP': use clickhouse+http://HOST:8123/DATABASE (letters, digits, _)\n"
    )


def test_the_cli_help_names_the_source() -> None:
    out = _cli("--help").stdout
    assert "clickhouse+http://HOST:8123   ClickHouse (the Collector exporter's otel_traces; /DATABASE, default otel)" in out


class _Recording(httpx.HTTPTransport):
    """The real HTTP transport, keeping each request's query parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.params: list[dict[str, str]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.params.append(dict(request.url.params))
        return super().handle_request(request)


def test_a_temporary_table_holds_the_select_in_one_session_and_is_dropped(clickhouse: str) -> None:
    recording = _Recording()
    source = ClickHouseSource(f"{clickhouse}/good", transport=recording)
    with source.temporary_table("SELECT TraceId, SpanId FROM otel_traces") as name:
        assert name.startswith("ragtrail_scratch_")
        assert source.run_sql(f"SELECT TraceId, SpanId FROM {name}") == [(TRACE_ID, "b7ad6b7169203331")]
    sessions = {p.get("session_id") for p in recording.params}
    assert len(sessions) == 1 and None not in sessions  # create, read and drop: one session
    assert [p.get("database") for p in recording.params] == ["good", "good", "good"]
    try:
        with pytest.raises(HttpStatusError, match=name):  # dropped on the way out
            source.run_sql(f"SELECT count() FROM {name}")
    finally:
        source.close()
