"""The whole-trace span processor against a real OTLP/HTTP receiver on loopback.

Every test checks the promise by arithmetic: each trace that arrives is whole (its local root's
``ragtrail.trace.span_count`` equals the spans that arrived), and every trace that did not arrive
is counted, exactly, in the loss ledger and in the ``ragtrail.loss`` records that reach the backend.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider

from otlp_server import OTLPServer, ReceivedSpan, otlp_server  # noqa: F401  (fixture)
from ragtrail.contract import semconv
from ragtrail.export.loss import REASON_EXPORT_FAILED, REASON_QUEUE_FULL, REASON_TRACE_TOO_LARGE
from ragtrail.export.whole_trace import WholeTraceSpanProcessor

LOSS_KEYS = (
    semconv.LOSS_TRACES_DROPPED,
    semconv.LOSS_SPANS_DROPPED,
    semconv.LOSS_TRACES_EXPORT_FAILED,
    semconv.LOSS_SPANS_EXPORT_FAILED,
)


@pytest.fixture(autouse=True)
def _local_store_in_tmp(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loss record that cannot reach the backend goes to the local store: keep it out of the cwd."""
    monkeypatch.setenv(semconv.ENV_LOCAL_STORE_DIR, str(tmp_path / "store"))


def pipeline(server: OTLPServer, exporter_timeout: float = 5.0, **options: Any):
    options.setdefault("schedule_delay_millis", 20)
    options.setdefault("grace_millis", 100)
    options.setdefault("loss_report_interval_millis", 3_600_000)  # only the one at shutdown
    provider = TracerProvider()
    processor = WholeTraceSpanProcessor(OTLPSpanExporter(endpoint=server.traces_url, timeout=exporter_timeout), **options)
    provider.add_span_processor(processor)
    return provider, processor, provider.get_tracer("test")


def make_trace(tracer: trace.Tracer, children: int = 2, **attributes: Any) -> int:
    with tracer.start_as_current_span("root", attributes=attributes or None) as root:
        for i in range(children):
            with tracer.start_as_current_span(f"child{i}"):
                pass
    return root.get_span_context().trace_id


def app_traces(server: OTLPServer) -> dict[str, list[ReceivedSpan]]:
    return {t: spans for t, spans in server.traces().items() if spans[0].name != semconv.LOSS_SPAN_NAME}


def loss_totals(server: OTLPServer) -> dict[str, int]:
    totals = dict.fromkeys(LOSS_KEYS, 0)
    for span in server.spans():
        if span.name == semconv.LOSS_SPAN_NAME:
            for key in LOSS_KEYS:
                totals[key] += span.attributes[key]
    return totals


def assert_whole(traces: dict[str, list[ReceivedSpan]]) -> None:
    """Every trace arrived whole: one local root whose span_count equals the spans received, every
    parent present, nothing marked late or incomplete."""
    for trace_id, spans in traces.items():
        roots = [s for s in spans if s.parent_span_id == ""]
        assert len(roots) == 1, trace_id
        assert roots[0].attributes[semconv.TRACE_SPAN_COUNT] == len(spans), trace_id
        ids = {s.span_id for s in spans}
        assert all(s.parent_span_id in ids for s in spans if s.parent_span_id), trace_id
        assert not any(semconv.TRACE_LATE in s.attributes or semconv.TRACE_INCOMPLETE in s.attributes for s in spans)


def test_a_trace_leaves_whole_in_one_request_root_last_and_counted(otlp_server: OTLPServer) -> None:  # noqa: F811
    provider, processor, tracer = pipeline(otlp_server)
    with tracer.start_as_current_span("root", attributes={"app.key": "v"}) as root:
        with tracer.start_as_current_span("child"), tracer.start_as_current_span("grandchild"):
            pass
        with tracer.start_as_current_span("child2"):
            pass
    assert provider.force_flush()
    (request,) = otlp_server.accepted_requests
    spans = otlp_server.spans()
    assert [s.name for s in spans] == ["grandchild", "child", "child2", "root"]
    assert {s.trace_id for s in spans} == {f"{root.get_span_context().trace_id:032x}"}
    attrs = dict(spans[-1].attributes)
    assert attrs.pop(semconv.TRACE_SPAN_COUNT) == 4
    assert attrs.pop("app.key") == "v"
    assert attrs == {}
    for span in spans[:-1]:
        assert span.attributes == {}
    provider.shutdown()
    # nothing was lost, so no loss record was sent
    assert [s.name for s in otlp_server.spans()] == ["grandchild", "child", "child2", "root"]


def test_a_straggler_within_the_grace_period_joins_its_trace(otlp_server: OTLPServer) -> None:  # noqa: F811
    provider, processor, tracer = pipeline(otlp_server, grace_millis=5_000)
    root = tracer.start_span("root")
    straggler = tracer.start_span("straggler", context=trace.set_span_in_context(root))
    root.end()
    time.sleep(0.1)  # the root's segment waits for its open child (not a timing assertion)
    assert otlp_server.requests == []
    straggler.end()
    spans = otlp_server.wait_for_spans(2)
    assert [s.name for s in spans] == ["straggler", "root"]
    assert spans[1].attributes[semconv.TRACE_SPAN_COUNT] == 2
    assert_whole(app_traces(otlp_server))
    provider.shutdown()


def test_a_span_ending_after_its_trace_left_is_exported_marked_late(otlp_server: OTLPServer) -> None:  # noqa: F811
    provider, processor, tracer = pipeline(otlp_server, grace_millis=20)
    root = tracer.start_span("root")
    late = tracer.start_span("late", context=trace.set_span_in_context(root))
    root.end()
    (root_received,) = otlp_server.wait_for_spans(1)
    assert root_received.attributes == {semconv.TRACE_SPAN_COUNT: 1}
    late.end()
    spans = otlp_server.wait_for_spans(2)
    assert spans[1].name == "late"
    assert spans[1].attributes == {semconv.TRACE_LATE: True}
    assert spans[1].parent_span_id == root_received.span_id
    provider.shutdown()


def test_queue_overflow_under_a_slow_exporter_drops_whole_traces_and_counts_exactly(
    otlp_server: OTLPServer,  # noqa: F811
) -> None:
    otlp_server.set_delay(0.05)
    provider, processor, tracer = pipeline(otlp_server, max_traces=8, max_export_batch_size=6)
    n = 200
    for i in range(n):
        make_trace(tracer, children=2, i=i)
        assert processor.buffered_traces <= 8
    otlp_server.set_delay(0)
    provider.shutdown()
    received = app_traces(otlp_server)
    assert_whole(received)
    for spans in received.values():
        assert len(spans) == 3
    dropped = processor.loss.total_traces_dropped
    assert dropped > 0  # the slow exporter did cause overflow
    assert len(received) + dropped == n
    assert sum(len(s) for s in received.values()) + processor.loss.total_spans_dropped == 3 * n
    assert processor.loss.total_traces_export_failed == 0
    # the loss reached the backend, and says so by the same arithmetic
    (record,) = [s for s in otlp_server.spans() if s.name == semconv.LOSS_SPAN_NAME]
    attrs = dict(record.attributes)
    assert attrs.pop(semconv.LOSS_TRACES_DROPPED) == dropped
    assert attrs.pop(semconv.LOSS_SPANS_DROPPED) == 3 * dropped
    assert attrs.pop(semconv.LOSS_TRACES_EXPORT_FAILED) == 0
    assert attrs.pop(semconv.LOSS_SPANS_EXPORT_FAILED) == 0
    assert attrs.pop(semconv.LOSS_REASON) == REASON_QUEUE_FULL
    assert attrs.pop(semconv.LOSS_WINDOW_START) <= record.end_time_unix_nano
    assert attrs.pop(semconv.SCHEMA) == semconv.SCHEMA_VERSION
    assert attrs.pop(semconv.TRACE_SPAN_COUNT) == 1
    assert attrs == {}


def test_memory_stays_within_max_bytes(otlp_server: OTLPServer) -> None:  # noqa: F811
    otlp_server.set_delay(0.05)
    provider, processor, tracer = pipeline(otlp_server, max_bytes=200_000)
    peak = 0
    for _i in range(300):
        make_trace(tracer, children=3, payload="x" * 2000)
        peak = max(peak, processor.buffered_bytes)
    assert 0 < peak <= 200_000
    otlp_server.set_delay(0)
    provider.shutdown()
    received = app_traces(otlp_server)
    assert_whole(received)
    assert len(received) + processor.loss.total_traces_dropped == 300


def test_a_trace_over_max_spans_per_trace_is_dropped_whole_and_counted(otlp_server: OTLPServer) -> None:  # noqa: F811
    provider, processor, tracer = pipeline(otlp_server, max_spans_per_trace=10)
    with tracer.start_as_current_span("big"):
        for i in range(30):
            with tracer.start_as_current_span(f"c{i}"):
                pass
    make_trace(tracer, children=2)
    provider.shutdown()
    received = app_traces(otlp_server)
    assert [sorted(s.name for s in spans) for spans in received.values()] == [["child0", "child1", "root"]]
    assert processor.loss.total_traces_dropped == 1
    assert processor.loss.total_spans_dropped == 31  # 11 buffered when dropped + 19 children + the root
    (record,) = [s for s in otlp_server.spans() if s.name == semconv.LOSS_SPAN_NAME]
    assert record.attributes[semconv.LOSS_TRACES_DROPPED] == 1
    assert record.attributes[semconv.LOSS_SPANS_DROPPED] == 31
    assert record.attributes[semconv.LOSS_REASON] == REASON_TRACE_TOO_LARGE


def test_the_application_never_waits_on_a_blocked_exporter(otlp_server: OTLPServer) -> None:  # noqa: F811
    gate = threading.Event()
    otlp_server.on_request(lambda request: gate.wait(30))
    provider, processor, tracer = pipeline(otlp_server, max_traces=50)
    make_trace(tracer)
    assert otlp_server.wait_for(lambda s: len(s.requests) == 1)  # the exporter is now stuck in a request
    errors: list[BaseException] = []

    def app() -> None:
        try:
            for _ in range(500):
                make_trace(tracer)
        except BaseException as exc:  # pragma: no cover - the assertion below reports it
            errors.append(exc)

    worker = threading.Thread(target=app)
    worker.start()
    worker.join(30)
    assert not worker.is_alive() and errors == []
    assert not gate.is_set() and len(otlp_server.requests) == 1  # all 500 traces done while it was stuck
    gate.set()
    otlp_server.on_request(None)
    provider.shutdown()
    received = app_traces(otlp_server)
    assert_whole(received)
    assert len(received) + processor.loss.total_traces_dropped == 501


def test_endpoint_down_is_counted_and_export_resumes_after_recovery(otlp_server: OTLPServer) -> None:  # noqa: F811
    provider, processor, tracer = pipeline(otlp_server, exporter_timeout=0.5, retry_timeout_millis=300)
    otlp_server.down()
    lost = [make_trace(tracer) for _ in range(5)]  # no exception reaches the application
    deadline = time.monotonic() + 30
    while processor.loss.total_traces_export_failed < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processor.loss.total_traces_export_failed == 5
    assert processor.loss.total_spans_export_failed == 15
    otlp_server.up()
    kept = [make_trace(tracer) for _ in range(5)]
    provider.shutdown()
    received = app_traces(otlp_server)
    assert set(received) == {f"{t:032x}" for t in kept}
    assert_whole(received)
    assert not {f"{t:032x}" for t in lost} & set(received)
    totals = loss_totals(otlp_server)
    assert totals == {
        semconv.LOSS_TRACES_DROPPED: 0,
        semconv.LOSS_SPANS_DROPPED: 0,
        semconv.LOSS_TRACES_EXPORT_FAILED: 5,
        semconv.LOSS_SPANS_EXPORT_FAILED: 15,
    }
    (record,) = [s for s in otlp_server.spans() if s.name == semconv.LOSS_SPAN_NAME]
    assert record.attributes[semconv.LOSS_REASON] == REASON_EXPORT_FAILED


def test_a_500_is_retried_with_backoff_until_accepted(otlp_server: OTLPServer) -> None:  # noqa: F811
    otlp_server.fail_with(500, times=2)
    provider, processor, tracer = pipeline(otlp_server, retry_timeout_millis=20_000)
    ids = [make_trace(tracer) for _ in range(3)]
    assert provider.force_flush(30_000)
    assert [r.status for r in otlp_server.requests] == [500, 500, 200]
    received = app_traces(otlp_server)
    assert set(received) == {f"{t:032x}" for t in ids}
    assert_whole(received)
    provider.shutdown()
    assert processor.loss.total_traces_export_failed == 0
    assert not [s for s in otlp_server.spans() if s.name == semconv.LOSS_SPAN_NAME]


def test_a_persistent_500_is_counted_lost_and_reported_once_healed(otlp_server: OTLPServer) -> None:  # noqa: F811
    otlp_server.fail_with(500)
    provider, processor, tracer = pipeline(otlp_server, retry_timeout_millis=300)
    for _ in range(4):
        make_trace(tracer, children=1)
    assert provider.force_flush(30_000)
    assert processor.loss.total_traces_export_failed == 4
    assert processor.loss.total_spans_export_failed == 8
    otlp_server.heal()
    kept = make_trace(tracer, children=1)
    provider.shutdown()
    assert set(app_traces(otlp_server)) == {f"{kept:032x}"}
    assert loss_totals(otlp_server)[semconv.LOSS_TRACES_EXPORT_FAILED] == 4
    assert loss_totals(otlp_server)[semconv.LOSS_SPANS_EXPORT_FAILED] == 8


def _big_trace(tracer: trace.Tracer, children: int, payload_chars: int) -> int:
    with tracer.start_as_current_span("root") as root:
        for i in range(children):
            with tracer.start_as_current_span(f"c{i}", attributes={"payload": chr(65 + i % 26) * payload_chars}):
                pass
    return root.get_span_context().trace_id


def test_an_oversized_trace_is_split_under_a_4_mib_receiver_limit(otlp_server: OTLPServer) -> None:  # noqa: F811
    limit = 4 * 1024 * 1024
    otlp_server.reject_over(limit)
    provider, processor, tracer = pipeline(otlp_server)
    _big_trace(tracer, children=40, payload_chars=250_000)  # ~10 MB in one trace
    provider.shutdown()
    assert all(r.accepted for r in otlp_server.requests)
    assert len(otlp_server.requests) >= 3
    assert max(r.body_bytes for r in otlp_server.requests) <= limit
    received = app_traces(otlp_server)
    assert_whole(received)
    (spans,) = received.values()
    assert len(spans) == 41
    # the part that carries the root and its span count goes first (issue 13: a later part that
    # fails leaves a root whose count shows the hole, never a rootless trace)
    assert spans[0].name == "root" and spans[0].request_index == otlp_server.requests[0].index
    assert all(len(s.attributes["payload"]) == 250_000 for s in spans[1:])
    assert processor.loss.total_traces_export_failed == 0


def test_a_receiver_limit_below_the_configured_one_is_found_and_nothing_lost(otlp_server: OTLPServer) -> None:  # noqa: F811
    otlp_server.reject_over(1024 * 1024)
    provider, processor, tracer = pipeline(otlp_server, retry_timeout_millis=300)
    _big_trace(tracer, children=30, payload_chars=200_000)
    ids = [make_trace(tracer) for _ in range(3)]
    provider.shutdown()
    received = app_traces(otlp_server)
    assert_whole(received)
    assert len(received) == 4 and all(f"{t:032x}" in received for t in ids)
    assert processor.loss.total_traces_export_failed == 0
    assert processor.max_request_bytes <= 1024 * 1024
    assert {r.status for r in otlp_server.requests} == {200, 413}


def test_force_flush_ignores_grace_and_shutdown_flushes_open_traces_marked_incomplete(
    otlp_server: OTLPServer,  # noqa: F811
) -> None:
    provider, processor, tracer = pipeline(otlp_server, grace_millis=60_000, schedule_delay_millis=60_000)
    root = tracer.start_span("waiting-root")
    open_child = tracer.start_span("open-child", context=trace.set_span_in_context(root))
    root.end()
    assert provider.force_flush()
    (received,) = otlp_server.spans()
    assert received.attributes == {semconv.TRACE_SPAN_COUNT: 1}
    other = tracer.start_span("never-ending-root")
    done_child = tracer.start_span("done-child", context=trace.set_span_in_context(other))
    done_child.end()
    provider.shutdown()
    names = {s.name: s for s in otlp_server.spans()}
    assert names["done-child"].attributes == {semconv.TRACE_INCOMPLETE: True}
    assert "never-ending-root" not in names and "open-child" not in names
    open_child.end()  # after shutdown: counted, never raised
    assert processor.loss.total_spans_dropped == 1


def test_twenty_threads_produce_complete_traces(otlp_server: OTLPServer) -> None:  # noqa: F811
    provider, processor, tracer = pipeline(otlp_server)
    ids: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(25):
            trace_id = make_trace(tracer, children=3)
            with lock:
                ids.append(trace_id)

    threads = [threading.Thread(target=work) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    provider.shutdown()
    received = app_traces(otlp_server)
    assert set(received) == {f"{t:032x}" for t in ids} and len(ids) == 500
    assert_whole(received)
    assert all(len(spans) == 4 for spans in received.values())
    assert processor.loss.total_traces_dropped == processor.loss.total_traces_export_failed == 0


async def test_two_hundred_asyncio_tasks_produce_complete_traces(otlp_server: OTLPServer) -> None:  # noqa: F811
    provider, processor, tracer = pipeline(otlp_server)

    async def request(i: int) -> int:
        with tracer.start_as_current_span("root") as root:
            for step in range(3):
                with tracer.start_as_current_span(f"step{step}"):
                    await asyncio.sleep(0.001 * (i % 5))  # interleave the tasks
        return root.get_span_context().trace_id

    ids = await asyncio.gather(*(request(i) for i in range(200)))
    await asyncio.to_thread(provider.shutdown)
    received = app_traces(otlp_server)
    assert set(received) == {f"{t:032x}" for t in ids}
    assert_whole(received)
    assert all(len(spans) == 4 for spans in received.values())


def test_spans_started_under_a_remote_parent_form_their_own_segment(otlp_server: OTLPServer) -> None:  # noqa: F811
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    provider, processor, tracer = pipeline(otlp_server)
    ctx = TraceContextTextMapPropagator().extract({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
    for name in ("server-a", "server-b"):
        with tracer.start_as_current_span(name, context=ctx), tracer.start_as_current_span(name + "-child"):
            pass
    provider.shutdown()
    spans = otlp_server.spans()
    roots = {s.name: s for s in spans if s.parent_span_id == "b7ad6b7169203331"}
    assert set(roots) == {"server-a", "server-b"}
    assert all(r.attributes == {semconv.TRACE_SPAN_COUNT: 2} for r in roots.values())


@pytest.mark.parametrize("bad", [0, -5])
def test_bad_limits_are_refused_clearly(bad: int) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    with pytest.raises(ValueError, match="must be > 0"):
        WholeTraceSpanProcessor(InMemorySpanExporter(), max_traces=bad)


def test_a_segment_whose_root_never_ends_is_dropped_at_max_age_and_counted(otlp_server: OTLPServer) -> None:  # noqa: F811
    provider, processor, tracer = pipeline(otlp_server, max_trace_age_millis=100)
    stuck = tracer.start_span("stuck-root")
    tracer.start_span("done-child", context=trace.set_span_in_context(stuck)).end()
    deadline = time.monotonic() + 10
    while processor.loss.total_traces_dropped < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert (processor.loss.total_traces_dropped, processor.loss.total_spans_dropped) == (1, 1)
    stuck.end()  # its segment is gone: counted, not exported with a hole
    assert (processor.loss.total_traces_dropped, processor.loss.total_spans_dropped) == (1, 2)
    make_trace(tracer)
    provider.shutdown()
    assert [sorted(s.name for s in spans) for spans in app_traces(otlp_server).values()] == [["child0", "child1", "root"]]
    (record,) = [s for s in otlp_server.spans() if s.name == semconv.LOSS_SPAN_NAME]
    assert record.attributes[semconv.LOSS_REASON] == "root_never_ended"
    assert record.attributes[semconv.LOSS_SPANS_DROPPED] == 2


def test_an_exporter_that_raises_is_counted_and_the_worker_survives(otlp_server: OTLPServer) -> None:  # noqa: F811
    from opentelemetry.sdk.trace.export import SpanExporter

    class Flaky(SpanExporter):
        def __init__(self) -> None:
            self.inner = OTLPSpanExporter(endpoint=otlp_server.traces_url)
            self.raise_next = 1

        def export(self, spans):  # type: ignore[no-untyped-def]
            if self.raise_next:
                self.raise_next -= 1
                raise RuntimeError("exporter bug")
            return self.inner.export(spans)

        def shutdown(self) -> None:
            self.inner.shutdown()

    provider = TracerProvider()
    processor = WholeTraceSpanProcessor(Flaky(), schedule_delay_millis=20, retry_timeout_millis=1)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    make_trace(tracer)
    assert provider.force_flush()
    assert processor.loss.total_traces_export_failed == 1
    kept = make_trace(tracer)
    provider.shutdown()
    assert set(app_traces(otlp_server)) == {f"{kept:032x}"}
    assert loss_totals(otlp_server)[semconv.LOSS_TRACES_EXPORT_FAILED] == 1


def test_a_trace_over_grpcs_4_mib_limit_arrives_whole_through_a_real_grpc_receiver() -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otlp_server import OTLPGrpcServer

    server = OTLPGrpcServer().start()
    try:
        # the problem: one export of the whole trace is refused by gRPC's default limit
        memory = InMemorySpanExporter()
        plain = TracerProvider()
        plain.add_span_processor(SimpleSpanProcessor(memory))
        _big_trace(plain.get_tracer("t"), children=24, payload_chars=250_000)  # ~6 MB
        direct = GrpcExporter(endpoint=server.endpoint, insecure=True, timeout=2)
        assert direct.export(memory.get_finished_spans()) is SpanExportResult.FAILURE
        direct.shutdown()
        assert server.spans() == []
        # the processor splits the segment under the limit: everything arrives, root part first
        provider = TracerProvider()
        processor = WholeTraceSpanProcessor(GrpcExporter(endpoint=server.endpoint, insecure=True, timeout=5), schedule_delay_millis=20)
        provider.add_span_processor(processor)
        _big_trace(provider.get_tracer("t"), children=24, payload_chars=250_000)
        provider.shutdown()
        spans = server.spans()
        assert len(spans) == 25 and len(server.requests) >= 2
        root = spans[0]
        assert root.name == "root"
        assert {kv.key: kv.value.int_value for kv in root.attributes}[semconv.TRACE_SPAN_COUNT] == 25
        assert processor.loss.total_traces_export_failed == 0
    finally:
        server.stop()


def test_losses_are_also_counted_as_metrics(otlp_server: OTLPServer) -> None:  # noqa: F811
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    provider, processor, tracer = pipeline(otlp_server, max_spans_per_trace=2, meter_provider=meters)
    make_trace(tracer, children=4)  # 5 spans > 2: dropped whole
    make_trace(tracer, children=1)  # 2 spans: kept
    provider.shutdown()
    points = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for point in metric.data.data_points:
                    points[(metric.name, point.attributes[semconv.LOSS_REASON])] = point.value
    assert points == {
        ("ragtrail.loss.traces", REASON_TRACE_TOO_LARGE): 1,
        ("ragtrail.loss.spans", REASON_TRACE_TOO_LARGE): 5,
    }
    meters.shutdown()


def test_a_slow_endpoint_delays_nothing_but_export_and_loses_nothing(otlp_server: OTLPServer) -> None:  # noqa: F811
    otlp_server.set_delay(0.3)
    provider, processor, tracer = pipeline(otlp_server, max_export_batch_size=10)
    ids = [make_trace(tracer, children=4) for _ in range(30)]  # 15 requests of 0.3 s each to come
    provider.shutdown()
    received = app_traces(otlp_server)
    assert set(received) == {f"{t:032x}" for t in ids}
    assert_whole(received)
    assert processor.loss.total_traces_dropped == processor.loss.total_traces_export_failed == 0


def test_two_processors_on_one_provider_keep_their_own_segments(otlp_server: OTLPServer) -> None:  # noqa: F811
    """A child started under an already-ended parent finds its segment through the parent span
    object; two processors on one provider must each find their own (a tee to two backends)."""
    provider = TracerProvider()
    for _ in range(2):
        provider.add_span_processor(
            WholeTraceSpanProcessor(
                OTLPSpanExporter(endpoint=otlp_server.traces_url), schedule_delay_millis=20, grace_millis=100, loss_report_interval_millis=3_600_000
            )
        )
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("root") as root:
        mid = tracer.start_span("mid")
        mid.end()
        with tracer.start_as_current_span("late", context=trace.set_span_in_context(mid)):
            pass
    assert provider.force_flush()
    spans = otlp_server.spans()
    assert sorted(s.name for s in spans) == sorted(["mid", "late", "root"] * 2)
    roots = [s for s in spans if s.name == "root"]
    assert [r.attributes[semconv.TRACE_SPAN_COUNT] for r in roots] == [3, 3]
    assert {s.trace_id for s in spans} == {f"{root.get_span_context().trace_id:032x}"}
    provider.shutdown()
