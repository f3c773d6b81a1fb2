"""The mirrors (docs/semconv.md §6) with exact values: document cards per capture mode on a narrowing
stage, the exclusion reason in an input card's metadata, the summary, the answer, status, the cap
counts under a tight attribute limit, continuation spans, GenAI documents and rerank attributes."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import mirrorutil
import ragtrail
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import preview

LONG = "x" * 300
DOCS = [
    {"id": "a", "content": "alpha text", "score": 0.9, "metadata": {"lang": "en", "secret": "s", "tags": ["p", "q"]}},
    {"id": "b", "content": LONG, "score": 0.5, "metadata": {"lang": "de"}},
    {"id": "c", "content": "gamma text", "score": 0.2, "metadata": {}},
]


def _record(provider: TracerProvider) -> None:
    tracer = provider.get_tracer("t")
    with ragtrail.stage("pipeline", "app", tracer=tracer):
        with ragtrail.stage("filter", "app.lang", tracer=tracer) as s:
            s.query("what?")
            s.inputs(DOCS)
            s.exclude(DOCS[1], "filtered_by_metadata", "lang=de")
            s.outputs([DOCS[0], DOCS[2]])
        ragtrail.answer("the answer " + LONG, claim="presence")
        ragtrail.cite(["a"], tracer=tracer)


@pytest.fixture
def recorded():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def run(limits: SpanLimits | None = None):
        nonlocal provider
        if limits is not None:
            provider = TracerProvider(span_limits=limits)
            provider.add_span_processor(SimpleSpanProcessor(exporter))
        _record(provider)
        return {s.name: s for s in exporter.get_finished_spans()}

    return run


@pytest.mark.parametrize("mode", ["off", "preview", "full"])
def test_narrowing_stage_cards_follow_the_capture_modes(recorded, mode):
    ragtrail.set_capture(content=mode, metadata=["lang", "tags"])
    spans = recorded()
    a = dict(spans["filter lang"].attributes)
    content = {"off": lambda t: None, "preview": preview, "full": lambda t: t}[mode]
    expected = {
        sc.OPENINFERENCE_SPAN_KIND: "RERANKER",
        sc.OI_INPUT_VALUE: "what?",
        sc.OI_INPUT_MIME_TYPE: "text/plain",
        sc.OI_RERANKER_QUERY: "what?",
        sc.OI_OUTPUT_VALUE: "kept 2 of 3; excluded: b filtered_by_metadata (lang=de)",
        sc.OI_OUTPUT_MIME_TYPE: "text/plain",
    }
    cards = {
        "reranker.output_documents": [("a", 0.9, "alpha text", {"lang": "en", "tags": ["p", "q"]}), ("c", 0.2, "gamma text", None)],
        "reranker.input_documents": [
            ("a", 0.9, "alpha text", {"lang": "en", "tags": ["p", "q"]}),
            ("b", 0.5, LONG, {"lang": "de", sc.EXCLUSION_REASON: "filtered_by_metadata", sc.EXCLUSION_DETAIL: "lang=de"}),
            ("c", 0.2, "gamma text", None),
        ],
    }
    for prefix, docs in cards.items():
        for i, (ident, score, text, meta) in enumerate(docs):
            expected[f"{prefix}.{i}.document.id"] = ident
            expected[f"{prefix}.{i}.document.score"] = score
            if content(text) is not None:
                expected[f"{prefix}.{i}.document.content"] = content(text)
            if meta is not None:
                expected[f"{prefix}.{i}.document.metadata"] = json.dumps(meta, sort_keys=True, separators=(",", ":"))
    got = {k: v for k, v in a.items() if not k.startswith("ragtrail.")}
    assert got == expected
    assert spans["filter lang"].status.status_code is StatusCode.OK
    # the same values, checked against the span's own events
    mirrorutil.pop_mirrors(a, spans["filter lang"])
    assert not [k for k in a if not k.startswith("ragtrail.")]

    root = dict(spans["pipeline app"].attributes)
    answer = "the answer " + LONG
    if mode == "off":
        assert sc.OI_OUTPUT_VALUE not in root
        assert spans["cite cite"].attributes[sc.OI_OUTPUT_VALUE] == '{"cited":["a"]}'
    else:
        assert root[sc.OI_OUTPUT_VALUE] == content(answer)
        assert json.loads(spans["cite cite"].attributes[sc.OI_OUTPUT_VALUE]) == {"answer": content(answer), "cited": ["a"]}


def test_query_hash_mode_writes_no_query_text(recorded):
    ragtrail.set_capture(query="hash")
    a = dict(recorded()["filter lang"].attributes)
    assert sc.OI_INPUT_VALUE not in a and sc.OI_RERANKER_QUERY not in a and "what?" not in str(a)


def test_failed_stage_is_error_and_mirrors_off_leave_status_unset():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with ragtrail.stage("rerank", "app.r", tracer=provider.get_tracer("t")) as s:
        s.set_status("failed", failure_class="parse_error")
    ragtrail.set_capture(mirror_openinference=False, mirror_genai=False)
    with ragtrail.stage("rerank", "app.quiet", tracer=provider.get_tracer("t")) as s:
        s.inputs(DOCS)
        s.outputs(DOCS[:1])
    failed, quiet = exporter.get_finished_spans()
    assert (failed.status.status_code, failed.status.description) == (StatusCode.ERROR, "parse_error")
    assert quiet.status.status_code is StatusCode.UNSET
    assert not [k for k in quiet.attributes if not k.startswith("ragtrail.")]


def test_a_capped_list_says_how_many_of_how_many():
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=80))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    hits = [{"id": f"d{i}", "content": f"text {i}", "score": 1 - i / 100} for i in range(40)]
    ragtrail.set_capture(content="full")
    with ragtrail.stage("retrieve", "app.search", tracer=provider.get_tracer("t")) as s:
        s.query("q")
        s.outputs(hits)
    (span,) = exporter.get_finished_spans()
    a = dict(span.attributes)
    # 80 - 40 kept for ragtrail - 4 for the counts - 3 OpenInference (kind, input, mime) - 5 GenAI = 28: 9 cards
    # of 3. ragtrail's own here fit the 40: 13 stage attributes + 8 candidate columns (ids, scores, score
    # kind, hop, chars, bytes, sha256, text) + 9 written last = 30; beyond 40 the cap would shrink
    assert a[sc.MIRROR_OUTPUT_DOCUMENTS_MIRRORED] == 9 and a[sc.MIRROR_OUTPUT_DOCUMENTS_TOTAL] == 40
    assert "retrieval.documents.8.document.id" in a and "retrieval.documents.9.document.id" not in a
    assert [d["id"] for d in json.loads(a[sc.GEN_AI_RETRIEVAL_DOCUMENTS])] == [f"d{i}" for i in range(9)]
    assert span.dropped_attributes == 0
    mirrorutil.pop_mirrors(a, span)
    assert not [k for k in a if not k.startswith("ragtrail.")]


def test_the_cap_leaves_room_for_every_attribute_ragtrail_writes():
    """Many metadata columns push ragtrail's own attributes past the 40 kept free: the mirror cap
    shrinks by exactly that much, and the SDK evicts nothing."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=80))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    keys = [f"k{j}" for j in range(20)]
    hits = [{"id": f"d{i}", "content": f"text {i}", "score": 1 - i / 100, "metadata": {k: i for k in keys}} for i in range(40)]
    ragtrail.set_capture(content="full", metadata=keys)
    with ragtrail.stage("retrieve", "app.search", tracer=provider.get_tracer("t")) as s:
        s.query("q")
        s.outputs(hits)
    (span,) = exporter.get_finished_spans()
    a = dict(span.attributes)
    # 13 stage attributes + 28 columns (8 + 20 metadata) + 9 written last = 50: 10 beyond the 40, so
    # 28 - 10 = 18 attributes for cards: 4 cards of 4 (id, score, content, metadata)
    assert a[sc.MIRROR_OUTPUT_DOCUMENTS_MIRRORED] == 4
    assert span.dropped_attributes == 0 and len(a[sc.COLUMN_IDS]) == 40


def test_genai_documents_are_cut_whole_to_the_value_length_limit():
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_attribute_length=100))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ragtrail.set_capture(mirror_openinference=False)
    hits = [{"id": f"doc-{i}", "score": 0.5} for i in range(10)]
    with ragtrail.stage("retrieve", "app.search", tracer=provider.get_tracer("t")) as s:
        s.outputs(hits)
    (span,) = exporter.get_finished_spans()
    docs = json.loads(span.attributes[sc.GEN_AI_RETRIEVAL_DOCUMENTS])  # valid JSON, not a cut string
    assert docs == [{"id": f"doc-{i}", "score": 0.5} for i in range(len(docs))] and 0 < len(docs) < 10
    assert span.attributes[sc.MIRROR_OUTPUT_DOCUMENTS_MIRRORED] == len(docs)
    assert span.attributes[sc.MIRROR_OUTPUT_DOCUMENTS_TOTAL] == 10


def test_rerank_genai_and_continuation_spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ragtrail.set_capture(events_per_span=1)
    stale = {"id": "d", "content": "delta text", "score": 0.1}
    with ragtrail.stage("rerank", "app.rerank", top_k=2, tracer=provider.get_tracer("t")) as s:
        s.inputs([*DOCS, stale])
        s.exclude(stale, "stale")  # two reasons: two exclusion events, one span each
        s.outputs([dict(DOCS[2], score=0.99), dict(DOCS[0], score=0.5)], score_kind="rerank")
    spans = exporter.get_finished_spans()
    stage = [s for s in spans if sc.STAGE_CONTINUATION not in s.attributes][0]
    (part,) = [s for s in spans if sc.STAGE_CONTINUATION in s.attributes]
    assert stage.attributes[sc.GEN_AI_RERANK_CANDIDATE_COUNT] == 4
    assert stage.attributes[sc.GEN_AI_RERANK_TOP_N] == 2
    assert stage.attributes[sc.GEN_AI_RERANK_SCORES] == (0.99, 0.5)
    assert sc.GEN_AI_OPERATION_NAME not in stage.attributes
    assert {k: v for k, v in part.attributes.items() if not k.startswith("ragtrail.")} == {
        sc.OPENINFERENCE_SPAN_KIND: "RERANKER",
        sc.OI_OUTPUT_VALUE: "continuation 1 of 1: ragtrail events 2-2 of 2 of this stage (the stage span holds the rest, its counts and digest)",
        sc.OI_OUTPUT_MIME_TYPE: "text/plain",
    }


def test_names_match_the_released_semantic_conventions():
    """GenAI names as the released opentelemetry-semantic-conventions package spells them."""
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as g

    assert (
        sc.GEN_AI_OPERATION_NAME,
        sc.GEN_AI_DATA_SOURCE_ID,
        sc.GEN_AI_REQUEST_TOP_K,
        sc.GEN_AI_RETRIEVAL_QUERY_TEXT,
        sc.GEN_AI_RETRIEVAL_DOCUMENTS,
    ) == (g.GEN_AI_OPERATION_NAME, g.GEN_AI_DATA_SOURCE_ID, g.GEN_AI_REQUEST_TOP_K, g.GEN_AI_RETRIEVAL_QUERY_TEXT, g.GEN_AI_RETRIEVAL_DOCUMENTS)
    assert g.GenAiOperationNameValues.RETRIEVAL.value == sc.GEN_AI_OPERATION_RETRIEVAL
    # semantic-conventions-genai v0.1.0 moved a retrieval's k to gen_ai.retrieval.top_k (its CHANGELOG,
    # #217); the released Python package predates it, so the name is pinned here as the release spells it
    assert sc.GEN_AI_RETRIEVAL_TOP_K == "gen_ai.retrieval.top_k"
    assert not hasattr(g, "GEN_AI_RETRIEVAL_TOP_K") or g.GEN_AI_RETRIEVAL_TOP_K == sc.GEN_AI_RETRIEVAL_TOP_K
    # the rerank names are a proposal (semantic-conventions-genai #253): in no released package yet
    assert not [n for n in dir(g) if "RERANK" in n]
