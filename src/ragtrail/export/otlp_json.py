"""OTLP JSON encoding of spans, byte-for-byte the shape the Collector's file exporter writes.

The SDK's own OTLP encoder (``opentelemetry-exporter-otlp-proto-common``) builds the protobuf
``ExportTraceServiceRequest``; ``google.protobuf.json_format`` renders it as ProtoJSON. The only
difference between ProtoJSON and OTLP JSON is the ids: ProtoJSON writes ``bytes`` fields in
base64, OTLP JSON writes ``traceId``/``spanId``/``parentSpanId`` (and link ids) as lowercase hex.
Enums are integers (``"kind": 1``), field names camelCase, 64-bit integers strings
(``"startTimeUnixNano": "1700000000000000000"``), default values omitted, as the OTLP spec says.

:func:`parse_request` reads both hex (OTLP JSON, Jaeger v2) and base64 (Tempo) ids back, so
readers can share it.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan

_SPAN_ID_FIELDS = ("traceId", "spanId", "parentSpanId")
_HEX = frozenset("0123456789abcdefABCDEF")


def encode_request(spans: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
    """The protobuf request the OTLP exporters would send for ``spans``."""
    return encode_spans(spans)


def _iter_id_holders(document: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for resource_spans in document.get("resourceSpans", ()):
        for scope_spans in resource_spans.get("scopeSpans", ()):
            for span in scope_spans.get("spans", ()):
                yield span
                yield from span.get("links", ())


def _b64_to_hex(value: str) -> str:
    return base64.b64decode(value).hex()


def _to_b64(value: str, expected_bytes: int | None) -> str:
    """Accept hex (OTLP JSON) or base64 (ProtoJSON, Tempo) and return base64 for ``json_format``."""
    if value and all(c in _HEX for c in value) and len(value) % 2 == 0 and (expected_bytes is None or len(value) == expected_bytes * 2):
        return base64.b64encode(bytes.fromhex(value)).decode("ascii")
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"id {value!r} is neither hex nor base64") from exc
    return value


def request_to_dict(request: ExportTraceServiceRequest) -> dict[str, Any]:
    """OTLP JSON object (a dict ready for ``json.dumps``) of a protobuf request, with hex ids."""
    document: dict[str, Any] = json_format.MessageToDict(request, use_integers_for_enums=True)
    for holder in _iter_id_holders(document):
        for field in _SPAN_ID_FIELDS:
            if field in holder:
                holder[field] = _b64_to_hex(holder[field])
    return document


def spans_to_dict(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """OTLP JSON object for ``spans``: ``{"resourceSpans": [...]}``."""
    return request_to_dict(encode_request(spans))


def spans_to_json_line(spans: Sequence[ReadableSpan]) -> str:
    """One compact OTLP JSON line (no trailing newline), as the Collector file exporter writes."""
    return json.dumps(spans_to_dict(spans), separators=(",", ":"), ensure_ascii=False)


def dict_to_request(document: Mapping[str, Any]) -> ExportTraceServiceRequest:
    """Parse an OTLP JSON object (hex or base64 ids) into the protobuf request."""
    copy = json.loads(json.dumps(document))  # never mutate the caller's object
    for holder in _iter_id_holders(copy):
        for field, size in (("traceId", 16), ("spanId", 8), ("parentSpanId", 8)):
            if holder.get(field):
                holder[field] = _to_b64(holder[field], size)
    request = ExportTraceServiceRequest()
    json_format.ParseDict(copy, request, ignore_unknown_fields=True)
    return request


def parse_request(line: str | bytes) -> ExportTraceServiceRequest:
    """Parse one OTLP JSON line (or whole document) into the protobuf request."""
    return dict_to_request(json.loads(line))


__all__ = [
    "encode_request",
    "request_to_dict",
    "spans_to_dict",
    "spans_to_json_line",
    "dict_to_request",
    "parse_request",
]
