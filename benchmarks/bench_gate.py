"""``ragtrail gate``: overhead per query over the bare pipeline, and the time for 1,000 queries.

The pipeline is the example's (examples/gate/rag.py: keyword retrieve over 12 documents, a filter, a
reranker, a context budget, an answer that cites), so the pipeline itself costs tens of microseconds
and what is measured is the gate. The eval set is the example's ten questions, each asked N/10 times
with its own id and a distinct suffix (``#17``: one more word, the same relevant document).

In one process, in this order (the gate installs the global tracer provider once, so the bare calls
come first):

1. bare: the decorated pipeline called N times with no OpenTelemetry SDK configured (what the host
   application pays without tracing);
2. start-up: the gate's first in-process run of ten queries (installs the provider, switches on every
   installed ragtrail instrumentation: imports LangChain, LlamaIndex, Haystack, ... when installed);
3. gate run: ``runner.run_in_process`` over the N cases (each call recorded by the real SDK, the
   spans turned into OTLP JSON, read back by the inspector, manifest built, receipts verified);
4. baseline freeze from one run, evaluate, and each renderer (JUnit, markdown, annotations,
   terminal, artifacts).

Then, unless ``--no-cli``, the whole command as a user runs it, in a fresh process (``ragtrail gate
baseline --runs 1`` then ``ragtrail gate run`` with every output), wall time.

    .venv/bin/python benchmarks/bench_gate.py --queries 1000
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "gate"
RAGTRAIL = str(Path(sys.executable).with_name("ragtrail"))


def write_set(path: Path, n: int) -> None:
    base = [json.loads(line) for line in (EXAMPLE / "eval.jsonl").read_text("utf-8").splitlines() if line.strip()]
    with path.open("w", encoding="utf-8") as out:
        for i in range(n):
            row = dict(base[i % len(base)])
            row["id"] = f"{row['id']}-{i}"
            row["query"] = f"{row['query']} #{i}"
            out.write(json.dumps(row) + "\n")


_last_cpu = [0.0]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(wall seconds, result); the call's CPU seconds (this process) go to ``_last_cpu``."""
    start, cpu = time.perf_counter(), time.process_time()
    result = fn()
    _last_cpu[0] = time.process_time() - cpu
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--no-cli", action="store_true", help="Skip the command-line run in a fresh process.")
    args = parser.parse_args()
    n = args.queries
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copy(EXAMPLE / "rag.py", work / "rag.py")
        write_set(work / "eval.jsonl", n)
        os.chdir(work)
        sys.path.insert(0, str(work))
        import rag  # the example, from the copy

        from ragtrail.gate import annotations, artifacts, baseline, evalset, evaluate, junit, markdown, runner, terminal

        es = evalset.load("eval.jsonl")
        queries = [c.query for c in es.cases]
        print(f"{n} queries, load average {os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]}")
        print("| phase | wall s | CPU s | wall per query ms |")
        print("|---|---:|---:|---:|")

        def row(label: str, seconds: float, per: int | None = n) -> None:
            print(f"| {label} | {seconds:.3f} | {_last_cpu[0]:.3f} | {'' if per is None else f'{1000 * seconds / per:.3f}'} |")

        bare, _ = timed(lambda: [rag.answer(q) for q in queries])
        bare_cpu = _last_cpu[0]
        row("bare pipeline (decorated, no SDK)", bare)
        startup, _ = timed(lambda: runner.run_in_process(rag.answer, es.cases[:10]))
        row("gate start-up (first 10 queries: provider, instrumentations)", startup, None)
        gate, runs = timed(lambda: runner.run_in_process(rag.answer, es.cases))
        gate_cpu = _last_cpu[0]
        row("gate run in-process (record, OTLP JSON, read back, manifest, verify)", gate)
        assert not [p for r in runs for p in r.problems], "the example's runs must be clean"
        frozen_s, frozen = timed(lambda: baseline.freeze(es, [runs], pipeline="rag:answer"))
        row("baseline freeze (1 run)", frozen_s)
        again = runner.run_in_process(rag.answer, es.cases)
        eval_s, report = timed(lambda: evaluate.evaluate(es, again, frozen, pipeline="rag:answer"))
        row("evaluate against the baseline", eval_s)
        assert report.verdict == "PASS", report.verdict
        for label, render in (
            ("junit", lambda: junit.render(report)),
            ("markdown", lambda: markdown.render(report)),
            ("annotations", lambda: annotations.render(report)),
            ("artifacts", lambda: artifacts.write(report, work / "artifacts")),
        ):
            seconds, _ = timed(render)
            row(f"render {label}", seconds)
        from rich.console import Console

        seconds, _ = timed(lambda: terminal.render(report, Console(file=io.StringIO(), width=120)))
        row("render terminal", seconds)
        print(
            f"\ngate overhead per query over the bare pipeline: {1000 * (gate - bare) / n:.3f} ms wall, "
            f"{1000 * (gate_cpu - bare_cpu) / n:.3f} ms CPU (bare {1e6 * bare / n:.1f} µs per query)"
        )
        if args.no_cli:
            return
        common = ["--pipeline", "rag:answer", "--set", "eval.jsonl"]
        cli_base, _ = timed(
            lambda: subprocess.run(
                [RAGTRAIL, "gate", "baseline", *common, "--runs", "1", "-o", "b.json"],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        outputs = ["--junit", "gate.xml", "--markdown", "gate.md", "--annotations", "--artifacts", "cli-artifacts"]
        done = subprocess.run  # the run's exit code is the verdict: 0 expected
        cli_run, proc = timed(
            lambda: done([RAGTRAIL, "gate", "run", *common, "--baseline", "b.json", *outputs], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )
        assert proc.returncode == 0, proc.returncode
        print(
            f"`ragtrail gate baseline --runs 1`, fresh process: {cli_base:.2f} s; "
            f"`ragtrail gate run` with every output: {cli_run:.2f} s ({n} queries)"
        )


if __name__ == "__main__":
    main()
