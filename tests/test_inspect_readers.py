"""Readers: local store / OTLP JSON, Jaeger v1 and v3, Tempo v1 and v2, over files and real loopback HTTP."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from fixtures.backend_server import BackendServer
from fixtures.ragtrail_traces import rag_run, record
from ragtrail.contract import semconv as sc
from ragtrail.inspect.errors import HttpStatusError, MalformedInput, SourceUnreachable, TraceNotFound, TruncatedInput
from ragtrail.inspect.manifest import build
from ragtrail.inspect.otlp import decode_document, decode_id, decode_value
from ragtrail.inspect.sources import FileSource, JaegerSource, TempoSource, open_source, resolve

FIXTURES = Path(__file__).parent / "fixtures"
# Jaeger bodies RECORDED from a real Jaeger by tests/e2e (RAGTRAIL_RECORD_JAEGER_FIXTURES=1); the Tempo
# fixtures are derived from JAEGER_V3 by fixtures/make_backend_fixtures.py (no Tempo can run here)
JAEGER_V1 = "jaeger_recorded/whole_trace.v1.json"
JAEGER_V3 = "jaeger_recorded/whole_trace.v3.json"
NOT_FOUND_V1 = "jaeger_recorded/not_found.v1.json"
NOT_FOUND_V3 = "jaeger_recorded/not_found.v3.json"
TRACE_ID = json.loads((FIXTURES / JAEGER_V1).read_text())["data"][0]["traceID"]


def _fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def _evidence(m: dict) -> list:
    """What must survive every source: stage kinds, candidate ids/ranks/scores, exclusions, hops, cited."""
    return [
        [
            (
                s["kind"],
                s["component"],
                s["in"],
                s["out"],
                [(c["id"], c["rank"], c["score"], c["hop"], c.get("meta")) for c in s["candidates"]],
                [(e["id"], e["rank"], e["reason"], e["detail"]) for e in s["excluded"]],
            )
            for s in m["stages"]
        ],
        [(h["hop"], h["parent_hop"], h["transform"], h["text"]) for h in m["query_hops"]],
        m["cited"],
        m["coverage"]["statement"],
    ]


def test_decode_values_both_spellings():
    assert decode_value({"intValue": "42"}) == 42
    assert decode_value({"int_value": 7}) == 7
    assert decode_value({"doubleValue": "NaN"}) != decode_value({"doubleValue": "NaN"})  # NaN survives as NaN
    assert decode_value({"doubleValue": "Infinity"}) == float("inf")
    assert decode_value({"arrayValue": {"values": [{"stringValue": "a"}, {"intValue": "2"}]}}) == ["a", 2]
    assert decode_value({"kvlistValue": {"values": [{"key": "k", "value": {"boolValue": True}}]}}) == {"k": True}
    assert decode_value({"bytesValue": base64.b64encode(b"\x00\x01").decode()}) == b"\x00\x01"
    assert decode_value({}) is None


def test_ids_hex_or_base64():
    hex_id = "5b8efff798038103d269b633813fc60c"
    assert decode_id(hex_id, 16) == hex_id
    assert decode_id(hex_id.upper(), 16) == hex_id
    assert decode_id(base64.b64encode(bytes.fromhex(hex_id)).decode(), 16) == hex_id
    assert decode_id("eee19b7ec3c1b174", 8) == "eee19b7ec3c1b174"
    assert decode_id(base64.b64encode(bytes.fromhex("eee19b7ec3c1b174")).decode(), 8) == "eee19b7ec3c1b174"
    assert decode_id("", 8) is None
    with pytest.raises(MalformedInput):
        decode_id("not an id!", 16)


def test_local_store_round_trip(tmp_path):
    store = tmp_path / "store"
    trace_id = record(store, rag_run)
    assert [p.name.startswith("traces-") for p in store.iterdir()] == [True]
    source = FileSource(store)
    assert source.latest() == trace_id
    trace = source.get(trace_id)
    assert trace.trace_id == trace_id
    assert sorted(s.name for s in trace.spans) == [
        "cite cite",
        "filter status",
        "pipeline answer",
        "query_transform rewrite",
        "rerank rerank",
        "retrieve bm25",
    ]
    assert all(s.dropped_events == 0 and s.dropped_attributes == 0 for s in trace.spans)
    root = next(s for s in trace.spans if s.parent_span_id is None)
    assert root.attributes[sc.TRACE_SPAN_COUNT] == 6
    with pytest.raises(TraceNotFound, match="not found"):
        source.get("0" * 31 + "1")


def test_every_backend_shape_gives_the_same_manifest():
    """The recorded Jaeger v1/v3 bodies of one trace and the Tempo v1/v2 shapes derived from it rebuild the
    same evidence."""
    manifests = {
        name: build(resolve(str(FIXTURES / name), None)).as_dict() for name in (JAEGER_V1, JAEGER_V3, "tempo_v1_trace.json", "tempo_v2_partial.json")
    }
    reference = _evidence(manifests[JAEGER_V3])
    stages, hops, cited, coverage = reference
    # what the recorded trace holds (tests/e2e's gateway scenario), to be sure the evidence is not empty
    assert [(s[0], s[1], s[2], s[3]) for s in stages] == [
        ("query_transform", "e2e.rewrite", 0, 0),
        ("retrieve", "e2e.search", 0, 12),
        ("rerank", "e2e.rerank", 12, 8),
        ("filter", "e2e.filter", 8, 7),
        ("budget", "e2e.budget", 7, 7),
        ("cite", "cite", 2, 2),
    ]
    assert stages[1][4][0] == ("doc-00", 0, 1.0, 1, None)  # retrieve's top hit
    assert stages[2][4][:2] == [("doc-10", 0, 0.9, 1, None), ("doc-11", 1, 0.85, 1, None)]
    assert stages[2][5] == [(f"doc-0{i}", i, "below_rank_cutoff", "top_k=8") for i in (6, 7, 8, 9)]
    assert stages[3][5] == [("doc-11", 1, "superseded", "replaced by a newer version")]
    assert [(h[0], h[1], h[2]) for h in hops] == [(0, None, "none"), (1, 0, "rewrite")]
    assert hops[1][3].endswith("could not be parsed (rewritten)")
    assert cited == ["doc-10", "doc-00"]
    assert coverage == "7 of 30 read: an absence claim is not supported"
    for name, m in manifests.items():
        assert m["trace_id"] == TRACE_ID, name
        assert m["span_count"] == 7, name
        assert _evidence(m) == reference, name
        assert (m["fidelity"]["intact"], m["fidelity"]["not_captured"]) == (32, 12), name
    # what each source can and cannot say about fidelity
    assert manifests[JAEGER_V1]["fidelity"]["dropped_events"] is None
    assert any("does not carry dropped counts" in n for n in manifests[JAEGER_V1]["fidelity"]["notes"])
    assert manifests[JAEGER_V3]["fidelity"]["dropped_events"] == 0
    assert manifests["tempo_v1_trace.json"]["fidelity"]["dropped_events"] == 0
    assert manifests["tempo_v2_partial.json"]["fidelity"]["partial"] is True
    assert [a["problem"] for a in manifests["tempo_v2_partial.json"]["fidelity"]["alarms"]] == ["backend returned a partial trace"]
    for name in (JAEGER_V1, JAEGER_V3, "tempo_v1_trace.json"):
        assert manifests[name]["fidelity"]["alarms"] == [], name
        assert manifests[name]["fidelity"]["partial"] is False, name


def test_jaeger_v1_keeps_tracestate_and_status():
    """The real Jaeger's v1 body (tags, logs, w3c.tracestate tag) decodes to the spans its v3 body gives."""
    doc = _fixture(JAEGER_V1)
    spans = list(resolve(str(FIXTURES / JAEGER_V1), None).spans)
    assert len(spans) == len(doc["data"][0]["spans"]) == 7
    root = next(s for s in spans if s.parent_span_id is None)
    assert (root.name, root.trace_state) == ("pipeline pipeline", "ot=th:8")  # p=0.5 head sampling
    assert all(s.trace_state == "ot=th:8" for s in spans)
    v3 = {s.span_id: s for s in resolve(str(FIXTURES / JAEGER_V3), None).spans}
    assert sorted(v3) == sorted(s.span_id for s in spans)
    for span in spans:
        other = v3[span.span_id]
        for key in ("w3c.tracestate", "otel.scope.name", "span.kind", "otel.status_code"):
            assert key not in span.attributes, (span.name, key)  # Jaeger's tags, turned back into fields
        assert span.attributes == other.attributes, span.name
        assert (span.name, span.parent_span_id, span.trace_state, span.scope_name, span.resource) == (
            other.name,
            other.parent_span_id,
            other.trace_state,
            other.scope_name,
            other.resource,
        )
        assert (span.status_code, span.status_message) == (other.status_code, other.status_message) == (None, None)
        assert [(e.name, e.attributes) for e in span.events] == [(e.name, e.attributes) for e in other.events]
        assert span.start_ns == other.start_ns // 1000 * 1000  # v1 speaks microseconds


def test_jaeger_http_v3_then_v1(tmp_path):
    with BackendServer() as server:
        server.route(f"/api/v3/traces/{TRACE_ID}", (FIXTURES / JAEGER_V3).read_text())
        trace = JaegerSource(server.url).get(TRACE_ID)
        assert trace.keeps_dropped_counts is True
        assert (trace.trace_id, len(trace.spans)) == (TRACE_ID, 7)
        assert server.requests == [f"/api/v3/traces/{TRACE_ID}"]
        # a Jaeger without the v3 API: 404 there, the v1 body is used (and says it lost dropped counts)
        server.routes.clear()
        server.requests.clear()
        server.route(f"/api/traces/{TRACE_ID}", (FIXTURES / JAEGER_V1).read_text())
        trace = open_source(f"jaeger+{server.url}").get(TRACE_ID)
        assert trace.keeps_dropped_counts is False
        assert (trace.trace_id, len(trace.spans)) == (TRACE_ID, 7)
        assert server.requests == [f"/api/v3/traces/{TRACE_ID}", f"/api/traces/{TRACE_ID}"]
        # an unknown id: the real Jaeger's recorded 404 bodies on both APIs
        unknown = "1" * 32
        server.route(f"/api/v3/traces/{unknown}", (FIXTURES / NOT_FOUND_V3).read_text(), status=404)
        server.route(f"/api/traces/{unknown}", (FIXTURES / NOT_FOUND_V1).read_text(), status=404)
        with pytest.raises(TraceNotFound, match="not found in Jaeger"):
            JaegerSource(server.url).get(unknown)


def test_tempo_http_partial_and_search():
    with BackendServer() as server:
        server.route(f"/api/v2/traces/{TRACE_ID}", _fixture("tempo_v2_partial.json"))
        server.route("/api/search", _fixture("tempo_search.json"))
        source = open_source(f"tempo+{server.url}")
        assert isinstance(source, TempoSource)
        trace = source.get(TRACE_ID)
        assert trace.partial is True and "PARTIAL" in (trace.partial_message or "")
        assert source.search(5, None, "1h") == [TRACE_ID]
        search = next(r for r in server.requests if r.startswith("/api/search"))
        assert "q=%7B+span.ragtrail.schema+%3E%3D+1+%7D" in search and "limit=5" in search


def test_jaeger_search_by_tag():
    with BackendServer() as server:
        recorded = _fixture(JAEGER_V1)
        service = recorded["data"][0]["processes"]["p1"]["serviceName"]
        server.route("/api/services", {"data": [service, "jaeger-all-in-one"]})
        # No search response was recorded from the real Jaeger: this one is built from the recorded v1
        # trace body, the way Jaeger's search answers ({"data": [<trace>, ...]} with the same trace objects).
        server.route("/api/traces", {"data": recorded["data"], "total": 0, "limit": 0, "offset": 0, "errors": None})
        assert JaegerSource(server.url).search(10, None, "1h") == [TRACE_ID]
        query = [r for r in server.requests if r.startswith("/api/traces?")]
        # Jaeger matches a tag exactly: one search per schema version the reader knows (5, 4, 3, 2, then 1)
        assert len(query) == 5 and all(f"service={service}" in q for q in query)
        assert [f"%22ragtrail.schema%22%3A+%22{v}%22" in q for v, q in zip((5, 4, 3, 2, 1), query, strict=False)] == [True] * 5


def test_http_errors_are_typed():
    with BackendServer() as server:
        server.route(f"/api/v3/traces/{TRACE_ID}", "upstream exploded", status=500)
        with pytest.raises(HttpStatusError, match="HTTP 500"):
            JaegerSource(server.url).get(TRACE_ID)
        server.route(f"/api/v2/traces/{TRACE_ID}", "slow", delay=2.0)
        with pytest.raises(SourceUnreachable, match="timed out"):
            TempoSource(server.url, timeout=0.3).get(TRACE_ID)
        port = server.port
    with pytest.raises(SourceUnreachable, match="cannot reach"):
        JaegerSource(f"http://127.0.0.1:{port}", timeout=2).get(TRACE_ID)


def test_truncated_and_malformed_files(tmp_path):
    good = (FIXTURES / JAEGER_V3).read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(good[: len(good) // 2])
    with pytest.raises(TruncatedInput):
        resolve(str(cut), None)
    bad = tmp_path / "bad.json"
    bad.write_text("this is not json\n")
    with pytest.raises(MalformedInput):
        resolve(str(bad), None)
    # a local store whose last line was cut mid-write still serves its complete traces
    store = tmp_path / "store"
    trace_id = record(store, rag_run)
    path = next(store.iterdir())
    path.write_text(path.read_text() + '{"resourceSpans":[{"scopeSpans"')
    assert FileSource(store).get(trace_id).trace_id == trace_id
    # ...but a single file that is nothing but a cut line is an error
    lone = tmp_path / "lone.jsonl"
    lone.write_text(path.read_text().splitlines()[0][:200])
    with pytest.raises(TruncatedInput):
        resolve(str(lone), None)


def test_decode_document_filters_by_trace():
    doc = _fixture(JAEGER_V3)["result"]
    assert sorted(s.name for s in decode_document(doc, TRACE_ID)) == [
        "budget budget",
        "cite cite",
        "filter filter",
        "pipeline pipeline",
        "query_transform rewrite",
        "rerank rerank",
        "retrieve search",
    ]
    assert list(decode_document(doc, "f" * 32)) == []


def test_a_directory_skips_files_that_are_not_traces(tmp_path):
    trace_id = record(tmp_path, rag_run)
    (tmp_path / "package.json").write_text(json.dumps({"name": "not a trace"}))
    (tmp_path / "notes.json").write_text("{broken")
    source = FileSource(tmp_path)
    assert source.get(trace_id).trace_id == trace_id
    assert source.latest() == trace_id


def test_fast_line_decoder_matches_the_general_decoder_or_steps_aside(tmp_path):
    """otlp_fast (msgspec, issue 6's speed fix) must give exactly the spans the general decoder gives for
    every local store line it takes, and return None (general decoder) for every other spelling."""
    from opentelemetry.trace import Status, StatusCode

    from ragtrail.inspect.otlp_fast import decode_line
    from ragtrail.inspect.sources import spans_from_document

    def run(tracer):
        trace_id = rag_run(tracer)
        with tracer.start_as_current_span("app.other") as span:  # every OTel attribute type, an error status
            span.set_attributes({"b": True, "f": 0.25, "i": -3, "s": "x", "ls": ["a", "b"], "li": [1, 2], "lf": [0.5, 1.5], "lb": [True, False]})
            span.add_event("app.event", {"n": 1, "ok": False})
            span.set_status(Status(StatusCode.ERROR, "boom"))
        return trace_id

    record(tmp_path, run)
    lines = [line for path in sorted(tmp_path.glob("*.jsonl")) for line in path.read_bytes().splitlines() if line]
    assert lines
    for line in lines:
        fast = decode_line(line)
        assert fast is not None, line[:200]
        general, info = spans_from_document(json.loads(line), "x")
        assert fast == general and info == {}
        some = fast[0].trace_id
        assert decode_line(line, some) == [s for s in general if s.trace_id == some]
    other = [s for line in lines for s in decode_line(line) if s.name == "app.other"][0]
    assert other.attributes.pop(sc.TRACE_SPAN_COUNT) == 1  # its own trace: the whole-trace processor stamps it
    assert other.attributes == {"b": True, "f": 0.25, "i": -3, "s": "x", "ls": ["a", "b"], "li": [1, 2], "lf": [0.5, 1.5], "lb": [True, False]}
    assert (other.status_code, other.status_message) == ("ERROR", "boom")
    assert other.events[0].attributes == {"n": 1, "ok": False}

    doc = json.loads(lines[0])
    snake = json.loads(json.dumps(doc).replace('"startTimeUnixNano"', '"start_time_unix_nano"'))
    for refused in (
        json.dumps(snake),
        json.dumps({"result": doc}),
        json.dumps({"batches": doc["resourceSpans"]}),
        (FIXTURES / JAEGER_V3).read_text(),
        (FIXTURES / "tempo_v2_partial.json").read_text(),
        lines[0][:-20].decode(),
        "not json",
    ):
        assert decode_line(refused.encode()) is None
    assert decode_line(json.dumps(snake).encode()) is None and spans_from_document(snake, "x")[0] == spans_from_document(doc, "x")[0]
