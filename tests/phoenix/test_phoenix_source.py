"""`ragtrail show|verify --source phoenix+http://...`: the inspector reads a trace back from a real
Phoenix through its REST API, and says what Phoenix cannot tell (dropped counts) instead of guessing."""

from __future__ import annotations

import phoenix_server as ps
import pytest
import ragtrail_backends as rb

import ragtrail
from ragtrail import settings
from ragtrail.demo.pipeline import QUESTION, load_corpus, make_pipeline
from ragtrail.inspect.sources.phoenix import NOTE_NO_DROPPED_COUNTS as NOTE


@pytest.fixture(scope="module")
def demo_trace(phoenix) -> str:
    settings.reset()
    ragtrail.set_capture(content="preview")
    try:
        with ps.sending(phoenix, "source") as (provider, memory):
            result = make_pipeline(load_corpus(), tracer=provider.get_tracer("demo"))(QUESTION)
            sent = len(memory.get_finished_spans())
    finally:
        settings.reset()
    phoenix.wait_for_spans("source", result["trace_id"], sent)
    return result["trace_id"]


def test_verify_reads_phoenix_and_says_dropped_counts_are_unknown(phoenix, demo_trace):
    (result,) = rb.verify_json(phoenix.source, demo_trace)
    assert result["trace_id"] == demo_trace
    fidelity = result["fidelity"]
    assert fidelity["dropped_events"] is None and fidelity["dropped_attributes"] is None
    assert fidelity["missing_events"] == 0 and fidelity["missing_spans"] == 0
    assert fidelity["changed_uncited"] == 0 and fidelity["unverifiable"] == 0 and fidelity["alarms"] == []
    assert fidelity["intact"] + fidelity["changed_cited"] > 0  # the receipts were read and checked
    # the test app exports without ragtrail's whole-trace processor, so no span count was stamped
    assert fidelity["notes"] == [
        "no ragtrail.trace.span_count stamped: whole spans lost in export cannot be counted (export through ragtrail's whole-trace processor)",
        NOTE,
    ]


def test_show_rebuilds_the_demo_manifest_from_phoenix(phoenix, demo_trace):
    one_project = f"{phoenix.source}/projects/source"
    for source in (phoenix.source, one_project):
        manifest = rb.show_json(source, demo_trace)
        stages = [s["kind"] for s in manifest["stages"]]
        assert stages.count("retrieve") == 2 and "budget" in stages and "rerank" in stages
        budget = [s for s in manifest["stages"] if s["kind"] == "budget"][0]
        assert [e["id"] for e in budget["excluded"]] == ["policy-2026-01"]
        assert budget["excluded"][0]["reason"] == "budget_exceeded"


def test_record_fixture(phoenix, demo_trace):
    """With RAGTRAIL_RECORD_PHOENIX_FIXTURES=1, keep this real Phoenix's answers (bytes as served) for
    the default tier's reader test (tests/test_inspect_phoenix.py)."""
    import os
    import urllib.request

    if not os.environ.get("RAGTRAIL_RECORD_PHOENIX_FIXTURES"):
        pytest.skip("recording only with RAGTRAIL_RECORD_PHOENIX_FIXTURES=1")
    target = rb.REPO / "tests" / "fixtures" / "phoenix_recorded"
    target.mkdir(parents=True, exist_ok=True)
    for name, path in (("projects", "/v1/projects?limit=100"), ("spans", f"/v1/projects/source/spans?trace_id={demo_trace}&limit=1000")):
        with urllib.request.urlopen(phoenix.url + path, timeout=30) as resp:  # noqa: S310 - loopback
            (target / f"{name}.json").write_bytes(resp.read())
    (target / "trace_id").write_text(demo_trace + "\n")


def test_last_and_unknown_trace(phoenix, demo_trace):
    result = rb.ragtrail_cli("show", "--json", "--source", f"{phoenix.source}/projects/source", "last")
    assert result.returncode == 0, result.stderr
    missing = rb.ragtrail_cli("show", "--source", phoenix.source, "0" * 31 + "7")
    assert missing.returncode != 0 and "not found in Phoenix" in missing.stderr
