"""Decode OTLP JSON (ExportTraceServiceRequest / TracesData) into the normalized model.

One decoder serves ragtrail's local store, the OpenTelemetry Collector's file exporter, Jaeger v2's
``/api/v3/traces`` (``{"result": ...}``) and Tempo (``resourceSpans`` or the older ``batches``, ids
in base64). Ids are accepted as hex or base64 and always come out as lowercase hex; int64 values
may arrive as JSON strings, doubles as ``"NaN"``/``"Infinity"``; both camelCase and snake_case field
names are read, because protobuf's JSON mapping allows either.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Iterator
from typing import Any

from .errors import MalformedInput
from .model import Event, Span

STATUS_CODES: dict[object, str] = {
    0: "UNSET",
    1: "OK",
    2: "ERROR",
    "STATUS_CODE_UNSET": "UNSET",
    "STATUS_CODE_OK": "OK",
    "STATUS_CODE_ERROR": "ERROR",
}
"""OTLP status codes, as numbers or enum names (both JSON spellings), to the model's UNSET/OK/ERROR."""

MAX_VALUE_DEPTH = 32
"""How deeply arrays and key/value lists may nest inside one attribute value. OTLP sets no bound;
ragtrail writes flat values, and a reader that recursed as deep as the input asked would end in a
RecursionError (exit 70) instead of a one-line "malformed input" (exit 4)."""


def depth_within(value: Any, limit: int) -> bool:
    """True when ``value`` nests at most ``limit`` lists/dicts deep (checked without recursion)."""
    level = [value]
    for _ in range(limit + 1):
        level = [v for item in level for v in (item.values() if isinstance(item, dict) else item) if isinstance(v, (list, dict))]
        if not level:
            return True
    return False


_INT64 = (-(1 << 63), 1 << 63)
_UINT64 = (0, 1 << 64)
# what a span or event decoder may meet and must report as malformed input, never as a bug
DECODE_ERRORS: tuple[type[Exception], ...] = (AttributeError, KeyError, TypeError, ValueError, OverflowError, IndexError)


def int64(value: Any) -> int:
    """An OTLP int64 (a JSON number or string); ``ValueError`` outside the int64 range."""
    n = int(value)
    if not _INT64[0] <= n < _INT64[1]:
        raise ValueError(f"integer {value!r:.40} is outside int64")
    return n


def uint64(value: Any) -> int:
    """An OTLP fixed64/uint32 (times, dropped counts): ``0`` when absent, ``ValueError`` when negative or too big."""
    if value is None or value == "":
        return 0
    n = int(value)
    if not _UINT64[0] <= n < _UINT64[1]:
        raise ValueError(f"count or time {value!r:.40} is outside 0..2**64")
    return n


def text_or_none(value: Any, what: str) -> str | None:
    """A field that must be a string when present (a name, tracestate, a status message)."""
    if value is None or isinstance(value, str):
        return value
    raise MalformedInput(f"{what} is a {type(value).__name__}, not a string", "the input is not OTLP JSON")


def attribute_key(key: Any) -> str:
    """An attribute key: always a string (a number or object there would break every reader downstream)."""
    if isinstance(key, str):
        return key
    raise MalformedInput(f"attribute key {key!r:.60} is a {type(key).__name__}, not a string", "the input is not OTLP JSON")


def _get(d: dict[str, Any], camel: str, snake: str, default: Any = None) -> Any:
    value = d.get(camel)
    if value is None:
        value = d.get(snake, default)
    return value


def decode_id(value: Any, nbytes: int) -> str | None:
    """An OTLP id as lowercase hex: hex input (2*n digits) is kept, base64 (Tempo, protobuf JSON) decoded."""
    if not value:
        return None
    if not isinstance(value, str):
        raise MalformedInput(f"span id {value!r} is not a string", "the input is not OTLP JSON")
    text = value.strip()
    if len(text) == 2 * nbytes:
        try:
            int(text, 16)
            return text.lower()
        except ValueError:
            pass
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) == nbytes:
        return raw.hex()
    if all(c in "0123456789abcdefABCDEF" for c in text) and 0 < len(text) <= 2 * nbytes:
        return text.lower().rjust(2 * nbytes, "0")
    raise MalformedInput(f"id {text!r} is neither hex nor base64 of {nbytes} bytes", "the input is not OTLP JSON")


def decode_value(value: Any, depth: int = 0) -> Any:
    """An OTLP ``AnyValue`` as a Python value (``None`` for an empty value). A string value must be a
    string; arrays and key/value lists may nest :data:`MAX_VALUE_DEPTH` levels deep."""
    if not isinstance(value, dict):
        return value
    for key, inner in value.items():
        if key in ("stringValue", "string_value"):
            if not isinstance(inner, str):
                raise MalformedInput(f"stringValue is a {type(inner).__name__}", "the input is not OTLP JSON")
            return inner
        if key in ("intValue", "int_value"):
            if isinstance(inner, float) and not inner.is_integer():
                raise ValueError(f"intValue {inner!r} is not an integer")
            return int64(inner)
        if key in ("doubleValue", "double_value"):
            if isinstance(inner, bool) or not isinstance(inner, (int, float, str)):
                raise ValueError(f"doubleValue is a {type(inner).__name__}")
            return float(inner)
        if key in ("boolValue", "bool_value"):
            return bool(inner) if not isinstance(inner, str) else inner == "true"
        if key in ("arrayValue", "array_value", "kvlistValue", "kvlist_value"):
            if depth >= MAX_VALUE_DEPTH:
                raise MalformedInput(
                    f"an attribute value nests deeper than {MAX_VALUE_DEPTH} levels",
                    "ragtrail reads values nested up to that depth: the input is not a trace it reads",
                )
            values = (inner or {}).get("values") or []
            if not isinstance(values, list):
                raise TypeError(f"{key}.values is a {type(values).__name__}, not a list")
            if key in ("arrayValue", "array_value"):
                return [decode_value(v, depth + 1) for v in values]
            return decode_attributes(values, depth + 1)
        if key in ("bytesValue", "bytes_value"):
            return base64.b64decode(inner)
    return None


def decode_attributes(items: Iterable[dict[str, Any]] | None, depth: int = 0) -> dict[str, Any]:
    """Attributes as a dict. Strings, ints and doubles (nearly all of a ragtrail trace: a 5,000-span
    trace holds about a million of them) take an inlined fast path; everything else goes through
    :func:`decode_value`. Keys must be strings."""
    out: dict[str, Any] = {}
    if not items:
        return out
    for kv in items:
        key = kv["key"]
        if type(key) is not str:
            key = attribute_key(key)
        value = kv.get("value")
        if value:
            if "stringValue" in value:
                inner = value["stringValue"]
                if type(inner) is str:
                    out[key] = inner
                    continue
            elif "intValue" in value:
                inner = value["intValue"]
                if type(inner) is str or type(inner) is int:
                    out[key] = int64(inner)
                    continue
            elif "doubleValue" in value:
                inner = value["doubleValue"]
                if type(inner) is float:
                    out[key] = inner
                    continue
        out[key] = decode_value(value, depth)
    return out


_int = uint64


def _scope_spans(resource_spans: dict[str, Any]) -> list[dict[str, Any]]:
    return (
        resource_spans.get("scopeSpans")
        or resource_spans.get("scope_spans")
        or resource_spans.get("instrumentationLibrarySpans")
        or resource_spans.get("instrumentation_library_spans")
        or []
    )


def decode_span(raw: dict[str, Any], resource: dict[str, Any], scope_name: str | None, scope_attributes: dict[str, Any] | None = None) -> Span:
    """One OTLP JSON span."""
    events: list[Event] = []
    append = events.append
    for e in raw.get("events") or ():  # the hot loop: up to 100,000 events a trace, so no helper calls
        when = e.get("timeUnixNano")
        if when is None:
            when = e.get("time_unix_nano")
        dropped = e.get("droppedAttributesCount")
        if dropped is None:
            dropped = e.get("dropped_attributes_count")
        name = e.get("name", "")
        if type(name) is not str:
            name = text_or_none(name, "an event name") or ""
        append(Event(name, uint64(when), decode_attributes(e.get("attributes")), uint64(dropped)))
    status = raw.get("status") or {}
    code = status.get("code")
    return Span(
        trace_id=decode_id(_get(raw, "traceId", "trace_id"), 16) or "",
        span_id=decode_id(_get(raw, "spanId", "span_id"), 8) or "",
        parent_span_id=decode_id(_get(raw, "parentSpanId", "parent_span_id"), 8),
        name=text_or_none(raw.get("name", ""), "a span name") or "",
        start_ns=_int(_get(raw, "startTimeUnixNano", "start_time_unix_nano", 0)),
        end_ns=_int(_get(raw, "endTimeUnixNano", "end_time_unix_nano", 0)),
        attributes=decode_attributes(raw.get("attributes")),
        events=events,
        dropped_attributes=_int(_get(raw, "droppedAttributesCount", "dropped_attributes_count", 0)),
        dropped_events=_int(_get(raw, "droppedEventsCount", "dropped_events_count", 0)),
        dropped_links=_int(_get(raw, "droppedLinksCount", "dropped_links_count", 0)),
        trace_state=text_or_none(_get(raw, "traceState", "trace_state") or None, "a tracestate"),
        resource=resource,
        scope_name=text_or_none(scope_name, "a scope name"),
        status_code=STATUS_CODES.get(code, str(code) if code is not None else None),
        status_message=text_or_none(status.get("message") or None, "a status message"),
        scope_attributes=scope_attributes if scope_attributes is not None else {},
    )


def iter_resource_spans(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``resourceSpans`` list of an OTLP JSON document (or Tempo's older ``batches``)."""
    found = document.get("resourceSpans")
    if found is None:
        found = document.get("resource_spans")
    if found is None:
        found = document.get("batches")
    if not isinstance(found, list):
        raise MalformedInput("no resourceSpans in the document", "expected OTLP JSON traces")
    return found


def decode_document(document: dict[str, Any], trace_id: str | None = None) -> Iterator[Span]:
    """Every span of an OTLP JSON document; only those of ``trace_id`` (hex) when given."""
    try:
        for rs in iter_resource_spans(document):
            resource = decode_attributes((rs.get("resource") or {}).get("attributes"))
            for ss in _scope_spans(rs):
                scope = ss.get("scope") or ss.get("instrumentationLibrary") or {}
                scope_name = scope.get("name")
                scope_attributes = decode_attributes(scope.get("attributes"))
                for raw in ss.get("spans") or ():
                    span = decode_span(raw, resource, scope_name, scope_attributes)
                    if trace_id is None or span.trace_id == trace_id:
                        yield span
    except MalformedInput:
        raise
    except DECODE_ERRORS as exc:
        raise MalformedInput(
            f"not valid OTLP JSON ({type(exc).__name__}: {str(exc)[:200]})", "expected OTLP JSON traces (resourceSpans/scopeSpans/spans)"
        ) from None


def id_forms(trace_id: str) -> tuple[str, str]:
    """The hex and base64 spellings of a trace id, for a cheap substring test before parsing a line."""
    return trace_id, base64.b64encode(bytes.fromhex(trace_id)).decode("ascii")
