"""Decode Jaeger's v1 JSON (``GET /api/traces/{id}``) into the normalized model.

The v1 model loses what OTLP carries: events become ``logs`` (name in the ``event`` field),
tracestate becomes the tag ``w3c.tracestate``, status becomes ``otel.status_code`` tags, and the
SDK's dropped counts are not carried at all. The decoder maps back what it can and marks the trace
``keeps_dropped_counts=False`` so the fidelity report says eviction cannot be seen from this source.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import MalformedInput
from .model import Event, Span, Trace, normalize_trace_id
from .otlp import DECODE_ERRORS, MAX_VALUE_DEPTH, attribute_key, depth_within, int64, text_or_none, uint64

_RESERVED_TAGS = {
    "span.kind",
    "otel.status_code",
    "otel.status_description",
    "w3c.tracestate",
    "otel.scope.name",
    "otel.library.name",
    "otel.scope.version",
    "otel.library.version",
    "internal.span.format",
    "error",
}


def _tag_value(tag: dict[str, Any]) -> Any:
    value = tag.get("value")
    kind = (tag.get("type") or "string").lower()
    if kind in ("int64", "int"):
        return int64(value)
    if kind in ("float64", "float"):
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"float64 tag value is a {type(value).__name__}")
        return float(value)
    if kind == "bool":
        return value if isinstance(value, bool) else str(value).lower() == "true"
    if isinstance(value, str) and value[:1] == "[" and value[-1:] == "]":
        # Jaeger stores OTLP array attributes as their JSON text
        try:
            parsed = json.loads(value)
            if isinstance(parsed, list) and depth_within(parsed, MAX_VALUE_DEPTH):
                return parsed
        except (ValueError, RecursionError):  # not JSON, or nested too deep to be an OTLP array: the text as it is
            pass
    return value


def _tags(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {attribute_key(t["key"]): _tag_value(t) for t in items or ()}


def decode_jaeger_trace(data: dict[str, Any], source: str) -> Trace:
    """One element of v1's ``data`` list."""
    try:
        processes = {pid: _tags(p.get("tags")) | {"service.name": p.get("serviceName")} for pid, p in (data.get("processes") or {}).items()}
        spans: list[Span] = []
        notes: list[str] = []
        trace_id = normalize_trace_id(data.get("traceID", ""))
        for raw in data.get("spans") or ():
            tags = _tags(raw.get("tags"))
            parent = None
            for ref in raw.get("references") or ():
                if ref.get("refType") == "CHILD_OF":
                    parent = ref.get("spanID")
                    break
            parent = parent or raw.get("parentSpanID") or None
            events = []
            for log in raw.get("logs") or ():
                fields = _tags(log.get("fields"))
                name = fields.pop("event", "")
                events.append(
                    Event(name=str(name), time_ns=uint64(uint64(log.get("timestamp", 0)) * 1000), attributes=fields, dropped_attributes=None)
                )
            start = uint64(uint64(raw.get("startTime", 0)) * 1000)
            for warning in raw.get("warnings") or ():
                notes.append(f"Jaeger warning on span {raw.get('spanID')}: {warning}")
            spans.append(
                Span(
                    trace_id=normalize_trace_id(raw.get("traceID", trace_id)),
                    span_id=str(raw["spanID"]).lower().rjust(16, "0"),
                    parent_span_id=str(parent).lower().rjust(16, "0") if parent else None,
                    name=text_or_none(raw.get("operationName", ""), "an operationName") or "",
                    start_ns=start,
                    end_ns=uint64(start + uint64(raw.get("duration", 0)) * 1000),
                    attributes={k: v for k, v in tags.items() if k not in _RESERVED_TAGS},
                    events=events,
                    dropped_attributes=None,
                    dropped_events=None,
                    dropped_links=None,
                    trace_state=text_or_none(tags.get("w3c.tracestate") or None, "a w3c.tracestate tag"),
                    resource=processes.get(raw.get("processID"), {}),
                    scope_name=text_or_none(tags.get("otel.scope.name") or tags.get("otel.library.name"), "a scope name"),
                    status_code=text_or_none(tags.get("otel.status_code"), "an otel.status_code tag"),
                    status_message=text_or_none(tags.get("otel.status_description"), "an otel.status_description tag"),
                )
            )
    except DECODE_ERRORS as exc:
        raise MalformedInput(
            f"not valid Jaeger JSON ({type(exc).__name__}: {str(exc)[:200]})", "expected the body of Jaeger's GET /api/traces/{id}"
        ) from None
    notes.append("Jaeger's v1 API does not carry dropped counts: SDK evictions cannot be seen from this source")
    return Trace(trace_id=trace_id, spans=spans, source=source, keeps_dropped_counts=False, notes=notes)
