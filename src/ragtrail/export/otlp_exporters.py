"""ragtrail's OTLP span exporters: the stock HTTP and gRPC exporters with ragtrail's encoder in place of
the stock one (:mod:`ragtrail.export.otlp_http`, :mod:`ragtrail.export.otlp_grpc`).

Everything but the serialisation is the stock exporter's own code: endpoint, headers, timeout,
compression, TLS, retries, every ``OTEL_EXPORTER_OTLP_*`` variable, the exporter's metrics. The bytes
on the wire are the same (:mod:`ragtrail.export.otlp_encode` is byte-identical to the stock encoder);
they are made several times faster and in chunks of ``CHUNK_SPANS`` spans, yielding the GIL between
chunks, so that an exporter thread encoding a large batch does not stall the app's threads.

:func:`with_ragtrail_encoder` upgrades an exporter built elsewhere (by the SDK's configurator from
``OTEL_TRACES_EXPORTER`` / ``OTEL_EXPORTER_OTLP_*``, or by the user) when it is exactly a stock OTLP
span exporter; any other exporter (a subclass, another vendor's, the local store) is left as it is.
Nothing here imports an exporter module before one is in use.
"""

from __future__ import annotations

from opentelemetry.sdk.trace.export import SpanExporter

_STOCK_HTTP = ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "OTLPSpanExporter")
_STOCK_GRPC = ("opentelemetry.exporter.otlp.proto.grpc.trace_exporter", "OTLPSpanExporter")


def with_ragtrail_encoder(exporter: SpanExporter) -> SpanExporter:
    """The same exporter object, encoding with ragtrail's encoder when it is exactly a stock OTLP span
    exporter (its class becomes the ragtrail subclass, which adds no state); any other unchanged."""
    kind = (type(exporter).__module__, type(exporter).__qualname__)
    if kind == _STOCK_HTTP:
        from ragtrail.export import otlp_http

        return otlp_http.adopt(exporter)  # type: ignore[arg-type]
    if kind == _STOCK_GRPC:
        from ragtrail.export import otlp_grpc

        return otlp_grpc.adopt(exporter)  # type: ignore[arg-type]
    return exporter


__all__ = ["with_ragtrail_encoder"]
