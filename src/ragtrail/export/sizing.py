"""How big a finished span is: a cheap estimate of its Python memory, which also bounds its OTLP
encoded size. It runs on the application thread for every span, so it reads the SDK's fields
directly; the constants were calibrated with tracemalloc in ``benchmarks/bench_export.py``."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

_SPAN_BASE = 2700
_ATTR_BASE = 90
_EVENT_BASE = 500
_LINK_BASE = 300
_KEY_CHARS = 40  # typical attribute key plus a short value
#: the processor's own bookkeeping, counted against ``max_bytes`` too
SPAN_BOOKKEEPING = 120  # the (span, size) tuple and its list slot
SEGMENT_BOOKKEEPING = 900  # the segment object, its list and its OrderedDict entry


def plain(attributes: Any) -> Any:
    """The dict inside the SDK's BoundedAttributes (iterating the Mapping wrapper is several times
    slower, and this runs on the application thread for every span); any mapping works."""
    return getattr(attributes, "_dict", attributes)


def _value_size(value: Any) -> int:
    if value.__class__ is str:
        n = len(value)
        # UTF-8 on the wire takes up to 3 bytes per code point where Python memory takes 1-4
        return n if n < 64 or value.isascii() else 3 * n
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if isinstance(value, (list, tuple)):
        return 56 + sum(8 + _value_size(v) for v in value)
    return 16


def _attributes_size(attributes: Any) -> int:
    if not attributes:
        return 0
    attributes = plain(attributes)
    total = (_ATTR_BASE + _KEY_CHARS) * len(attributes)  # keys are mostly shared constants
    for value in attributes.values():
        if value.__class__ is str:
            n = len(value)
            if n > 32:
                total += n if value.isascii() else 3 * n  # UTF-8 may take 3 bytes per code point
        elif value.__class__ is not int and value.__class__ is not float and value.__class__ is not bool:
            total += _value_size(value)
    return total


def estimate_span_bytes(span: ReadableSpan) -> int:
    """A cheap estimate of a finished span's Python memory, calibrated with tracemalloc (within a
    few percent); it also bounds the span's OTLP encoded size."""
    # the public properties copy (MappingProxyType, tuple(events)): read the fields when present
    try:
        attributes, events, links = span._attributes, span._events, span._links
    except AttributeError:  # not the SDK's ReadableSpan
        attributes, events, links = span.attributes, span.events, span.links
    total = _SPAN_BASE + len(span.name) + _attributes_size(attributes)
    if events:
        for event in events:
            total += _EVENT_BASE + len(event.name) + _attributes_size(event.attributes)
    if links:
        for link in links:
            total += _LINK_BASE + _attributes_size(link.attributes)
    return total


__all__ = ["estimate_span_bytes", "plain", "SPAN_BOOKKEEPING", "SEGMENT_BOOKKEEPING"]
