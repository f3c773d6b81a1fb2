"""A ClickHouse for the e2e tests, fed by the REAL Collector's ClickHouse exporter, on 127.0.0.1.

Two ways to run one, tried in this order:

1. Debian's ``clickhouse-server`` (``scripts/install-clickhouse.sh``), started here with a config
   file written into the test's temporary folder (free ports, its own data dir; never the system
   service), and used when it can hold the exporter's schema (``Map``, ``DateTime64``, query
   parameters: ClickHouse 21.8 and later).
2. Otherwise the same ClickHouse engine embedded (chdb) behind ClickHouse's HTTP interface
   (``tests/chfront.py``). Debian bookworm ships clickhouse-server 18.16 (2018), which refuses
   every one of those types, so on this machine kind the tier runs on (2); :attr:`ClickHouse.kind`
   says which one ran, and a test can print it.

Either way the Collector writes over ClickHouse's HTTP interface (``http://127.0.0.1:PORT``) and
ragtrail reads with ``clickhouse+http://127.0.0.1:PORT/DATABASE``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import ragtrail_backends as rb

REPO = Path(__file__).resolve().parents[2]
FRONT = REPO / "tests" / "chfront.py"
SERVER_BIN = "/usr/sbin/clickhouse-server"

_CONFIG = """<yandex>
  <logger><level>warning</level><log>{dir}/log/server.log</log><errorlog>{dir}/log/error.log</errorlog><console>0</console></logger>
  <http_port>{http}</http_port>
  <tcp_port>{tcp}</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>{dir}/data/</path>
  <tmp_path>{dir}/tmp/</tmp_path>
  <user_files_path>{dir}/user_files/</user_files_path>
  <format_schema_path>{dir}/format_schemas/</format_schema_path>
  <mark_cache_size>5368709120</mark_cache_size>
  <users_config>users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
</yandex>
"""
_USERS = """<yandex>
  <profiles><default></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></default></users>
  <quotas><default></default></quotas>
</yandex>
"""


def sql(url: str, statement: str, timeout: float = 30.0) -> str:
    """One statement over the HTTP interface, its TabSeparated answer (errors raise HTTPError)."""
    request = urllib.request.Request(url + "/?default_format=TabSeparated", data=statement.encode(), method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - loopback only
        return response.read().decode()


class ClickHouse(rb.ManagedProcess):
    """A ClickHouse answering HTTP on a free port of 127.0.0.1; ``kind`` says which one."""

    def __init__(self, name: str, argv: list[str], http_port: int, log_dir: Path, kind: str) -> None:
        self.http_port = http_port
        self.kind = kind
        super().__init__(name, argv, {}, [http_port], log_dir)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def source(self, database: str) -> str:
        """What ``ragtrail --source`` takes for one database of this ClickHouse."""
        return f"clickhouse+{self.url}/{database}"

    def count(self, database: str) -> tuple[int, int]:
        """(spans, traces) in ``database.otel_traces``; (0, 0) before the exporter made the table."""
        try:
            spans, traces = sql(self.url, f"SELECT count(), uniqExact(TraceId) FROM {database}.otel_traces").split()
        except OSError:
            return 0, 0
        return int(spans), int(traces)


def debian_server(log_dir: Path) -> ClickHouse | None:
    """Debian's clickhouse-server with a config of its own, if installed and recent enough (else ``None``)."""
    if not Path(SERVER_BIN).is_file():
        return None
    home = log_dir / "clickhouse-server"
    for sub in ("log", "data", "tmp", "user_files", "format_schemas"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    http, tcp = rb.free_port(), rb.free_port()
    (home / "config.xml").write_text(_CONFIG.format(dir=home, http=http, tcp=tcp))
    (home / "users.xml").write_text(_USERS)
    server = ClickHouse("clickhouse-server", [SERVER_BIN, f"--config-file={home / 'config.xml'}"], http, log_dir, "clickhouse-server")
    try:
        server.start()
    except RuntimeError:
        return None
    try:
        sql(server.url, "SELECT toTypeName(map('k', 'v')), toDateTime64(0, 9)")  # the exporter's column types
    except OSError:
        server.stop()
        return None
    return server


def embedded_engine(log_dir: Path) -> ClickHouse:
    """chdb behind ClickHouse's HTTP interface (tests/chfront.py) on a free port, data in ``log_dir``."""
    data = log_dir / "chdb"
    data.mkdir(parents=True, exist_ok=True)
    port = rb.free_port()
    argv = [sys.executable, str(FRONT), "--port", str(port), "--path", str(data)]
    return ClickHouse("chdb-front", argv, port, log_dir, "chdb (embedded ClickHouse) behind the HTTP interface").start()  # type: ignore[return-value]


def start_clickhouse(log_dir: Path) -> ClickHouse:
    """Debian's server when it can hold the exporter's schema, else the embedded engine."""
    return debian_server(log_dir) or embedded_engine(log_dir)


def collector_env(clickhouse: ClickHouse, database: str) -> dict[str, str]:
    """collector-config/clickhouse.yaml writing to ``database`` over HTTP, each insert readable when it returns."""
    return {
        "RAGTRAIL_CLICKHOUSE_ENDPOINT": clickhouse.url,
        "RAGTRAIL_CLICKHOUSE_DATABASE": database,
        "RAGTRAIL_CLICKHOUSE_COMPRESS": "none",
        "RAGTRAIL_CLICKHOUSE_ASYNC_INSERT": "false",
    }


def otlp_batches(store: Path, per: int = 200) -> Iterator[bytes]:
    """The local store's OTLP JSON lines, ``per`` lines to one ExportTraceServiceRequest body."""
    batch: list[bytes] = []
    for path in sorted(store.glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            if line.strip():
                batch.append(line[line.index(b"[") + 1 : line.rindex(b"]")])
                if len(batch) >= per:
                    yield b'{"resourceSpans":[' + b",".join(batch) + b"]}"
                    batch = []
    if batch:
        yield b'{"resourceSpans":[' + b",".join(batch) + b"]}"


def send_store(store: Path, traces_url: str) -> int:
    """POST a whole local store to a Collector's OTLP/HTTP endpoint; the number of requests."""
    n = 0
    for body in otlp_batches(store):
        request = urllib.request.Request(traces_url, data=body, headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - loopback only
            assert response.status == 200, response.status
        n += 1
    return n


def make_store(path: Path, traces: int, *extra: str) -> Path:
    """benchmarks/make_many_store.py: ``traces`` traces copied from recorded templates."""
    if path.exists():
        shutil.rmtree(path)
    subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "make_many_store.py"), str(path), "--traces", str(traces), *extra], check=True, capture_output=True
    )
    return path


def store_size(store: Path) -> tuple[int, int]:
    """(spans, traces) of a local store written by make_many_store.py (one trace a line)."""
    spans = traces = 0
    for path in store.glob("*.jsonl"):
        for line in path.read_bytes().splitlines():
            if line.strip():
                spans += line.count(b'"spanId":')
                traces += 1
    return spans, traces


def wait_for_spans(clickhouse: ClickHouse, database: str, spans: int, timeout: float = 120.0) -> tuple[int, int]:
    """Wait until ``database`` holds ``spans`` spans (the exporter inserts in batches); (spans, traces) then."""
    deadline = time.monotonic() + timeout
    while True:
        got = clickhouse.count(database)
        if got[0] >= spans or time.monotonic() > deadline:
            return got
        time.sleep(0.3)
