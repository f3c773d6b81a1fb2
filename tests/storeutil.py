"""The exact-attribute check shared by the vector-store tests written against a real engine
(LanceDB, Milvus Lite, psycopg2): pop every attribute the stage must carry, then nothing may be
left; one candidate event per hit, in the engine's order, each popped to empty."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

import mirrorutil
import spanutil
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import receipt
from ragtrail.instrumentation._vectorstore import vector_receipt


@dataclass
class Expected:
    """What one retrieve stage must say, and nothing else."""

    component: str
    collection: str | None  # None: a store without a name (the GenAI data source is then the component)
    ids: list[str]
    kind: str
    scores: list[Any] | None = None
    contents: list[str] | None = None
    top_k: int | None = None
    text: str | None = None
    vector: Any = None
    filter_json: str | None = None
    findings: tuple[str, ...] | None = None
    batch: tuple[int, int] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def check_span(span: Any, spans: Any, want: Expected) -> None:
    a = spanutil.own(span)
    expected: dict[str, Any] = {
        sc.SCHEMA: 5,
        sc.STAGE_KIND: sc.KIND_RETRIEVE,
        sc.STAGE_COMPONENT: want.component,
        sc.STAGE_STATUS: sc.STATUS_OK if want.ids else sc.STATUS_EMPTY,
        sc.CANDIDATES_IN: 0,
        sc.CANDIDATES_OUT: len(want.ids),
        sc.CANDIDATES_EXCLUDED: 0,
        sc.GEN_AI_OPERATION_NAME: "retrieval",
        sc.GEN_AI_DATA_SOURCE_ID: want.collection if want.collection is not None else want.component,
        sc.OPENINFERENCE_SPAN_KIND: "RETRIEVER",
    }
    if want.collection is not None:
        expected[sc.STAGE_COLLECTION] = want.collection
    if want.top_k is not None:
        expected[sc.STAGE_TOP_K] = expected[sc.GEN_AI_RETRIEVAL_TOP_K] = want.top_k
    if want.text is not None:
        rec = receipt(want.text)
        expected.update(
            {
                sc.QUERY_TEXT: want.text,
                sc.QUERY_HOP: 0,
                sc.QUERY_TRANSFORM: "none",
                sc.QUERY_CHARS: rec.chars,
                sc.QUERY_BYTES: rec.bytes,
                sc.QUERY_SHA256: rec.sha256,
                sc.OI_INPUT_VALUE: want.text,
            }
        )
    if want.vector is not None:
        expected[sc.QUERY_VECTOR_DIM], expected[sc.QUERY_VECTOR_SHA256] = vector_receipt(want.vector)
    if want.filter_json is not None:
        expected[sc.STAGE_FILTER] = want.filter_json
    if want.findings:
        expected[sc.STAGE_FINDINGS] = want.findings
    if want.batch is not None:
        expected[sc.STAGE_BATCH_INDEX], expected[sc.STAGE_BATCH_SIZE] = want.batch
    expected.update(want.extra)
    for key, value in expected.items():
        assert key in a, key
        assert a.pop(key) == value, key
    evs = spanutil.stitched(span, spans)
    spanutil.check_count_and_digest(span, evs)
    a.pop(sc.EVENTS_COUNT, None), a.pop(sc.EVENTS_DIGEST, None)
    for i, ident in enumerate(want.ids):
        if f"retrieval.documents.{i}.document.id" in a:
            assert a.pop(f"retrieval.documents.{i}.document.id") == ident
            if want.scores is not None:
                assert a.pop(f"retrieval.documents.{i}.document.score") == pytest.approx(want.scores[i])
    mirrorutil.pop_mirrors(a, span, spans)
    assert a == {}, f"unexpected attributes {a}"
    assert [name for name, _ in evs] == [sc.EVENT_CANDIDATE] * len(want.ids)
    for rank, (ident, (_, ev)) in enumerate(zip(want.ids, evs, strict=True)):
        spanutil.pop_pointer(ev, {})
        assert ev.pop(sc.CANDIDATE_ID) == ident
        assert ev.pop(sc.CANDIDATE_RANK) == rank
        if want.scores is not None:
            assert ev.pop(sc.CANDIDATE_SCORE) == pytest.approx(want.scores[rank])
        assert ev.pop(sc.CANDIDATE_SCORE_KIND) == want.kind
        if want.text is not None:
            assert ev.pop(sc.CANDIDATE_HOP) == 0
        if want.contents is not None:
            rec = receipt(want.contents[rank])
            assert ev.pop(sc.CANDIDATE_CONTENT_CHARS) == rec.chars
            assert ev.pop(sc.CANDIDATE_CONTENT_BYTES) == rec.bytes
            assert ev.pop(sc.CANDIDATE_CONTENT_SHA256) == rec.sha256
        assert ev == {}, ev
