"""ragtrail's Jaeger reader against responses RECORDED from the real Jaeger v2.13.0 (module v1.76.0)
by the e2e tests (RAGTRAIL_RECORD_JAEGER_FIXTURES=1), served byte for byte through
httpx.MockTransport. Runs anywhere: no Jaeger binary needed.

Fixtures (tests/fixtures/jaeger_recorded/):
  whole_trace.{v1,v3}.json            a head-sampled (p=0.5) trace through the gateway, intact
  tail_sampled_degraded.{v1,v3}.json  a degraded trace kept by tail sampling (scope attr tailsampling.policy)
  truncated_by_collector.{v1,v3}.json a trace whose attributes a collector cut to 128 bytes
  not_found.{v1,v3}.json              Jaeger's 404 bodies for an unknown trace id
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragtrail.contract import semconv
from ragtrail.inspect.errors import TraceNotFound
from ragtrail.inspect.manifest import build
from ragtrail.inspect.sources import JaegerSource

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "jaeger_recorded"
NOT_FOUND = {api: (FIXTURES / f"not_found.{api}.json").read_bytes() for api in ("v1", "v3")}


def _trace_id(name: str) -> str:
    body = json.loads((FIXTURES / f"{name}.v1.json").read_text())
    return body["data"][0]["traceID"]


def _source(name: str, apis: tuple[str, ...] = ("v3", "v1")) -> JaegerSource:
    """A JaegerSource whose transport answers with the recorded bodies (404 for the rest)."""
    trace_id = _trace_id(name)
    routes = {"v3": f"/api/v3/traces/{trace_id}", "v1": f"/api/traces/{trace_id}"}

    def handler(request: httpx.Request) -> httpx.Response:
        for api in apis:
            if request.url.path == routes[api]:
                return httpx.Response(200, content=(FIXTURES / f"{name}.{api}.json").read_bytes(), headers={"content-type": "application/json"})
        api = "v3" if request.url.path.startswith("/api/v3/") else "v1"
        return httpx.Response(404, content=NOT_FOUND[api], headers={"content-type": "application/json"})

    return JaegerSource("http://jaeger.invalid:16686", transport=httpx.MockTransport(handler))


def _v3_spans(name: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    body = json.loads((FIXTURES / f"{name}.v3.json").read_text())
    return [(ss.get("scope", {}), span) for rs in body["result"]["resourceSpans"] for ss in rs["scopeSpans"] for span in ss["spans"]]


@pytest.mark.parametrize("apis", [("v3", "v1"), ("v1",)], ids=["v3", "v1-fallback"])
def test_whole_trace_reads_back_intact(apis: tuple[str, ...]) -> None:
    trace = _source("whole_trace", apis).get(_trace_id("whole_trace"))
    manifest = build(trace).as_dict()
    fidelity = manifest["fidelity"]
    assert fidelity["alarms"] == []
    assert (fidelity["changed_uncited"], fidelity["unverifiable"], fidelity["missing_spans"], fidelity["missing_events"]) == (0, 0, 0, 0)
    assert fidelity["intact"] > 0
    assert manifest["span_count"] == len(_v3_spans("whole_trace"))
    assert manifest["sampling"]["probability"] == 0.5
    assert [s["kind"] for s in manifest["stages"]][:2] == ["query_transform", "retrieve"]


def test_tail_sampled_trace_keeps_its_policy_and_finding() -> None:
    policies = {
        a["value"]["stringValue"]
        for scope, _ in _v3_spans("tail_sampled_degraded")
        for a in scope.get("attributes", [])
        if a["key"] == "tailsampling.policy"
    }
    assert policies == {"finding-stage-status"}
    manifest = build(_source("tail_sampled_degraded").get(_trace_id("tail_sampled_degraded"))).as_dict()
    assert manifest["fidelity"]["alarms"] == []
    assert any("degraded" in f and "input_order" in f for f in manifest["findings"])
    # recorded before the gateway stamped a probability: the scope names the policy, nothing says with
    # what probability it keeps, so the trace is counted once and said (issue 26), never weighted as 1
    sampling = manifest["sampling"]
    assert (sampling["tail_policy"], sampling["tail_probability"], sampling["weight"], sampling["basis"]) == (
        "finding-stage-status",
        None,
        1.0,
        "unknown_policy",
    )
    assert sampling["statement"].endswith(
        "kept by the tail sampler's policy 'finding-stage-status', which records no probability: "
        "how many requests this trace stands for is unknown (counted once)"
    )


def test_collector_truncation_reads_back_as_changed_uncited_on_exactly_the_cut_fields() -> None:
    # the cut fields, from the recorded data itself: receipted payloads that arrived shorter than
    # their receipt says (the collector cut every value to 128 bytes)
    expected = []
    for _, span in _v3_spans("truncated_by_collector"):
        holders = [("", {a["key"]: a["value"] for a in span.get("attributes", [])})]
        holders += [(e["name"], {a["key"]: a["value"] for a in e.get("attributes", [])}) for e in span.get("events", [])]
        for _, attrs in holders:
            for payload, prefix in ((semconv.QUERY_TEXT, "ragtrail.query"), (semconv.CANDIDATE_CONTENT_PREVIEW, "ragtrail.candidate.content")):
                if payload in attrs:
                    got = len(attrs[payload]["stringValue"].encode())
                    receipt_bytes = int(attrs[f"{prefix}.bytes"]["intValue"])
                    if got < min(receipt_bytes, 256 if payload == semconv.CANDIDATE_CONTENT_PREVIEW else receipt_bytes):
                        cand = attrs.get(semconv.CANDIDATE_ID, {}).get("stringValue", "")
                        expected.append((span["spanId"], cand, payload))
    assert expected
    manifest = build(_source("truncated_by_collector").get(_trace_id("truncated_by_collector"))).as_dict()
    alarms = manifest["fidelity"]["alarms"]
    assert {a["problem"] for a in alarms} == {"changed_uncited"}
    assert sorted((a["span_id"], a["candidate"], a["field"]) for a in alarms) == sorted(expected)
    assert manifest["fidelity"]["unverifiable"] == 0


def test_unknown_trace_is_not_found() -> None:
    # Jaeger answers 404 on both APIs (recorded bodies); the reader tries v3, then v1, then says so
    assert json.loads(NOT_FOUND["v3"]) == {"error": {"httpCode": 404, "message": "No traces found"}}
    assert json.loads(NOT_FOUND["v1"])["errors"][0]["code"] == 404
    with pytest.raises(TraceNotFound):
        _source("whole_trace", ()).get("0" * 31 + "1")
