"""The stock OTLP/gRPC span exporter sending ragtrail's encoding of the request (same bytes, faster,
in chunks that yield the GIL; see :mod:`ragtrail.export.otlp_exporters`).

The stub's ``Export`` is the same method on the same channel with an identity request serializer, so
the pre-encoded request goes out as is; everything else (endpoint, TLS, headers, timeout, compression,
retries and reconnection, ``OTEL_EXPORTER_OTLP_*``) is the stock exporter's own code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as StockGrpcSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace import ReadableSpan

from ragtrail.export.otlp_encode import encode_request

EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


class PreEncodedTraceStub:
    """The trace service stub with an identity request serializer: ``Export(request=bytes, ...)``."""

    def __init__(self, channel: Any) -> None:
        self.Export = channel.unary_unary(EXPORT_METHOD, request_serializer=None, response_deserializer=ExportTraceServiceResponse.FromString)


class RagtrailGrpcSpanExporter(StockGrpcSpanExporter):
    """The stock OTLP/gRPC span exporter sending ragtrail's encoding of the request."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.use_pre_encoded_stub()

    def use_pre_encoded_stub(self) -> None:
        """Send bytes: the stock re-creates its stub from ``self._stub`` when it reconnects, so it stays ours."""
        self._stub = PreEncodedTraceStub
        self._client = PreEncodedTraceStub(self._channel)  # type: ignore[assignment]  # annotated None by the stock

    def _translate_data(self, data: Sequence[ReadableSpan]) -> Any:
        return encode_request(data)


def adopt(exporter: StockGrpcSpanExporter) -> RagtrailGrpcSpanExporter:
    """Turn a stock exporter object into this subclass (which adds no state), keeping its channel."""
    exporter.__class__ = RagtrailGrpcSpanExporter
    assert isinstance(exporter, RagtrailGrpcSpanExporter)
    exporter.use_pre_encoded_stub()
    return exporter


__all__ = ["RagtrailGrpcSpanExporter", "PreEncodedTraceStub", "adopt"]
