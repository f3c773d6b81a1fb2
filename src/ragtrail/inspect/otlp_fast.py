"""A fast path for the commonest input: one OTLP JSON line as ragtrail's local store or the Collector writes it.

:mod:`ragtrail.inspect.otlp` decodes any spelling of OTLP JSON from plain dicts. On a 5,000-span
trace (35-85 MB) most of the time went into making those dicts (one per attribute and one per
attribute value: about two million for 100,000 events) and freeing them again. ``msgspec`` decodes
the bytes straight into the typed structs below, which cost a fraction of that (benchmarks/README.md).

The structs accept exactly the camelCase OTLP JSON fields and nothing else (``forbid_unknown_fields``):
a snake_case document, Tempo's ``batches``, a Jaeger or Tempo wrapper, a value of an unexpected type,
or anything malformed is refused, and :func:`decode_line` returns ``None`` so that the caller takes the
general decoder, which also produces the one-line errors. Whatever this path accepts it decodes to the
same :class:`~ragtrail.inspect.model.Span` objects as the general decoder (tests/test_inspect_readers.py
compares the two). Without msgspec installed the general decoder alone is used.
"""

from __future__ import annotations

from typing import Any

from .model import Event, Span
from .otlp import STATUS_CODES, decode_attributes, decode_id, decode_value, int64, uint64

try:
    import msgspec
except ImportError:  # pragma: no cover - msgspec is a runtime dependency; the general decoder still works
    msgspec = None  # type: ignore[assignment]

_Int = int | str | None  # int64 values may arrive as JSON strings

if msgspec is not None:

    class _Value(msgspec.Struct, forbid_unknown_fields=True):
        stringValue: str | None = None
        intValue: _Int = None
        doubleValue: float | str | None = None
        boolValue: Any = None
        arrayValue: Any = None
        kvlistValue: Any = None
        bytesValue: Any = None

    class _KeyValue(msgspec.Struct, forbid_unknown_fields=True):
        key: str
        value: _Value | None = None

    class _Event(msgspec.Struct, forbid_unknown_fields=True):
        name: str = ""
        timeUnixNano: _Int = None
        attributes: list[_KeyValue] | None = None
        droppedAttributesCount: _Int = None

    class _Status(msgspec.Struct, forbid_unknown_fields=True):
        code: int | str | None = None
        message: str | None = None

    class _Span(msgspec.Struct, forbid_unknown_fields=True):
        traceId: str | None = None
        spanId: str | None = None
        parentSpanId: str | None = None
        traceState: str | None = None
        flags: _Int = None
        name: str = ""
        kind: int | str | None = None
        startTimeUnixNano: _Int = None
        endTimeUnixNano: _Int = None
        attributes: list[_KeyValue] | None = None
        droppedAttributesCount: _Int = None
        events: list[_Event] | None = None
        droppedEventsCount: _Int = None
        links: Any = None
        droppedLinksCount: _Int = None
        status: _Status | None = None

    class _Scope(msgspec.Struct, forbid_unknown_fields=True):
        name: str | None = None
        version: str | None = None
        attributes: Any = None
        droppedAttributesCount: _Int = None

    class _ScopeSpans(msgspec.Struct, forbid_unknown_fields=True):
        scope: _Scope | None = None
        spans: list[_Span] | None = None
        schemaUrl: str | None = None

    class _Resource(msgspec.Struct, forbid_unknown_fields=True):
        attributes: list[_KeyValue] | None = None
        droppedAttributesCount: _Int = None

    class _ResourceSpans(msgspec.Struct, forbid_unknown_fields=True):
        resource: _Resource | None = None
        scopeSpans: list[_ScopeSpans] | None = None
        schemaUrl: str | None = None

    class _Document(msgspec.Struct, forbid_unknown_fields=True):
        resourceSpans: list[_ResourceSpans]

    _DECODER = msgspec.json.Decoder(_Document)
    _REFUSED: tuple[type[Exception], ...] = (msgspec.DecodeError, ValueError, TypeError)


def _attributes(items: list[Any] | None) -> dict[str, Any]:
    """What :func:`ragtrail.inspect.otlp.decode_attributes` makes of the same key/value list."""
    out: dict[str, Any] = {}
    if not items:
        return out
    for kv in items:
        v = kv.value
        if v is None:
            out[kv.key] = None
        elif v.stringValue is not None:
            out[kv.key] = v.stringValue
        elif v.intValue is not None:
            out[kv.key] = int64(v.intValue)
        elif v.doubleValue is not None:
            out[kv.key] = float(v.doubleValue)
        elif v.boolValue is not None:
            out[kv.key] = decode_value({"boolValue": v.boolValue})
        elif v.arrayValue is not None:
            out[kv.key] = decode_value({"arrayValue": v.arrayValue})
        elif v.kvlistValue is not None:
            out[kv.key] = decode_value({"kvlistValue": v.kvlistValue})
        elif v.bytesValue is not None:
            out[kv.key] = decode_value({"bytesValue": v.bytesValue})
        else:
            out[kv.key] = None
    return out


_n = uint64


def decode_line(data: bytes, trace_id: str | None = None) -> list[Span] | None:
    """The spans (of ``trace_id`` when given) of one camelCase OTLP JSON document, or ``None`` when this
    fast path does not apply and the general decoder must read the document instead."""
    if msgspec is None:
        return None
    try:
        document = _DECODER.decode(data)
        spans: list[Span] = []
        for rs in document.resourceSpans:
            resource = _attributes(rs.resource.attributes) if rs.resource is not None else {}
            for ss in rs.scopeSpans or ():
                scope_name = ss.scope.name if ss.scope is not None else None
                scope_attributes = decode_attributes(ss.scope.attributes) if ss.scope is not None and ss.scope.attributes else {}
                for raw in ss.spans or ():
                    status = raw.status
                    code = status.code if status is not None else None
                    span = Span(
                        trace_id=decode_id(raw.traceId, 16) or "",
                        span_id=decode_id(raw.spanId, 8) or "",
                        parent_span_id=decode_id(raw.parentSpanId, 8),
                        name=raw.name,
                        start_ns=_n(raw.startTimeUnixNano),
                        end_ns=_n(raw.endTimeUnixNano),
                        attributes=_attributes(raw.attributes),
                        events=[Event(e.name, _n(e.timeUnixNano), _attributes(e.attributes), _n(e.droppedAttributesCount)) for e in raw.events or ()],
                        dropped_attributes=_n(raw.droppedAttributesCount),
                        dropped_events=_n(raw.droppedEventsCount),
                        dropped_links=_n(raw.droppedLinksCount),
                        trace_state=raw.traceState or None,
                        resource=resource,
                        scope_name=scope_name,
                        status_code=STATUS_CODES.get(code, str(code) if code is not None else None),
                        status_message=(status.message or None) if status is not None else None,
                        scope_attributes=scope_attributes,
                    )
                    if trace_id is None or span.trace_id == trace_id:  # after decoding, as the general decoder does
                        spans.append(span)
        return spans
    except _REFUSED:
        return None
    except Exception:  # anything else odd (a MalformedInput from decode_id, ...): the general decoder reports it
        return None
