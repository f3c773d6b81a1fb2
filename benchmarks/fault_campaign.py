"""Fault campaign (issue 13): does every trace either arrive whole or get counted lost, under every
way a backend fails, including the traces still in flight when the application shuts down?

For each mode a fresh application process (the real SDK, configured by ``ragtrail.export.configure``
with the whole-trace processor and the SDK's OTLP/HTTP exporter at its defaults) runs 20 threads and
200 asyncio tasks producing traces (a root and two children) for ``--seconds``, joins them and shuts
the provider down. The OTLP/HTTP receiver on 127.0.0.1 (``tests/otlp_server.py``, in this process)
misbehaves as the mode says. Then, by arithmetic:

* sent: trace ids the application produced (it writes them to a file);
* received whole: traces whose local root arrived with ``ragtrail.trace.span_count`` equal to the spans
  that arrived; partial: traces that arrived with fewer;
* counted lost: ``traces_dropped + traces_export_failed`` summed over every ``ragtrail.loss`` record,
  those the receiver accepted and those written to the application's local store directory;
* uncounted = sent - received whole - counted lost (must be 0; negative means counted twice).

Also per mode: RSS of the application at start (after set-up) and at its peak, the shutdown time
(``provider.shutdown()``), and the p50 of the time the application thread spends producing one
trace, against the same in the ``healthy`` mode (no fault).

The 13 fault modes: down, slow-5s, 500, 503, 429+Retry-After, 413 (bodies over 32 KiB), hang,
flapping (down 1 s / up 1 s), heal-after-down, heal-after-500, reset-connection, 400, 502; plus the
``healthy`` baseline. Loopback only; every loop is bounded and the campaign stops by itself.

    .venv/bin/python benchmarks/fault_campaign.py --seconds 30            # the real run (~14 min)
    .venv/bin/python benchmarks/fault_campaign.py --seconds 3 --modes healthy,down,hang   # a quick check
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

THREADS = 20
TASKS = 200
THREAD_PAUSE = 0.05  # seconds between traces in a thread: 400 traces/s from the threads
TASK_PAUSE = 0.5  # and 400 traces/s from the tasks, to keep the campaign's CPU modest

FAULTS = [
    "down",
    "slow-5s",
    "500",
    "503",
    "429+Retry-After",
    "413",
    "hang",
    "flapping",
    "heal-after-down",
    "heal-after-500",
    "reset-connection",
    "400",
    "502",
]
MODES = ["healthy", *FAULTS]


# --- the application (child process) ---------------------------------------------------------------
def _rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def app_main(endpoint: str, seconds: float, ids_path: str) -> None:
    """Produce traces for ``seconds`` from 20 threads and 200 asyncio tasks, then shut down."""
    from ragtrail.export import configure

    provider = configure(service_name="fault-campaign", endpoint=endpoint, set_global=False, processor_options={"loss_report_interval_millis": 5000})
    tracer = provider.get_tracer("fault-campaign")
    ids: list[str] = []
    latencies: list[float] = []  # thread traces: spans only, the application thread's own cost
    task_latencies: list[float] = []  # task traces: includes the two awaits (other tasks run there)
    stop_at = time.monotonic() + seconds
    rss = {"start": _rss_bytes(), "peak": _rss_bytes()}

    def one_trace() -> None:
        started = time.perf_counter()
        with tracer.start_as_current_span("request", attributes={"app.route": "/search"}) as root:
            with tracer.start_as_current_span("retrieve", attributes={"app.k": 5}):
                pass
            with tracer.start_as_current_span("rerank", attributes={"app.k": 3}):
                pass
        latencies.append(time.perf_counter() - started)
        ids.append(f"{root.get_span_context().trace_id:032x}")

    def thread_producer() -> None:
        while time.monotonic() < stop_at:
            one_trace()
            time.sleep(THREAD_PAUSE)

    async def task_producer() -> None:
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            with tracer.start_as_current_span("request", attributes={"app.route": "/ask"}) as root:
                with tracer.start_as_current_span("retrieve"):
                    await asyncio.sleep(0)
                with tracer.start_as_current_span("rerank"):
                    await asyncio.sleep(0)
            task_latencies.append(time.perf_counter() - started)
            ids.append(f"{root.get_span_context().trace_id:032x}")
            await asyncio.sleep(TASK_PAUSE)

    async def tasks() -> None:
        await asyncio.gather(*(task_producer() for _ in range(TASKS)))

    def sample_rss() -> None:
        while time.monotonic() < stop_at + 60 and not done.is_set():
            rss["peak"] = max(rss["peak"], _rss_bytes())
            done.wait(0.25)

    done = threading.Event()
    sampler = threading.Thread(target=sample_rss, daemon=True)
    sampler.start()
    print("ready", flush=True)
    workers = [threading.Thread(target=thread_producer) for _ in range(THREADS)]
    for worker in workers:
        worker.start()
    asyncio.run(tasks())
    for worker in workers:
        worker.join()
    started = time.monotonic()
    provider.shutdown()
    shutdown_s = time.monotonic() - started
    done.set()
    rss["peak"] = max(rss["peak"], _rss_bytes())
    Path(ids_path).write_text("\n".join(ids))
    print(
        json.dumps(
            {
                "p50_ms": statistics.median(latencies) * 1000,
                "task_p50_ms": statistics.median(task_latencies) * 1000,
                "shutdown_s": shutdown_s,
                "rss_start": rss["start"],
                "rss_peak": rss["peak"],
            }
        ),
        flush=True,
    )


# --- the receiver's behaviour per mode (this process) ---------------------------------------------
def _timeline(mode: str, server: Any, seconds: float) -> tuple[Callable[[], None], Callable[[threading.Event], None] | None]:
    """(what to set before the app starts, what to run while it produces)."""
    half = seconds / 2

    def heal_at_half(stop: threading.Event) -> None:
        if not stop.wait(half):
            server.heal()
            server.up()

    def flap(stop: threading.Event) -> None:
        deadline = time.monotonic() + seconds + 120
        while not stop.is_set() and time.monotonic() < deadline:
            server.down()
            if stop.wait(1.0):
                break
            server.up()
            stop.wait(1.0)
        server.up()

    setups: dict[str, Callable[[], None]] = {
        "healthy": lambda: None,
        "down": server.down,
        "slow-5s": lambda: server.set_delay(5.0),
        "500": lambda: server.fail_with(500),
        "503": lambda: server.fail_with(503),
        "429+Retry-After": lambda: server.fail_with(429, retry_after=1),
        "413": lambda: server.reject_over(32 * 1024),
        "hang": server.hang,
        "flapping": lambda: None,
        "heal-after-down": server.down,
        "heal-after-500": lambda: server.fail_with(500),
        "reset-connection": server.reset_connections,
        "400": lambda: server.fail_with(400),
        "502": lambda: server.fail_with(502),
    }
    during = {"flapping": flap, "heal-after-down": heal_at_half, "heal-after-500": heal_at_half}
    return setups[mode], during.get(mode)


def _tally(server: Any, store: Path, sent: list[str]) -> dict[str, int]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from ragtrail.contract import semconv
    from ragtrail.export.otlp_json import parse_request

    arrived: dict[str, int] = {}
    stamped: dict[str, int] = {}
    counted = records = local = 0

    def read(request: ExportTraceServiceRequest, is_local: bool) -> None:
        nonlocal counted, records, local
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    attrs = {kv.key: kv.value.int_value for kv in span.attributes if kv.value.HasField("int_value")}
                    if span.name == semconv.LOSS_SPAN_NAME:
                        counted += attrs[semconv.LOSS_TRACES_DROPPED] + attrs[semconv.LOSS_TRACES_EXPORT_FAILED]
                        records += 1
                        local += is_local
                        continue
                    trace_id = span.trace_id.hex()
                    arrived[trace_id] = arrived.get(trace_id, 0) + 1
                    if not span.parent_span_id and semconv.TRACE_SPAN_COUNT in attrs:
                        stamped[trace_id] = attrs[semconv.TRACE_SPAN_COUNT]

    for request in server.accepted_requests:
        read(request.request, False)
    for path in sorted(store.glob("traces-*.jsonl")):
        for line in path.read_text().splitlines():
            read(parse_request(line), True)
    whole = sum(1 for t in sent if t in stamped and stamped[t] == arrived[t])
    partial = sum(1 for t in sent if t in arrived) - whole
    return {
        "sent": len(sent),
        "whole": whole,
        "partial": partial,
        "counted": counted,
        "uncounted": len(sent) - whole - counted,
        "records": records,
        "local_records": local,
    }


def run_mode(mode: str, seconds: float) -> dict[str, Any]:
    from otlp_server import OTLPServer

    server = OTLPServer().start()
    setup, during = _timeline(mode, server, seconds)
    with tempfile.TemporaryDirectory(prefix="ragtrail-campaign-") as tmp:
        store = Path(tmp) / "store"
        ids_path = Path(tmp) / "ids.txt"
        env = {**os.environ, "RAGTRAIL_LOCAL_STORE_DIR": str(store), "PYTHONPATH": str(ROOT / "src")}
        setup()
        with open(Path(tmp) / "app.log", "w") as log:  # the SDK exporter's own complaints, one per failure
            child = subprocess.Popen(
                [sys.executable, __file__, "--app", server.url, str(seconds), str(ids_path)], stdout=subprocess.PIPE, stderr=log, text=True, env=env
            )
            assert child.stdout is not None
            child.stdout.readline()  # "ready"
            stop = threading.Event()
            driver = threading.Thread(target=during, args=(stop,)) if during else None
            if driver:
                driver.start()
            try:
                out, _ = child.communicate(timeout=seconds + 300)
            finally:
                stop.set()
                if driver:
                    driver.join()
                if child.poll() is None:
                    child.kill()
            server.stop()  # releases hanging handlers: a request that hung is not kept
        if child.returncode != 0:
            print((Path(tmp) / "app.log").read_text()[-3000:], file=sys.stderr)
        result = json.loads(out.strip().splitlines()[-1])
        sent = ids_path.read_text().split()
        result.update(_tally(server, store, sent))
    return {"mode": mode, "exit": child.returncode, **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30.0, help="production time per mode")
    parser.add_argument("--modes", default=",".join(MODES), help="comma list (healthy is the p50 baseline)")
    parser.add_argument("--app", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.app:
        endpoint, seconds, ids_path = args.app
        app_main(endpoint, float(seconds), ids_path)
        return
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}; choose from {MODES}")
    results = [run_mode(mode, args.seconds) for mode in modes]
    healthy = next((r for r in results if r["mode"] == "healthy"), None)
    print(f"\n{args.seconds:g} s per mode, {THREADS} threads + {TASKS} asyncio tasks\n")
    print(
        "| mode | sent | received whole | partial | counted lost | uncounted | loss records (local) "
        "| RSS start → peak MiB | shutdown s | p50 µs thread trace (healthy) | p50 µs task trace (healthy) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        base = f" ({healthy['p50_ms'] * 1000:.0f})" if healthy else ""
        task_base = f" ({healthy['task_p50_ms'] * 1000:.0f})" if healthy else ""
        print(
            f"| {r['mode']} | {r['sent']} | {r['whole']} | {r['partial']} | {r['counted']} | {r['uncounted']} "
            f"| {r['records']} ({r['local_records']}) | {r['rss_start'] / 2**20:.0f} → {r['rss_peak'] / 2**20:.0f} "
            f"| {r['shutdown_s']:.2f} | {r['p50_ms'] * 1000:.0f}{base} | {r['task_p50_ms'] * 1000:.0f}{task_base} |"
        )
    bad = [r["mode"] for r in results if r["uncounted"] != 0 or r["exit"] != 0]
    if bad:
        print(f"\nUNCOUNTED LOSS or failed run in: {', '.join(bad)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
