"""A real OTLP/HTTP trace receiver on loopback, for tests.

It decodes every request with ``opentelemetry-proto`` (protobuf, or OTLP JSON when the content type
says so; gzip/deflate bodies too), keeps what it accepted, and can be told to misbehave the way real
backends do: answer 500, refuse bodies over a size with 413 (a gRPC receiver's 4 MiB limit), answer
slowly, or go away entirely (connection refused) and come back on the same port.

Usage::

    from otlp_server import OTLPServer, otlp_server  # ``otlp_server`` is a pytest fixture

    def test_x(otlp_server):
        exporter = OTLPSpanExporter(endpoint=otlp_server.traces_url)
        ...
        spans = otlp_server.wait_for_spans(3)
        otlp_server.fail_with(500, times=2)   # next two requests answer 500
        otlp_server.reject_over(4 * 1024 * 1024)   # 413 for bodies over 4 MiB
        otlp_server.set_delay(0.5)            # every response 0.5 s late
        otlp_server.down(); otlp_server.up()  # connection refused, then back on the same port
        otlp_server.fail_with(429, retry_after=1)  # 429 with a Retry-After header
        otlp_server.hang()                    # read each request, never answer, never keep it
        otlp_server.reset_connections()       # read each request, then reset the connection (RST)
"""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

TRACES_PATH = "/v1/traces"
METRICS_PATH = "/v1/metrics"


def any_value(value: AnyValue) -> Any:
    """An OTLP AnyValue as a plain Python value."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind)


def attributes(key_values: Any) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in key_values}


@dataclass
class ReceivedEvent:
    name: str
    attributes: dict[str, Any]
    time_unix_nano: int
    dropped_attributes_count: int


@dataclass
class ReceivedSpan:
    """One span as it arrived, decoded (ids in lowercase hex, "" for no parent)."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    trace_state: str
    attributes: dict[str, Any]
    events: list[ReceivedEvent]
    dropped_attributes_count: int
    dropped_events_count: int
    dropped_links_count: int
    start_time_unix_nano: int
    end_time_unix_nano: int
    status_code: int
    resource: dict[str, Any]
    scope: str
    request_index: int
    proto: Any = field(repr=False, default=None)


@dataclass
class ReceivedRequest:
    """One HTTP request and what the server answered."""

    index: int
    path: str
    headers: dict[str, str]
    body_bytes: int
    status: int
    request: ExportTraceServiceRequest | None
    received_at: float
    body: bytes = b""  # the request body exactly as it arrived (before any decompression)

    @property
    def accepted(self) -> bool:
        return 200 <= self.status < 300

    @property
    def span_count(self) -> int:
        if self.request is None:
            return 0
        return sum(len(ss.spans) for rs in self.request.resource_spans for ss in rs.scope_spans)


class OTLPServer:
    """Loopback OTLP/HTTP receiver with programmable failures (see the module docstring)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Condition()
        self.requests: list[ReceivedRequest] = []
        self._fail_status: int | None = None
        self._fail_times: int | None = None
        self._retry_after: float | None = None
        self._hang = threading.Event()  # set: requests hang
        self._release = threading.Event()  # set: hanging requests are let go (closed, not stored)
        self._reset = False
        self._reject_over: int | None = None
        self._reject_status = 413
        self._delay = 0.0
        self._truncate_over: int | None = None
        self._on_request: Callable[[ReceivedRequest], None] | None = None
        self._connections: set[socket.socket] = set()

    # --- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> OTLPServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802
                server._handle(self)

            def handle(self) -> None:
                with server._lock:
                    server._connections.add(self.connection)
                try:
                    super().handle()
                except OSError:
                    pass
                finally:
                    with server._lock:
                        server._connections.discard(self.connection)

        self._httpd = ThreadingHTTPServer((self.host, self.port), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()  # hanging handlers give up their connections
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        with self._lock:  # keep-alive connections would otherwise go on being served
            connections, self._connections = list(self._connections), set()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def down(self) -> None:
        """Stop listening: clients get connection refused until :meth:`up`."""
        self.stop()

    def up(self) -> None:
        """Listen again on the same port."""
        if self._httpd is None:
            self.start()

    @property
    def is_up(self) -> bool:
        return self._httpd is not None

    def __enter__(self) -> OTLPServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def traces_url(self) -> str:
        return self.url + TRACES_PATH

    # --- failure modes ------------------------------------------------------------------------------
    def fail_with(self, status: int = 500, times: int | None = None, retry_after: float | None = None) -> None:
        """Answer ``status`` to the next ``times`` requests (every request when ``None``), with a
        ``Retry-After: <seconds>`` header when ``retry_after`` is given."""
        with self._lock:
            self._fail_status = status
            self._fail_times = times
            self._retry_after = retry_after

    def hang(self) -> None:
        """Read every request and never answer it (until :meth:`heal` or :meth:`stop`, which close
        the connection); a request that hung is not kept, as a backend that never committed it."""
        self._release.clear()
        self._hang.set()

    def reset_connections(self, on: bool = True) -> None:
        """Read every request, then reset the connection (TCP RST) without answering or keeping it."""
        self._reset = on

    def reject_over(self, max_body_bytes: int | None, status: int = 413) -> None:
        """Refuse bodies larger than ``max_body_bytes`` (``None`` to accept any size)."""
        with self._lock:
            self._reject_over = max_body_bytes
            self._reject_status = status

    def truncate_strings_over(self, max_bytes: int | None) -> None:
        """Store string attribute values (span and event) cut to ``max_bytes`` UTF-8 bytes, silently,
        as Tempo's distributor does (2,048 bytes by default) and a Collector's ``truncate_all``."""
        self._truncate_over = max_bytes

    def set_delay(self, seconds: float) -> None:
        """Wait this long before answering each request."""
        self._delay = seconds

    def heal(self) -> None:
        """Back to normal: no failures, no size limit, no delay (does not restart a down server)."""
        with self._lock:
            self._fail_status = None
            self._fail_times = None
            self._retry_after = None
            self._reject_over = None
        self._delay = 0.0
        self._reset = False
        self._hang.clear()
        self._release.set()

    def on_request(self, callback: Callable[[ReceivedRequest], None] | None) -> None:
        """Call ``callback`` with each request after it is recorded (in the server thread)."""
        self._on_request = callback

    # --- reading what arrived -----------------------------------------------------------------------
    def clear(self) -> None:
        with self._lock:
            self.requests = []

    @property
    def accepted_requests(self) -> list[ReceivedRequest]:
        """Accepted trace requests (metrics requests are kept in ``requests`` only)."""
        with self._lock:
            return [r for r in self.requests if r.accepted and r.path != METRICS_PATH]

    def spans(self) -> list[ReceivedSpan]:
        """Every span of every accepted request, in arrival order."""
        return list(self._iter_spans())

    def _iter_spans(self) -> Iterator[ReceivedSpan]:
        for req in self.accepted_requests:
            assert req.request is not None
            for rs in req.request.resource_spans:
                resource = attributes(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        yield ReceivedSpan(
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex(),
                            name=s.name,
                            kind=s.kind,
                            trace_state=s.trace_state,
                            attributes=attributes(s.attributes),
                            events=[ReceivedEvent(e.name, attributes(e.attributes), e.time_unix_nano, e.dropped_attributes_count) for e in s.events],
                            dropped_attributes_count=s.dropped_attributes_count,
                            dropped_events_count=s.dropped_events_count,
                            dropped_links_count=s.dropped_links_count,
                            start_time_unix_nano=s.start_time_unix_nano,
                            end_time_unix_nano=s.end_time_unix_nano,
                            status_code=s.status.code,
                            resource=resource,
                            scope=ss.scope.name,
                            request_index=req.index,
                            proto=s,
                        )

    def traces(self) -> dict[str, list[ReceivedSpan]]:
        """Accepted spans grouped by trace id (hex)."""
        grouped: dict[str, list[ReceivedSpan]] = {}
        for span in self.spans():
            grouped.setdefault(span.trace_id, []).append(span)
        return grouped

    def wait_for(self, predicate: Callable[[OTLPServer], bool], timeout: float = 10.0) -> bool:
        """Wait until ``predicate(self)`` holds (re-checked at every request); False on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            if predicate(self):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with self._lock:
                self._lock.wait(min(remaining, 0.1))

    def wait_for_spans(self, count: int, timeout: float = 10.0) -> list[ReceivedSpan]:
        """Wait until at least ``count`` spans were accepted; returns them (may be fewer on timeout)."""
        self.wait_for(lambda s: sum(r.span_count for r in s.accepted_requests) >= count, timeout)
        return self.spans()

    # --- the handler --------------------------------------------------------------------------------
    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in handler.headers.items()}
        if self._hang.is_set() or self._reset:
            if self._hang.is_set():
                self._release.wait()
            _abort(handler)
            return
        if self._delay:
            time.sleep(self._delay)
        with self._lock:
            status = 200
            if self._fail_status is not None and (self._fail_times is None or self._fail_times > 0):
                status = self._fail_status
                if self._fail_times is not None:
                    self._fail_times -= 1
            elif self._reject_over is not None and len(raw) > self._reject_over:
                status = self._reject_status
        request: ExportTraceServiceRequest | None = None
        if handler.path == METRICS_PATH:
            pass  # accepted, kept as it arrived (``body``): metrics tests decode it themselves
        elif handler.path != TRACES_PATH:
            status = 404
        else:
            try:
                request = _decode(raw, headers)
            except Exception:
                status = 400
            else:
                if self._truncate_over is not None:
                    _truncate(request, self._truncate_over)
        with self._lock:
            record = ReceivedRequest(
                index=len(self.requests),
                path=handler.path,
                headers=headers,
                body_bytes=len(raw),
                status=status,
                request=request,
                received_at=time.monotonic(),
                body=raw,
            )
            self.requests.append(record)
            self._lock.notify_all()
        if self._on_request is not None:
            self._on_request(record)
        if 200 <= status < 300:
            body = ExportTraceServiceResponse().SerializeToString()
            content_type = "application/x-protobuf"
        else:
            body = json.dumps({"code": status, "message": "refused by test server"}).encode()
            content_type = "application/json"
        handler.send_response(status)
        if status >= 300 and self._retry_after is not None:
            handler.send_header("Retry-After", f"{self._retry_after:g}")
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)


def _abort(handler: BaseHTTPRequestHandler) -> None:
    """Reset the connection (SO_LINGER 0: RST, not FIN) without an answer."""
    import struct

    try:
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        handler.connection.close()
    except OSError:
        pass
    handler.close_connection = True


def _truncate(request: ExportTraceServiceRequest, max_bytes: int) -> None:
    def cut_value(value: Any) -> None:
        kind = value.WhichOneof("value")
        if kind == "string_value":
            data = value.string_value.encode("utf-8")
            if len(data) > max_bytes:
                value.string_value = data[:max_bytes].decode("utf-8", "ignore")
        elif kind == "array_value":  # each string of an array (Tempo's processAttributes walks arrays)
            for item in value.array_value.values:
                cut_value(item)

    def cut(key_values: Any) -> None:
        for kv in key_values:
            cut_value(kv.value)

    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                cut(span.attributes)
                for event in span.events:
                    cut(event.attributes)


def _decode(raw: bytes, headers: dict[str, str]) -> ExportTraceServiceRequest:
    encoding = headers.get("content-encoding", "")
    if encoding == "gzip":
        raw = gzip.decompress(raw)
    elif encoding == "deflate":
        raw = zlib.decompress(raw)
    if headers.get("content-type", "").startswith("application/json"):
        from ragtrail.export.otlp_json import parse_request

        return parse_request(raw)
    request = ExportTraceServiceRequest()
    request.ParseFromString(raw)
    return request


class OTLPGrpcServer:
    """A real OTLP/gRPC trace receiver on loopback with gRPC's default 4 MiB receive limit (the
    limit that makes a backend keep a partial trace when a large export is refused)."""

    def __init__(self, max_receive_bytes: int | None = None) -> None:
        self.max_receive_bytes = max_receive_bytes
        self.requests: list[ExportTraceServiceRequest] = []
        self._lock = threading.Lock()
        self._server: Any = None
        self.port = 0

    def start(self) -> OTLPGrpcServer:
        from concurrent.futures import ThreadPoolExecutor

        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        server_self = self

        class Servicer(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: ExportTraceServiceRequest, context: Any) -> ExportTraceServiceResponse:  # noqa: N802
                with server_self._lock:
                    server_self.requests.append(request)
                return ExportTraceServiceResponse()

        options = []
        if self.max_receive_bytes is not None:
            options.append(("grpc.max_receive_message_length", self.max_receive_bytes))
        self._server = grpc.server(ThreadPoolExecutor(max_workers=4), options=options)
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Servicer(), self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None)
            self._server = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def spans(self) -> list[Any]:
        with self._lock:
            return [s for r in self.requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]


@pytest.fixture
def otlp_grpc_server() -> Iterator[OTLPGrpcServer]:
    """A started loopback OTLP/gRPC receiver (4 MiB receive limit), stopped after the test."""
    server = OTLPGrpcServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def otlp_server() -> Iterator[OTLPServer]:
    """A started loopback OTLP/HTTP receiver, stopped after the test."""
    server = OTLPServer().start()
    try:
        yield server
    finally:
        server.stop()


__all__ = ["OTLPServer", "OTLPGrpcServer", "otlp_grpc_server", "ReceivedSpan", "ReceivedEvent", "ReceivedRequest", "otlp_server", "any_value"]
