"""The receipt benchmark runs end to end in --smoke mode: it captures the users' pipeline's stages, checks
that the native package's receipts and digests are the rule's on them (it exits non-zero otherwise),
and reports both paths. No timing is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from nativeutil import native_module

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_receipts.py"


def test_smoke_run_checks_both_paths_on_real_stages_and_reports_them() -> None:
    native_module()
    proc = subprocess.run([sys.executable, str(SCRIPT), "--smoke"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "10 stages of 2 queries; native package installed"
    assert lines[1:3] == ["| path | µs per query, min / median |", "|---|---:|"]
    assert [line.split(" | ")[0] for line in lines[3:]] == ["| python", "| native"]
