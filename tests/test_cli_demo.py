"""``ragtrail demo``: the bundled pipeline runs offline under ragtrail and tells its story in the manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otlp_server import otlp_server  # noqa: F401  (fixture)
from test_cli_errors import ragtrail

ANSWER = "answer: Enterprise customers can request a refund within 30 days of the invoice [policy-2024-11]."


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory) -> tuple[Path, str]:
    cwd = tmp_path_factory.mktemp("demo")
    result = ragtrail("demo", cwd=cwd)
    assert result.returncode == 0, result.stderr
    return cwd, result.stdout


def test_demo_prints_answer_manifest_and_report(demo_dir):
    cwd, out = demo_dir
    lines = out.splitlines()
    assert lines[0] == ANSWER
    for expected in (
        'hop 2  follow_up of hop 1  "refund exceptions for annual enterprise contracts" → index',
        "Coverage: the answer claims presence: supported by what was read (3 of 20 read; an absence claim would not be)",
        "Cited: policy-2024-11",
        "Sampling: sampled at p=1: this trace stands for 1 request",
        f"HTML report: {cwd / '.ragtrail' / 'demo-report.html'}",
    ):
        assert expected in out, expected
    assert any(line.startswith("Fidelity: faithful") for line in lines)
    assert (cwd / ".ragtrail" / "demo-report.html").stat().st_size > 5000
    assert len(list((cwd / ".ragtrail").glob("traces-*.jsonl"))) == 1
    assert "Traceback" not in out


def test_demo_trace_tells_the_story(demo_dir):
    cwd, _ = demo_dir
    m = json.loads(ragtrail("show", "last", "--json", cwd=cwd).stdout)
    assert [(h["hop"], h["parent_hop"], h["transform"]) for h in m["query_hops"]] == [(0, None, "none"), (1, 0, "rewrite"), (2, 1, "follow_up")]
    assert [(s["kind"], s["component"]) for s in m["stages"]] == [
        ("query_transform", "demo.keyword_rewrite"),
        ("retrieve", "demo.bm25"),
        ("query_transform", "demo.follow_up"),
        ("retrieve", "demo.bm25"),
        ("fuse", "demo.rrf"),
        ("filter", "demo.status_filter"),
        ("filter", "demo.dedupe"),
        ("rerank", "demo.overlap_reranker"),
        ("budget", "demo.context_budget"),
        ("cite", "cite"),
    ]
    by_reason = {(e["stage"], e["reason"], e["id"]) for e in m["excluded"] if e["stage"] != "fuse"}
    assert by_reason == {
        ("filter", "superseded", "policy-2026-01-draft"),
        ("filter", "deduplicated", "wiki-refunds-mirror"),
        ("rerank", "below_rank_cutoff", "exceptions-annual-2026"),
        ("budget", "budget_exceeded", "policy-2026-01"),
    }
    # the fourteen-month-old policy outranks the current one, and the current one never reaches the model
    rerank = next(s for s in m["stages"] if s["kind"] == "rerank")
    ranks = {c["id"]: (c["rank"], c["meta"]["updated_at"]) for c in rerank["candidates"]}
    assert ranks["policy-2024-11"] == (0, "2024-11-04")
    assert ranks["policy-2026-01"][1] == "2026-01-12" and ranks["policy-2026-01"][0] > 0
    budget = next(s for s in m["stages"] if s["kind"] == "budget")
    assert [(c["id"], c.get("transform_rule")) for c in budget["candidates"]] == [
        ("policy-2024-11", None),
        ("sales-deck-q1", None),
        ("discount-policy", "budget_trim@1"),
    ]
    assert budget["knobs"] == {"budget_limit": 90, "budget_used": 90, "budget_unit": "words"}
    assert m["cited"] == ["policy-2024-11"]
    assert m["coverage"]["corpus_size"] == 20 and m["coverage"]["exhaustive"] is False
    f = m["fidelity"]
    assert f["alarms"] == [] and f["changed_uncited"] == 0 and f["changed_cited"] > 0 and f["missing_spans"] == 0
    assert m["sampling"]["probability"] == 1.0
    assert ragtrail("verify", "last", cwd=cwd).returncode == 0


def test_demo_also_exports_by_otlp(tmp_path, otlp_server):  # noqa: F811
    result = ragtrail("demo", "--json", cwd=tmp_path, env={"OTEL_EXPORTER_OTLP_ENDPOINT": otlp_server.url})
    assert result.returncode == 0, result.stderr
    manifest = json.loads(result.stdout)
    spans = otlp_server.wait_for_spans(manifest["span_count"])
    assert {s.trace_id for s in spans} == {manifest["trace_id"]}
    assert sorted(s.name for s in spans if not s.parent_span_id) == ["pipeline answer"]
    assert len(spans) == manifest["span_count"]


def test_demo_report_path_option(tmp_path):
    target = tmp_path / "out" / "demo.html"
    result = ragtrail("demo", "--store", str(tmp_path / "store"), "--report", str(target), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert target.exists() and f"HTML report: {target}" in result.stdout
