"""ragtrail's OTLP encoder writes exactly the stock encoder's bytes (``encode_spans(spans).SerializeToString()``)
for every span the SDK can produce, and fails where the stock fails.

The contract, checked on hypothesis-drawn ``ReadableSpan``s built with the real SDK: same bytes, or, when
the stock raises, the same exception type. An attribute the stock cannot encode (an int outside int64, a
lone surrogate, an unknown type, anywhere inside an array or mapping) is dropped by both (and logged);
a span field it cannot encode (a lone surrogate in a name, a time or count out of range, an id past its
width) makes both raise. Then the real thing: the wire snapshot pipelines' spans, encoded both ways.

Every check runs against each encoder: the pure-Python one (the reference) and the optional native one
(native/ragtrail-encoder, module ``ragtrail_native``; where it declines a batch, the pure-Python one
encodes it, as ``encode_spans`` does). When the native module is not installed its cases fail in CI
(``CI`` set: scripts/test.sh builds it) and skip, saying so, elsewhere.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as stock_encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util import BoundedList
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode

from nativeutil import native_module
from ragtrail.export import encode_spans
from ragtrail.export.otlp_encode import NATIVE_ENV, encode_spans_python, native_encoder

ROOT = Path(__file__).resolve().parents[1]


def _outcome(encode: Callable[[], bytes]) -> tuple[str, Any]:
    try:
        return "bytes", encode()
    except Exception as error:  # noqa: BLE001 - the exception type is what is compared
        return "raises", type(error)


Encode = Callable[..., bytes]
ENCODERS = ["python", "native"]


def encoder(name: str) -> Encode:
    """The encoder under test: the pure-Python one, or the native one with the pure-Python fallback
    for the batches it declines (what ``encode_spans`` does when the native module is there)."""
    if name == "python":
        return encode_spans_python
    native = native_module().encode_spans

    def encode(spans: list[ReadableSpan], chunk: int = 0) -> bytes:
        encoded: bytes | None = native(spans, chunk)
        return encoded if encoded is not None else encode_spans_python(spans, chunk=chunk)

    return encode


def assert_same_as_stock(spans: list[ReadableSpan], encode: Encode = encode_spans) -> None:
    ours = _outcome(lambda: encode(spans))
    theirs = _outcome(lambda: stock_encode_spans(spans).SerializeToString())
    assert ours == theirs
    chunked = _outcome(lambda: encode(spans, chunk=2))
    assert chunked == theirs


# --- values ------------------------------------------------------------------------------------------
def _nan(payload: int, sign: int = 0) -> float:
    value: float = struct.unpack("<d", struct.pack("<Q", (sign << 63) | 0x7FF8000000000000 | payload))[0]
    return value


SPECIAL_FLOATS = [math.nan, -math.nan, _nan(0x123), _nan(1, sign=1), math.inf, -math.inf, -0.0, 0.0, 5e-324, 1.7976931348623157e308]
EDGE_INTS = [0, 1, -1, 127, 128, 16383, 16384, 2**31, -(2**31), 2**32, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 2**64, 2**64 - 1, -(2**64), 10**30]
surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
texts = st.one_of(
    st.text(max_size=20),
    st.text(st.one_of(st.characters(), surrogates), max_size=6),  # lone surrogates: the stock drops or raises
    st.text(min_size=127, max_size=200),  # varint lengths past one byte
    st.sampled_from(["", "é", "日本", "\U0001f600", "\x00"]),
)
ints = st.one_of(st.integers(min_value=-(2**64), max_value=2**64), st.sampled_from(EDGE_INTS), st.integers(min_value=-(2**80), max_value=2**80))
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(SPECIAL_FLOATS))
scalars = st.one_of(st.none(), st.booleans(), ints, floats, texts, st.binary(max_size=20))


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keys = st.one_of(texts, st.integers(min_value=-5, max_value=5), st.none(), st.booleans())
    return st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(keys, children, max_size=3),
        st.binary(max_size=4).map(bytearray),  # a Sequence of ints to the stock encoder
        st.integers(min_value=0, max_value=3).map(range),
        st.sets(st.integers(), max_size=2),  # not a Sequence nor a Mapping: the stock drops it
    )


any_values = st.recursive(scalars, _containers, max_leaves=8)
# what the SDK's own attribute cleaning keeps: scalars and homogeneous tuples of them
sdk_scalars = st.one_of(st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1), floats, st.text(max_size=30))
sdk_values = st.one_of(
    sdk_scalars,
    st.lists(st.text(max_size=8), max_size=5).map(tuple),
    st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=5).map(tuple),
    st.lists(floats, max_size=4).map(tuple),
    st.lists(st.booleans(), max_size=4).map(tuple),
)
attribute_keys = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["ragtrail.stage", "k", ""]),
    st.text(st.one_of(st.characters(), surrogates), max_size=3),
)


@st.composite
def attributes(draw: st.DrawFn) -> Any:
    """A plain dict (anything, as ``ReadableSpan(...)`` takes it) or the SDK's ``BoundedAttributes``
    (cleaned values, possibly over its limit: dropped counts)."""
    if draw(st.booleans()):
        odd_keys = st.one_of(attribute_keys, st.none(), st.integers(-3, 3), st.binary(max_size=3))  # not str: what does the stock do?
        return draw(st.one_of(st.none(), st.dictionaries(odd_keys, any_values, max_size=6)))
    maxlen = draw(st.one_of(st.none(), st.integers(min_value=0, max_value=4)))
    return BoundedAttributes(maxlen=maxlen, attributes=draw(st.dictionaries(st.text(max_size=10), sdk_values, max_size=7)), immutable=True)


# --- spans -------------------------------------------------------------------------------------------
trace_ids = st.one_of(st.integers(min_value=1, max_value=2**128 - 1), st.sampled_from([0, 2**128 - 1, 2**128]))
span_ids = st.one_of(st.integers(min_value=1, max_value=2**64 - 1), st.sampled_from([0, 2**64 - 1, 2**64]))
trace_states = st.one_of(st.none(), st.sampled_from([TraceState(), TraceState([("vendor", "value")]), TraceState([("a", "1"), ("b@t", "2=x")])]))
times = st.one_of(st.none(), st.integers(min_value=0, max_value=2**64 - 1), st.sampled_from([0, 1, 2**64 - 1, 2**64, -1]))
counts_limits = st.one_of(st.none(), st.integers(min_value=0, max_value=3))


@st.composite
def span_contexts(draw: st.DrawFn) -> SpanContext:
    return SpanContext(
        draw(trace_ids),
        draw(span_ids),
        is_remote=draw(st.booleans()),
        trace_flags=TraceFlags(draw(st.sampled_from([0, 1]))),
        trace_state=draw(trace_states),
    )


@st.composite
def events(draw: st.DrawFn) -> Any:
    timestamps = st.one_of(st.integers(min_value=0, max_value=2**64 - 1), st.sampled_from([0, 2**64, -1]))
    items = [Event(draw(texts), draw(attributes()), timestamp=draw(timestamps)) for _ in range(draw(st.integers(min_value=0, max_value=3)))]
    if draw(st.booleans()):
        return BoundedList.from_seq(draw(counts_limits), items)  # over its limit: dropped_events
    return items


@st.composite
def links(draw: st.DrawFn) -> Any:
    items = [Link(draw(span_contexts()), draw(attributes())) for _ in range(draw(st.integers(min_value=0, max_value=2)))]
    if draw(st.booleans()):
        return BoundedList.from_seq(draw(counts_limits), items)
    return items


RESOURCES = [
    Resource({"service.name": "rag"}),
    Resource({"service.name": "rag"}),  # equal to the first, another object: one ResourceSpans
    Resource({"service.name": "rag"}, schema_url="https://opentelemetry.io/schemas/1.21.0"),
    Resource({}),
    Resource({"n": 1, "f": -0.0, "t": ("a", "b"), "bad": 2**70}),  # "bad" is dropped by both
    Resource({"n": True, "f": 0.0, "t": ("a", "b"), "bad": 2**70}),  # equal to the previous by dict equality
]
SCOPES = [
    None,
    InstrumentationScope("ragtrail", "0.1"),
    InstrumentationScope("ragtrail", "0.1"),  # equal: one ScopeSpans
    InstrumentationScope("ragtrail", "0.1", schema_url="https://example.com/s", attributes={"a": 1}),
    InstrumentationScope("ragtrail", "0.1", schema_url="https://example.com/s", attributes={"a": True}),  # equal by dict equality
    InstrumentationScope("", None),
    InstrumentationScope("other", "", attributes={"x": ("1", "2")}),
]
statuses = st.one_of(
    st.none(),
    st.just(Status(StatusCode.UNSET)),
    st.just(Status(StatusCode.OK)),
    texts.map(lambda text: Status(StatusCode.ERROR, text)),
)


@st.composite
def readable_spans(draw: st.DrawFn) -> ReadableSpan:
    return ReadableSpan(
        name=draw(texts),
        context=draw(span_contexts()),
        parent=draw(st.one_of(st.none(), span_contexts())),
        resource=draw(st.sampled_from(RESOURCES)),
        attributes=draw(attributes()),
        events=draw(events()),
        links=draw(links()),
        kind=draw(st.sampled_from(list(SpanKind))),
        status=draw(statuses),
        start_time=draw(times),
        end_time=draw(times),
        instrumentation_scope=draw(st.sampled_from(SCOPES)),
    )


@pytest.mark.parametrize("name", ENCODERS)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example])
@given(st.lists(readable_spans(), max_size=5))
def test_the_bytes_of_the_stock_encoder_for_any_span(name: str, spans: list[ReadableSpan]) -> None:
    assert_same_as_stock(spans, encoder(name))


@pytest.mark.parametrize("name", ENCODERS)
@settings(max_examples=300, deadline=None)
@given(st.dictionaries(attribute_keys, any_values, max_size=4))
def test_every_attribute_value_as_the_stock_encodes_or_drops_it(name: str, values: dict[Any, Any]) -> None:
    span = ReadableSpan("s", context=SpanContext(1, 2, False), attributes=values, start_time=1, end_time=2)
    assert_same_as_stock([span], encoder(name))


@pytest.mark.parametrize(
    "value",
    [
        *SPECIAL_FLOATS,
        *EDGE_INTS,
        "\ud800",
        "a\udfffb",
        b"",
        b"\x00\xff",
        [],
        (),
        {},
        [1, "a", 2.5, None, True],
        [[], {}],
        {"k": {"n": [None]}},
        {1: "one", None: 2},
        bytearray(b"ab"),
        range(3),
        None,
        {1, 2},
        object(),
    ],
)
@pytest.mark.parametrize("name", ENCODERS)
def test_each_listed_value(name: str, value: Any) -> None:
    span = ReadableSpan("s", context=SpanContext(1, 2, False), attributes={"v": value, "after": "kept"}, start_time=1, end_time=2)
    assert_same_as_stock([span], encoder(name))


@pytest.mark.parametrize("fault", ["name", "start", "end", "trace_id", "event_name", "event_time", "status", "link_span_id"])
@pytest.mark.parametrize("name", ENCODERS)
def test_a_span_field_the_stock_refuses_raises_the_same(name: str, fault: str) -> None:
    context = SpanContext(2**128 if fault == "trace_id" else 1, 2, False)
    span = ReadableSpan(
        "\ud800" if fault == "name" else "s",
        context=context,
        start_time=-1 if fault == "start" else 1,
        end_time=2**64 if fault == "end" else 2,
        events=[Event("\udc00" if fault == "event_name" else "e", timestamp=-5 if fault == "event_time" else 3)],
        links=[Link(SpanContext(1, 2**64 if fault == "link_span_id" else 3, True))],
        status=Status(StatusCode.ERROR, "\ud800" if fault == "status" else "boom"),
    )
    assert _outcome(lambda: stock_encode_spans([span]).SerializeToString())[0] == "raises"
    assert_same_as_stock([span], encoder(name))


# --- what the native encoder must answer itself (no fallback) ----------------------------------------
clean_texts = st.text(max_size=20)  # no lone surrogates
clean_values = st.recursive(
    st.one_of(sdk_scalars, st.none(), st.binary(max_size=6)),
    lambda children: st.one_of(st.lists(children, max_size=3), st.lists(children, max_size=3).map(tuple)),
    max_leaves=6,
)


@st.composite
def clean_attributes(draw: st.DrawFn) -> Any:
    if draw(st.booleans()):
        return draw(st.dictionaries(st.text(max_size=8), clean_values, max_size=5))
    maxlen = draw(st.one_of(st.none(), st.integers(min_value=0, max_value=4)))
    return BoundedAttributes(maxlen=maxlen, attributes=draw(st.dictionaries(st.text(max_size=10), sdk_values, max_size=7)), immutable=True)


@st.composite
def clean_contexts(draw: st.DrawFn) -> SpanContext:
    return SpanContext(
        draw(st.integers(min_value=0, max_value=2**128 - 1)),
        draw(st.integers(min_value=0, max_value=2**64 - 1)),
        is_remote=draw(st.booleans()),
        trace_state=draw(trace_states),
    )


@st.composite
def clean_spans(draw: st.DrawFn) -> ReadableSpan:
    clean_times = st.one_of(st.none(), st.integers(min_value=0, max_value=2**64 - 1))
    event_list = [
        Event(draw(clean_texts), draw(clean_attributes()), timestamp=draw(st.integers(min_value=0, max_value=2**64 - 1)))
        for _ in range(draw(st.integers(min_value=0, max_value=2)))
    ]
    link_list = [Link(draw(clean_contexts()), draw(clean_attributes())) for _ in range(draw(st.integers(min_value=0, max_value=2)))]
    return ReadableSpan(
        name=draw(clean_texts),
        context=draw(clean_contexts()),
        parent=draw(st.one_of(st.none(), clean_contexts())),
        resource=draw(st.sampled_from(RESOURCES[:4])),
        attributes=draw(clean_attributes()),
        events=BoundedList.from_seq(draw(counts_limits), event_list) if draw(st.booleans()) else event_list,
        links=BoundedList.from_seq(draw(counts_limits), link_list) if draw(st.booleans()) else link_list,
        kind=draw(st.sampled_from(list(SpanKind))),
        status=draw(st.one_of(st.none(), st.just(Status(StatusCode.OK)), clean_texts.map(lambda text: Status(StatusCode.ERROR, text)))),
        start_time=draw(clean_times),
        end_time=draw(clean_times),
        instrumentation_scope=draw(st.sampled_from(SCOPES)),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example])
@given(st.lists(clean_spans(), max_size=5))
def test_native_encoder_answers_every_clean_span_with_the_stock_bytes(spans: list[ReadableSpan]) -> None:
    """Spans the pure-Python encoder neither drops from, logs on nor raises on: the native encoder writes
    them itself (a decline here would be a silent slow path)."""
    native = native_module().encode_spans
    expected = stock_encode_spans(spans).SerializeToString()
    assert native(spans, 0) == expected
    assert native(spans, 2) == expected


# --- the real thing: ragtrail's own spans ------------------------------------------------------------
def _wire_snapshot_module() -> Any:
    spec = importlib.util.spec_from_file_location("wire_snapshot_for_encoder", ROOT / "scripts" / "wire_snapshot.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def captured_sections(names: list[str]) -> Iterator[tuple[str, list[ReadableSpan]]]:
    """The spans each wire snapshot section records (the script's real SDK pipelines), captured where
    the script normalises them."""
    module = _wire_snapshot_module()
    normalise = module.normalise
    for name in names:
        captured: list[ReadableSpan] = []

        def keep(spans: Any, captured: list[ReadableSpan] = captured) -> Any:
            captured.extend(spans)
            return normalise(spans)

        module.normalise = keep
        module.SECTIONS[name]()
        yield name, captured
    module.normalise = normalise


def test_ragtrail_spans_byte_identical() -> None:
    sections = ["demo", "decorators", "langchain", "llama_index"]
    total = 0
    for name, spans in captured_sections(sections):
        assert spans, name
        expected = stock_encode_spans(spans).SerializeToString()
        assert encode_spans(spans) == expected, name
        assert encode_spans(spans, chunk=3) == expected, name
        assert encode_spans(spans) == expected, name  # warm caches: still the same
        assert encode_spans_python(spans) == expected, name
        total += len(spans)
    assert total > 50


def test_native_encoder_writes_ragtrail_spans_itself() -> None:
    """The native encoder answers for every real ragtrail span (no fallback) with the stock bytes."""
    native = native_module().encode_spans
    for name, spans in captured_sections(["demo", "decorators", "langchain", "llama_index"]):
        expected = stock_encode_spans(spans).SerializeToString()
        assert native(spans, 0) == expected, name
        assert native(spans, 3) == expected, name


class _Renamed(ReadableSpan):
    """A ReadableSpan whose ``attributes`` says something else than the holder it keeps."""

    @property
    def attributes(self) -> Any:
        return {"said": "by the property"}


def test_native_encoder_reads_what_the_public_attributes_say() -> None:
    """The native encoder reads an ended span's (immutable) BoundedAttributes through its plain dict;
    a live (mutable) one, a plain dict, no attributes, and a class whose ``attributes`` is its own,
    through what the public mapping says, as the stock encoder does."""
    native = native_module().encode_spans

    def span(attributes: Any, cls: type[ReadableSpan] = ReadableSpan) -> ReadableSpan:
        return cls("s", context=SpanContext(1, 2, False), attributes=attributes, start_time=1, end_time=2)

    values = {"a": "x", "b": (1, 2), "c": 1.5}
    event = Event("e", BoundedAttributes(attributes={"k": "v", "n": 3}, immutable=True), timestamp=5)
    cases = [
        span(BoundedAttributes(attributes=values, immutable=True)),
        span(BoundedAttributes(attributes=values, immutable=False)),
        span(BoundedAttributes(attributes={}, immutable=True)),
        span(dict(values)),
        span(None),
        span(BoundedAttributes(attributes=values, immutable=True), _Renamed),
        ReadableSpan("s", context=SpanContext(1, 2, False), attributes=values, events=[event], start_time=1, end_time=2),
    ]
    for case in cases:
        expected = stock_encode_spans([case]).SerializeToString()
        assert native([case], 0) == expected, case.attributes
    assert b"by the property" in native([cases[5]], 0)


def test_native_encoder_declines_what_python_drops_or_raises_on() -> None:
    native = native_module().encode_spans
    odd: list[Any] = [2**70, "\ud800", {"k": 1}, {1, 2}, object(), bytearray(b"a"), range(2), [1, 2**64]]
    for value in odd:
        span = ReadableSpan("s", context=SpanContext(1, 2, False), attributes={"v": value}, start_time=1, end_time=2)
        assert native([span], 0) is None, value
    assert native([ReadableSpan("\ud800", context=SpanContext(1, 2, False))], 0) is None


def test_native_encoder_is_used_unless_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    module = native_module()
    native_encoder.cache_clear()
    try:
        monkeypatch.setenv(NATIVE_ENV, "off")
        assert native_encoder() is None
        native_encoder.cache_clear()
        monkeypatch.delenv(NATIVE_ENV)
        assert native_encoder() is module.encode_spans
    finally:
        native_encoder.cache_clear()
