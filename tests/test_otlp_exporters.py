"""ragtrail's OTLP exporters send the stock encoder's exact bytes over HTTP and gRPC, with the stock
exporters' behaviour (headers, compression, retries) around them; every stock OTLP exporter that reaches
ragtrail's export path is upgraded, any other exporter is left alone.

HTTP against tests/otlp_server.py (a real receiver on loopback); gRPC against a grpc server on loopback
that keeps each request's raw bytes.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as stock_encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as StockGrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as StockHttpSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from otlp_server import OTLPServer, otlp_server  # noqa: F401  (fixture)
from ragtrail.export.local_store import LocalStoreSpanExporter
from ragtrail.export.otlp_exporters import with_ragtrail_encoder
from ragtrail.export.otlp_grpc import EXPORT_METHOD, RagtrailGrpcSpanExporter
from ragtrail.export.otlp_http import RagtrailHttpSpanExporter
from ragtrail.export.sender import Sender


def some_spans(count: int = 70) -> list[ReadableSpan]:
    """More spans than one encoding chunk, with events, links, arrays and a status."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("ragtrail.test", "1.0")
    with tracer.start_as_current_span("root", attributes={"ids": ("a", "b"), "n": -3, "x": float("nan")}) as root:
        for i in range(count - 1):
            with tracer.start_as_current_span(f"child{i}", attributes={"i": i, "text": "é" * i}) as child:
                child.add_event("candidate", {"rank": i, "score": i / 3})
                child.add_link(root.get_span_context(), {"why": "shared"})
        root.set_status(Status(StatusCode.ERROR, "boom"))
    return list(exporter.get_finished_spans())


# --- HTTP ----------------------------------------------------------------------------------------------
def test_http_sends_the_stock_bytes_with_its_headers(otlp_server: OTLPServer) -> None:  # noqa: F811
    spans = some_spans()
    exporter = RagtrailHttpSpanExporter(endpoint=otlp_server.traces_url, headers={"x-tenant": "t1"})
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    (request,) = otlp_server.accepted_requests
    assert request.body == stock_encode_spans(spans).SerializeToString()
    assert request.headers.get("x-tenant") == "t1"
    assert request.span_count == len(spans)


def test_http_compression_and_retry_are_the_stock_ones(otlp_server: OTLPServer) -> None:  # noqa: F811
    spans = some_spans(5)
    otlp_server.fail_with(503, times=1)
    exporter = RagtrailHttpSpanExporter(endpoint=otlp_server.traces_url, compression=HttpCompression.Gzip, timeout=10)
    assert exporter.export(spans) == SpanExportResult.SUCCESS  # the stock client retried the 503
    (request,) = otlp_server.accepted_requests
    assert gzip.decompress(request.body) == stock_encode_spans(spans).SerializeToString()


def test_http_max_request_size_refuses_as_the_stock_does(otlp_server: OTLPServer) -> None:  # noqa: F811
    exporter = RagtrailHttpSpanExporter(endpoint=otlp_server.traces_url, max_request_size=100)
    assert exporter.export(some_spans(5)) == SpanExportResult.FAILURE
    assert otlp_server.accepted_requests == []


def test_a_stock_exporter_given_to_ragtrail_is_upgraded_in_place(otlp_server: OTLPServer) -> None:  # noqa: F811
    stock = StockHttpSpanExporter(endpoint=otlp_server.traces_url)
    sender = Sender(stock, max_request_bytes=1 << 20, max_export_batch_size=512, retry_timeout=1.0)
    assert sender.exporter is stock and type(stock) is RagtrailHttpSpanExporter
    spans = some_spans(3)
    assert sender.export_once(spans)
    assert otlp_server.accepted_requests[0].body == stock_encode_spans(spans).SerializeToString()


def test_other_exporters_are_left_alone(tmp_path: Any) -> None:
    class Custom(StockHttpSpanExporter):
        pass

    for exporter in (InMemorySpanExporter(), LocalStoreSpanExporter(tmp_path), Custom(endpoint="http://127.0.0.1:9/v1/traces")):
        kind = type(exporter)
        assert with_ragtrail_encoder(exporter) is exporter and type(exporter) is kind


# --- gRPC ----------------------------------------------------------------------------------------------
class GrpcReceiver:
    """A trace service on loopback keeping each request's raw bytes and metadata; ``fail_next`` answers
    UNAVAILABLE that many times first (the stock exporter retries it)."""

    def __init__(self) -> None:
        self.requests: list[bytes] = []
        self.metadata: list[dict[str, str]] = []
        self.fail_next = 0
        self.lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        service, method = EXPORT_METHOD.rsplit("/", 1)
        handler = grpc.unary_unary_rpc_method_handler(
            self.export, request_deserializer=None, response_serializer=ExportTraceServiceResponse.SerializeToString
        )
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.lstrip("/"), {method: handler}),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def export(self, request: bytes, context: Any) -> ExportTraceServiceResponse:
        with self.lock:
            if self.fail_next:
                self.fail_next -= 1
                context.abort(grpc.StatusCode.UNAVAILABLE, "try again")
            self.requests.append(request)
            self.metadata.append({k: v for k, v in context.invocation_metadata()})
        return ExportTraceServiceResponse()


@pytest.fixture
def grpc_receiver() -> Iterator[GrpcReceiver]:
    receiver = GrpcReceiver()
    try:
        yield receiver
    finally:
        receiver.server.stop(None)


def test_grpc_sends_the_stock_bytes_with_its_metadata(grpc_receiver: GrpcReceiver) -> None:
    spans = some_spans()
    exporter = RagtrailGrpcSpanExporter(endpoint=f"http://127.0.0.1:{grpc_receiver.port}", insecure=True, headers={"x-tenant": "t1"})
    try:
        assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    assert grpc_receiver.requests == [stock_encode_spans(spans).SerializeToString()]
    assert grpc_receiver.metadata[0].get("x-tenant") == "t1"


def test_grpc_retries_and_reconnects_as_the_stock_does(grpc_receiver: GrpcReceiver) -> None:
    spans = some_spans(4)
    grpc_receiver.fail_next = 1  # UNAVAILABLE: the stock reconnects (a new stub from self._stub) and retries
    exporter = RagtrailGrpcSpanExporter(endpoint=f"http://127.0.0.1:{grpc_receiver.port}", insecure=True, timeout=20)
    started = time.monotonic()
    try:
        assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    assert time.monotonic() - started < 15
    assert grpc_receiver.requests == [stock_encode_spans(spans).SerializeToString()]


def test_a_stock_grpc_exporter_is_upgraded_in_place(grpc_receiver: GrpcReceiver) -> None:
    stock = StockGrpcSpanExporter(endpoint=f"http://127.0.0.1:{grpc_receiver.port}", insecure=True)
    try:
        assert with_ragtrail_encoder(stock) is stock and type(stock) is RagtrailGrpcSpanExporter
        spans = some_spans(3)
        assert stock.export(spans) == SpanExportResult.SUCCESS
    finally:
        stock.shutdown()
    assert grpc_receiver.requests == [stock_encode_spans(spans).SerializeToString()]


def test_grpc_compression_is_the_channels(grpc_receiver: GrpcReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip")  # read by the stock exporter, as always
    spans = some_spans(40)
    exporter = RagtrailGrpcSpanExporter(endpoint=f"http://127.0.0.1:{grpc_receiver.port}", insecure=True)
    try:
        assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    assert grpc_receiver.requests == [stock_encode_spans(spans).SerializeToString()]
