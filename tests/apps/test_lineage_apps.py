"""Lineage follows the run (issue 24, principle 2): documentation apps whose stages branch inside one
pipeline, run unchanged (offline stand-ins only) under ``opentelemetry-instrument`` and read back with
the real ``ragtrail`` CLI (tests/apps/runner.py). A candidate's content is checked against its own
upstream on its own branch, never against what another branch handed on last."""

from __future__ import annotations

import pytest

from apps.runner import assert_host_untouched, run_app

pytest.importorskip("llama_index.core")

ENABLED = ["ragtrail_llama_index"]


def test_two_queries_in_one_pipeline_verify_clean(tmp_path):
    run = run_app("llama_two_questions.py", tmp_path, enabled=ENABLED)
    assert_host_untouched(run)
    [trace] = run.traces()
    proc = run.ragtrail("verify", trace["trace_id"], ok_codes=(0, 1))
    assert proc.returncode == 0, proc.stdout
    assert "ALARM" not in proc.stdout
    fidelity = run.verify(trace["trace_id"])["fidelity"]
    assert fidelity["alarms"] == []
    assert fidelity["changed_uncited"] == 0 and fidelity["unverifiable"] == 0
