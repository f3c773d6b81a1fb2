"""Run the REAL Jaeger v2 and OpenTelemetry Collector binaries for ragtrail's end-to-end tests.

The binaries are built from Go modules by ``scripts/build-backends.sh`` into a cache outside the
repository (``$RAGTRAIL_BACKENDS_DIR`` or ``~/.cache/ragtrail-backends``). Each server here binds
127.0.0.1 only, on free ports, with the repository's own config files (collector-config/*.yaml,
whose endpoints are environment variables), and is stopped by the test that started it.

Missing binaries: under CI (``CI`` set) that is a failure, because the e2e tests are required
there; on a developer machine without Go the tests skip with a loud message.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO / "collector-config"
BUILD_SCRIPT = REPO / "scripts" / "build-backends.sh"
BACKENDS_ENV = "RAGTRAIL_BACKENDS_DIR"
JAEGER_BIN = "jaeger"
OTELCOL_BIN = "otelcol-ragtrail"
RECORD_POLICY_GATE = "processor.tailsamplingprocessor.recordpolicy"
# The collector's own metrics endpoint defaults to localhost:8888: several collectors would clash.
NO_SELF_METRICS = "yaml:service::telemetry::metrics::level: none"


def backends_dir() -> Path:
    """Where build-backends.sh puts its binaries (same default as the script)."""
    env = os.environ.get(BACKENDS_ENV)
    return Path(env) if env else Path.home() / ".cache" / "ragtrail-backends"


def binary_path(name: str) -> Path:
    return backends_dir() / "bin" / name


def missing_binaries(*names: str) -> list[Path]:
    return [p for p in (binary_path(n) for n in names) if not (p.is_file() and os.access(p, os.X_OK))]


def missing_message(missing: Sequence[Path]) -> str:
    return (
        "\n" + "!" * 78 + "\n"
        "ragtrail e2e: real backend binaries not found:\n"
        + "".join(f"    {p}\n" for p in missing)
        + f"  Build them (needs Go >= 1.26 and the Go module proxy):  {BUILD_SCRIPT.relative_to(REPO)}\n"
        f"  or point {BACKENDS_ENV} at a directory holding bin/{JAEGER_BIN} and bin/{OTELCOL_BIN}.\n" + "!" * 78
    )


def require_binaries(*names: str) -> dict[str, Path]:
    """Return the binaries' paths, or fail (CI) / skip loudly (developer machine)."""
    missing = missing_binaries(*names)
    if missing:
        message = missing_message(missing)
        if os.environ.get("CI"):
            pytest.fail("required under CI:" + message, pytrace=False)
        pytest.skip("SKIPPED, not passed:" + message)
    return {n: binary_path(n) for n in names}


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port the kernel just handed out on 127.0.0.1, never one this process handed out before.

    The kernel may give the same ephemeral port to two binds in a row once the first socket is
    closed, so a server asking for four ports could get one twice and fail to bind (seen in CI:
    Jaeger's query gRPC and OTLP/HTTP on one port). Ports already handed out are held open while
    asking again, so the kernel must pick another. Other processes can still race us (tiny; fine here).
    """
    held: list[socket.socket] = []
    try:
        while True:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(s)
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port
    finally:
        for s in held:
            s.close()


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.2, what: str = "condition") -> Any:
    """Poll until ``predicate()`` is truthy; return its value or raise TimeoutError."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class ManagedProcess:
    """A server process with its log in a file, started and stopped by the test that owns it."""

    def __init__(self, name: str, argv: Sequence[str], env: Mapping[str, str], ports: Sequence[int], log_dir: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.env = {**os.environ, **env}
        self.ports = list(ports)
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, timeout: float = 60.0) -> ManagedProcess:
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts}: {' '.join(self.argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_until(self._ready, timeout, what=f"{self.name} to listen on {self.ports}")
        except TimeoutError:
            self.stop()
            raise RuntimeError(f"{self.name} did not start; log tail:\n{self.log_tail()}") from None
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; log tail:\n{self.log_tail()}")
        return all(port_open(p) for p in self.ports)

    def stop(self, timeout: float = 20.0) -> int | None:
        """Graceful stop (SIGTERM: a collector flushes what it holds), then SIGKILL."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def kill(self) -> None:
        """Abrupt stop (SIGKILL): whatever the process held in memory is lost."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def wait_ports_free(self, timeout: float = 20.0) -> None:
        wait_until(lambda: not any(port_open(p) for p in self.ports), timeout, what=f"{self.name} ports to close")

    def restart(self, timeout: float = 60.0) -> None:
        self.stop()
        self.wait_ports_free()
        self.start(timeout)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])


def _get_json(url: str, timeout: float = 10.0) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback only
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        body = e.read()
        try:
            return e.code, json.loads(body)
        except ValueError:
            return e.code, body.decode(errors="replace")


class Jaeger(ManagedProcess):
    """Jaeger v2 all-in-one (memory storage) with collector-config/jaeger.yaml on free ports."""

    def __init__(self, binary: Path, log_dir: Path, name: str = "jaeger") -> None:
        self.otlp_grpc_port, self.otlp_http_port = free_port(), free_port()
        self.query_http_port, self.query_grpc_port = free_port(), free_port()
        env = {
            "RAGTRAIL_JAEGER_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{self.otlp_grpc_port}",
            "RAGTRAIL_JAEGER_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{self.otlp_http_port}",
            "RAGTRAIL_JAEGER_QUERY_HTTP_ENDPOINT": f"127.0.0.1:{self.query_http_port}",
            "RAGTRAIL_JAEGER_QUERY_GRPC_ENDPOINT": f"127.0.0.1:{self.query_grpc_port}",
        }
        argv = [str(binary), "--config", str(CONFIG_DIR / "jaeger.yaml")]
        super().__init__(name, argv, env, [self.otlp_grpc_port, self.otlp_http_port, self.query_http_port], log_dir)

    @property
    def otlp_grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.otlp_grpc_port}"

    @property
    def query_url(self) -> str:
        return f"http://127.0.0.1:{self.query_http_port}"

    @property
    def source(self) -> str:
        """What ``ragtrail verify --source`` takes for this Jaeger."""
        return f"jaeger+http://127.0.0.1:{self.query_http_port}"

    def trace_v1(self, trace_id: str) -> tuple[int, Any]:
        return _get_json(f"{self.query_url}/api/traces/{trace_id}")

    def trace_v3(self, trace_id: str) -> tuple[int, Any]:
        return _get_json(f"{self.query_url}/api/v3/traces/{trace_id}")

    def services(self) -> list[str]:
        status, body = _get_json(f"{self.query_url}/api/services")
        return list(body.get("data") or []) if status == 200 and isinstance(body, dict) else []

    def traces_of_service(self, service: str, limit: int = 2000) -> list[dict[str, Any]]:
        status, body = _get_json(f"{self.query_url}/api/traces?service={service}&limit={limit}&lookback=1h")
        return list(body.get("data") or []) if status == 200 and isinstance(body, dict) else []

    def v3_spans(self, trace_id: str) -> list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
        """(resource, scope, span) triples of a trace from the v3 API ([] when not found)."""
        status, body = self.trace_v3(trace_id)
        if status != 200 or not isinstance(body, dict):
            return []
        out = []
        for rs in (body.get("result") or {}).get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    out.append((rs.get("resource", {}), ss.get("scope", {}), span))
        return out

    def wait_for_spans(self, trace_id: str, count: int, timeout: float = 30.0) -> list[tuple[dict, dict, dict]]:
        """Wait until the trace holds at least ``count`` spans; return them."""
        return wait_until(
            lambda: (lambda s: s if len(s) >= count else None)(self.v3_spans(trace_id)),
            timeout,
            interval=0.3,
            what=f"{count} spans of trace {trace_id} in {self.name}",
        )


class Collector(ManagedProcess):
    """The custom collector (otelcol-ragtrail) with one of collector-config/*.yaml on free ports."""

    def __init__(
        self,
        binary: Path,
        config: Path,
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        feature_gates: Sequence[str] = (),
        name: str = "collector",
        overlays: Sequence[Path] = (),
    ) -> None:
        self.otlp_grpc_port, self.otlp_http_port = free_port(), free_port()
        full_env = {  # the collector's own listen endpoints always win: the ports are ours
            **(env or {}),
            "RAGTRAIL_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{self.otlp_grpc_port}",
            "RAGTRAIL_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{self.otlp_http_port}",
        }
        # overlays (e.g. metrics.yaml) are merged over the config, in order, as the Collector does
        argv = [str(binary), f"--config={config}", *(f"--config={o}" for o in overlays), f"--config={NO_SELF_METRICS}"]
        if feature_gates:
            argv.append("--feature-gates=" + ",".join(feature_gates))
        super().__init__(name, argv, full_env, [self.otlp_grpc_port, self.otlp_http_port], log_dir)

    @property
    def otlp_grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.otlp_grpc_port}"

    @property
    def traces_url(self) -> str:
        """OTLP/HTTP traces endpoint, for the SDK's OTLPSpanExporter(endpoint=...)."""
        return f"http://127.0.0.1:{self.otlp_http_port}/v1/traces"


PROMETHEUS_BIN = "prometheus"  # Debian's package (scripts/test.sh installs it), not built here


def require_prometheus() -> Path:
    """The ``prometheus`` server on PATH, or fail (CI) / skip loudly (developer machine)."""
    found = shutil.which(PROMETHEUS_BIN)
    if found:
        return Path(found)
    message = f"\n{'!' * 78}\nragtrail e2e: no `{PROMETHEUS_BIN}` on PATH (Debian: apt-get install prometheus; scripts/test.sh does)\n{'!' * 78}"
    if os.environ.get("CI"):
        pytest.fail("required under CI:" + message, pytrace=False)
    pytest.skip("SKIPPED, not passed:" + message)


class Prometheus(ManagedProcess):
    """A real Prometheus server scraping the given targets every ``scrape_interval``, on a free port with
    its config and TSDB in ``work_dir``."""

    def __init__(self, binary: Path, work_dir: Path, targets: Sequence[str], scrape_interval: str = "1s", name: str = "prometheus") -> None:
        self.http_port = free_port()
        config = work_dir / f"{name}.yml"
        # honor_labels: the exporter's `job`/`instance` (the app's service.name / instance id) are kept
        config.write_text(
            f"global:\n  scrape_interval: {scrape_interval}\n  evaluation_interval: {scrape_interval}\n"
            f"scrape_configs:\n  - job_name: collector\n    honor_labels: true\n    static_configs:\n      - targets: {list(targets)!r}\n"
        )
        argv = [
            str(binary),
            f"--config.file={config}",
            f"--storage.tsdb.path={work_dir / (name + '-data')}",
            f"--web.listen-address=127.0.0.1:{self.http_port}",
        ]
        super().__init__(name, argv, {}, [self.http_port], work_dir)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def query(self, promql: str) -> list[tuple[dict[str, str], float]]:
        """An instant query through the HTTP API (``/api/v1/query``): (labels, value) per series."""
        status, body = _get_json(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        assert status == 200 and isinstance(body, dict) and body.get("status") == "success", (promql, status, body)
        return [(dict(r["metric"]), float(r["value"][1])) for r in body["data"]["result"]]


def gateway_env(jaeger: Jaeger, tempo: Jaeger, percentage: str = "100", decision_wait: str = "1s") -> dict[str, str]:
    """Environment for collector-config/gateway.yaml exporting to two loopback backends (the
    second stands in for Tempo's OTLP ingest: Tempo is not built here)."""
    return {
        "RAGTRAIL_JAEGER_OTLP_ENDPOINT": jaeger.otlp_grpc_endpoint,
        "RAGTRAIL_TEMPO_OTLP_ENDPOINT": tempo.otlp_grpc_endpoint,
        "RAGTRAIL_TAIL_DECISION_WAIT": decision_wait,
        "RAGTRAIL_TAIL_SAMPLING_PERCENTAGE": percentage,
    }


def validate_config(binary: Path, config: Path, *extra: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``<binary> validate --config <config>``: the collector's own config check (no ports opened)."""
    return subprocess.run(
        [str(binary), "validate", f"--config={config}", *extra], env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=120
    )


# ---- reading back ---------------------------------------------------------------------------------


def ragtrail_cli(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run the installed ``ragtrail`` console script (the real CLI a user runs)."""
    import sys

    exe = Path(sys.executable).parent / "ragtrail"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout)


def verify_json(source: str, *trace_ids: str) -> list[dict[str, Any]]:
    """``ragtrail verify --json --strict --source <source> <ids>``: one result per trace, findings included."""
    result = ragtrail_cli("verify", "--json", "--strict", "--source", source, *trace_ids)
    assert result.returncode in (0, 1), f"ragtrail verify failed ({result.returncode}):\n{result.stderr}"
    return json.loads(result.stdout)


def show_json(source: str, trace_id: str) -> dict[str, Any]:
    """``ragtrail show --json``: the manifest rebuilt from the backend."""
    result = ragtrail_cli("show", "--json", "--source", source, trace_id)
    assert result.returncode == 0, f"ragtrail show failed ({result.returncode}):\n{result.stderr}"
    return json.loads(result.stdout)


def otlp_value(value: Mapping[str, Any]) -> Any:
    """Decode one OTLP JSON AnyValue (ints arrive as strings, per the protobuf JSON mapping)."""
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        return tuple(otlp_value(v) for v in value["arrayValue"].get("values", []))
    if "kvlistValue" in value:
        return otlp_attributes(value["kvlistValue"].get("values", []))
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def otlp_attributes(items: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    return {kv["key"]: otlp_value(kv.get("value", {})) for kv in items or ()}


FIXTURES_DIR = REPO / "tests" / "fixtures" / "jaeger_recorded"
RECORD_ENV = "RAGTRAIL_RECORD_JAEGER_FIXTURES"


def _get_raw(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback only
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def record_fixture(name: str, jaeger: Jaeger, trace_id: str) -> None:
    """With RAGTRAIL_RECORD_JAEGER_FIXTURES=1, save this real Jaeger's v1 and v3 answers (the bytes
    as served) for the trace, and for an unknown id, under tests/fixtures/jaeger_recorded/."""
    if not os.environ.get(RECORD_ENV):
        return
    FIXTURES_DIR.mkdir(parents=True, exist_ok=True)
    unknown = "0" * 31 + "1"
    for api, path in (("v1", "/api/traces/"), ("v3", "/api/v3/traces/")):
        status, body = _get_raw(jaeger.query_url + path + trace_id)
        assert status == 200, (api, status, body[:200])
        (FIXTURES_DIR / f"{name}.{api}.json").write_bytes(body)
        status, body = _get_raw(jaeger.query_url + path + unknown)
        assert status == 404, (api, status, body[:200])
        (FIXTURES_DIR / f"not_found.{api}.json").write_bytes(body)
