"""Order-free reading against the real Jaeger v2: its query service sorts a span's events by name
(the ``SortCollections`` adjuster), so a stage's ``ragtrail.query`` events come back after its
exclusion events (schema 2: after its candidates). A trace verifies ok all the same (issue 11: 4 of
4 multi-query traces alarmed). Schema 3's candidate columns come back as OTLP arrays from the v3 API
and as their JSON text (Go's encoder: a whole float without ".0") from the v1 API: both verify."""

from __future__ import annotations

import json
from pathlib import Path

import ragtrail_backends as rb
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

import ragtrail
from fixtures.ragtrail_traces import multi_query_run, trace_id_now
from ragtrail.contract import semconv
from ragtrail.export.whole_trace import WholeTraceSpanProcessor
from ragtrail.inspect.otlp import decode_id


def test_multi_query_stage_from_the_real_jaeger_verifies_ok(start_jaeger) -> None:
    jaeger = start_jaeger("jaeger")
    service = "ragtrail-e2e-order-free"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{jaeger.otlp_http_port}/v1/traces", timeout=5)
    provider.add_span_processor(WholeTraceSpanProcessor(exporter, grace_millis=100, schedule_delay_millis=100))
    trace_id = multi_query_run(provider.get_tracer("ragtrail.e2e"))
    assert provider.force_flush(30_000)
    spans = jaeger.wait_for_spans(trace_id, 7)  # pipeline, multi-query, 2 bm25, fuse, filter, cite
    # schema 3: the multi-query stage's candidates are columns, its events its 3 produced queries
    mq = next(span for _, _, span in spans if span["name"] == "retrieve multi_query")
    assert [e["name"] for e in mq["events"]] == [semconv.EVENT_QUERY] * 3
    ids = next(a["value"] for a in mq["attributes"] if a["key"] == semconv.COLUMN_IDS)
    assert len(ids["arrayValue"]["values"]) == 6
    results = rb.verify_json(jaeger.source, trace_id)
    f = results[0]["fidelity"]
    assert f["alarms"] == [], f["alarms"]
    assert (f["changed_uncited"], f["unverifiable"], f["missing_events"], f["missing_spans"]) == (0, 0, 0, 0)
    manifest = rb.show_json(jaeger.source, trace_id)
    assert [h["hop"] for h in manifest["query_hops"]][:4] == [0, 1, 2, 3]
    fuse_stage = next(s for s in manifest["stages"] if s["kind"] == "fuse")
    assert [c["rank"] for c in fuse_stage["candidates"]] == [0, 1, 2, 3]
    provider.shutdown()


def _mixed_run(tracer) -> str:
    """One stage whose span holds produced queries and two exclusion reasons, with whole-number scores."""
    hits = [{"id": f"doc-{i}", "content": f"passage {i}", "score": float(5 - i)} for i in range(5)]
    with ragtrail.stage("pipeline", "tests.mixed", tracer=tracer) as pipe:
        pipe.query("travel policy")
        with ragtrail.stage("fuse", "tests.multi", score_kind="bm25", tracer=tracer) as s:
            s.query("travel policy")
            s.add_query_variant("travel policy 2024", transform="multi_query")
            s.add_query_variant("reimbursement rules", transform="multi_query")
            s.inputs(hits)
            s.exclude(hits[3], "superseded", "doc-0 replaces it")
            s.exclude(hits[4], "stale")
            s.outputs(hits[:3])
        with ragtrail.stage("filter", "tests.after", tracer=tracer) as s:  # schema 4: points to the fuse
            s.inputs(hits[:3])
            s.exclude(hits[2], "stale")
            s.outputs(hits[:2])
        return trace_id_now()


def test_columns_and_reordered_exclusion_events_from_the_real_jaeger_v1_and_v3(start_jaeger, tmp_path: Path) -> None:
    jaeger = start_jaeger("jaeger")
    provider = TracerProvider(resource=Resource.create({"service.name": "ragtrail-e2e-columns"}))
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{jaeger.otlp_http_port}/v1/traces", timeout=5)
    provider.add_span_processor(WholeTraceSpanProcessor(exporter, grace_millis=100, schedule_delay_millis=100))
    trace_id = _mixed_run(provider.get_tracer("ragtrail.e2e"))
    assert provider.force_flush(30_000)
    spans = jaeger.wait_for_spans(trace_id, 3)
    fuse = next(span for _, _, span in spans if span["name"] == "fuse multi")
    after = next(span for _, _, span in spans if span["name"] == "filter after")
    # the filter's rows point to the fuse span's receipts (followed by span id in both APIs below)
    pointer = next(a["value"]["stringValue"] for a in after["attributes"] if a["key"] == semconv.COLUMN_CONTENT_FROM)
    assert pointer == decode_id(fuse["spanId"], 8)
    # emitted: 2 query events, then one exclusion event per reason; Jaeger serves them sorted by name
    assert [e["name"] for e in fuse["events"]] == [semconv.EVENT_EXCLUSION] * 2 + [semconv.EVENT_QUERY] * 2
    v3 = rb.verify_json(jaeger.source, trace_id)[0]["fidelity"]
    assert v3["alarms"] == [] and (v3["changed_uncited"], v3["unverifiable"], v3["missing_events"]) == (0, 0, 0)
    status, body = jaeger.trace_v1(trace_id)
    assert status == 200
    tags = {t["key"]: t for s in body["data"][0]["spans"] if s["operationName"] == "fuse multi" for t in s["tags"]}
    scores = tags[semconv.COLUMN_SCORES]
    assert scores["type"] == "string" and scores["value"] == "[5,4,3]"  # the array's JSON text, whole floats as ints
    path = tmp_path / "jaeger.v1.json"
    path.write_text(json.dumps(body))
    v1 = rb.verify_json(str(path), trace_id)[0]["fidelity"]
    assert v1["alarms"] == [], v1["alarms"]
    assert {k: v for k, v in v1.items() if k not in ("dropped_attributes", "dropped_events", "notes")} == {
        k: v for k, v in v3.items() if k not in ("dropped_attributes", "dropped_events", "notes")
    }
    manifest = rb.show_json(str(path), trace_id)
    stage = next(s for s in manifest["stages"] if s["kind"] == "fuse")
    assert [(c["id"], c["rank"], c["score"]) for c in stage["candidates"]] == [("doc-0", 0, 5.0), ("doc-1", 1, 4.0), ("doc-2", 2, 3.0)]
    assert [(e["id"], e["reason"], e["detail"]) for e in stage["excluded"]] == [
        ("doc-3", "superseded", "doc-0 replaces it"),
        ("doc-4", "stale", None),
    ]
    # Jaeger v1 names spans by its own hex ids: the filter's pointed rows read back with the fuse's receipts
    after_stage = next(s for s in manifest["stages"] if s["kind"] == "filter")
    fused = {c["id"]: (c["sha256"], c["chars"]) for c in stage["candidates"]}
    assert [(c["id"], c["sha256"], c["chars"]) for c in after_stage["candidates"] + after_stage["excluded"]] == [
        (i, *fused[i]) for i in ("doc-0", "doc-1", "doc-2")
    ]
    provider.shutdown()
