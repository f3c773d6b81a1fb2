"""Issue 13, "loss that nobody counts": every trace that does not arrive whole is counted, at
shutdown too, and the last loss record leaves after the last count.

Each test runs real traces through the whole-trace processor and the SDK's OTLP/HTTP exporter to a
real receiver on loopback that misbehaves one way (down, 500, 503, 429 with Retry-After, 413, hang,
flapping, connection reset), shuts down with traces still in flight, and checks by arithmetic:
traces sent = traces received whole + traces counted lost in the ``ragtrail.loss`` records (those
that reached the receiver plus those written to the local store), with nothing left uncounted and
nothing counted that the ledger does not hold.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider

from otlp_server import OTLPServer, any_value, otlp_server  # noqa: F401  (fixture)
from ragtrail.contract import semconv
from ragtrail.export.local_store import FILE_GLOB
from ragtrail.export.otlp_json import parse_request
from ragtrail.export.whole_trace import WholeTraceSpanProcessor

LOST_KEYS = (semconv.LOSS_TRACES_DROPPED, semconv.LOSS_TRACES_EXPORT_FAILED)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The local store directory, where a loss record goes when the backend does not take it."""
    directory = tmp_path / "store"
    monkeypatch.setenv("RAGTRAIL_LOCAL_STORE_DIR", str(directory))
    return directory


def pipeline(server: OTLPServer, **options: Any) -> tuple[TracerProvider, WholeTraceSpanProcessor, trace.Tracer]:
    options.setdefault("schedule_delay_millis", 20)
    options.setdefault("grace_millis", 50)
    options.setdefault("retry_timeout_millis", 300)
    options.setdefault("loss_report_interval_millis", 3_600_000)
    provider = TracerProvider()
    processor = WholeTraceSpanProcessor(OTLPSpanExporter(endpoint=server.traces_url, timeout=1.0), **options)
    provider.add_span_processor(processor)
    return provider, processor, provider.get_tracer("tests.shutdown")


def make_trace(tracer: trace.Tracer, children: int = 2) -> str:
    with tracer.start_as_current_span("root") as root:
        for i in range(children):
            with tracer.start_as_current_span(f"child{i}"):
                pass
    return f"{root.get_span_context().trace_id:032x}"


def store_records(directory: Path) -> list[dict[str, Any]]:
    """The attributes of every ``ragtrail.loss`` record in the local store."""
    records = []
    for path in sorted(directory.glob(FILE_GLOB)):
        for line in path.read_text().splitlines():
            request: ExportTraceServiceRequest = parse_request(line)
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        assert span.name == semconv.LOSS_SPAN_NAME
                        records.append({kv.key: any_value(kv.value) for kv in span.attributes})
    return records


def tally(server: OTLPServer, store_dir: Path, sent: list[str]) -> dict[str, int]:
    """Whole, partial and counted traces, by what arrived and what the records say."""
    received = server.traces()
    whole = partial = 0
    for trace_id in sent:
        spans = received.get(trace_id, [])
        roots = [s for s in spans if s.parent_span_id == ""]
        if roots and roots[0].attributes.get(semconv.TRACE_SPAN_COUNT) == len(spans):
            whole += 1
        elif spans:
            partial += 1
    backend = [s.attributes for s in server.spans() if s.name == semconv.LOSS_SPAN_NAME]
    local = store_records(store_dir)
    counted = sum(r[key] for r in backend + local for key in LOST_KEYS)
    return {"sent": len(sent), "whole": whole, "partial": partial, "counted": counted, "backend_records": len(backend), "local_records": len(local)}


def assert_every_trace_accounted(processor: WholeTraceSpanProcessor, t: dict[str, int]) -> None:
    ledger = processor.loss.total_traces_dropped + processor.loss.total_traces_export_failed
    assert t["whole"] + t["counted"] == t["sent"], t  # uncounted = 0, nothing counted twice
    assert t["counted"] == ledger, t  # every count of the ledger left in a record: none after the last


def test_backend_down_for_good_the_final_record_goes_to_the_local_store(otlp_server: OTLPServer, store: Path) -> None:  # noqa: F811
    otlp_server.down()
    provider, processor, tracer = pipeline(otlp_server, schedule_delay_millis=5_000)
    sent = [make_trace(tracer) for _ in range(30)]  # still buffered at shutdown
    provider.shutdown()
    t = tally(otlp_server, store, sent)
    assert_every_trace_accounted(processor, t)
    assert (t["whole"], t["counted"], t["backend_records"], t["local_records"]) == (0, 30, 0, 1)
    assert processor.loss_store_directory == store
    (record,) = store_records(store)
    assert record[semconv.LOSS_TRACES_EXPORT_FAILED] == 30
    assert record[semconv.LOSS_SPANS_EXPORT_FAILED] == 90


@pytest.mark.parametrize("status,retry_after", [(500, None), (503, None), (429, 1), (413, None)])
def test_a_refusing_backend_loses_only_counted_traces_at_shutdown(
    otlp_server: OTLPServer,
    store: Path,
    status: int,
    retry_after: Any,  # noqa: F811
) -> None:
    provider, processor, tracer = pipeline(otlp_server)
    kept = [make_trace(tracer) for _ in range(5)]
    assert provider.force_flush()
    if status == 413:
        otlp_server.reject_over(1)  # every body is too large
    else:
        otlp_server.fail_with(status, retry_after=retry_after)
    refused = [make_trace(tracer) for _ in range(20)]  # some in flight, some buffered at shutdown
    provider.shutdown()
    t = tally(otlp_server, store, kept + refused)
    assert_every_trace_accounted(processor, t)
    assert (t["whole"], t["partial"], t["counted"]) == (5, 0, 20)
    assert t["local_records"] == 1  # the backend refuses: the final record is in the local store
    if retry_after is not None:
        refusals = [r for r in otlp_server.requests if r.status == 429]
        assert refusals  # the header was there to honour (the SDK's exporter waits for it)


def test_a_hanging_backend_with_a_request_in_flight_at_shutdown(otlp_server: OTLPServer, store: Path) -> None:  # noqa: F811
    provider, processor, tracer = pipeline(otlp_server)
    kept = make_trace(tracer)
    assert provider.force_flush()
    otlp_server.hang()
    hung = [make_trace(tracer) for _ in range(10)]
    assert otlp_server.wait_for(lambda s: len(s.requests) >= 1)
    deadline = time.monotonic() + 10
    while not processor.in_flight_traces and time.monotonic() < deadline:  # the worker is inside export()
        time.sleep(0.01)
    assert processor.in_flight_traces
    processor.shutdown(timeout_millis=300)
    t = tally(otlp_server, store, [kept, *hung])
    assert_every_trace_accounted(processor, t)
    assert (t["whole"], t["counted"], t["local_records"]) == (1, 10, 1)
    provider.shutdown()  # a second shutdown is a no-op


def test_a_flapping_backend_loses_only_counted_traces(otlp_server: OTLPServer, store: Path) -> None:  # noqa: F811
    provider, processor, tracer = pipeline(otlp_server, retry_timeout_millis=200, loss_report_interval_millis=100)
    stop = threading.Event()

    def flap() -> None:
        while not stop.is_set():
            otlp_server.fail_with(503)
            stop.wait(0.3)
            otlp_server.heal()
            stop.wait(0.15)

    flapper = threading.Thread(target=flap)
    flapper.start()
    sent = []
    try:
        for _ in range(60):
            sent.append(make_trace(tracer))
            time.sleep(0.02)
    finally:
        stop.set()
        flapper.join()
    provider.shutdown()
    t = tally(otlp_server, store, sent)
    assert_every_trace_accounted(processor, t)
    assert t["whole"] > 0 and t["partial"] == 0


def test_connection_resets_lose_only_counted_traces(otlp_server: OTLPServer, store: Path) -> None:  # noqa: F811
    otlp_server.reset_connections()
    provider, processor, tracer = pipeline(otlp_server)
    sent = [make_trace(tracer) for _ in range(10)]
    provider.shutdown()
    t = tally(otlp_server, store, sent)
    assert_every_trace_accounted(processor, t)
    assert (t["whole"], t["counted"], t["local_records"]) == (0, 10, 1)


def test_counts_made_during_shutdown_reach_the_final_record(otlp_server: OTLPServer, store: Path) -> None:  # noqa: F811
    """The backend is back by shutdown: what was lost before and what shutdown counts all arrive in
    records at the backend, the final one after the last count."""
    provider, processor, tracer = pipeline(otlp_server, max_traces=4)
    otlp_server.fail_with(500)
    sent = [make_trace(tracer) for _ in range(20)]  # most dropped (queue full) or refused
    otlp_server.heal()
    sent += [make_trace(tracer) for _ in range(3)]
    provider.shutdown()
    t = tally(otlp_server, store, sent)
    assert_every_trace_accounted(processor, t)
    assert t["local_records"] == 0 and t["backend_records"] >= 1
    final = otlp_server.requests[-1]
    assert final.accepted and final.span_count == 1  # the last request is the final loss record


def test_a_span_ending_after_shutdown_is_counted_in_a_record_of_its_own(otlp_server: OTLPServer, store: Path) -> None:  # noqa: F811
    provider, processor, tracer = pipeline(otlp_server)
    root = tracer.start_span("root")
    provider.shutdown()
    root.end()  # after the final record: written to the local store, never lost silently
    (record,) = store_records(store)
    assert record[semconv.LOSS_SPANS_DROPPED] == 1
    assert record[semconv.LOSS_REASON] == "after_shutdown"


def test_a_split_segment_sends_the_root_first_and_a_failed_later_part_is_counted(
    otlp_server: OTLPServer,
    store: Path,  # noqa: F811
) -> None:
    def fail_after_first(request: Any) -> None:
        if request.index == 0:
            otlp_server.fail_with(500)  # every request after the first is refused

    otlp_server.on_request(fail_after_first)
    provider, processor, tracer = pipeline(otlp_server, max_export_batch_size=4)
    with tracer.start_as_current_span("root") as root:
        for i in range(10):
            with tracer.start_as_current_span(f"c{i}"):
                pass
    provider.shutdown()
    first = otlp_server.requests[0]
    assert first.accepted and first.span_count == 4
    arrived = otlp_server.traces()[f"{root.get_span_context().trace_id:032x}"]
    head = arrived[0]
    assert head.name == "root" and head.parent_span_id == ""
    assert head.attributes[semconv.TRACE_SPAN_COUNT] == 11  # the reader sees 4 of 11: a counted hole
    assert len(arrived) == 4 and all(r.status == 500 for r in otlp_server.requests[1:])
    assert (processor.loss.total_traces_export_failed, processor.loss.total_spans_export_failed) == (1, 11)
    (record,) = store_records(store)  # the backend refused the last request: final record is local
    assert record[semconv.LOSS_TRACES_EXPORT_FAILED] == 1


def test_a_slow_backend_at_shutdown_gets_no_request_that_cannot_end_in_time(otlp_server: OTLPServer, store: Path) -> None:  # noqa: F811
    """Requests take 0.4 s and shutdown has 1 s: the requests that fit are sent, the rest are counted
    without being started, so no trace ends up both received and counted."""
    provider, processor, tracer = pipeline(otlp_server, max_export_batch_size=3, schedule_delay_millis=60_000)
    otlp_server.set_delay(0.4)
    sent = [make_trace(tracer, children=2) for _ in range(20)]  # 20 requests of one trace each
    processor.shutdown(timeout_millis=1000)
    provider.shutdown()
    t = tally(otlp_server, store, sent)
    assert_every_trace_accounted(processor, t)
    assert 0 < t["whole"] < 20 and t["partial"] == 0
