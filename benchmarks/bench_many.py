"""``ragtrail ls``, ``stats`` and ``compare`` over two 100,000-trace local stores: traces per second and peak RSS.

The stores are written by ``benchmarks/make_many_store.py`` (setup, not timed): A with every reranker
call parsing, B with every 5th falling back to input order. Each command runs as a user runs it (the
console script in a fresh process, output to /dev/null); wall time, CPU time (user+sys) and the
process's own peak RSS (``wait4``) are reported. Memory must stay flat as the store grows: run with
``--traces 10000`` and ``--traces 100000`` and compare the RSS column.

    .venv/bin/python benchmarks/bench_many.py --traces 100000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RAGTRAIL = str(Path(sys.executable).with_name("ragtrail"))


def run(args: list[str]) -> tuple[float, float, float]:
    """(wall s, cpu s, peak RSS MiB) of one command."""
    start = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        proc = subprocess.Popen([RAGTRAIL, *args], stdout=devnull, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"ragtrail {' '.join(args)} failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", type=int, default=100_000)
    parser.add_argument("--stores", type=Path, default=None, help="Keep (or reuse) the two stores in this directory.")
    parser.add_argument("--only", default=None, help="Run only the commands whose label starts with this.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = args.stores or Path(tmp)
        a, b = base / "a", base / "b"
        for store, extra in ((a, []), (b, ["--fallback-every", "5"])):
            if store.exists():
                continue
            subprocess.run(
                [sys.executable, str(HERE / "make_many_store.py"), str(store), "--traces", str(args.traces), *extra],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        size = sum(p.stat().st_size for p in a.glob("*.jsonl")) / 2**20
        print(f"{args.traces} traces per store, {size:.0f} MiB each, load average {os.getloadavg()[0]:.1f}")
        print("| command | traces read | wall s | CPU s | traces/s (CPU) | peak RSS MiB |")
        print("|---|---:|---:|---:|---:|---:|")
        for label, cmd, n in (
            ("ls", ["ls", "--source", str(b)], args.traces),
            ("ls --status degraded --json", ["ls", "--source", str(b), "--status", "degraded", "--json"], args.traces),
            ("stats", ["stats", "--source", str(b), "--engine", "python"], args.traces),
            ("compare A B", ["compare", str(a), str(b)], 2 * args.traces),
        ):
            if args.only and not label.startswith(args.only):
                continue
            wall, cpu, rss = run(cmd)
            print(f"| `{label}` | {n} | {wall:.1f} | {cpu:.1f} | {n / cpu:,.0f} | {rss:.0f} |")


if __name__ == "__main__":
    main()
