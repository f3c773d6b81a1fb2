"""``ragtrail stats`` through the embedded engine (chdb) over 1,000,000 traces: ingest, then query.

The store is written by ``benchmarks/make_many_store.py`` (setup, not timed; ``--store`` reuses one).
Timed, each as a user runs it (the console script in a fresh process, output to /dev/null, wall and
CPU time and the process's peak RSS from ``wait4``):

1. the first ``stats --engine columnar``: ingests every line of the store, then aggregates;
2. the same command again: nothing new to ingest, the aggregate alone;
3. after the engine's table is grown to ``--scale`` times the store inside the engine (each span
   copied with a new trace id: the same traces ``make_many_store.py --traces N*scale`` would write,
   without 24 GB of JSON on disk), ``stats`` over all of them.

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
    """Copy the engine's spans ``scale - 1`` times under new trace ids; return the trace count."""
    from ragtrail.inspect.columnar.engine import ChdbEngine
    from ragtrail.inspect.columnar.store import engine_dir

    engine = ChdbEngine(engine_dir(store))
    for k in range(1, scale):
        engine.run_sql(
            "INSERT INTO otel_traces SELECT * REPLACE (concat(substring(TraceId, 1, 27), 'x', leftPad(toString({k:UInt32}), 4, '0')) AS TraceId)"
            " FROM otel_traces WHERE position(TraceId, 'x') = 0",
            {"k": k},
        )
    traces = int(engine.run_sql("SELECT uniqExact(TraceId) FROM otel_traces")[0][0])
    engine.close()
    return traces


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", type=Path, required=True, help="A store made by make_many_store.py (made here if missing).")
    parser.add_argument("--traces", type=int, default=100_000)
    parser.add_argument("--fallback-every", type=int, default=5)
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--engine-dir", type=Path, default=Path("/tmp/ragtrail-bench-columnar"))
    args = parser.parse_args()
    if not args.store.exists():
        subprocess.run(
            [
                sys.executable,
                str(HERE / "make_many_store.py"),
                str(args.store),
                "--traces",
                str(args.traces),
                "--fallback-every",
                str(args.fallback_every),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    env = {**os.environ, "RAGTRAIL_COLUMNAR_DIR": str(args.engine_dir)}
    os.environ["RAGTRAIL_COLUMNAR_DIR"] = str(args.engine_dir)
    size = sum(p.stat().st_size for p in args.store.glob("*.jsonl")) / 2**20
    print(f"{args.traces} traces in the store ({size:.0f} MiB), load average {os.getloadavg()[0]:.1f}")
    print("| step | traces | wall s | CPU s | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|")
    cmd = ["stats", "--source", str(args.store), "--engine", "columnar", "--json"]
    for label in ("first run: ingest + stats", "again: stats (nothing new)"):
        wall, cpu, rss = run(cmd, env)
        print(f"| {label} | {args.traces} | {wall:.1f} | {cpu:.1f} | {rss:.0f} |", flush=True)
    start = time.perf_counter()
    traces = grow(args.store, args.scale)
    print(f"| (setup: grow the engine's table to {args.scale}x) | {traces} | {time.perf_counter() - start:.1f} | | |", flush=True)
    wall, cpu, rss = run(cmd, env)
    print(f"| stats | {traces} | {wall:.1f} | {cpu:.1f} | {rss:.0f} |")


if __name__ == "__main__":
    main()
