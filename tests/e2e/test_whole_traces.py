"""Whole traces through the real gateway collector into the real Jaeger, read back by ragtrail.

app (RagtrailSampler p=0.5, WholeTraceSpanProcessor, OTLPSpanExporter http) -> gateway.yaml
(tail sampling keeping 100% here) -> Jaeger v2 and a second Jaeger standing in for Tempo's OTLP
ingest -> `ragtrail verify|show --source jaeger+http://127.0.0.1:<port>`.
"""

from __future__ import annotations

from typing import Any

import ragtrail_backends as rb
from e2e_pipelines import LONG_QUERY, App

from ragtrail.contract import semconv


def _local_view(span: Any) -> dict[str, Any]:
    attrs = {k: tuple(v) if isinstance(v, (list, tuple)) else v for k, v in span.attributes.items()}
    events = [(e.name, {k: tuple(v) if isinstance(v, (list, tuple)) else v for k, v in e.attributes.items()}) for e in span.events]
    return {"name": span.name, "attributes": attrs, "events": events, "parent": format(span.parent.span_id, "016x") if span.parent else None}


def _remote_view(span: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": span["name"],
        "attributes": rb.otlp_attributes(span.get("attributes")),
        "events": [(e["name"], rb.otlp_attributes(e.get("attributes"))) for e in span.get("events", [])],
        "parent": span.get("parentSpanId") or None,
    }


def test_whole_traces_arrive_with_every_event_and_receipt(start_jaeger, start_collector) -> None:
    jaeger = start_jaeger("jaeger")
    tempo = start_jaeger("tempo-standin")
    gateway = start_collector("gateway.yaml", rb.gateway_env(jaeger, tempo), name="gateway")
    app = App(gateway.traces_url, probability=0.5)
    sampled = app.run_many(40, query=LONG_QUERY)
    app.flush()
    # p=0.5 over 40 runs: 20 expected (binomial sd 3.2)
    assert 7 <= len(sampled) <= 33
    assert set(app.recorder.spans_per_trace) == set(sampled)

    for tid in sampled:
        expected = app.recorder.spans_per_trace[tid]
        got = jaeger.wait_for_spans(tid, expected)
        assert len(got) == expected
        # byte-for-byte: every span, attribute and event the process produced is what Jaeger returns
        local = {format(s.context.span_id, "016x"): _local_view(s) for s in app.local_spans(tid)}
        remote = {span["spanId"]: _remote_view(span) for _, _, span in got}
        assert set(remote) == set(local)
        for span_id, want in local.items():
            have = remote[span_id]
            # the gateway stamps every span of a kept trace with the policy and its keep probability (100% here)
            stamp = (have["attributes"].pop(semconv.SAMPLING_TAIL_POLICY), have["attributes"].pop(semconv.SAMPLING_TAIL_PROBABILITY))
            assert stamp == ("baseline-probabilistic", 1.0)
            if want["parent"] is None:
                # the whole-trace processor stamps the segment's span count on the exported root
                assert have["attributes"].pop(semconv.TRACE_SPAN_COUNT) == expected
            elif semconv.STAGE_KIND in want["attributes"]:
                # and, schema 2, the root's id and the same count on every other ragtrail span
                root_id = next(i for i, v in local.items() if v["parent"] is None)
                assert have["attributes"].pop(semconv.TRACE_SEGMENT_ROOT) == root_id
                assert have["attributes"].pop(semconv.TRACE_SEGMENT_SPAN_COUNT) == expected
            assert have == want
        # the same whole trace went to the second backend (the gateway's Tempo exporter)
        assert len(tempo.wait_for_spans(tid, expected)) == expected
    # nothing but the sampled traces arrived
    arrived = {t["traceID"] for t in jaeger.traces_of_service(app.service)}
    assert arrived == set(sampled)

    results = rb.verify_json(jaeger.source, *sampled)
    assert [r["trace_id"] for r in results] == sampled
    for r in results:
        f = r["fidelity"]
        assert f["alarms"] == [], f["alarms"]
        assert (f["changed_uncited"], f["unverifiable"], f["missing_events"], f["missing_spans"]) == (0, 0, 0, 0)
        assert f["intact"] > 0
        # no stage failed, degraded or lost a candidate unexplained (other notes may exist)
        assert not [x for x in r["findings"] if any(w in x for w in ("degraded", "failed", "unexplained"))]

    manifest = rb.show_json(jaeger.source, sampled[0])
    assert manifest["sampling"]["probability"] == 0.5
    assert manifest["sampling"]["adjusted_count"] == 2
    assert manifest["span_count"] == app.recorder.spans_per_trace[sampled[0]]
    rb.record_fixture("whole_trace", jaeger, sampled[0])
    app.shutdown()
