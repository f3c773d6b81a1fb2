"""The optional native package's receipt steps give exactly what the pure-Python rule gives, or decline.

``ragtrail.contract.receipts.digests`` is the rule (docs/semconv.md §3, §8); the native package
(native/ragtrail-encoder, module ``ragtrail_native``) makes a column's field text, the stage receipt
over a stage's fields (alone, and with the span's fields in one call) and the records digest faster.
Each is checked here against the rule computed with the native package switched off, on the values
where a shortcut could go wrong (quotes, backslashes, control characters, non-ASCII and lone
surrogates; 0.0, -0.0, NaN, the infinities, subnormals and ties between two shortest float texts;
ints past 64 bits; subclasses; mixed and empty arrays), and it must not decline the plain values
the recorder writes (else the speed-up is silently gone). Then the real thing: the receipts of a
recorded LangChain pipeline's spans, both ways.
"""

from __future__ import annotations

import enum
import json
import random
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nativeutil import native_module
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import digests
from ragtrail.recorder import events

BOUNDS = (digests.MAX_ITEMS, digests.MAX_CHARS)


class Level(enum.IntEnum):
    LOW = 1


class Text(str):
    pass


@pytest.fixture(autouse=True)
def _native() -> Any:
    return native_module()


def python_field_json(value: Any) -> str:
    text = digests._quoted_array(value) if type(value) in (list, tuple) else None
    return text if text is not None else digests.json_leaf(digests.field_value(value))


TRICKY_TEXT = ["", "a", '"', "\\", 'a","b', "\n", "\r\t\b\f", "\x00", "\x1f", "\x7f", "é", "\u2028", "😀", "~ ", "0" * 64]
TRICKY_FLOATS = [0.0, -0.0, 1.5, -2.25, 1e300, 5e-324, 2.2250738585072014e-308, 1e16, 1e15, 1e-4, 1e-5, 0.1 + 0.2]
TIES = [1089743870771729.2, 81897033309066.62, 33647508383631.562, -3307058797836.5312, 2151412256911903.2]
SPECIAL = [float("nan"), float("inf"), float("-inf")]


def test_plain_columns_are_made_natively_and_are_the_rule() -> None:
    native = native_module()
    columns: list[Any] = [
        tuple(TRICKY_TEXT),
        [t for t in TRICKY_TEXT if t.isascii()],
        ("c1", "c2", "sha256:" + "a" * 64),
        tuple(TRICKY_FLOATS + TIES + SPECIAL),
        [-0.0, 0.0, -0.0],
        (1, 2, -3, 2**63 - 1, -(2**63)),
        (True, False),
        ["x"],
    ]
    for column in columns:
        made = native.field_json(column, *BOUNDS)
        assert made is not None, column  # a plain column: never left to Python
        assert made == python_field_json(column) == digests.json_leaf(digests.field_value(column)), column


def test_what_the_native_package_declines_the_rule_decides() -> None:
    native = native_module()
    declined: list[Any] = [
        (),
        [],
        ("a", 1),
        (1, True),
        (1, 1.0),
        (2**63,),
        (Level.LOW,),
        (Text("a"),),
        ("\ud800",),
        ("x", None),
        "plain text",
        7,
        1.5,
        None,
        ("a",) * 3,  # within the bounds: made, but not past them (below)
    ]
    for column in declined[:-1]:
        assert native.field_json(column, *BOUNDS) is None, column
        assert digests.field_json(column) == digests.json_leaf(digests.field_value(column)), column
    assert native.field_json(declined[-1], 2, 100) is None  # more items than the bound
    assert native.field_json(("ab", "cd"), 10, 3) is None  # more characters than the bound


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.lists(st.text(max_size=6), max_size=6),
        st.lists(st.sampled_from(TRICKY_TEXT), max_size=6),
        st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=6),
        st.lists(st.sampled_from(TRICKY_FLOATS + TIES + SPECIAL), max_size=6),
        st.lists(st.integers(), max_size=6),
        st.lists(st.booleans(), max_size=4),
        st.lists(st.one_of(st.text(max_size=3), st.integers(), st.floats(), st.booleans()), max_size=5),
    ),
    st.booleans(),
)
def test_a_column_is_the_rule_or_declined(values: list[Any], as_tuple: bool) -> None:
    column = tuple(values) if as_tuple else values
    made = native_module().field_json(column, *BOUNDS)
    assert made is None or made == python_field_json(column)
    assert digests.field_json(column) == python_field_json(column)


def test_float_texts_are_pythons_repr_over_a_million_doubles() -> None:
    # random bit patterns (every exponent, subnormals, NaN payloads), scores, and decimal values near
    # ties: the shortest digits that read back, the nearest of them, the even one in a tie
    native, rng = native_module(), random.Random(25)
    draws = [
        lambda: struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0],
        lambda: rng.uniform(-1e3, 1e3),
        lambda: float(rng.randint(-(10**18), 10**18)) / 2 ** rng.randint(0, 70),
        lambda: round(rng.random(), rng.randint(0, 17)) * 10.0 ** rng.randint(-30, 30),
    ]
    for batch in range(200):
        column = tuple(draws[batch % len(draws)]() for _ in range(5000))
        made = native.field_json(column, *BOUNDS)
        expected = json.dumps(json.dumps(column, separators=(",", ":")))
        if made != expected:  # the first value that differs, for the message
            wrong = next(v for v in column if native.field_json((v,), *BOUNDS) != json.dumps(json.dumps([v])))
            pytest.fail(f"{wrong!r}: {native.field_json((wrong,), *BOUNDS)} != {json.dumps(json.dumps([wrong]))}")


FIELD_TEXT = st.one_of(st.text(max_size=12), st.sampled_from(TRICKY_TEXT + ["\ud800"]))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.one_of(st.text(min_size=1, max_size=8), st.sampled_from(["é", 'a"b', "\ud800"])), FIELD_TEXT, max_size=8))
def test_stage_receipt_is_the_rule_or_declined(fields: dict[str, str]) -> None:
    made = native_module().stage_receipt(fields, digests.MAX_ITEMS, digests.MAX_CHARS, digests.FIELD_DIGEST_HEX)
    if made is not None:
        expected = _python_stage_receipt(fields)
        assert made == (expected.receipt, expected.fields)
    surrogate = any("\ud800" in k or "\ud800" in v for k, v in fields.items())
    assert (made is None) == surrogate  # declined only where UTF-8 cannot carry a text


def _python_stage_receipt(fields: dict[str, str]) -> digests.StageReceipt:
    with digests.rule_only():
        return digests.stage_receipt(fields)


ATTRIBUTE = st.one_of(
    FIELD_TEXT,
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(TIES + SPECIAL),
    st.booleans(),
    st.lists(st.text(max_size=4), min_size=1, max_size=4).map(tuple),
    st.lists(st.floats(), min_size=1, max_size=4).map(tuple),
    st.lists(st.integers(-5, 5), max_size=3).map(tuple),
    st.sampled_from([Text("subclass"), Level.LOW, ("a", 1)]),
)
KEY = st.one_of(
    st.sampled_from(["ragtrail.schema", "ragtrail.candidates.ids", "ragtrail.x", "gen_ai.operation.name", "input.value", "ragtrail."]),
    st.sampled_from(sorted(digests._UNCOVERED)),
    st.text(max_size=6).map(lambda t: "ragtrail." + t),
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(KEY, ATTRIBUTE, max_size=8), st.booleans())
def test_a_stage_receipt_in_one_call_is_the_rule(attributes: dict[str, Any], with_event: bool) -> None:
    stage_events = []
    if with_event:
        stage_events.append(
            (sc.EVENT_EXCLUSION, {sc.EXCLUSION_REASON: "below_threshold", sc.COLUMN_IDS: ("c1", "c2"), sc.COLUMN_SCORES: (0.5, 0.25)})
        )
    made = digests.stage_receipt_of(attributes, stage_events)
    with digests.rule_only():
        expected = digests.stage_receipt(digests.stage_fields(attributes, stage_events))
    assert made == expected


def test_the_recorders_stage_attributes_are_made_in_one_native_call() -> None:
    attributes = {
        sc.SCHEMA: sc.SCHEMA_VERSION,
        sc.STAGE_KIND: "rerank",
        sc.CANDIDATES_IN: 3,
        sc.COLUMN_IDS: ("c1", "c2"),
        sc.COLUMN_SCORES: (0.5, -0.0),
        "ragtrail.flag": True,
        sc.STAGE_RECEIPT: "left out",
        "input.value": "not ragtrail's",
    }
    made = native_module().stage_receipt_of(attributes, "ragtrail.", digests._UNCOVERED, {}, *BOUNDS, digests.FIELD_DIGEST_HEX)
    assert made is not None
    assert digests.StageReceipt(*made) == _python_stage_receipt(digests.stage_fields(attributes, []))
    attributes["ragtrail.odd"] = Text("a subclass")  # the wire carries its plain value: Python's path
    assert native_module().stage_receipt_of(attributes, "ragtrail.", digests._UNCOVERED, {}, *BOUNDS, digests.FIELD_DIGEST_HEX) is None


DIGEST_PART = st.one_of(st.text(max_size=5), st.text(alphabet='ac0 ~[]#!:"\\\x00\x1f\x7fé\ud800', max_size=5))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["ragtrail.candidate", "ragtrail.exclusion", "ragtrail.query"]),
            st.lists(st.one_of(DIGEST_PART, st.sampled_from(["c1", "c10", "c", ""])), max_size=5),
            st.lists(st.one_of(DIGEST_PART, st.just(""), st.just("a" * 64)), max_size=6),
        ),
        max_size=4,
    ),
    st.booleans(),
)
def test_the_records_digest_is_the_rule_or_declined(groups: list[tuple[str, list[Any], list[Any]]], as_tuples: bool) -> None:
    records = [events.Records(name, tuple(ids) if as_tuples else ids, tuple(shas) if as_tuples else shas) for name, ids, shas in groups]
    items = [item for name, ids, shas in groups for item in zip([name] * len(ids), ids, shas, strict=False)]
    made = native_module().records_digest(records)
    plain = all(all(0x20 <= ord(c) < 0x7F and c not in '"\\' for c in part) for item in items for part in item)
    every_sha = all(len(ids) <= len(shas) for _, ids, shas in groups)
    assert (made is not None) == (bool(items) and plain and every_sha)
    if made is not None:
        assert made == digests.sorted_events_digest(items)
    assert events.digest(records) == digests.sorted_events_digest(items)


def test_a_recorded_pipelines_receipts_are_the_same_without_the_native_package(span_exporter: Any) -> None:
    # the recorder's own stages (LangChain's compression pipeline, as the users' benchmark runs it):
    # every stage receipt and events digest on the wire is what the rule alone computes from the spans
    from langchain_classic.retrievers import ContextualCompressionRetriever
    from langchain_classic.retrievers.document_compressors import DocumentCompressorPipeline
    from langchain_community.retrievers import BM25Retriever
    from langchain_core.documents import BaseDocumentCompressor, Document

    from ragtrail.instrumentation.langchain import LangChainInstrumentor

    class TopTwo(BaseDocumentCompressor):
        def compress_documents(self, documents: Any, query: str, callbacks: Any = None) -> list[Document]:
            return [
                Document(page_content=d.page_content, id=d.id, metadata={**d.metadata, "relevance_score": 1.0 / (i + 3)})
                for i, d in enumerate(documents[:2])
            ]

    docs = [Document(page_content=f'doc {i} says "{i}"\n\\ é', id=f"c{i}") for i in range(8)]
    retriever = ContextualCompressionRetriever(
        base_retriever=BM25Retriever.from_documents(docs, k=5), base_compressor=DocumentCompressorPipeline(transformers=[TopTwo()])
    )
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument()
    try:
        retriever.invoke("doc says")
    finally:
        instrumentor.uninstrument()
    spans = [s for s in span_exporter.get_finished_spans() if sc.STAGE_RECEIPT in (s.attributes or {})]
    assert len(spans) == 3
    for span in spans:
        attributes = dict(span.attributes)
        stamped = (attributes[sc.STAGE_RECEIPT], attributes[sc.STAGE_RECEIPT_FIELDS])
        wire_events = [(e.name, dict(e.attributes)) for e in span.events]
        with digests.rule_only():
            assert digests.stage_receipt(digests.stage_fields(attributes, wire_events)) == stamped


def test_a_mapping_that_is_not_a_dict_takes_the_rule() -> None:
    # the native functions take a dict: any other mapping (a reader's proxy) goes to the rule, never raises
    from types import MappingProxyType

    fields = {"stage.kind": '"rerank"', "candidates.ids": '"[\\"c1\\"]"'}
    assert digests.stage_receipt(MappingProxyType(fields)) == digests.stage_receipt(fields) == _python_stage_receipt(fields)
    attributes = {sc.STAGE_KIND: "rerank", sc.COLUMN_IDS: ("c1",)}
    assert digests.stage_receipt_of(MappingProxyType(attributes), []) == digests.stage_receipt_of(attributes, [])


def test_the_rule_alone_is_what_the_comparisons_above_compute() -> None:
    # rule_only must switch every native step off (else a comparison above compares native with native)
    installed = [digests._native_field_json, digests._native_stage_receipt, digests._native_receipt_of, digests._native_records_digest]
    assert all(step is not None for step in installed)
    with digests.rule_only():
        assert [digests._native_field_json, digests._native_stage_receipt, digests._native_receipt_of, digests._native_records_digest] == [None] * 4
    assert [digests._native_field_json, digests._native_stage_receipt, digests._native_receipt_of, digests._native_records_digest] == installed
