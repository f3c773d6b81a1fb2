"""Adding ragtrail's events to a span, with a fast path for the OpenTelemetry SDK's own spans.

The SDK's ``add_event`` re-validates every attribute value (about 6 µs an event, more than half of
a 100-candidate stage). ragtrail builds its event attributes itself from str, int, float, bool and
homogeneous lists or tuples of those, so on an SDK span with no value-length limit and room for every attribute the
result of that check is known in advance: the events are built exactly as ``add_event`` would
build them (immutable ``BoundedAttributes``, the span's count limit, no drops), without the
re-check. Any other case (a value-length limit: the SDK must cut, and the receipts must catch it;
a tighter count limit; another SDK) goes through the public ``add_event``. A probe at import
decides whether the fast path exists at all. ``tests/test_stage.py`` pins the two paths to
identical exported events.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple

__all__ = ["Event", "add_events", "held_attributes", "set_attributes"]

Event = tuple[str, dict[str, Any]]


class _SdkParts(NamedTuple):
    """The SDK classes the fast path builds with and checks against."""

    attributes: Any  # opentelemetry.attributes.BoundedAttributes
    event: Any  # opentelemetry.sdk.trace.Event
    span: Any  # opentelemetry.sdk.trace.Span


def _probe() -> _SdkParts | None:
    """The SDK parts the fast path needs, or ``None`` when this SDK does not have them as expected."""
    try:
        from opentelemetry.attributes import BoundedAttributes
        from opentelemetry.sdk.trace import Event as SdkEvent
        from opentelemetry.sdk.trace import Span as SdkSpan

        probe = BoundedAttributes(1, None, immutable=False, max_value_len=None)
        if not isinstance(getattr(probe, "_dict", None), dict) or not hasattr(SdkSpan, "_add_event"):
            return None
        return _SdkParts(BoundedAttributes, SdkEvent, SdkSpan)
    except Exception:  # pragma: no cover - another SDK: the public path is used
        return None


_PARTS = _probe()


_PRIMITIVES = frozenset({str, bool, int, float})


def _plain(value: Any) -> bool:
    """A value the SDK's attribute cleaning keeps as it is (a list: as its tuple): a primitive, or a
    sequence of one primitive type (checked in C: ``map(type, ...)``)."""
    kind = type(value)
    if kind in _PRIMITIVES:
        return True
    if kind is tuple or kind is list:
        types = set(map(type, value))
        return len(types) <= 1 and types <= _PRIMITIVES
    return False


_STR = frozenset({str})
_PLAIN_TYPES = _PRIMITIVES | {list, tuple}


def _all_plain(values: Collection[Any]) -> bool:
    """``all(map(_plain, values))``: the primitives told apart by their set of types (in C), only the
    sequences checked one by one."""
    types = set(map(type, values))
    if types <= _PRIMITIVES:
        return True
    if not types <= _PLAIN_TYPES:
        return False
    return all(map(_plain, [v for v in values if type(v) is list or type(v) is tuple]))


def set_attributes(span: Any, attributes: Mapping[str, Any]) -> None:
    """``span.set_attributes(attributes)``, exactly, without the SDK's per-value re-check where its
    result is known: an SDK span with no value-length limit, every value a primitive or a homogeneous
    sequence (the SDK's check walks each element of each array in Python: most of a stage's write
    once the candidates are columns). The SDK's own ``_setitem_locked`` stores them, so eviction at the
    count limit and the dropped count are the SDK's. Anything else takes the public path."""
    parts = _PARTS
    bounded = getattr(span, "_attributes", None)
    if (
        parts is None
        or not isinstance(span, parts.span)
        or not isinstance(bounded, parts.attributes)
        or bounded.max_value_len is not None
        or bounded._immutable
        or not hasattr(bounded, "_setitem_locked")
        or not _all_plain(attributes.values())
    ):
        span.set_attributes(attributes)
        return
    with span._lock:
        ended = span._end_time is not None
        if not ended:
            store = bounded._setitem_locked
            with bounded._lock:
                held = bounded._dict
                maxlen = bounded.maxlen
                if (
                    (maxlen is None or len(held) + len(attributes) <= maxlen)
                    and held.keys().isdisjoint(attributes)
                    and set(map(type, attributes)) <= _STR
                    and "" not in attributes
                ):
                    # new keys only, all of them fitting: what _setitem_locked does key by key (no
                    # key moved, none evicted) is one update, in the same order
                    held.update(
                        attributes
                        if list not in set(map(type, attributes.values()))
                        else {k: tuple(v) if type(v) is list else v for k, v in attributes.items()}
                    )
                else:
                    for key, value in attributes.items():
                        if type(key) is not str or not key:  # pragma: no cover - ragtrail's keys are names
                            bounded.dropped += 1
                            continue
                        store(key, tuple(value) if type(value) is list else value)
    if ended:
        # what set_attributes does on an ended span: warn and write nothing. Called once the span's
        # lock is released: the SDK's lock is not reentrant, and calling it under the lock hangs.
        span.set_attributes(attributes)


def held_attributes(span: Any) -> Mapping[str, Any] | None:
    """The attributes the SDK holds for ``span`` (the plain dict inside its ``BoundedAttributes``: reading
    it is a dict walk, where the public mapping proxy walks it in Python), ``None`` when it is not a span."""
    parts = _PARTS
    bounded = getattr(span, "_attributes", None)
    if parts is not None and isinstance(bounded, parts.attributes) and isinstance(getattr(bounded, "_dict", None), dict):
        held: Mapping[str, Any] = bounded._dict
        return held
    attributes: Mapping[str, Any] | None = getattr(span, "attributes", None)
    return attributes


def add_events(span: Any, events: Sequence[Event]) -> None:
    """Add ``events`` to ``span`` in order, each exactly as ``span.add_event`` would."""
    parts = _PARTS
    limits = getattr(span, "_limits", None)
    if parts is None or limits is None or limits.max_attribute_length is not None or not isinstance(span, parts.span):
        for name, attributes in events:
            span.add_event(name, attributes)
        return
    bounded_cls, event_cls = parts.attributes, parts.event
    max_attributes = limits.max_event_attributes
    for name, attributes in events:
        if max_attributes is not None and len(attributes) > max_attributes:
            span.add_event(name, attributes)
            continue
        bounded = bounded_cls(max_attributes, None, immutable=False, max_value_len=None)
        # a list becomes the tuple add_event makes of it (the schema 3 columns are built as lists)
        bounded._dict.update({k: tuple(v) if type(v) is list else v for k, v in attributes.items()})
        bounded._immutable = True
        span._add_event(event_cls(name=name, attributes=bounded))
