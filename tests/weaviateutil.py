"""A real Weaviate server for the tests: ``weaviate-server`` v1.35.2, built from the Go module proxy by
``scripts/build-backends.sh weaviate`` into ``$RAGTRAIL_BACKENDS_DIR/bin`` (default
``~/.cache/ragtrail-backends/bin``).

``running_weaviate()`` starts it on free ports with a fresh data directory, waits for
``/v1/.well-known/ready``, and however the tests end kills its process group and deletes the data
directory. Every socket it listens on is on 127.0.0.1: REST, Raft and gossip by their settings, and
gRPC, the cluster data port and the Prometheus metrics because the build patches upstream's
``net.Listen(":port")`` into ``"127.0.0.1:port"`` (scripts/weaviate-loopback.patch). Once ready, the
server's own listening sockets (``/proc/<pid>/net``) are checked: one on any other address stops the
server and fails its tests (an unpatched binary does). Telemetry and the profiler are off.

``Weaviate.requests()`` reads the server's own Prometheus counters (REST requests by route, gRPC
requests by method, as the server counted them), so a test counts what reached the server, not what
the client believes it sent.

Missing binary: under CI (``CI`` set) a failure, because these tests are required there; elsewhere
the tests skip with a loud message (the e2e tests' rule, tests/e2e/ragtrail_backends.py).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

BINARY = "weaviate-server"
_COUNT = re.compile(r"^weaviate_(grpc_server|http)_request_duration_seconds_count\{(?P<labels>[^}]*)\} (?P<n>[0-9.e+]+)$", re.M)


def binary_path() -> Path:
    env = os.environ.get("RAGTRAIL_BACKENDS_DIR")
    return (Path(env) if env else Path.home() / ".cache" / "ragtrail-backends") / "bin" / BINARY


def require_binary() -> Path:
    """The server binary, or fail (CI) / skip loudly (developer machine)."""
    path = binary_path()
    if path.is_file() and os.access(path, os.X_OK):
        return path
    message = (
        "\n" + "!" * 78 + f"\nragtrail weaviate tests: the real server was not found at {path}\n"
        "  Build it (needs Go >= 1.26 and the Go module proxy; 11-20 min cold on 2 cores):  scripts/build-backends.sh weaviate\n"
        "  or point RAGTRAIL_BACKENDS_DIR at a directory holding bin/weaviate-server.\n" + "!" * 78
    )
    if os.environ.get("CI"):
        pytest.fail("required under CI:" + message, pytrace=False)
    pytest.skip("SKIPPED, not passed:" + message)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def listening_sockets(pid: int) -> set[tuple[str, str, int]]:
    """``(protocol, address, port)`` of every socket process ``pid`` listens on: TCP in state LISTEN
    and UDP not connected to a peer, IPv4 and IPv6, from ``/proc/<pid>/net`` matched to the process's
    own file descriptors by inode."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        for line in Path(f"/proc/{pid}/net/{proto}").read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
            listening = state == "0A" if proto.startswith("tcp") else set(remote.split(":")[0]) == {"0"}
            if inode in inodes and listening:
                address, port = local.split(":")
                found.add((proto, _ip(address), int(port, 16)))
    return found


def _ip(hex_address: str) -> str:
    """An address from /proc/net/{tcp,udp}[6]: 32-bit words, each in host (little-endian) order."""
    raw = b"".join(bytes.fromhex(hex_address[i : i + 8])[::-1] for i in range(0, len(hex_address), 8))
    return str(ipaddress.ip_address(raw))


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


@dataclass
class Weaviate:
    """A running server: its process, ports, log, and its own request counters."""

    pid: int
    http_port: int
    grpc_port: int
    metrics_port: int
    ports: dict[str, int]
    log: Path

    def requests(self) -> Counter[str]:
        """Requests the server has served so far, by ``"GET /v1/meta"``-style REST route or
        ``"grpc Search"``-style gRPC method of Weaviate's public service (cluster-internal traffic and
        the readiness probe are left out)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        counts: Counter[str] = Counter()
        for m in _COUNT.finditer(text):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))
            if "grpc_service" in labels:
                if labels["grpc_service"] != "weaviate.v1.Weaviate":
                    continue
                key = f"grpc {labels['method']}"
            elif labels.get("route") == "/v1/.well-known/ready":
                continue
            else:
                key = f"{labels.get('method')} {labels.get('route')}"
            counts[key] += int(float(m["n"]))
        return counts


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/.well-known/ready", timeout=1) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _check_loopback_only(pid: int, ports: dict[str, int], deadline: float) -> None:
    """Wait until every configured TCP port listens (some listeners start after the ready probe
    answers), then fail if any listening socket of the server is on a non-loopback address."""
    while True:
        sockets = listening_sockets(pid)
        missing = {name for name, port in ports.items() if not any(p.startswith("tcp") and n == port for p, _, n in sockets)}
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    exposed = sorted(s for s in sockets if not _is_loopback(s[1]))
    if exposed:
        raise RuntimeError(
            f"weaviate-server listens beyond 127.0.0.1 on {exposed} (all: {sorted(sockets)}): the binary lacks "
            "scripts/weaviate-loopback.patch; rebuild it with scripts/build-backends.sh weaviate"
        )
    if missing:
        raise RuntimeError(f"weaviate-server never listened on {sorted(missing)} (listening: {sorted(sockets)})")


@contextlib.contextmanager
def running_weaviate(binary: Path, timeout: float = 90.0) -> Iterator[Weaviate]:
    directory = Path(tempfile.mkdtemp(prefix="ragtrail-weaviate-"))
    http, grpc, raft, raft_rpc, gossip, data, metrics = _free_ports(7)
    ports = {"http": http, "grpc": grpc, "raft": raft, "raft_rpc": raft_rpc, "gossip": gossip, "data": data, "metrics": metrics}
    env = {
        **os.environ,
        "AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED": "true",
        "PERSISTENCE_DATA_PATH": str(directory / "data"),
        "DEFAULT_VECTORIZER_MODULE": "none",
        # Weaviate's own offline generative module (compiled in): answers generate.* with a fixed text
        # that quotes the prompt the server built, so collection.generate.* runs end to end here
        "ENABLE_MODULES": "generative-dummy",
        "CLUSTER_HOSTNAME": "node1",
        "CLUSTER_ADVERTISE_ADDR": "127.0.0.1",
        "CLUSTER_BIND_ADDR": "127.0.0.1",
        "GRPC_PORT": str(grpc),
        "RAFT_PORT": str(raft),
        "RAFT_INTERNAL_RPC_PORT": str(raft_rpc),
        "CLUSTER_GOSSIP_BIND_PORT": str(gossip),
        "CLUSTER_DATA_BIND_PORT": str(data),
        "PROMETHEUS_MONITORING_ENABLED": "true",
        "PROMETHEUS_MONITORING_PORT": str(metrics),
        "DISABLE_TELEMETRY": "true",
        "GO_PROFILING_DISABLE": "true",
        "LOG_LEVEL": "info",
    }
    log = directory / "weaviate.log"
    argv = [str(binary), "--host", "127.0.0.1", "--port", str(http), "--scheme", "http"]
    proc = None
    try:
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, env=env, cwd=directory, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not _ready(http):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"weaviate-server did not become ready (exit {proc.poll()}):\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        _check_loopback_only(proc.pid, ports, time.monotonic() + 30)
        yield Weaviate(pid=proc.pid, http_port=http, grpc_port=grpc, metrics_port=metrics, ports=ports, log=log)
    finally:
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def weaviate_server() -> Iterator[Weaviate]:
    """One real Weaviate for the whole session (tests use their own collections)."""
    binary = require_binary()
    with running_weaviate(binary) as server:
        yield server
