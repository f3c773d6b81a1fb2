"""What the exported copy of a trace segment carries that the recorded spans do not: the local
root's ``ragtrail.trace.span_count`` (and, on the segment's other ragtrail spans, the root's id and
that count: ``ragtrail.trace.segment.root`` / ``.segment.span_count``), and ``ragtrail.trace.late`` / ``ragtrail.trace.incomplete``
marks. The recorded spans are never changed: stamped spans are shallow copies."""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import ReadableSpan

from ragtrail.contract import semconv
from ragtrail.export.sizing import plain


class _StampedAttributes(BoundedAttributes):
    """The exported copy's attributes: the SDK-cleaned originals plus ragtrail's stamps, with the
    original's dropped count (which OTLP carries as ``droppedAttributesCount``)."""

    def __init__(self, original: Any, extra: dict[str, Any], dropped: int) -> None:  # noqa: D107
        # BoundedAttributes' own __init__ re-cleans every value, which the SDK did when they were set
        self.maxlen = None
        self.max_value_len = None
        self._lock = threading.Lock()
        self._dict = {**plain(original or {}), **extra}
        self.dropped = dropped
        self._immutable = True


def with_attributes(span: ReadableSpan, extra: dict[str, Any]) -> ReadableSpan:
    """A shallow copy of ``span`` with ``extra`` attributes added; dropped counts preserved."""
    try:
        clone = object.__new__(span.__class__)
        clone.__dict__.update(span.__dict__)
        original = span._attributes
    except (AttributeError, TypeError):  # pragma: no cover - not the SDK's ReadableSpan
        clone = copy.copy(span)
        original = span.attributes
    clone._attributes = _StampedAttributes(original, extra, span.dropped_attributes)  # there is no setter
    return clone


def stamp_segment(
    spans: Sequence[ReadableSpan],
    root_span_id: int,
    span_count: int,
    *,
    late: bool = False,
    incomplete: bool = False,
) -> list[ReadableSpan]:
    """The spans to send for one segment, the local root stamped with ``span_count`` and last (a
    request split across several puts it first again: :func:`root_first`). Every other ragtrail
    span (one with ``ragtrail.stage.kind``) is stamped with the root's span id and the same count
    (schema 2), so a reader can tell a missing root or a lowered count without the root."""
    marks: dict[str, Any] = {}
    if late:
        marks[semconv.TRACE_LATE] = True
    if incomplete:
        marks[semconv.TRACE_INCOMPLETE] = True
    segment = {**marks, semconv.TRACE_SEGMENT_ROOT: semconv.span_id_hex(root_span_id), semconv.TRACE_SEGMENT_SPAN_COUNT: span_count}
    out: list[ReadableSpan] = []
    root: ReadableSpan | None = None
    for span in spans:
        if span.context.span_id == root_span_id:
            root = with_attributes(span, {**marks, semconv.TRACE_SPAN_COUNT: span_count})
        elif not late and semconv.STAGE_KIND in (span.attributes or {}):
            # late spans (the root and its count already left) are counted over, never under: unstamped
            out.append(with_attributes(span, segment))
        else:
            out.append(with_attributes(span, marks) if marks else span)
    if root is not None:
        out.append(root)
    return out


def root_first(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    """``spans`` with every stamped local root moved to the front.

    A segment split across requests sends the part that carries the root and its span count first:
    if a later part fails, the backend holds a root whose count shows the hole (and the trace is
    counted lost), never a rootless trace.
    """
    roots = [s for s in spans if semconv.TRACE_SPAN_COUNT in (s.attributes or {})]
    if not roots or spans[: len(roots)] == roots:
        return spans
    return roots + [s for s in spans if semconv.TRACE_SPAN_COUNT not in (s.attributes or {})]


__all__ = ["stamp_segment", "root_first", "with_attributes"]
