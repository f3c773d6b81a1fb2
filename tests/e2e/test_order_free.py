"""Order-free reading against the real Jaeger v2: its query service sorts a span's events by name
(the ``SortCollections`` adjuster), so a stage's ``ragtrail.query`` events come back after its
candidates. A schema 2 trace verifies ok all the same (issue 11: 4 of 4 multi-query traces alarmed)."""

from __future__ import annotations

import ragtrail_backends as rb
from fixtures.ragtrail_traces import multi_query_run
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from ragtrail.contract import semconv
from ragtrail.export.whole_trace import WholeTraceSpanProcessor


def test_multi_query_stage_from_the_real_jaeger_verifies_ok(start_jaeger) -> None:
    jaeger = start_jaeger("jaeger")
    service = "ragtrail-e2e-order-free"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{jaeger.otlp_http_port}/v1/traces", timeout=5)
    provider.add_span_processor(WholeTraceSpanProcessor(exporter, grace_millis=100, schedule_delay_millis=100))
    trace_id = multi_query_run(provider.get_tracer("ragtrail.e2e"))
    assert provider.force_flush(30_000)
    spans = jaeger.wait_for_spans(trace_id, 7)  # pipeline, multi-query, 2 bm25, fuse, filter, cite
    # the real Jaeger reorders: the multi-query stage's query events, emitted first, come back last
    mq = next(span for _, _, span in spans if span["name"] == "retrieve multi_query")
    assert [e["name"] for e in mq["events"]] == [semconv.EVENT_CANDIDATE] * 6 + [semconv.EVENT_QUERY] * 3
    results = rb.verify_json(jaeger.source, trace_id)
    f = results[0]["fidelity"]
    assert f["alarms"] == [], f["alarms"]
    assert (f["changed_uncited"], f["unverifiable"], f["missing_events"], f["missing_spans"]) == (0, 0, 0, 0)
    manifest = rb.show_json(jaeger.source, trace_id)
    assert [h["hop"] for h in manifest["query_hops"]][:4] == [0, 1, 2, 3]
    fuse_stage = next(s for s in manifest["stages"] if s["kind"] == "fuse")
    assert [c["rank"] for c in fuse_stage["candidates"]] == [0, 1, 2, 3]
    provider.shutdown()
