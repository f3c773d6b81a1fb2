"""collector-config/truncate-example.yaml cuts every attribute value to 128 bytes on the real
collector (OTTL truncate_all): ragtrail's receipts flag exactly the cut payloads ``changed_uncited``
and nothing else."""

from __future__ import annotations

import ragtrail_backends as rb
from e2e_pipelines import LONG_QUERY, App

import ragtrail
from ragtrail.contract import semconv

LIMIT = 128


def test_collector_truncation_is_flagged_on_exactly_the_cut_fields(start_jaeger, start_collector) -> None:
    jaeger = start_jaeger()
    collector = start_collector(
        "truncate-example.yaml",
        {
            "RAGTRAIL_JAEGER_OTLP_ENDPOINT": jaeger.otlp_grpc_endpoint,
            "RAGTRAIL_TRUNCATE_BYTES": str(LIMIT),
        },
        record_policy=False,
        name="truncating-collector",
    )
    ragtrail.set_capture(content="preview")
    app = App(collector.traces_url)
    tid = app.run_many(1, query=LONG_QUERY)[0]
    app.flush()
    jaeger.wait_for_spans(tid, app.recorder.spans_per_trace[tid])

    # what the collector must have cut, computed from what the process sent: every receipted payload
    # (query text on a span or a query event; a content preview) longer than the limit
    expected: list[tuple[str, str, str]] = []
    kept_previews = long_previews = 0
    for span in app.local_spans(tid):
        span_id = format(span.context.span_id, "016x")
        text = span.attributes.get(semconv.QUERY_TEXT)
        if isinstance(text, str) and len(text.encode()) > LIMIT:
            expected.append((span_id, "", semconv.QUERY_TEXT))
        for event in span.events:
            text = event.attributes.get(semconv.QUERY_TEXT)
            if isinstance(text, str) and len(text.encode()) > LIMIT:
                expected.append((span_id, "", semconv.QUERY_TEXT))
        # schema 3: previews are elements of the candidates' preview column; the collector's
        # truncate_all cuts string values only, not the strings inside an array, so they arrive whole
        for preview in span.attributes.get(semconv.COLUMN_CONTENT_PREVIEW, ()):
            long_previews += len(preview.encode()) > LIMIT
            kept_previews += len(preview.encode()) <= LIMIT
    fields = {f for _, _, f in expected}
    assert fields == {semconv.QUERY_TEXT} and kept_previews and long_previews  # previews on both sides of the limit

    [result] = rb.verify_json(jaeger.source, tid)
    alarms = result["fidelity"]["alarms"]
    assert {a["problem"] for a in alarms} == {"changed_uncited"}, alarms
    assert sorted((a["span_id"], a["candidate"], a["field"]) for a in alarms) == sorted(expected)
    assert result["fidelity"]["changed_uncited"] == len(expected)
    assert result["fidelity"]["unverifiable"] == 0
    assert result["fidelity"]["missing_events"] == 0 and result["fidelity"]["missing_spans"] == 0
    rb.record_fixture("truncated_by_collector", jaeger, tid)
    app.shutdown()
