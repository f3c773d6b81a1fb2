"""The local store: OTLP JSON lines exactly as the Collector's file exporter writes them, rotated and capped."""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragtrail.contract import semconv
from ragtrail.export.local_store import LocalStoreSpanExporter
from ragtrail.export.otlp_json import parse_request, spans_to_dict
from ragtrail.export.whole_trace import WholeTraceSpanProcessor
from ragtrail.sampling import RagtrailSampler


def _finished_spans(n_traces: int = 1, payload: str = "") -> list:
    memory = InMemorySpanExporter()
    provider = TracerProvider(sampler=RagtrailSampler(1.0))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("ragtrail.test", "1.2")
    for _i in range(n_traces):
        with tracer.start_as_current_span("retrieve BM25", attributes={"ragtrail.candidates.out": 2, "p": payload}) as s:
            s.add_event("ragtrail.candidate", {"ragtrail.candidate.id": "doc-1", "ragtrail.candidate.score": 0.5})
            with tracer.start_as_current_span("child", links=[]):
                pass
    return list(memory.get_finished_spans())


def test_a_line_is_otlp_json_with_hex_ids_and_round_trips_to_the_same_protobuf(tmp_path: Path) -> None:
    spans = _finished_spans()
    exporter = LocalStoreSpanExporter(tmp_path)
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    exporter.shutdown()
    (path,) = sorted(tmp_path.glob("traces-*.jsonl"))
    lines = path.read_text("utf-8").splitlines()
    assert len(lines) == 1
    document = json.loads(lines[0])
    (resource_spans,) = document["resourceSpans"]
    (scope_spans,) = resource_spans["scopeSpans"]
    assert scope_spans["scope"] == {"name": "ragtrail.test", "version": "1.2"}
    child, root = scope_spans["spans"]
    assert root["traceId"] == f"{spans[1].context.trace_id:032x}"
    assert root["spanId"] == f"{spans[1].context.span_id:016x}"
    assert child["parentSpanId"] == root["spanId"]
    assert "parentSpanId" not in root
    assert root["kind"] == 1  # enums are integers in OTLP JSON
    assert root["startTimeUnixNano"] == str(spans[1].start_time)  # 64-bit integers are strings
    assert root["traceState"] == "ot=th:0"
    assert {"key": "ragtrail.candidates.out", "value": {"intValue": "2"}} in root["attributes"]
    (event,) = root["events"]
    assert event["name"] == "ragtrail.candidate"
    assert {"key": "ragtrail.candidate.score", "value": {"doubleValue": 0.5}} in event["attributes"]
    # the same bytes the OTLP exporters would send
    assert parse_request(lines[0]) == encode_spans(spans)


def test_parse_request_also_reads_base64_ids_as_tempo_serves_them() -> None:
    spans = _finished_spans()
    request = encode_spans(spans)
    protojson = json_format.MessageToDict(request)  # base64 ids
    assert parse_request(json.dumps(protojson)) == request
    assert parse_request(json.dumps(spans_to_dict(spans))) == request


def test_files_rotate_at_the_size_limit_and_the_oldest_are_deleted_over_the_cap(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    spans = _finished_spans(payload="x" * 3000)
    exporter = LocalStoreSpanExporter(tmp_path, max_file_bytes=10_000, max_total_bytes=25_000)
    line_bytes = len(json.dumps(spans_to_dict(spans), separators=(",", ":")).encode()) + 1
    assert 3000 < line_bytes < 5000
    for _ in range(12):
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    exporter.shutdown()
    files = sorted(tmp_path.glob("traces-*.jsonl"))
    sizes = [f.stat().st_size for f in files]
    assert all(size <= 10_000 for size in sizes)
    assert sum(sizes[:-1]) <= 25_000  # checked when each new file opens
    lines_left = sum(len(f.read_text().splitlines()) for f in files)
    assert lines_left < 12  # the oldest were removed ...
    assert "deleted the oldest files" in caplog.text  # ... and it said so
    for f in files:
        for line in f.read_text().splitlines():
            parse_request(line)


def test_directory_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(semconv.ENV_LOCAL_STORE_DIR, str(tmp_path / "store"))
    exporter = LocalStoreSpanExporter()
    exporter.export(_finished_spans())
    exporter.shutdown()
    assert len(list((tmp_path / "store").glob("traces-*.jsonl"))) == 1


def test_an_unwritable_directory_fails_the_export_which_the_processor_counts(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    exporter = LocalStoreSpanExporter(blocker / "store")
    assert exporter.export(_finished_spans()) is SpanExportResult.FAILURE
    provider = TracerProvider()
    processor = WholeTraceSpanProcessor(exporter, retry_timeout_millis=1, loss_store_dir=tmp_path / "fallback")
    provider.add_span_processor(processor)
    with provider.get_tracer("t").start_as_current_span("root"):
        pass
    provider.shutdown()
    assert processor.loss.total_traces_export_failed == 1
    # the exporter took nothing, so the final loss record went to the fallback directory
    (path,) = (tmp_path / "fallback").glob("traces-*.jsonl")
    (span,) = [s for rs in parse_request(path.read_text()).resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert span.name == semconv.LOSS_SPAN_NAME
    assert {kv.key: kv.value.int_value for kv in span.attributes}[semconv.LOSS_TRACES_EXPORT_FAILED] == 1


def test_registered_as_the_ragtrail_file_exporter() -> None:
    (ep,) = [e for e in entry_points(group="opentelemetry_traces_exporter") if e.name == "ragtrail_file"]
    assert ep.load() is LocalStoreSpanExporter
