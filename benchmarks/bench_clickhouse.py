"""ClickHouse as a source of many traces: the real Collector's ingest into ``otel_traces``, and ``ragtrail
stats``/``compare`` read through ``--source clickhouse+http://...`` (the Python path: every trace
fetched, in batches of 500 ids, and reduced in Python) beside the same commands on the local stores
the traces came from.

The stores are written by ``benchmarks/make_many_store.py`` (setup, not timed); the ClickHouse is the
e2e tier's (tests/e2e/clickhouse_backend.py: Debian's clickhouse-server when it can hold the
exporter's schema, else chdb behind ClickHouse's HTTP interface). Each ragtrail command runs as a user
runs it (the console script, a fresh process); wall, CPU (user+sys) and peak RSS of that process.

    .venv/bin/python benchmarks/bench_clickhouse.py --traces 10000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "e2e"))
sys.path.insert(0, str(HERE))

import clickhouse_backend as chb  # noqa: E402
import ragtrail_backends as rb  # noqa: E402
from bench_many import run  # noqa: E402


def ingest(clickhouse: chb.ClickHouse, store: Path, database: str, log_dir: Path) -> tuple[float, int, int]:
    """(seconds, spans, traces): the store sent to a fresh Collector over OTLP/HTTP until ClickHouse holds every span."""
    binary = rb.require_binaries(rb.OTELCOL_BIN)[rb.OTELCOL_BIN]
    collector = rb.Collector(
        binary, rb.CONFIG_DIR / "clickhouse.yaml", log_dir, env=chb.collector_env(clickhouse, database), name=f"collector-{database}"
    )
    collector.start()
    spans, traces = chb.store_size(store)
    start = time.perf_counter()
    try:
        chb.send_store(store, f"http://127.0.0.1:{collector.otlp_http_port}/v1/traces")
        got = chb.wait_for_spans(clickhouse, database, spans, timeout=1800)
    finally:
        collector.stop()
    if got != (spans, traces):
        raise SystemExit(f"ClickHouse holds {got}, the store {(spans, traces)}")
    return time.perf_counter() - start, spans, traces


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        a = chb.make_store(base / "a", args.traces)
        b = chb.make_store(base / "b", args.traces, "--fallback-every", "5")
        clickhouse = chb.start_clickhouse(base)
        try:
            print(f"{args.traces} traces per store; ClickHouse: {clickhouse.kind}; load average {os.getloadavg()[0]:.1f}")
            print("| step | traces | wall s | CPU s | traces/s (wall) | peak RSS MiB |")
            print("|---|---:|---:|---:|---:|---:|")
            for database, store in (("side_a", a), ("side_b", b)):
                seconds, spans, traces = ingest(clickhouse, store, database, base)
                print(f"| Collector -> ClickHouse ingest ({database}, {spans} spans) | {traces} | {seconds:.1f} | - | {traces / seconds:,.0f} | - |")
            for label, cmd, n in (
                ("stats, local store", ["stats", "--source", str(b)], args.traces),
                ("stats, clickhouse+http", ["stats", "--source", clickhouse.source("side_b"), "--lookback", "24h"], args.traces),
                ("compare A B, local stores", ["compare", str(a), str(b)], 2 * args.traces),
                (
                    "compare A B, clickhouse+http",
                    ["compare", clickhouse.source("side_a"), clickhouse.source("side_b"), "--lookback", "24h"],
                    2 * args.traces,
                ),
            ):
                wall, cpu, rss = run(cmd)
                print(f"| `{label}` | {n} | {wall:.1f} | {cpu:.1f} | {n / wall:,.0f} | {rss:.0f} |")
        finally:
            clickhouse.stop()


if __name__ == "__main__":
    main()
