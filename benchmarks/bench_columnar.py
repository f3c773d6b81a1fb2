"""``ragtrail stats`` through the embedded engine (chdb) over 1,000,000 traces: ingest, then query.

The store is written by ``benchmarks/make_many_store.py`` (setup, not timed; ``--store`` reuses one).
Timed, each as a user runs it (the console script in a fresh process, output to /dev/null, wall and
CPU time and the process's peak RSS from ``wait4``):

1. the first ``stats --engine columnar``: ingests every line of the store, then aggregates;
2. the same command again: nothing new to ingest, the aggregate alone;
3. after the engine's table is grown to ``--scale`` times the store inside the engine (each span
   copied with a new trace id and query receipt: the traces ``make_many_store.py --traces N*scale``
   would write, without 24 GB of JSON on disk), ``stats`` over all of them;
4. with ``--compare-with A`` (store A, made likewise without fallbacks): ``compare A B`` at the
   store's size (its first run ingests A), again, and at ``--scale`` times (both tables grown).

The engine directory is kept: a second run ingests nothing new and grows the tables afresh.

    .venv/bin/python benchmarks/bench_columnar.py --store /tmp/many-b --traces 100000 --scale 10
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RAGTRAIL = str(Path(sys.executable).with_name("ragtrail"))


def run(args: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """(wall s, cpu s, peak RSS MiB) of one command."""
    start = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        proc = subprocess.Popen([RAGTRAIL, *args], stdout=devnull, stderr=subprocess.PIPE, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"ragtrail {' '.join(args)} failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def grow(store: Path, scale: int) -> int:
    """Copy the engine's spans ``scale - 1`` times under new trace ids (and new query receipts, the
    same in both stores, so copies pair as new questions); return the trace count."""
    from ragtrail.inspect.columnar.engine import ChdbEngine
    from ragtrail.inspect.columnar.store import engine_dir

    engine = ChdbEngine(engine_dir(store))
    for table in ("otel_traces", "ragtrail_spans"):  # copies of an earlier run
        engine.run_sql(f"ALTER TABLE {table} DELETE WHERE substring(TraceId, 28, 1) = 'x' SETTINGS mutations_sync = 1")
    for k in range(1, scale):
        engine.run_sql(
            "INSERT INTO otel_traces SELECT * REPLACE ("
            " concat(substring(TraceId, 1, 27), 'x', leftPad(toString({k:UInt32}), 4, '0')) AS TraceId,"
            " if(mapContains(SpanAttributes, 'ragtrail.query.sha256'), mapUpdate(SpanAttributes, map('ragtrail.query.sha256',"
            " concat(substring(SpanAttributes['ragtrail.query.sha256'], 1, 59), 'x', leftPad(toString({k:UInt32}), 4, '0')))),"
            " SpanAttributes) AS SpanAttributes)"
            " FROM (SELECT * FROM otel_traces WHERE substring(TraceId, 28, 1) != 'x')",  # (a WHERE beside REPLACE sees the new TraceId)
            {"k": k},
        )
    traces = int(engine.run_sql("SELECT uniqExact(TraceId) FROM otel_traces")[0][0])
    engine.close()
    return traces


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", type=Path, required=True, help="Store B, made by make_many_store.py (made here if missing).")
    parser.add_argument("--compare-with", type=Path, default=None, help="Store A for compare (made here if missing).")
    parser.add_argument("--traces", type=int, default=100_000)
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--scaled-only", action="store_true", help="Skip the runs at the store's size (the engine directory is already filled).")
    parser.add_argument("--engine-dir", type=Path, default=Path("/tmp/ragtrail-bench-columnar"))
    args = parser.parse_args()
    stores = [(args.store, ["--fallback-every", "5"])] + ([(args.compare_with, [])] if args.compare_with else [])
    for store, extra in stores:
        if not store.exists():
            subprocess.run(
                [sys.executable, str(HERE / "make_many_store.py"), str(store), "--traces", str(args.traces), *extra],
                check=True,
                stdout=subprocess.DEVNULL,
            )
    env = {**os.environ, "RAGTRAIL_COLUMNAR_DIR": str(args.engine_dir)}
    os.environ["RAGTRAIL_COLUMNAR_DIR"] = str(args.engine_dir)
    size = sum(p.stat().st_size for p in args.store.glob("*.jsonl")) / 2**20
    print(f"{args.traces} traces a store ({size:.0f} MiB), load average {os.getloadavg()[0]:.1f}")
    print("| step | traces | wall s | CPU s | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|")
    stats = ["stats", "--source", str(args.store), "--engine", "columnar", "--json"]
    compare = ["compare", str(args.compare_with), str(args.store), "--engine", "columnar", "--json"]
    steps = [("stats, first run (ingest B)", stats), ("stats again", stats)]
    if args.compare_with:
        steps += [("compare A B, first run (ingest A)", compare), ("compare A B again", compare)]
    for label, cmd in [] if args.scaled_only else steps:
        wall, cpu, rss = run(cmd, env)
        print(f"| {label} | {args.traces} a store | {wall:.1f} | {cpu:.1f} | {rss:.0f} |", flush=True)
    for store, _ in stores:
        start = time.perf_counter()
        traces = grow(store, args.scale)
        print(f"| (setup: {store.name}'s table grown to {args.scale}x) | {traces} | {time.perf_counter() - start:.1f} | | |", flush=True)
    for label, cmd in [("stats", stats)] + ([("compare A B", compare)] if args.compare_with else []):
        wall, cpu, rss = run(cmd, env)
        print(f"| {label} | {traces} a store | {wall:.1f} | {cpu:.1f} | {rss:.0f} |", flush=True)


if __name__ == "__main__":
    main()
