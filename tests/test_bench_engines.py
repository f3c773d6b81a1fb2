"""The issue 27 engines benchmark runs end to end in --smoke mode on the cheap engines (faiss and the
three loopback services): every figure per engine and k, and every bare block recorded 0 stages and
every instrumented block one per search (the script exits non-zero otherwise). No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_engines.py"
FIGURES = {
    "searches_per_mode",
    "bare_p50_us",
    "inst_p50_us",
    "added_p50_us",
    "bare_p95_us",
    "inst_p95_us",
    "added_p95_us",
    "bare_cpu_us",
    "inst_cpu_us",
    "added_cpu_us",
    "added_p50_rounds_us",
}


def test_smoke_run_reports_every_figure_per_engine_and_k() -> None:
    for module in ("faiss", "elasticsearch", "opensearchpy", "pinecone"):
        pytest.importorskip(module)
    engines = "faiss,elasticsearch,opensearch,pinecone"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--json", "--only", engines], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (out["rounds"], out["searches"], out["skipped"]) == (1, 3, {})
    assert set(out["results"]) == set(engines.split(","))
    for engine, by_k in out["results"].items():
        assert set(by_k) == {"k=10", "k=100"}, engine
        for k, r in by_k.items():
            assert set(r) == FIGURES, (engine, k)
            assert r["searches_per_mode"] == 3 and len(r["added_p50_rounds_us"]) == 1
            assert r["bare_p50_us"] > 0 and r["inst_p50_us"] > 0 and r["bare_cpu_us"] > 0
