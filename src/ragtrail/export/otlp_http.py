"""The stock OTLP/HTTP span exporter sending ragtrail's encoding of the request (same bytes, faster,
in chunks that yield the GIL; see :mod:`ragtrail.export.otlp_exporters`).

``export`` is the stock method with its encoding line swapped: the size limit, the client (retries,
timeout, compression, headers), the exporter's metrics and every ``OTEL_EXPORTER_OTLP_*`` variable are
the stock exporter's own. With an exporter version whose internals differ from the ones this was
written against, it falls back to the stock ``export`` (same bytes, the stock's speed).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as StockHttpSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from ragtrail.export.otlp_encode import encode_request

# the stock HTTP exporter logs through its own module's logger: its messages keep their logger
_http_logger = logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter")


class RagtrailHttpSpanExporter(StockHttpSpanExporter):
    """The stock OTLP/HTTP span exporter sending ragtrail's encoding of the request."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not self._has_known_internals():
            return super().export(spans)
        if self._shutdown:
            _http_logger.warning("Exporter already shutdown, ignoring batch")
            return SpanExportResult.FAILURE
        with self._metrics.export_operation(len(spans)) as result:
            try:
                serialized_data = encode_request(spans)
            except Exception as error:  # the stock's catch: a batch that cannot be encoded fails
                _http_logger.error("Failed to encode span batch: %s", error)
                result.error = error
                return SpanExportResult.FAILURE
            return self._send_serialized(serialized_data, result)

    def _send_serialized(self, serialized_data: bytes, result: Any) -> SpanExportResult:
        """The rest of the stock ``export``: the size limit, then the client (retries, timeout, compression)."""
        if 0 < self._max_request_size < len(serialized_data):
            _http_logger.warning(
                "Dropping span batch: serialized size %d bytes exceeds max_request_size %d bytes.",
                len(serialized_data),
                self._max_request_size,
            )
            result.error = _payload_too_large(len(serialized_data), self._max_request_size)
            return SpanExportResult.FAILURE
        export_result = self._client.export(serialized_data)
        if not export_result.success:
            result.error = export_result.error
            result.error_attrs = {"http.response.status_code": export_result.status_code} if export_result.status_code is not None else None
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def _has_known_internals(self) -> bool:
        return all(hasattr(self, name) for name in ("_client", "_metrics", "_max_request_size", "_shutdown")) and hasattr(self._client, "export")


def _payload_too_large(size: int, limit: int) -> Exception:
    """The stock's own error type when this exporter version has it (its class name is reported as
    ``error.type`` in the exporter's metrics)."""
    message = f"Serialized span request size {size} bytes exceeds max_request_size {limit} bytes."
    try:
        from opentelemetry.exporter.otlp.proto.http import _common

        error_type: type[Exception] = _common.RequestPayloadTooLargeError
    except (ImportError, AttributeError):
        error_type = ValueError
    return error_type(message)


def adopt(exporter: StockHttpSpanExporter) -> RagtrailHttpSpanExporter:
    """Turn a stock exporter object into this subclass (which adds no state)."""
    exporter.__class__ = RagtrailHttpSpanExporter
    assert isinstance(exporter, RagtrailHttpSpanExporter)
    return exporter


__all__ = ["RagtrailHttpSpanExporter", "adopt"]
