"""OTLP/protobuf encoding of spans without building protobuf message objects.

``encode_spans(spans)`` returns exactly the bytes of the stock
``opentelemetry.exporter.otlp.proto.common.trace_encoder.encode_spans(spans).SerializeToString()``
(proven by tests/test_otlp_encoder.py against the stock encoder), several times faster: the stock
encoder spends nearly all its time creating one Python protobuf object per value; this writes the
varints and length-delimited fields directly, with caches for attribute keys, resources and scopes.

What it reproduces of the stock encoder, on purpose:

* grouping: one ``ResourceSpans`` per *equal* resource and one ``ScopeSpans`` per equal scope (dict
  equality, first object wins), in first-seen order; a span without a scope gets an empty scope;
* every ``AnyValue`` rule (``bool`` before ``int``; ``bytes``; any ``Sequence`` (``bytearray``,
  ``range``, ``tuple``) as an array; any ``Mapping`` as a key-value list with ``str(key)``; ``None``
  as an empty value; NaN payloads, ``-0.0`` and infinities bit for bit);
* what the stock drops: an attribute whose value cannot be encoded (an int outside int64, a string
  with a lone surrogate, an unknown type, anywhere inside it) is left out and logged through the
  stock encoder's logger with the stock message; the rest of the span is kept;
* what the stock raises: a span field that cannot be encoded (a lone surrogate in a name, a time or
  dropped count out of range, an id past its width) raises the same exception type (and, for
  ranges, message) as the stock encoder, so an exporter fails the batch the same way;
* what the stock leaves out: a link's ``trace_state``, the sampled bit in ``flags`` (only the
  has-is-remote / is-remote bits are written), zero and empty scalar fields.

``encode_spans(spans, chunk=32)`` yields the GIL (``time.sleep(0)``) after every 32 spans so that an
exporter thread encoding a large batch never holds the app's threads for long; the bytes are the same.

The optional native encoder (the package native/ragtrail-encoder, module ``ragtrail_native``, built
with maturin) is used when importable, unless ``RAGTRAIL_NATIVE_ENCODER=off``: it writes the same bytes
for the common case and declines (returns None) a batch holding anything else, which is then encoded
here. This module stays the reference: tests/test_otlp_encoder.py checks both against the stock.
"""

from __future__ import annotations

import functools
import logging
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from ragtrail import native

# the stock encoder's logger: whoever silences or collects its "Failed to encode key" keeps doing so
_logger = logging.getLogger("opentelemetry.exporter.otlp.proto.common._internal")

_INT64_MIN = -(1 << 63)
_INT64_LIMIT = 1 << 63
_UINT64_LIMIT = 1 << 64
_UINT32_LIMIT = 1 << 32
_MASK64 = _UINT64_LIMIT - 1
_pack_double = struct.Struct("<d").pack
_pack_fixed64 = struct.Struct("<Q").pack
_pack_fixed32 = struct.Struct("<I").pack

# span.kind -> the varint field 6 (the proto's SpanKind is the API's value + 1)
_KIND_FIELD = {
    SpanKind.INTERNAL: b"\x30\x01",
    SpanKind.SERVER: b"\x30\x02",
    SpanKind.CLIENT: b"\x30\x03",
    SpanKind.PRODUCER: b"\x30\x04",
    SpanKind.CONSUMER: b"\x30\x05",
}
_FLAGS_LOCAL = 0x100  # SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_FLAGS_REMOTE = 0x300  # ... | SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_SPAN_FLAGS = {False: b"\x85\x01" + _pack_fixed32(_FLAGS_LOCAL), True: b"\x85\x01" + _pack_fixed32(_FLAGS_REMOTE)}
_LINK_FLAGS = {False: b"\x35" + _pack_fixed32(_FLAGS_LOCAL), True: b"\x35" + _pack_fixed32(_FLAGS_REMOTE)}
_CACHE_LIMIT = 1024  # distinct attribute keys (and resources, scopes) remembered before starting over


def _varint_slow(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = tuple(_varint_slow(i) for i in range(1 << 14))  # every length below 16 KiB: one lookup


def _varint(value: int) -> bytes:
    """A non-negative value as a protobuf varint."""
    return _SMALL[value] if value < 16384 else _varint_slow(value)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field (``tag`` is the already encoded key)."""
    size = len(payload)
    return tag + (_SMALL[size] if size < 16384 else _varint_slow(size)) + payload


def _check_range(value: int, limit: int) -> int:
    """The stock (upb) refuses an unsigned field outside its width with this ValueError."""
    if not 0 <= value < limit:
        raise ValueError(f"Value out of range: {value}")
    return value


def _int_value(value: int) -> bytes:
    """AnyValue.int_value (field 3, int64: a negative value is ten bytes of two's complement)."""
    if not _INT64_MIN <= value < _INT64_LIMIT:
        raise ValueError(f"Value out of range: {value}")
    return b"\x18" + _varint(value & _MASK64)


def _any_value(value: Any) -> bytes:
    """The body of one AnyValue, in the stock encoder's order of type tests."""
    if value is None:
        return b""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _field(b"\x0a", value.encode("utf-8"))
    if isinstance(value, int):
        return _int_value(value)
    if isinstance(value, float):
        return b"\x21" + _pack_double(value)
    if isinstance(value, bytes):
        return _field(b"\x3a", value)
    if isinstance(value, Sequence):
        return _field(b"\x2a", b"".join([_field(b"\x0a", _any_value(item)) for item in value]))
    if isinstance(value, Mapping):
        return _field(b"\x32", b"".join([_field(b"\x0a", _key_value(str(key), item)) for key, item in value.items()]))
    raise Exception(f"Invalid type {type(value)} of value {value}")  # the stock's exception, word for word


_SHORT = 64  # a string value up to this long is remembered with its encoding (ids, names, kinds recur)
_VALUES_PER_KEY = 64  # remembered values of one key before its memory starts over (at most 1024 keys x 64)


class _Key:
    """One attribute key: its encoded ``KeyValue.key`` field and the encoded bodies of its recent
    short string and int values (exact types only: ``1``, ``True`` and ``1.0`` are equal dict keys)."""

    __slots__ = ("field", "values")

    def __init__(self, field: bytes) -> None:
        self.field = field
        self.values: dict[str | int, bytes] = {}

    def remember(self, value: str | int, body: bytes) -> None:
        if len(self.values) >= _VALUES_PER_KEY:
            self.values = {}
        self.values[value] = body


class _Keys:
    """Encoded attribute keys (and their recent values): the same few hundred keys recur in every span."""

    def __init__(self) -> None:
        self.known: dict[str, _Key] = {}

    def get(self, key: Any) -> _Key:
        known = self.known.get(key) if type(key) is str else None
        if known is not None:
            return known
        known = _Key(_key_field(key))
        if type(key) is str:
            if len(self.known) >= _CACHE_LIMIT:
                self.known = {}
            self.known[key] = known
        return known


def _key_field(key: Any) -> bytes:
    """``KeyValue.key`` as the stock sets it: ``None`` leaves it unset, bytes must be UTF-8."""
    if key is None:
        return b""
    if isinstance(key, str):
        encoded = key.encode("utf-8")
    elif isinstance(key, bytes):
        key.decode("utf-8")
        encoded = key
    else:
        raise TypeError(f"{key!r} has type {type(key).__name__}, but expected one of: bytes, str")
    return _field(b"\x0a", encoded) if encoded else b""


_KEYS = _Keys()


def _key_value(key: Any, value: Any) -> bytes:
    """The body of one KeyValue."""
    return _KEYS.get(key).field + _field(b"\x12", _any_value(value))


def _str_item_header(size: int) -> bytes:
    """The header of an ``ArrayValue.values`` entry holding a string of ``size`` UTF-8 bytes."""
    return b"\x0a" + _varint(size + 1 + len(_varint(size))) + b"\x0a" + _varint(size)


def _int_item(value: int) -> bytes:
    return _field(b"\x0a", _int_value(value))


_STR_ITEM_HEADERS = tuple(_str_item_header(size) for size in range(2048))
_INT_ITEMS = tuple(_int_item(value) for value in range(2048))
_FLOAT_ITEM = b"\x0a\x09\x21"
_BOOL_ITEMS = {True: b"\x0a\x02\x10\x01", False: b"\x0a\x02\x10\x00"}


def _str_items(value: tuple[Any, ...], parts: list[bytes]) -> bool:
    append = parts.append
    headers = _STR_ITEM_HEADERS
    for item in value:
        if type(item) is not str:
            return False
        encoded = item.encode("utf-8")
        size = len(encoded)
        append(headers[size] if size < 2048 else _str_item_header(size))
        append(encoded)
    return True


def _int_items(value: tuple[Any, ...], parts: list[bytes]) -> bool:
    append = parts.append
    small = _INT_ITEMS
    for item in value:
        if type(item) is not int:
            return False
        append(small[item] if 0 <= item < 2048 else _int_item(item))
    return True


def _float_items(value: tuple[Any, ...], parts: list[bytes]) -> bool:
    append = parts.append
    for item in value:
        if type(item) is not float:
            return False
        append(_FLOAT_ITEM + _pack_double(item))
    return True


def _bool_items(value: tuple[Any, ...], parts: list[bytes]) -> bool:
    if any(type(item) is not bool for item in value):
        return False
    parts.extend([_BOOL_ITEMS[item] for item in value])
    return True


_ITEMS = {str: _str_items, int: _int_items, float: _float_items, bool: _bool_items}


def _tuple_value(value: tuple[Any, ...]) -> bytes:
    """An AnyValue array of a homogeneous tuple of str, int, float or bool (what the SDK makes of a
    list attribute), one tight loop per type; any other tuple through :func:`_any_value`."""
    if not value:
        return b"\x2a\x00"
    items = _ITEMS.get(type(value[0]))
    parts: list[bytes] = []
    if items is None or not items(value, parts):
        return _any_value(value)
    return _field(b"\x2a", b"".join(parts))


def _attributes(tag: bytes, attributes: Any, complete: list[bool] | None = None) -> bytes:
    """Repeated KeyValue fields under ``tag``; a value the stock cannot encode is dropped and logged
    as the stock does (``complete[0]`` turns False when one was). Exact str/int values are looked up
    in the key's memory first; the rest is written by :func:`_value_body`."""
    if not attributes:
        return b""
    parts: list[bytes] = []
    append = parts.append
    known = _KEYS.known
    for key, value in attributes.items():
        try:
            entry = known.get(key) if type(key) is str else None
            if entry is None:
                entry = _KEYS.get(key)
            kind = type(value)
            if kind is int or (kind is str and len(value) <= _SHORT):
                body = entry.values.get(value)
                if body is None:
                    body = _value_body(entry.field, value)
                    entry.remember(value, body)
            else:
                body = _value_body(entry.field, value)
        except Exception as error:  # the stock's catch: the attribute is left out, the span is kept
            _logger.exception("Failed to encode key %s: %s", key, error)
            if complete is not None:
                complete[0] = False
            continue
        size = len(body)
        append(tag + (_SMALL[size] if size < 16384 else _varint_slow(size)))
        append(body)
    return b"".join(parts)


def _value_body(key_field: bytes, value: Any) -> bytes:
    """The body of one KeyValue whose key field is already encoded."""
    kind = type(value)
    if kind is str:
        encoded: bytes = value.encode("utf-8")
        size = len(encoded)
        if size < 16000:
            inner = size + 1 + len(_SMALL[size])
            return key_field + b"\x12" + _SMALL[inner] + b"\x0a" + _SMALL[size] + encoded
        any_body = _field(b"\x0a", encoded)
    elif kind is int:
        any_body = _int_value(value)
    elif kind is float:
        any_body = b"\x21" + _pack_double(value)
    elif kind is tuple:
        any_body = _tuple_value(value)
    else:
        any_body = _any_value(value)
    return key_field + _field(b"\x12", any_body)


def _events(events: Sequence[Any]) -> bytes:
    """Span field 11, one Event per span event."""
    parts: list[bytes] = []
    for event in events:
        attributes = _attributes(b"\x1a", event.attributes)
        name = event.name
        name_field = _field(b"\x12", name.encode("utf-8")) if name else b""  # the stock checks the name first
        timestamp = event.timestamp
        body = b"\x09" + _pack_fixed64(_check_range(timestamp, _UINT64_LIMIT)) if timestamp else b""
        body += name_field + attributes
        dropped = event.dropped_attributes
        if dropped:
            body += b"\x20" + _varint(_check_range(dropped, _UINT32_LIMIT))
        parts.append(_field(b"\x5a", body))
    return b"".join(parts)


def _links(links: Sequence[Any]) -> bytes:
    """Span field 13; like the stock encoder, a link's trace_state is not written."""
    parts: list[bytes] = []
    for link in links:
        context = link.context
        body = (
            b"\x0a\x10"
            + context.trace_id.to_bytes(length=16, byteorder="big", signed=False)
            + b"\x12\x08"
            + context.span_id.to_bytes(length=8, byteorder="big", signed=False)
            + _attributes(b"\x22", link.attributes)
        )
        dropped = link.dropped_attributes
        if dropped:
            body += b"\x28" + _varint(_check_range(dropped, _UINT32_LIMIT))
        body += _LINK_FLAGS[bool(context.is_remote)]
        parts.append(_field(b"\x6a", body))
    return b"".join(parts)


def _status(status: Any) -> bytes:
    """Span field 15: present (possibly empty) whenever the span has a status object."""
    if status is None:
        return b""
    body = b""
    description = status.description
    if description:
        body += _field(b"\x12", description.encode("utf-8"))
    code = status.status_code.value
    if code:
        body += b"\x18" + _varint(code & _MASK64)
    return _field(b"\x7a", body)


def _trace_state(trace_state: Any) -> bytes:
    if not trace_state:
        return b""
    text = ",".join([f"{key}={value}" for key, value in trace_state.items()])
    return _field(b"\x1a", text.encode("utf-8")) if text else b""


def _count(tag: bytes, dropped: int) -> bytes:
    """A dropped count (uint32), left out when zero."""
    return tag + _varint(_check_range(dropped, _UINT32_LIMIT)) if dropped else b""


def encode_span(span: ReadableSpan) -> bytes:
    """One Span message (its body, without the ScopeSpans field header), fields in number order.

    The parts are computed in the stock encoder's order (ids, kind, attributes, events, links and
    status before the span's own scalar fields), so that a span with several faults raises the same
    exception as the stock does."""
    context = span.get_span_context()
    assert context is not None  # a ReadableSpan always has one (the stock would fail on None too)
    parent = span.parent
    ids = (
        b"\x0a\x10"
        + context.trace_id.to_bytes(length=16, byteorder="big", signed=False)
        + b"\x12\x08"
        + context.span_id.to_bytes(length=8, byteorder="big", signed=False)
        + _trace_state(context.trace_state)
        + (b"\x22\x08" + parent.span_id.to_bytes(length=8, byteorder="big", signed=False) if parent else b"")
    )
    kind = _KIND_FIELD[span.kind]
    attributes = _attributes(b"\x4a", span.attributes)
    events = span.events
    encoded_events = _events(events) if events else b""
    links = span.links
    encoded_links = _links(links) if links else b""
    status = _status(span.status)
    name = span.name
    start = span.start_time
    end = span.end_time
    return b"".join(
        [
            ids,
            _field(b"\x2a", name.encode("utf-8")) if name else b"",
            kind,
            b"\x39" + _pack_fixed64(_check_range(start, _UINT64_LIMIT)) if start else b"",
            b"\x41" + _pack_fixed64(_check_range(end, _UINT64_LIMIT)) if end else b"",
            attributes,
            _count(b"\x50", span.dropped_attributes),
            encoded_events,
            _count(b"\x60", span.dropped_events),
            encoded_links,
            _count(b"\x70", span.dropped_links),
            status,
            _SPAN_FLAGS[bool(parent and parent.is_remote)],
        ]
    )


class _Encoded:
    """Encoded resources and scopes by object identity (the object is kept, so its id stays its own):
    an app has one resource and a handful of scopes, the same objects in every span. Only an encoding
    that dropped nothing is kept, so that a bad attribute is logged on every export, as the stock does."""

    def __init__(self) -> None:
        self.resources: dict[int, tuple[Any, bytes]] = {}
        self.scopes: dict[int, tuple[Any, bytes]] = {}

    def resource(self, resource: Any) -> bytes:
        known = self.resources.get(id(resource))
        if known is not None and known[0] is resource:
            return known[1]
        complete = [True]
        body = _attributes(b"\x0a", resource.attributes, complete)
        if complete[0]:
            self._keep(self.resources, resource, body)
        return body

    def scope(self, scope: Any) -> bytes:
        if scope is None:
            return b""
        known = self.scopes.get(id(scope))
        if known is not None and known[0] is scope:
            return known[1]
        complete = [True]
        name = scope.name
        version = scope.version
        body = b"".join(
            [
                _field(b"\x0a", name.encode("utf-8")) if name else b"",
                _field(b"\x12", version.encode("utf-8")) if version else b"",
                _attributes(b"\x1a", scope.attributes, complete),
            ]
        )
        if complete[0]:
            self._keep(self.scopes, scope, body)
        return body

    @staticmethod
    def _keep(cache: dict[int, tuple[Any, bytes]], owner: Any, body: bytes) -> None:
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[id(owner)] = (owner, body)


_ENCODED = _Encoded()


def _grouped(spans: Sequence[ReadableSpan], chunk: int) -> dict[Any, dict[Any, list[bytes]]]:
    """Encoded spans by resource, then scope, as the stock groups them (dict keys: equal resources or
    scopes share a group under the first one seen); the same object skips the hashing."""
    groups: dict[Any, dict[Any, list[bytes]]] = {}
    last_resource: Any = groups  # a sentinel no span has
    last_scope: Any = groups
    by_scope: dict[Any, list[bytes]] = {}
    target: list[bytes] = []
    for done, span in enumerate(spans, 1):
        resource = span.resource
        scope = span.instrumentation_scope or None
        encoded = encode_span(span)
        if resource is not last_resource:
            by_scope = groups.setdefault(resource, {})
            last_resource, last_scope = resource, groups
        if scope is not last_scope:
            target = by_scope.setdefault(scope, [])
            last_scope = scope
        target.append(encoded)
        if chunk and done % chunk == 0:
            time.sleep(0)  # let the app's threads run: at most ``chunk`` spans per hold of the GIL
    return groups


def _header(tag: bytes, size: int) -> bytes:
    return tag + (_SMALL[size] if size < 16384 else _varint_slow(size))


def _scope_spans(scope: Any, bodies: list[bytes], parts: list[bytes]) -> int:
    """Append one ScopeSpans message's pieces (without its own header) to ``parts``; returns its size."""
    scope_body = _ENCODED.scope(scope)
    pieces = [_header(b"\x0a", len(scope_body)), scope_body]
    for body in bodies:
        pieces.append(_header(b"\x12", len(body)))
        pieces.append(body)
    schema_url = scope.schema_url if scope else None
    if schema_url:
        pieces.append(_field(b"\x1a", schema_url.encode("utf-8")))
    parts.extend(pieces)
    return sum(map(len, pieces))


def encode_spans(spans: Sequence[ReadableSpan], *, chunk: int = 0, native_chunk: int | None = None) -> bytes:
    """The serialized ``ExportTraceServiceRequest`` of ``spans``: the stock encoder's exact bytes.

    Through the native encoder when it is installed and not switched off (:func:`native_encoder`);
    a batch it declines (anything the pure-Python encoder would drop, log or raise on, or a value
    type it does not handle) is encoded by :func:`encode_spans_python`, the reference.
    ``chunk``: when positive, release the GIL after every ``chunk`` spans (``native_chunk``, when
    given, for the native encoder)."""
    encode_natively = native_encoder()
    if encode_natively is not None:
        encoded = encode_natively(spans, chunk if native_chunk is None else native_chunk)
        if encoded is not None:
            return encoded
    return encode_spans_python(spans, chunk=chunk)


NATIVE_ENV = "RAGTRAIL_NATIVE_ENCODER"  # "off" (or 0, false, no): always the pure-Python encoder
NativeEncode = Callable[[Sequence[ReadableSpan], int], bytes | None]


@functools.cache
def native_encoder() -> NativeEncode | None:
    """``ragtrail_native.encode_spans`` (the optional package native/ragtrail-encoder) when importable
    and not switched off by RAGTRAIL_NATIVE_ENCODER; one import attempt per process."""
    encode: NativeEncode | None = native.function("encode_spans", NATIVE_ENV)
    return encode


def encode_spans_python(spans: Sequence[ReadableSpan], *, chunk: int = 0) -> bytes:
    """The pure-Python encoder (the reference and the fallback of the native one).

    ``chunk``: when positive, release the GIL (``time.sleep(0)``) after every ``chunk`` spans.
    Each span is encoded once and copied once, into the request: the nesting headers are computed
    from the sizes, not by wrapping (and copying) each level."""
    out: list[bytes] = []
    for resource, by_scope in _grouped(spans, chunk).items():
        resource_body = _ENCODED.resource(resource)
        parts = [_header(b"\x0a", len(resource_body)), resource_body]
        for scope, bodies in by_scope.items():
            header_at = len(parts)
            parts.append(b"")
            parts[header_at] = _header(b"\x12", _scope_spans(scope, bodies, parts))
        schema_url = resource.schema_url
        if schema_url:
            parts.append(_field(b"\x1a", schema_url.encode("utf-8")))
        out.append(_header(b"\x0a", sum(map(len, parts))))
        out.extend(parts)
    return b"".join(out)


CHUNK_SPANS = 32  # spans the pure-Python encoder encodes per hold of the GIL (then time.sleep(0))
# the native encoder's: it holds the GIL for the whole of a chunk (it reads the spans' Python objects);
# 8 kept the host's p95 within 10 % of no exporter on a quiet machine where 32 did not always
# (benchmarks/README.md, "the host while the exporter encodes")
NATIVE_CHUNK_SPANS = 8


def encode_request(spans: Sequence[ReadableSpan]) -> bytes:
    """What ragtrail's OTLP exporters send: :func:`encode_spans` in chunks of CHUNK_SPANS spans
    (NATIVE_CHUNK_SPANS through the native encoder)."""
    return encode_spans(spans, chunk=CHUNK_SPANS, native_chunk=NATIVE_CHUNK_SPANS)


def clear_caches() -> None:
    """Forget every remembered key, value, resource and scope (benchmarks: a cold encoder)."""
    global _KEYS, _ENCODED
    _KEYS = _Keys()
    _ENCODED = _Encoded()


__all__ = [
    "encode_spans",
    "encode_spans_python",
    "encode_span",
    "encode_request",
    "clear_caches",
    "native_encoder",
    "CHUNK_SPANS",
    "NATIVE_CHUNK_SPANS",
    "NATIVE_ENV",
]
