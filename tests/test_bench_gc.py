"""The GC benchmark runs end to end in --smoke mode and reports its figures per framework and mode
(OpenInference is not in the test venv). No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gc.py"


def test_smoke_run_reports_collections_and_the_peak_per_mode() -> None:
    cmd = [sys.executable, str(SCRIPT), "--smoke", "--modes", "none,ragtrail", "--thresholds", "1000"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["failed"] == [] and [(r["framework"], r["mode"]) for r in out["results"]] == [("langchain", "none"), ("langchain", "ragtrail")]
    for r in out["results"]:
        assert set(r) == {
            "framework",
            "mode",
            "per_queries",
            "collections",
            "ms_per_query",
            "peak_median",
            "peaks",
            "tracked_at_peak",
            "what_if_collections_per_query",
        }
        assert r["per_queries"] == 5 and len(r["collections"]) == 3 and len(r["ms_per_query"]) == 3 and len(r["peaks"]) == 2
        assert set(r["what_if_collections_per_query"]) == {"1000"}
    recorded = out["results"][1]["tracked_at_peak"]
    assert recorded.get("Candidate", 0) > 0  # the recorder's candidates are among what is alive at the peak
