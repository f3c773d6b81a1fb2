"""The Phoenix reader (inspect/sources/phoenix.py) on a real Phoenix 20.26.1's recorded answers
(tests/fixtures/phoenix_recorded/, recorded by tests/phoenix/test_phoenix_source.py with
RAGTRAIL_RECORD_PHOENIX_FIXTURES=1) served from loopback: the tier without Phoenix still checks it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.backend_server import BackendServer
from ragtrail.contract import semconv as sc
from ragtrail.inspect.errors import TraceNotFound, UsageError
from ragtrail.inspect.manifest import build
from ragtrail.inspect.sources import open_source
from ragtrail.inspect.sources.phoenix import NOTE_NO_DROPPED_COUNTS, PhoenixSource, split_project
from ragtrail.inspect.stages import stitch
from ragtrail.inspect.verify import check

RECORDED = Path(__file__).parent / "fixtures" / "phoenix_recorded"
TRACE_ID = (RECORDED / "trace_id").read_text().strip()
SPANS = (RECORDED / "spans.json").read_text()


def _serve(server: BackendServer) -> None:
    server.route("/v1/projects", (RECORDED / "projects.json").read_text())
    server.route("/v1/projects/source/spans", SPANS)
    server.route("/v1/projects/default/spans", json.dumps({"data": [], "next_cursor": None}))


def test_a_trace_from_phoenix_rebuilds_the_demo_and_says_what_phoenix_cannot_tell():
    with BackendServer() as server:
        _serve(server)
        trace = open_source(f"phoenix+{server.url}").get(TRACE_ID)
    assert trace.keeps_dropped_counts is False and trace.notes == [NOTE_NO_DROPPED_COUNTS]
    assert len(trace.spans) == len(json.loads(SPANS)["data"]) == 11
    assert all(s.dropped_events is None and s.dropped_attributes is None for s in trace.spans)
    budget = [s for s in trace.spans if s.name == "budget context_budget"][0]
    assert budget.status_code == "OK" and budget.end_ns >= budget.start_ns > 0
    assert [e.name for e in budget.events].count(sc.EVENT_EXCLUSION) == 1
    manifest = build(trace).as_dict()
    (stage,) = [s for s in manifest["stages"] if s["kind"] == "budget"]
    assert [(e["id"], e["reason"]) for e in stage["excluded"]] == [("policy-2026-01", "budget_exceeded")]
    fidelity = check(trace, stitch(trace))
    assert fidelity.dropped_events is None and fidelity.dropped_attributes is None  # unknown, not zero
    assert fidelity.changed_uncited == 0 and fidelity.unverifiable == 0 and fidelity.intact > 0


def test_one_project_unknown_ids_and_bad_urls():
    with BackendServer() as server:
        _serve(server)
        source = PhoenixSource(f"{server.url}/projects/source")
        assert source.projects() == ["source"]
        assert source.search(5) == [TRACE_ID]
        assert source.search(5, "ragtrail.stage.kind=budget") == [TRACE_ID]
        assert source.search(5, "ragtrail.stage.kind=nothing") == []
        server.route("/v1/projects/source/spans", json.dumps({"data": [], "next_cursor": None}))
        with pytest.raises(TraceNotFound, match="not found in Phoenix"):
            source.get("1" * 32)
    assert split_project("http://h:6006/") == ("http://h:6006", None)
    with pytest.raises(UsageError):
        split_project("http://h:6006/projects/")
