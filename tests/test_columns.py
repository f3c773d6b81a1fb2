"""Schema 3's candidate columns (docs/semconv.md §3): the real recorder writes them on the real SDK,
the reader decodes them back into exactly the per-candidate records schema 2's events held, from
every shape a backend returns arrays in; odd rows (no score, a non-finite score, no content, no hop,
mixed kinds, metadata, transform rules, rank-less exclusions) keep their blanks apart from values."""

from __future__ import annotations

import json
import math

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ragtrail
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import receipt, stage_fields, stage_receipt
from ragtrail.inspect import columns
from ragtrail.recorder.candidates import Candidate
from spanutil import records


def _sha(text: str) -> str:
    return receipt(text).sha256


ODD = [
    Candidate(id="a", content="alpha", score=0.5, score_kind="bm25", hop=0, metadata={"lang": "en", "tags": ["x", "y"]}),
    Candidate(id="b", content="beta", score=float("nan"), score_kind="rerank", hop=1, metadata={"n": 3}),
    Candidate(id="c", content=None, score=None, hop=None),
    Candidate(id="d", content="delta text", score=2, transform_rule="budget_trim@1", derived_from="f" * 64),
]


def _record() -> tuple[object, object]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ragtrail.set_capture(content="preview", metadata=["lang", "tags", "n"])
    with ragtrail.stage("filter", "app.odd", tracer=provider.get_tracer("t")) as s:
        s.inputs([*ODD, {"id": "e", "content": "echo", "score": 0.1}])
        s.exclude("e", "stale", "old edition")
        s.exclude("zz-never-seen", "superseded")  # excluded before it was an input: no rank
        s.outputs(ODD)
    (span,) = exporter.get_finished_spans()
    return span, exporter


def test_odd_rows_round_trip_exactly() -> None:
    span, _ = _record()
    a = span.attributes
    assert a[sc.COLUMN_IDS] == ("a", "b", "c", "d")
    assert a[sc.COLUMN_SCORES] == (0.5, 0.0, 0.0, 2.0)
    assert a[sc.COLUMN_SCORE_RAW] == ("", "nan", sc.NO_SCORE, "")
    assert a[sc.COLUMN_SCORE_KINDS] == ("bm25", "rerank", "none", "none") and sc.COLUMN_SCORE_KIND not in a
    assert a[sc.COLUMN_HOPS] == (0, 1, -1, -1) and sc.COLUMN_HOP not in a
    assert a[sc.COLUMN_CONTENT_CHARS] == (5, 4, -1, 10) and a[sc.COLUMN_CONTENT_SHA256][2] == ""
    assert a[sc.COLUMN_CONTENT_PREVIEW] == ("alpha", "beta", "", "delta text")
    assert a[sc.COLUMN_TRANSFORM_RULE] == ("", "", "", "budget_trim@1")
    assert a[sc.COLUMN_META_PREFIX + "tags"] == ('["x","y"]', "", "", "")
    assert a[sc.COLUMN_META_PREFIX + "n"] == ("", "3", "", "")
    got = records(span)
    assert got[:4] == [
        (
            sc.EVENT_CANDIDATE,
            {
                sc.CANDIDATE_ID: "a",
                sc.CANDIDATE_RANK: 0,
                sc.CANDIDATE_SCORE: 0.5,
                sc.CANDIDATE_SCORE_KIND: "bm25",
                sc.CANDIDATE_HOP: 0,
                sc.CANDIDATE_CONTENT_CHARS: 5,
                sc.CANDIDATE_CONTENT_BYTES: 5,
                sc.CANDIDATE_CONTENT_SHA256: _sha("alpha"),
                sc.CANDIDATE_CONTENT_PREVIEW: "alpha",
                sc.CANDIDATE_META_PREFIX + "lang": "en",
                sc.CANDIDATE_META_PREFIX + "tags": ("x", "y"),
            },
        ),
        (
            sc.EVENT_CANDIDATE,
            {
                sc.CANDIDATE_ID: "b",
                sc.CANDIDATE_RANK: 1,
                sc.CANDIDATE_SCORE_RAW: "nan",
                sc.CANDIDATE_SCORE_KIND: "rerank",
                sc.CANDIDATE_HOP: 1,
                sc.CANDIDATE_CONTENT_CHARS: 4,
                sc.CANDIDATE_CONTENT_BYTES: 4,
                sc.CANDIDATE_CONTENT_SHA256: _sha("beta"),
                sc.CANDIDATE_CONTENT_PREVIEW: "beta",
                sc.CANDIDATE_META_PREFIX + "n": 3,
            },
        ),
        (sc.EVENT_CANDIDATE, {sc.CANDIDATE_ID: "c", sc.CANDIDATE_RANK: 2, sc.CANDIDATE_SCORE_KIND: "none"}),
        (
            sc.EVENT_CANDIDATE,
            {
                sc.CANDIDATE_ID: "d",
                sc.CANDIDATE_RANK: 3,
                sc.CANDIDATE_SCORE: 2.0,
                sc.CANDIDATE_SCORE_KIND: "none",
                sc.CANDIDATE_CONTENT_CHARS: 10,
                sc.CANDIDATE_CONTENT_BYTES: 10,
                sc.CANDIDATE_CONTENT_SHA256: _sha("delta text"),
                sc.CANDIDATE_CONTENT_PREVIEW: "delta text",
                sc.CANDIDATE_TRANSFORM_RULE: "budget_trim@1",
                sc.CANDIDATE_TRANSFORM_DERIVED_FROM: "f" * 64,
            },
        ),
    ]
    assert got[4:] == [
        (
            sc.EVENT_EXCLUSION,
            {
                sc.CANDIDATE_ID: "e",
                sc.CANDIDATE_RANK: 4,
                sc.CANDIDATE_SCORE: 0.1,
                sc.CANDIDATE_SCORE_KIND: "none",
                sc.CANDIDATE_CONTENT_CHARS: 4,
                sc.CANDIDATE_CONTENT_BYTES: 4,
                sc.CANDIDATE_CONTENT_SHA256: _sha("echo"),
                sc.CANDIDATE_CONTENT_PREVIEW: "echo",
                sc.EXCLUSION_DETAIL: "old edition",
                sc.EXCLUSION_REASON: "stale",
            },
        ),
        (sc.EVENT_EXCLUSION, {sc.CANDIDATE_ID: "zz-never-seen", sc.CANDIDATE_SCORE_KIND: "none", sc.EXCLUSION_REASON: "superseded"}),
    ]
    assert a[sc.EVENTS_COUNT] == 6
    # one event per reason, the reason last (the SDK evicts the oldest first)
    assert [(e.name, list(e.attributes)[-1], e.attributes[sc.EXCLUSION_REASON]) for e in span.events] == [
        (sc.EVENT_EXCLUSION, sc.EXCLUSION_REASON, "stale"),
        (sc.EVENT_EXCLUSION, sc.EXCLUSION_REASON, "superseded"),
    ]


def _jaeger_text(value: object) -> object:
    """An array as Jaeger's v1 API returns it: its JSON text from Go (a whole float without ".0")."""
    if not isinstance(value, tuple):
        return value
    return json.dumps(
        [int(v) if isinstance(v, float) and math.isfinite(v) and v.is_integer() else v for v in value], separators=(",", ":"), ensure_ascii=False
    )


@pytest.mark.parametrize("shape", ["sdk tuples", "otlp lists", "jaeger v1 json text"])
def test_every_array_shape_decodes_to_the_same_records_and_receipt(shape: str) -> None:
    span, _ = _record()
    reference = records(span)
    stamped = span.attributes[sc.STAGE_RECEIPT]
    convert = {"sdk tuples": lambda v: v, "otlp lists": lambda v: list(v) if isinstance(v, tuple) else v, "jaeger v1 json text": _jaeger_text}[shape]
    attributes = {k: convert(v) for k, v in span.attributes.items()}
    events = [(e.name, {k: convert(v) for k, v in e.attributes.items()}) for e in span.events]
    columns.normalize(attributes)
    for _, event_attributes in events:
        columns.normalize(event_attributes)
    decoded = [(name, row) for _, name, row in columns.expand(attributes, [(None, n, a) for n, a in events], None)]
    assert decoded == reference
    assert stage_receipt(stage_fields(attributes, events)).receipt == stamped


def test_a_column_cut_short_leaves_its_field_out_and_never_shifts_rows() -> None:
    span, _ = _record()
    attributes = dict(span.attributes)
    attributes[sc.COLUMN_CONTENT_SHA256] = attributes[sc.COLUMN_CONTENT_SHA256][:1]
    rows = columns.records(attributes)
    assert [r[sc.CANDIDATE_ID] for r in rows] == ["a", "b", "c", "d"]
    assert [r.get(sc.CANDIDATE_CONTENT_SHA256) for r in rows] == [_sha("alpha"), None, None, None]


def test_receipts_of_equal_texts_are_one_rule_cached_or_not() -> None:
    from ragtrail.contract.receipts.stamp import clear_receipt_cache, stamp

    text = "a chunk handed over query after query"
    first = receipt(text)
    again = receipt("".join(["a chunk handed over ", "query after query"]))  # an equal, distinct str
    assert first == again == stamp(text)
    clear_receipt_cache()
    assert receipt(text) == first
