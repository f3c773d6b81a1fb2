"""The write path's shortcuts (issue 11's cost) give exactly what the general rules give.

Each fast path on the host's thread (a stage field's text, the digests, the SDK attribute store, the
exclusion matching) is pinned here to the slower rule it stands in for, on the values where a
shortcut could go wrong: quotes, backslashes, control characters, non-ASCII and lone surrogates in
text; 0.0 and -0.0, NaN and the infinities among scores; repeated ids.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import SpanLimits, TracerProvider

from ragtrail import settings as capture
from ragtrail.contract import columns, receipts
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import digests
from ragtrail.recorder import events, mirrors
from ragtrail.recorder.candidates import Candidate
from ragtrail.recorder.exclusions import _kept_positions
from ragtrail.recorder.rescoring import unproduced_scores
from ragtrail.recorder.sdk_events import set_attributes


class Level(enum.IntEnum):
    LOW = 1


def general(value: object) -> str:
    """A field's text by the general rule: the value as a digest sees it, as JSON."""
    return digests.json_leaf(digests.field_value(value))


TRICKY_TEXT = ["", "a", '"', "\\", 'a","b', "\n", "\x00", "\x1f", "\x7f", "é", "\u2028", "\ud800", "~ ", "0" * 64]
TRICKY_FLOATS = [0.0, -0.0, 1.5, -2.25, 1e300, 5e-324, float("nan"), float("inf"), float("-inf"), 0.1 + 0.2]


def test_field_text_of_tricky_values_is_the_general_rule() -> None:
    values: list[object] = [
        *TRICKY_TEXT,
        0,
        -7,
        10**30,
        True,
        False,
        None,
        1.5,
        float("nan"),
        -0.0,
        tuple(TRICKY_TEXT),
        [t for t in TRICKY_TEXT if t.isascii()],
        ("", ""),
        ("a",),
        (),
        tuple(TRICKY_FLOATS),
        [-0.0, 0.0, -0.0],
        (1, 2, 3),
        (True, False),
        (1, True),
        (1, 1.0),
        ("a", 1),
        (Level.LOW, Level.LOW),
        [Level.LOW],
        ("x" * 10, None),
    ]
    for value in values:
        assert digests.field_json(value) == general(value), repr(value)


def test_a_score_text_read_back_from_the_memo_is_its_own() -> None:
    # 0.0 and -0.0 are equal dict keys with different texts; NaN is never equal to itself
    first = digests.field_json([0.0, 1.25, -0.0, float("nan"), 1.25])
    again = digests.field_json([-0.0, 1.25, 0.0, float("nan")])
    assert first == general([0.0, 1.25, -0.0, float("nan"), 1.25]) == '"[0.0,1.25,-0.0,NaN,1.25]"'
    assert again == general([-0.0, 1.25, 0.0, float("nan")]) == '"[-0.0,1.25,0.0,NaN]"'


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.lists(st.text(max_size=6), max_size=6),
        st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=6),
        st.lists(st.integers(), max_size=6),
        st.lists(st.booleans(), max_size=4),
        st.lists(st.one_of(st.text(max_size=3), st.integers(), st.floats(), st.booleans()), max_size=5),
        st.text(max_size=8),
        st.integers(),
        st.floats(),
        st.booleans(),
        st.none(),
    )
)
def test_field_text_is_the_general_rule(value: object) -> None:
    assert digests.field_json(value) == general(value)
    assert digests.field_json(tuple(value) if isinstance(value, list) else value) == general(value)


# ids and digests as the recorder writes them (printable ASCII: the sorted-join fast path), and the
# characters that must send a digest to the general path (NUL, quote, backslash, controls, non-ASCII)
_DIGEST_PART = st.one_of(st.text(max_size=5), st.text(alphabet='ac0 ~[]#!:"\\\x00\x1f\x7fé\ud800', max_size=5))


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["ragtrail.candidate", "ragtrail.exclusion", "ragtrail.query"]), _DIGEST_PART, _DIGEST_PART),
        max_size=12,
    )
)
def test_events_digest_is_the_documented_rule(items: list[tuple[str, str, str]]) -> None:
    # docs/semconv.md §3: sha256 of the compact JSON array of the items in sorted order
    payload = json.dumps([list(i) for i in sorted(items)], separators=(",", ":"), ensure_ascii=False)
    expected = hashlib.sha256(payload.encode("utf-8", "backslashreplace")).hexdigest()
    assert receipts.sorted_events_digest(items) == expected
    assert receipts.sorted_events_digest(iter(items)) == expected
    assert receipts.events_digest([list(i) for i in sorted(items)]) == expected


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["ragtrail.candidate", "ragtrail.exclusion", "ragtrail.query"]),
            st.lists(_DIGEST_PART, max_size=5),
            st.lists(st.one_of(_DIGEST_PART, st.just(""), st.just("a" * 64)), max_size=6),
        ),
        max_size=4,
    )
)
def test_a_stages_record_groups_digest_and_count_as_their_items(groups: list[tuple[str, list[Any], list[Any]]]) -> None:
    # the writer's records by column (events.Records): the same digest and count as the items one
    # by one (zip: a shorter sha column cuts the group), whatever characters the parts hold
    records = [events.Records(name, ids, shas) for name, ids, shas in groups]
    items = [item for name, ids, shas in groups for item in zip([name] * len(ids), ids, shas, strict=False)]
    assert events.count(records) == len(items)
    assert events.digest(records) == receipts.sorted_events_digest(items)


def test_the_recorders_digest_items_take_the_sorted_join_and_sort_as_tuples() -> None:
    # ids that are prefixes of each other and empty digests: NUL joints sort as the tuples do
    items = [
        ("ragtrail.exclusion", "c1", ""),
        ("ragtrail.candidate", "c10", "a" * 64),
        ("ragtrail.candidate", "c1", "b" * 64),
        ("ragtrail.candidate", "c1", ""),
        ("ragtrail.candidate", "c", "f" * 64),
        ("ragtrail.query", "hop:0", "0" * 64),
    ]
    text = digests._plain_sorted_items(items)
    assert text == json.dumps([list(i) for i in sorted(items)], separators=(",", ":"))
    for odd in ("é", '"', "\\", "\x00", "\n"):  # the general path decides these
        assert digests._plain_sorted_items([*items, ("ragtrail.candidate", odd, "")]) is None
    assert digests._plain_sorted_items([("ragtrail.candidate", "c1")]) is None  # not three parts
    assert digests._plain_sorted_items([("ragtrail.candidate", "c1", 1)]) is None  # not text


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=12), max_size=8), st.one_of(st.none(), st.binary(min_size=1, max_size=8)))
def test_stage_receipt_is_the_documented_rule(fields: dict[str, str], key: bytes | None) -> None:
    ordered = sorted(fields.items())

    def mac(text: str) -> str:
        data = text.encode("utf-8", "backslashreplace")
        if key is None:
            return hashlib.sha256(data).hexdigest()
        return hmac.new(key, data, hashlib.sha256).hexdigest()

    whole = mac(json.dumps([[k, v] for k, v in ordered], sort_keys=True, separators=(",", ":"), ensure_ascii=False))
    stamp = receipts.stage_receipt(fields, key)
    assert stamp.receipt == (whole if key is None else f"hmac-sha256:{whole}")
    assert stamp.fields == ";".join(f"{k}={mac(v)[: receipts.FIELD_DIGEST_HEX]}" for k, v in ordered)


def test_a_field_digest_read_back_from_the_memo_is_its_own() -> None:
    # the memo of short field texts: a hit, a text too long to keep, and the memo started over when full
    texts = ['"ok"', "100", '"\ud800"', '"' + "x" * 80 + '"', *(f"{i}" for i in range(digests._MEMO_ENTRIES + 5))]
    for _ in range(2):
        for text in texts:
            expected = hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()[: receipts.FIELD_DIGEST_HEX]
            assert digests._field_digest(text) == expected
            assert receipts.stage_receipt({"f": text}).fields == f"f={expected}"
    assert len(digests._FIELD_DIGESTS) <= digests._MEMO_ENTRIES
    assert '"' + "x" * 80 + '"' not in digests._FIELD_DIGESTS


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(st.text(max_size=6), st.sampled_from(TRICKY_TEXT)),
    st.one_of(st.none(), st.floats(), st.sampled_from(TRICKY_FLOATS), st.integers(-(10**20), 10**20), st.booleans()),
)
def test_a_genai_document_is_the_general_rule(ident: str, score: Any) -> None:
    # gen_ai.retrieval.documents with content off and no metadata: the object's text written directly
    # is the sorted-keys JSON of {"id", "score"} (the score only when finite), and a score read back
    # from the columns' memory of score texts is its own
    config = capture.get()
    assert config.content_for("") is None and not config.metadata  # the defaults: the direct path
    item: dict[str, Any] = {"id": ident}
    finite = receipts.finite_or_none(score)
    if finite is not None:
        item["score"] = finite
    expected = json.dumps(item, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for _ in range(2):
        assert mirrors._genai_document(config, Candidate(ident, "text", score), False) == expected
        if finite is not None:
            digests._floats_json([finite])  # now in the memory the columns fill


def _scores_by_the_rule(values: list[Any]) -> dict[str, Any]:
    """docs/semconv.md §3's score columns, row by row: ``scores`` when any row has a finite score
    (0.0 in the rows without), ``score_raw`` when some row has none."""
    numbers = [None if v is None else receipts.finite_or_none(v) for v in values]
    out: dict[str, Any] = {}
    if any(n is not None for n in numbers):
        out[sc.COLUMN_SCORES] = [0.0 if n is None else n for n in numbers]
    raw = ["" if n is not None else sc.NO_SCORE if v is None else columns.score_text(v) for v, n in zip(values, numbers, strict=True)]
    if any(raw) and (any(r not in ("", sc.NO_SCORE) for r in raw) or sc.COLUMN_SCORES in out):
        out[sc.COLUMN_SCORE_RAW] = raw
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.floats(), st.sampled_from([*TRICKY_FLOATS, 1.7e308, -1.7e308, None, 3, True, "x"])), max_size=8))
def test_score_columns_are_the_rule(values: list[Any]) -> None:
    # every row a finite float takes the direct path (also when their sum overflows: the rows decide)
    out: dict[str, Any] = {}
    columns.encode_scores(out, values)
    expected = _scores_by_the_rule(values)
    assert list(out) == list(expected)
    assert [repr(v) for v in out.get(sc.COLUMN_SCORES, [])] == [repr(v) for v in expected.get(sc.COLUMN_SCORES, [])]  # -0.0 kept
    assert out.get(sc.COLUMN_SCORE_RAW) == expected.get(sc.COLUMN_SCORE_RAW)
    out2: dict[str, Any] = {}
    columns.encode_scores(out2, iter(values))
    assert repr(out2) == repr(out)


def _span(max_attributes: int | None = None) -> Any:
    limits = SpanLimits(max_span_attributes=max_attributes) if max_attributes else SpanLimits()
    return TracerProvider(span_limits=limits).get_tracer("t").start_span("s")


def _stored(span: Any) -> tuple[list[tuple[str, Any]], int]:
    """What the SDK holds, in its order, and how many it dropped."""
    return list(span.attributes.items()), span.dropped_attributes


def test_set_attributes_stores_what_the_sdk_stores() -> None:
    batches = [
        {"a": 1, "b": "x", "c": [1, 2], "d": (1.5,)},  # all new: one update
        {"e": True, "a": 2},  # an existing key moves to the end
        {"f": ["p", "q"], "g": 3.0},
    ]
    for max_attributes in (None, 128, 5, 3):
        ours, sdks = _span(max_attributes), _span(max_attributes)
        for batch in batches:
            set_attributes(ours, batch)
            sdks.set_attributes(batch)
            assert _stored(ours) == _stored(sdks), (max_attributes, batch)
        ours.end()
        sdks.end()


def _candidates(ids: list[str]) -> list[Candidate]:
    return [Candidate(id=i, score=float(n)) for n, i in enumerate(ids)]


def _kept_by_multiset(inputs: list[Candidate], outputs: list[Candidate]) -> set[int]:
    """The matching rule for repeated ids, applied to distinct ones (the first free position of an id)."""
    kept: set[int] = set()
    for out in outputs:
        free = [n for n, c in enumerate(inputs) if c.id == out.id and n not in kept]
        if free:
            kept.add(free[0])
    return kept


def test_distinct_ids_are_kept_as_the_multiset_rule_keeps_them() -> None:
    inputs = _candidates(["a", "b", "c", "d"])
    for out_ids in (["c", "a"], ["a", "a", "b"], ["z"], [], ["d", "c", "b", "a"]):
        outputs = [Candidate(id=i) for i in out_ids]
        assert _kept_positions(inputs, outputs) == _kept_by_multiset(inputs, outputs), out_ids


def test_an_output_id_given_twice_takes_its_input_score_once() -> None:
    inputs = [Candidate(id="a", score=1.0, score_kind="bm25"), Candidate(id="b", score=2.0, score_kind="bm25")]
    outputs = [Candidate(id="a", score=1.0, score_kind="rerank"), Candidate(id="a", score=1.0, score_kind="rerank")]
    findings = unproduced_scores("rerank", inputs, outputs)
    # the first "a" is its input's own score handed on; the second has no input left to match
    assert [c.score_kind for c in outputs] == ["bm25", "rerank"]
    assert findings == ["1 output score(s) are the inputs' own scores, not produced by this stage: recorded with their upstream kind (bm25)"]


class Text(str):
    """A ``str`` subclass, as LangChain's ``StrOutputParser`` returns (``TextAccessor``): a history-aware
    retriever's rewritten question reaches the retriever as one."""


def test_a_subclass_value_has_the_field_text_of_the_plain_value_the_wire_carries() -> None:
    """OTLP carries a ``str``/``int`` subclass as its plain value, so its field text is the plain
    value's; it was the JSON text of its JSON text (quoted twice), so the reader's digest of the
    received plain string never matched: a false ``changed_uncited`` alarm on an intact trace."""
    for value, plain in ((Text("What are common ways?"), "What are common ways?"), (Text('a"\\\n'), 'a"\\\n'), (Level.LOW, 1)):
        assert digests.field_json(value) == digests.field_json(plain) == general(plain), repr(value)


def test_a_str_subclass_query_verifies_intact(span_exporter) -> None:
    import ragtrail
    from ragtrail.export.otlp_json import spans_to_dict
    from ragtrail.inspect.manifest import build
    from ragtrail.inspect.model import Trace
    from ragtrail.inspect.otlp import decode_document

    @ragtrail.retriever(top_k=1)
    def search(query: str) -> list[dict[str, Any]]:
        return [{"id": "d1", "text": "Chain of thought is one way.", "score": 0.5}]

    search(Text("What are common ways of doing task decomposition?"))
    spans = list(decode_document(spans_to_dict(span_exporter.get_finished_spans())))
    [trace_id] = {s.trace_id for s in spans}
    fidelity = build(Trace(trace_id=trace_id, spans=spans, source="memory")).as_dict()["fidelity"]
    assert fidelity["alarms"] == [] and fidelity["changed_uncited"] == 0
