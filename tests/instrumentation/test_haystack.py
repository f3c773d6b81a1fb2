"""Haystack (haystack-ai) auto-instrumentation on the real library, offline.

Everything is real Haystack: ``InMemoryDocumentStore`` with BM25 and embedding retrieval, the real
joiners, rankers, query expander, multi-query retrievers and pipelines (sync and async). Only the LLM
behind ``QueryExpander`` is scripted (a tiny chat generator component returning fixed replies), and
embeddings come from a deterministic bag-of-words embedder component of our own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import math
import subprocess
import sys

import pytest

import mirrorutil

pytest.importorskip("haystack")

from haystack import Document, Pipeline, component  # noqa: E402
from haystack.components.joiners import DocumentJoiner  # noqa: E402
from haystack.components.query import QueryExpander  # noqa: E402
from haystack.components.rankers import LostInTheMiddleRanker, MetaFieldRanker  # noqa: E402
from haystack.components.retrievers import (  # noqa: E402
    AutoMergingRetriever,
    MultiQueryEmbeddingRetriever,
    MultiQueryTextRetriever,
    SentenceWindowRetriever,
)
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever  # noqa: E402
from haystack.dataclasses import ChatMessage  # noqa: E402
from haystack.document_stores.in_memory import InMemoryDocumentStore  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.instrumentation.utils import suppress_instrumentation  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.contract.receipts import receipt, sorted_events_digest  # noqa: E402
from ragtrail.instrumentation.haystack import HaystackInstrumentor  # noqa: E402
from spanutil import attrs, events, pop_all, records  # noqa: E402

BM25 = "haystack.components.retrievers.in_memory.bm25_retriever.InMemoryBM25Retriever"
EMB = "haystack.components.retrievers.in_memory.embedding_retriever.InMemoryEmbeddingRetriever"
JOINER = "haystack.components.joiners.document_joiner.DocumentJoiner"
LITM = "haystack.components.rankers.lost_in_the_middle.LostInTheMiddleRanker"
META = "haystack.components.rankers.meta_field.MetaFieldRanker"
EXPANDER = "haystack.components.query.query_expander.QueryExpander"
MQ_TEXT = "haystack.components.retrievers.multi_query_text_retriever.MultiQueryTextRetriever"
MQ_EMB = "haystack.components.retrievers.multi_query_embedding_retriever.MultiQueryEmbeddingRetriever"
PIPELINE = "haystack.core.pipeline.pipeline.Pipeline"

CORPUS = [
    ("solar", "Solar panels convert sunlight into electricity", {"year": 2021}),
    ("wind", "Wind turbines convert wind into electricity", {"year": 2019}),
    ("hydro", "Hydropower uses flowing water to make electricity", {"year": 2023}),
    ("geo", "Geothermal energy is heat from inside the earth", {}),
    ("coal", "Coal and gas are fossil fuels", {"year": 2015}),
    ("battery", "Batteries store solar and wind electricity for the night", {"year": 2024}),
]
VOCAB = [
    "solar",
    "sunlight",
    "wind",
    "turbines",
    "water",
    "hydropower",
    "heat",
    "earth",
    "coal",
    "gas",
    "fossil",
    "batteries",
    "store",
    "electricity",
    "night",
    "energy",
]


def embed(text: str) -> list[float]:
    """Deterministic bag-of-words embedding over VOCAB, L2-normalised."""
    words = [w.strip(".,?").lower() for w in text.split()]
    vector = [float(words.count(term)) for term in VOCAB]
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


@component
class BagOfWordsEmbedder:
    """A text embedder (Haystack's TextEmbedder protocol) with no model: ``embed`` above."""

    @component.output_types(embedding=list[float])
    def run(self, text: str) -> dict:
        return {"embedding": embed(text)}


@component
class ScriptedChatGenerator:
    """Stands in for the LLM behind QueryExpander: replies with a fixed text, remembers the prompts."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.prompts: list[str] = []

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage]) -> dict:
        self.prompts.append(messages[-1].text)
        return {"replies": [ChatMessage.from_assistant(self.reply)]}


def make_store() -> InMemoryDocumentStore:
    store = InMemoryDocumentStore(embedding_similarity_function="cosine")
    store.write_documents([Document(id=i, content=c, meta=m, embedding=embed(c)) for i, c, m in CORPUS])
    return store


def doc(ident: str, score: float | None, meta: dict | None = None) -> Document:
    content = next(c for i, c, _ in CORPUS if i == ident)
    return Document(id=ident, content=content, score=score, meta=meta if meta is not None else {})


@pytest.fixture
def instrument(tracer_provider, span_exporter):
    instrumentor = HaystackInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    yield span_exporter
    instrumentor.uninstrument()


def run_plain_then_instrumented(tracer_provider, span_exporter, fn):
    """The same call without and with instrumentation: (plain result, instrumented result, spans)."""
    plain = fn()
    assert span_exporter.get_finished_spans() == ()
    instrumentor = HaystackInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    try:
        traced = fn()
    finally:
        instrumentor.uninstrument()
    return plain, traced, span_exporter.get_finished_spans()


# --- expected attributes and events ----------------------------------------------------------------
def candidate(d: Document, rank: int, kind: str, hop: int | None = 0, score: float | None = None) -> dict:
    event = {
        sc.CANDIDATE_ID: d.id,
        sc.CANDIDATE_RANK: rank,
        sc.CANDIDATE_SCORE_KIND: kind,
        sc.CANDIDATE_CONTENT_CHARS: len(d.content),
        sc.CANDIDATE_CONTENT_BYTES: len(d.content.encode()),
        sc.CANDIDATE_CONTENT_SHA256: receipt(d.content).sha256,
    }
    score = d.score if score is None else score
    if score is not None:
        event[sc.CANDIDATE_SCORE] = score
    if hop is not None:
        event[sc.CANDIDATE_HOP] = hop
    return event


def excluded(d: Document, rank: int, kind: str, reason: str, detail: str | None, hop: int | None = 0) -> dict:
    event = candidate(d, rank, kind, hop)
    event[sc.EXCLUSION_REASON] = reason
    if detail is not None:
        event[sc.EXCLUSION_DETAIL] = detail
    return event


def query_attrs(text: str, hop: int, transform: str = "none", parent: int | None = None) -> dict:
    r = receipt(text)
    out = {
        sc.QUERY_TEXT: text,
        sc.QUERY_HOP: hop,
        sc.QUERY_TRANSFORM: transform,
        sc.QUERY_CHARS: r.chars,
        sc.QUERY_BYTES: r.bytes,
        sc.QUERY_SHA256: r.sha256,
    }
    if parent is not None:
        out[sc.QUERY_PARENT_HOP] = parent
    return out


def check_span(
    span,
    *,
    kind: str,
    component: str,
    own: dict,
    cands: list[dict],
    excl: list[dict] = (),
    queries: list[dict] = (),
    inputs: list[tuple[str, float | None]] | None = None,
    query: str | None = None,
    top_k: int | None = None,
) -> None:
    """Pop every attribute the span must carry (its own, the mirrors, count and digest) and compare
    its events exactly; nothing else may be left."""
    a = attrs(span)
    expected_events = [(sc.EVENT_QUERY, q) for q in queries] + [(sc.EVENT_CANDIDATE, c) for c in cands] + [(sc.EVENT_EXCLUSION, e) for e in excl]
    got = records(span)  # schema 3: the columns and the exclusion events, decoded
    assert got == expected_events
    oi_kind = mirrorutil.KINDS.get(kind, sc.OI_CHAIN)
    mirrors = {sc.OPENINFERENCE_SPAN_KIND: oi_kind}
    if query is not None:
        mirrors[sc.OI_INPUT_VALUE] = query
        if kind == sc.KIND_RERANK:
            mirrors[sc.OI_RERANKER_QUERY] = query
    if kind == sc.KIND_RETRIEVE:
        mirrors[sc.GEN_AI_OPERATION_NAME] = "retrieval"
        mirrors[sc.GEN_AI_DATA_SOURCE_ID] = component
        if top_k is not None:
            mirrors[sc.GEN_AI_RETRIEVAL_TOP_K] = top_k
        lists = [(sc.OI_RETRIEVAL_DOCUMENTS, [(c[sc.CANDIDATE_ID], c.get(sc.CANDIDATE_SCORE)) for c in cands])]
    elif oi_kind == sc.OI_RERANKER:
        if top_k is not None:
            mirrors[sc.OI_RERANKER_TOP_K] = top_k
        lists = [
            (sc.OI_RERANKER_OUTPUT_DOCUMENTS, [(c[sc.CANDIDATE_ID], c.get(sc.CANDIDATE_SCORE)) for c in cands]),
            (sc.OI_RERANKER_INPUT_DOCUMENTS, inputs or []),
        ]
    else:
        lists = []
    for prefix, docs in lists:
        for i, (ident, score) in enumerate(docs):
            mirrors[f"{prefix}.{i}.document.id"] = ident
            if score is not None:
                mirrors[f"{prefix}.{i}.document.score"] = score
    pop_all(a, mirrors)
    pop_all(a, {sc.SCHEMA: 5, sc.STAGE_KIND: kind, sc.STAGE_COMPONENT: component})
    pop_all(a, own)
    digest_items = [
        (
            n,
            f"hop:{e[sc.QUERY_HOP]}" if n == sc.EVENT_QUERY else e[sc.CANDIDATE_ID],
            e.get(sc.QUERY_SHA256 if n == sc.EVENT_QUERY else sc.CANDIDATE_CONTENT_SHA256, ""),
        )
        for n, e in expected_events
    ]
    pop_all(a, {sc.EVENTS_COUNT: len(expected_events), sc.EVENTS_DIGEST: sorted_events_digest(digest_items)})
    mirrorutil.pop_mirrors(a, span)
    assert a == {}, f"unexpected attributes left: {a}"


def ok_counts(n_in: int, n_out: int, n_excluded: int, findings: list[str]) -> dict:
    """A stage's own attributes when it ended ok: its counts and findings."""
    return {
        sc.STAGE_STATUS: "ok",
        sc.CANDIDATES_IN: n_in,
        sc.CANDIDATES_OUT: n_out,
        sc.CANDIDATES_EXCLUDED: n_excluded,
        sc.STAGE_FINDINGS: findings,
    }


def spans_named(spans, name: str) -> list:
    return [s for s in spans if s.name == name]


def one(spans, name: str):
    found = spans_named(spans, name)
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


# --- the library must not need Haystack to import --------------------------------------------------
def test_module_imports_without_haystack_and_imports_nothing_itself():
    code = (
        "import sys\n"
        "import ragtrail.instrumentation.haystack as h\n"
        "assert 'haystack' not in sys.modules, 'imported haystack'\n"
        "sys.modules['haystack'] = None  # now make it unimportable\n"
        "h.HaystackInstrumentor().instrument()\n"
        "assert h.HaystackInstrumentor().is_instrumented_by_opentelemetry\n"
        "h.HaystackInstrumentor().uninstrument()\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_declares_its_instrumented_library():
    assert HaystackInstrumentor().instrumentation_dependencies() == ("haystack-ai >= 2.10",)


# --- retrievers ------------------------------------------------------------------------------------
SCALED = "scale_score=True: each document's score is the store's expit(bm25 / 8), not the raw score"


@pytest.mark.parametrize("scaled", [None, "init", "run"])
def test_bm25_retriever_exact_span(tracer_provider, span_exporter, scaled):
    """Raw BM25 scores are kind ``bm25``; ``scale_score=True`` (the retriever's, or the call's over
    it) makes the store return ``expit(bm25 / 8)``: kind ``none`` with a finding saying so (probe h74)."""
    store = make_store()
    retriever = InMemoryBM25Retriever(store, top_k=3, scale_score=scaled == "init")
    kwargs = {"scale_score": True} if scaled == "run" else {}
    plain, traced, spans = run_plain_then_instrumented(tracer_provider, span_exporter, lambda: retriever.run(query="solar electricity", **kwargs))
    assert plain == traced
    docs = traced["documents"]
    assert [d.id for d in docs][:1] == ["solar"] and len(docs) == 3
    assert all(0.5 < d.score < 1 for d in docs) == (scaled is not None)  # sigmoid-scaled, as haystack's store does
    (span,) = spans
    assert span.name == "retrieve InMemoryBM25Retriever"
    assert span.kind == trace.SpanKind.CLIENT
    assert span.status.status_code == StatusCode.OK  # the OpenInference mirror's status on success
    check_span(
        span,
        kind="retrieve",
        component=BM25,
        top_k=3,
        query="solar electricity",
        own={
            sc.STAGE_STATUS: "ok",
            sc.STAGE_TOP_K: 3,
            sc.COVERAGE_CORPUS_SIZE: 6,
            sc.CANDIDATES_IN: 0,
            sc.CANDIDATES_OUT: 3,
            sc.CANDIDATES_EXCLUDED: 0,
            **({sc.STAGE_FINDINGS: [SCALED]} if scaled else {}),
            **query_attrs("solar electricity", 0),
        },
        cands=[candidate(d, i, "none" if scaled else "bm25") for i, d in enumerate(docs)],
    )


def test_bm25_filters_and_runtime_top_k_are_recorded(instrument):
    retriever = InMemoryBM25Retriever(make_store(), top_k=5)
    filters = {"field": "meta.year", "operator": ">", "value": 2020}
    out = retriever.run(query="electricity", filters=filters, top_k=2)
    (span,) = instrument.get_finished_spans()
    a = attrs(span)
    assert a[sc.STAGE_FILTER] == '{"field":"meta.year","operator":">","value":2020}'
    assert a[sc.STAGE_TOP_K] == 2 and a[sc.GEN_AI_RETRIEVAL_TOP_K] == 2
    assert [e[sc.CANDIDATE_ID] for e in events(span, sc.EVENT_CANDIDATE)] == [d.id for d in out["documents"]]
    assert all(d.meta["year"] > 2020 for d in out["documents"])


def test_bm25_scale_score_false_at_run_keeps_bm25(instrument):
    retriever = InMemoryBM25Retriever(make_store(), top_k=2, scale_score=True)
    retriever.run(query="solar electricity", scale_score=False)
    (span,) = instrument.get_finished_spans()
    assert {e[sc.CANDIDATE_SCORE_KIND] for e in records_of(span)} == {"bm25"}
    assert attrs(span).get(sc.STAGE_FINDINGS) in (None, [])


def test_embedding_scale_score_names_the_stores_function(instrument):
    store = make_store()
    InMemoryEmbeddingRetriever(store, top_k=2, scale_score=True).run(query_embedding=embed("solar electricity"))
    (span,) = instrument.get_finished_spans()
    assert {e[sc.CANDIDATE_SCORE_KIND] for e in records_of(span)} == {"similarity"}
    assert attrs(span)[sc.STAGE_FINDINGS] == ["scale_score=True: each document's score is the store's (cosine + 1) / 2, not the raw score"]


def records_of(span) -> list[dict]:
    return [e for n, e in records(span) if n == sc.EVENT_CANDIDATE]


def test_embedding_retriever_in_a_pipeline_takes_the_pipelines_only_query(tracer_provider, span_exporter):
    store = make_store()

    def build_and_run():
        p = Pipeline()
        p.add_component("embedder", BagOfWordsEmbedder())
        p.add_component("retriever", InMemoryEmbeddingRetriever(store, top_k=2))
        p.connect("embedder.embedding", "retriever.query_embedding")
        return p.run({"embedder": {"text": "wind turbines"}})

    plain, traced, spans = run_plain_then_instrumented(tracer_provider, span_exporter, build_and_run)
    assert plain == traced
    docs = traced["retriever"]["documents"]
    assert docs[0].id == "wind"
    root = one(spans, "pipeline Pipeline")
    span = one(spans, "retrieve InMemoryEmbeddingRetriever")
    assert span.parent.span_id == root.context.span_id
    # the retriever searched for the run's only query, as this vector: hop 0 hit the index
    import hashlib

    import numpy as np

    vector = BagOfWordsEmbedder().run(text="wind turbines")["embedding"]
    check_span(
        span,
        kind="retrieve",
        component=EMB,
        top_k=2,
        query="wind turbines",
        own={
            sc.STAGE_STATUS: "ok",
            sc.STAGE_TOP_K: 2,
            sc.COVERAGE_CORPUS_SIZE: 6,
            sc.CANDIDATES_IN: 0,
            sc.CANDIDATES_OUT: 2,
            sc.CANDIDATES_EXCLUDED: 0,
            **query_attrs("wind turbines", 0),
            sc.QUERY_VECTOR_DIM: len(vector),
            sc.QUERY_VECTOR_SHA256: hashlib.sha256(np.asarray(vector, "<f4").tobytes()).hexdigest(),
        },
        cands=[candidate(d, i, "similarity", hop=0) for i, d in enumerate(docs)],
    )
    check_span(
        root,
        kind="pipeline",
        component=PIPELINE,
        query="wind turbines",
        own={
            sc.STAGE_STATUS: "ok",
            sc.CANDIDATES_IN: 0,
            sc.CANDIDATES_OUT: 0,
            sc.CANDIDATES_EXCLUDED: 0,
            sc.COVERAGE_RETRIEVED: 2,
            sc.COVERAGE_CITED: 0,
            sc.COVERAGE_CORPUS_SIZE: 6,
            sc.RUN_STATUS: sc.RUN_AVAILABLE,
            **query_attrs("wind turbines", 0),
        },
        cands=[],
    )


def test_retriever_errors_are_the_librarys_own(tracer_provider, span_exporter):
    retriever = InMemoryBM25Retriever(make_store())

    def call():
        try:
            retriever.run(query="solar", top_k=-1)
        except ValueError as exc:
            return type(exc), str(exc)
        raise AssertionError("no error")

    plain, traced, spans = run_plain_then_instrumented(tracer_provider, span_exporter, call)
    assert plain == traced
    (span,) = spans
    assert span.status.status_code == StatusCode.ERROR
    a = attrs(span)
    assert a[sc.STAGE_STATUS] == "failed"
    assert a[sc.STAGE_FAILURE_CLASS] == "exception:ValueError"
    assert [e.name for e in span.events] == ["exception"]


# --- DocumentJoiner in every join mode -------------------------------------------------------------
def joiner_lists():
    a = [doc("solar", 0.9), doc("wind", 0.5), doc("hydro", 0.4)]
    b = [doc("solar", 0.3), doc("geo", 0.6), doc("coal", 0.1)]
    return a, b


def test_joiner_concatenate_dedups_and_cuts(tracer_provider, span_exporter):
    joiner = DocumentJoiner(top_k=3)
    plain, traced, spans = run_plain_then_instrumented(tracer_provider, span_exporter, lambda: joiner.run(documents=list(joiner_lists())))
    assert plain == traced
    assert [(d.id, d.score) for d in traced["documents"]] == [("solar", 0.9), ("geo", 0.6), ("wind", 0.5)]
    (span,) = spans
    assert span.name == "fuse DocumentJoiner"
    a, b = joiner_lists()
    check_span(
        span,
        kind="fuse",
        component=JOINER,
        own={sc.STAGE_STATUS: "ok", sc.STAGE_TOP_K: 3, sc.CANDIDATES_IN: 6, sc.CANDIDATES_OUT: 3, sc.CANDIDATES_EXCLUDED: 3},
        cands=[candidate(a[0], 0, "none", None), candidate(b[1], 1, "none", None), candidate(a[1], 2, "none", None)],
        excl=[
            excluded(a[2], 2, "none", "below_rank_cutoff", "top_k=3", None),
            excluded(b[0], 3, "none", "deduplicated", "duplicate id of solar", None),
            excluded(b[2], 5, "none", "below_rank_cutoff", "top_k=3", None),
        ],
    )


@pytest.mark.parametrize("mode,kind", [("merge", "none"), ("reciprocal_rank_fusion", "rrf"), ("distribution_based_rank_fusion", "relative")])
def test_joiner_rescoring_modes(tracer_provider, span_exporter, mode, kind):
    joiner = DocumentJoiner(join_mode=mode, top_k=4)
    plain, traced, spans = run_plain_then_instrumented(tracer_provider, span_exporter, lambda: joiner.run(documents=list(joiner_lists())))
    assert plain == traced
    out = traced["documents"]
    assert len(out) == 4
    (span,) = spans
    got = events(span, sc.EVENT_CANDIDATE)
    assert [(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_SCORE], e[sc.CANDIDATE_SCORE_KIND]) for e in got] == [(d.id, d.score, kind) for d in out]
    ids = {d.id for d in out}
    a, b = joiner_lists()
    inputs = a + b
    expected_excl = []
    seen = set()
    for rank, d in enumerate(inputs):
        if d.id in ids and d.id not in seen:
            seen.add(d.id)
            continue
        if d.id in seen:
            expected_excl.append((d.id, rank, "deduplicated", f"duplicate id of {d.id}", d.score))
        else:
            seen.add(d.id)
            expected_excl.append((d.id, rank, "below_rank_cutoff", "top_k=4", d.score))
    got_excl = [
        (e[sc.CANDIDATE_ID], e[sc.CANDIDATE_RANK], e[sc.EXCLUSION_REASON], e[sc.EXCLUSION_DETAIL], e[sc.CANDIDATE_SCORE])
        for e in events(span, sc.EVENT_EXCLUSION)
    ]
    assert got_excl == expected_excl
    assert len(got_excl) == 2  # one duplicate (solar) and one cut (six inputs, five ids, four kept)
    a_ = attrs(span)
    assert (a_[sc.CANDIDATES_IN], a_[sc.CANDIDATES_OUT], a_[sc.CANDIDATES_EXCLUDED]) == (6, 4, 2)
    # merge adds the raw input scores times their weights: no normalised ("relative") score, said so
    merged = [
        "join_mode=merge: each score is the sum of the document's input scores times their list's weight (equal weights), "
        "not normalised: scores of kind unknown added as they are (score kind none)"
    ]
    assert a_.get(sc.STAGE_FINDINGS, []) == (merged if mode == "merge" else [])


def test_joiner_inputs_keep_the_hop_and_kind_of_the_retriever_that_found_them(instrument):
    store = make_store()
    p = Pipeline()
    p.add_component("bm25", InMemoryBM25Retriever(store, top_k=2))
    p.add_component("embedder", BagOfWordsEmbedder())
    p.add_component("dense", InMemoryEmbeddingRetriever(store, top_k=2))
    p.add_component("joiner", DocumentJoiner(join_mode="reciprocal_rank_fusion"))
    p.connect("embedder.embedding", "dense.query_embedding")
    p.connect("bm25", "joiner")
    p.connect("dense", "joiner")
    q = "solar electricity"
    out = p.run({"bm25": {"query": q}, "embedder": {"text": q}})
    spans = instrument.get_finished_spans()
    fuse = one(spans, "fuse DocumentJoiner")
    root = one(spans, "pipeline Pipeline")
    assert {s.parent.span_id for s in spans if s is not root} == {root.context.span_id}
    assert len({s.context.trace_id for s in spans}) == 1
    kinds_in = {}
    for s in spans:
        if s.name.startswith("retrieve "):
            for e in events(s, sc.EVENT_CANDIDATE):
                kinds_in.setdefault(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_SCORE_KIND])
    fused = events(fuse, sc.EVENT_CANDIDATE)
    assert [e[sc.CANDIDATE_ID] for e in fused] == [d.id for d in out["joiner"]["documents"]]
    assert {e[sc.CANDIDATE_SCORE_KIND] for e in fused} == {"rrf"}
    assert {e[sc.CANDIDATE_HOP] for e in fused} == {0}
    for e in events(fuse, sc.EVENT_EXCLUSION):  # the second copy of an id found by both retrievers
        assert e[sc.EXCLUSION_REASON] == "deduplicated"
        assert e[sc.CANDIDATE_SCORE_KIND] == "similarity"
        assert e[sc.CANDIDATE_HOP] == 0


def test_one_store_read_by_a_bm25_and_an_embedding_retriever_counts_once(instrument):
    """Issue 24: the corpus is the store's size, not one per retriever reading it (it read "4 of 12")."""
    store = make_store()
    p = Pipeline()
    p.add_component("bm25", InMemoryBM25Retriever(store, top_k=2))
    p.add_component("embedder", BagOfWordsEmbedder())
    p.add_component("dense", InMemoryEmbeddingRetriever(store, top_k=2))
    p.add_component("joiner", DocumentJoiner(join_mode="reciprocal_rank_fusion"))
    p.connect("embedder.embedding", "dense.query_embedding")
    p.connect("bm25", "joiner")
    p.connect("dense", "joiner")
    p.run({"bm25": {"query": "solar electricity"}, "embedder": {"text": "solar electricity"}})
    root = attrs(one(instrument.get_finished_spans(), "pipeline Pipeline"))
    assert root[sc.COVERAGE_CORPUS_SIZE] == store.count_documents()
    assert sc.COVERAGE_STORES not in root  # one store


# --- rankers ---------------------------------------------------------------------------------------
def test_lost_in_the_middle_classifies_dedup_top_k_and_word_budget(tracer_provider, span_exporter):
    # words: solar 6, wind 6, hydro 7, geo 8, coal 6, battery 9
    inputs = [doc("solar", 0.9), doc("wind", 0.8), doc("solar", 0.2), doc("hydro", 0.7), doc("geo", 0.6), doc("coal", 0.5), doc("battery", 0.4)]
    ranker = LostInTheMiddleRanker(word_count_threshold=18, top_k=5)
    plain, traced, spans = run_plain_then_instrumented(tracer_provider, span_exporter, lambda: ranker.run(documents=list(inputs)))
    assert plain == traced
    out = traced["documents"]
    # kept: solar (6), wind (12), hydro (19 >= 18: kept, then stop); lost-in-the-middle order
    assert [d.id for d in out] == ["solar", "hydro", "wind"]
    (span,) = spans
    assert span.name == "rerank LostInTheMiddleRanker"
    check_span(
        span,
        kind="rerank",
        component=LITM,
        top_k=5,
        inputs=[(d.id, d.score) for d in inputs],
        own={
            sc.STAGE_STATUS: "ok",
            sc.STAGE_TOP_K: 5,
            sc.STAGE_BUDGET_LIMIT: 18,
            sc.STAGE_BUDGET_USED: 19,
            sc.STAGE_BUDGET_UNIT: "words",
            sc.CANDIDATES_IN: 7,
            sc.CANDIDATES_OUT: 3,
            sc.CANDIDATES_EXCLUDED: 4,
        },
        cands=[candidate(out[0], 0, "none", None), candidate(out[1], 1, "none", None), candidate(out[2], 2, "none", None)],
        excl=[
            excluded(inputs[2], 2, "none", "deduplicated", "duplicate id of solar", None),
            excluded(inputs[4], 4, "none", "budget_exceeded", "19 words >= word_count_threshold=18 before this document", None),
            excluded(inputs[5], 5, "none", "budget_exceeded", "19 words >= word_count_threshold=18 before this document", None),
            excluded(inputs[6], 6, "none", "below_rank_cutoff", "top_k=5", None),
        ],
    )


def test_lost_in_the_middle_first_document_alone_exhausts_the_budget(instrument):
    ranker = LostInTheMiddleRanker(word_count_threshold=3)
    out = ranker.run(documents=[doc("solar", 0.9), doc("wind", 0.8)], top_k=2)
    assert [d.id for d in out["documents"]] == ["solar"]
    (span,) = instrument.get_finished_spans()
    (e,) = events(span, sc.EVENT_EXCLUSION)
    assert (e[sc.CANDIDATE_ID], e[sc.EXCLUSION_REASON]) == ("wind", "budget_exceeded")
    assert e[sc.EXCLUSION_DETAIL] == "6 words >= word_count_threshold=3 before this document"
    assert attrs(span)[sc.STAGE_TOP_K] == 2


def test_lost_in_the_middle_rejects_non_text_documents_unchanged(tracer_provider, span_exporter):
    ranker = LostInTheMiddleRanker()

    def call():
        try:
            ranker.run(documents=[doc("solar", 0.5), Document(id="img", blob=None, content=None)])
        except ValueError as exc:
            return str(exc)

    plain, traced, spans = run_plain_then_instrumented(tracer_provider, span_exporter, call)
    assert plain == traced and "not textual" in plain
    (span,) = spans
    assert attrs(span)[sc.STAGE_STATUS] == "failed"


def test_meta_field_ranker_drop_missing_and_top_k(tracer_provider, span_exporter):
    inputs = [
        doc("solar", 0.9, {"year": 2021}),
        doc("geo", 0.8, {}),
        doc("wind", 0.7, {"year": 2019}),
        doc("hydro", 0.6, {"year": 2023}),
        doc("battery", 0.5, {"year": 2024}),
    ]
    ranker = MetaFieldRanker(meta_field="year", weight=1.0, top_k=2, missing_meta="drop")
    plain, traced, spans = run_plain_then_instrumented(tracer_provider, span_exporter, lambda: ranker.run(documents=list(inputs)))
    assert plain == traced
    out = traced["documents"]
    assert [d.id for d in out] == ["battery", "hydro"]
    (span,) = spans
    check_span(
        span,
        kind="rerank",
        component=META,
        top_k=2,
        inputs=[(d.id, d.score) for d in inputs],
        own={sc.STAGE_STATUS: "ok", sc.STAGE_TOP_K: 2, sc.CANDIDATES_IN: 5, sc.CANDIDATES_OUT: 2, sc.CANDIDATES_EXCLUDED: 3},
        cands=[candidate(out[0], 0, "rrf", None), candidate(out[1], 1, "rrf", None)],
        excl=[
            excluded(inputs[0], 0, "none", "below_rank_cutoff", "top_k=2", None),
            excluded(inputs[1], 1, "none", "filtered_by_metadata", "meta field 'year' missing (missing_meta=drop)", None),
            excluded(inputs[2], 2, "none", "below_rank_cutoff", "top_k=2", None),
        ],
    )


def test_meta_field_ranker_linear_score_is_a_rerank_score(instrument):
    inputs = [doc("solar", 0.9, {"year": 2021}), doc("wind", 0.7, {"year": 2019})]
    out = MetaFieldRanker(meta_field="year", ranking_mode="linear_score").run(documents=inputs)["documents"]
    (span,) = instrument.get_finished_spans()
    got = events(span, sc.EVENT_CANDIDATE)
    assert [(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_SCORE], e[sc.CANDIDATE_SCORE_KIND]) for e in got] == [(d.id, d.score, "rerank") for d in out]


def test_meta_field_ranker_unsortable_values_are_a_degraded_input_order_fallback(tracer_provider, span_exporter):
    inputs = [doc("solar", 0.9, {"year": 2021}), doc("wind", 0.7, {"year": "recent"}), doc("geo", 0.5, {})]
    ranker = MetaFieldRanker(meta_field="year", missing_meta="drop")
    plain, traced, spans = run_plain_then_instrumented(tracer_provider, span_exporter, lambda: ranker.run(documents=list(inputs)))
    assert plain == traced
    assert [d.id for d in traced["documents"]] == ["solar", "wind"]
    (span,) = spans
    a = attrs(span)
    pop_all(a, {sc.STAGE_STATUS: "degraded", sc.STAGE_FAILURE_CLASS: "meta_not_sortable", sc.STAGE_FALLBACK: "input_order"})
    assert [(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_SCORE], e[sc.CANDIDATE_SCORE_KIND]) for e in events(span, sc.EVENT_CANDIDATE)] == [
        ("solar", 0.9, "none"),
        ("wind", 0.7, "none"),
    ]
    (e,) = events(span, sc.EVENT_EXCLUSION)
    assert (e[sc.CANDIDATE_ID], e[sc.EXCLUSION_REASON]) == ("geo", "filtered_by_metadata")


def test_meta_field_ranker_no_document_has_the_field(instrument):
    out = MetaFieldRanker(meta_field="year", missing_meta="bottom").run(documents=[doc("geo", 0.4, {})])
    assert [d.id for d in out["documents"]] == ["geo"]
    (span,) = instrument.get_finished_spans()
    a = attrs(span)
    assert (a[sc.STAGE_STATUS], a[sc.STAGE_FAILURE_CLASS]) == ("degraded", "meta_field_missing")


@pytest.mark.filterwarnings("ignore:Mutating attribute 'score'")
def test_ranker_inputs_are_snapshotted_before_the_call(instrument):
    """A ranker that rescores the very objects it was given (a real MetaFieldRanker whose merge step
    writes the input documents' scores in place): exclusions still show the score each document had
    when it entered the stage."""

    class InPlaceMetaFieldRanker(MetaFieldRanker):
        def _merge_rankings(self, documents, sorted_documents, weight, ranking_mode):
            for d in documents:
                d.score = -1.0
            return super()._merge_rankings(documents, sorted_documents, weight, ranking_mode)

    docs = [doc("solar", 0.9, {"year": 2021}), doc("wind", 0.4, {"year": 2019})]
    InPlaceMetaFieldRanker(meta_field="year", top_k=1).run(documents=docs)
    assert [d.score for d in docs] == [-1.0, -1.0]
    (span,) = instrument.get_finished_spans()
    (e,) = events(span, sc.EVENT_EXCLUSION)
    assert (e[sc.CANDIDATE_ID], e[sc.CANDIDATE_SCORE]) == ("wind", 0.4)


# --- query expansion and multi-query retrieval ----------------------------------------------------
EXPANSIONS = '{"queries": ["sunlight power", "wind turbines"]}'


def expansion_pipeline(store, reply: str = EXPANSIONS, *, embedding: bool = False):
    p = Pipeline()
    p.add_component("expander", QueryExpander(chat_generator=ScriptedChatGenerator(reply), n_expansions=2))
    if embedding:
        inner = InMemoryEmbeddingRetriever(store, top_k=2)
        p.add_component("multi", MultiQueryEmbeddingRetriever(retriever=inner, query_embedder=BagOfWordsEmbedder()))
    else:
        p.add_component("multi", MultiQueryTextRetriever(retriever=InMemoryBM25Retriever(store, top_k=2)))
    p.connect("expander.queries", "multi.queries")
    return p


def check_expansion_trace(spans, query: str, out_docs, inner_name: str, inner_kind: str, multi_component: str):
    roots = spans_named(spans, "pipeline Pipeline")
    assert len(roots) == 1
    root = roots[0]
    assert len({s.context.trace_id for s in spans}) == 1
    expander = one(spans, "query_transform QueryExpander")
    multi = one(spans, f"fuse {multi_component.rsplit('.', 1)[-1]}")
    inner = spans_named(spans, inner_name)
    assert expander.parent.span_id == root.context.span_id
    assert multi.parent.span_id == root.context.span_id
    # the thread pool's workers: children of the multi-query span, one per query
    assert len(inner) == 3
    assert {s.parent.span_id for s in inner} == {multi.context.span_id}
    check_span(
        expander,
        kind="query_transform",
        component=EXPANDER,
        query=query,
        own={sc.STAGE_STATUS: "ok", sc.CANDIDATES_IN: 0, sc.CANDIDATES_OUT: 0, sc.CANDIDATES_EXCLUDED: 0, **query_attrs(query, 0)},
        queries=[
            {k: v for k, v in query_attrs("sunlight power", 1, "expand", 0).items()},
            {k: v for k, v in query_attrs("wind turbines", 2, "expand", 0).items()},
        ],
        cands=[],
    )
    hop_of = {"sunlight power": 1, "wind turbines": 2, query: 0}
    transform = {1: ("expand", 0), 2: ("expand", 0), 0: ("none", None)}
    found_by: dict[str, list[tuple[int, object]]] = {}
    for s in inner:
        a = attrs(s)
        text = a[sc.QUERY_TEXT]
        hop = hop_of[text]
        assert a[sc.QUERY_HOP] == hop
        assert (a[sc.QUERY_TRANSFORM], a.get(sc.QUERY_PARENT_HOP)) == transform[hop]
        cands = events(s, sc.EVENT_CANDIDATE)
        assert {e[sc.CANDIDATE_HOP] for e in cands} == {hop}
        assert {e[sc.CANDIDATE_SCORE_KIND] for e in cands} == {inner_kind}
        for e in cands:
            found_by.setdefault(e[sc.CANDIDATE_ID], []).append((hop, e[sc.CANDIDATE_SCORE]))
    # the fuse span: inputs in query order, duplicates deduplicated, each output with its finder's hop
    fused = events(multi, sc.EVENT_CANDIDATE)
    assert [e[sc.CANDIDATE_ID] for e in fused] == [d.id for d in out_docs]
    for e in fused:
        assert (e[sc.CANDIDATE_HOP], e[sc.CANDIDATE_SCORE]) in found_by[e[sc.CANDIDATE_ID]]
        assert e[sc.CANDIDATE_SCORE_KIND] == inner_kind
    a = attrs(multi)
    n_in = sum(len(v) for v in found_by.values())
    assert (a[sc.CANDIDATES_IN], a[sc.CANDIDATES_OUT], a[sc.CANDIDATES_EXCLUDED]) == (n_in, len(out_docs), n_in - len(out_docs))
    assert {e[sc.EXCLUSION_REASON] for e in events(multi, sc.EVENT_EXCLUSION)} <= {"deduplicated"}
    return root


def test_expander_and_multi_query_text_retriever(tracer_provider, span_exporter):
    store = make_store()
    query = "solar electricity"
    plain, traced, spans = run_plain_then_instrumented(
        tracer_provider, span_exporter, lambda: expansion_pipeline(store).run({"expander": {"query": query}})
    )
    assert plain == traced
    check_expansion_trace(spans, query, traced["multi"]["documents"], "retrieve InMemoryBM25Retriever", "bm25", MQ_TEXT)


def test_expander_and_multi_query_embedding_retriever(tracer_provider, span_exporter):
    store = make_store()
    query = "solar electricity"
    plain, traced, spans = run_plain_then_instrumented(
        tracer_provider, span_exporter, lambda: expansion_pipeline(store, embedding=True).run({"expander": {"query": query}})
    )
    assert plain == traced
    check_expansion_trace(spans, query, traced["multi"]["documents"], "retrieve InMemoryEmbeddingRetriever", "similarity", MQ_EMB)


async def test_async_pipeline_expander_and_multi_query(tracer_provider, span_exporter):
    store = make_store()
    query = "solar electricity"
    plain = await expansion_pipeline(store).run_async({"expander": {"query": query}})
    instrumentor = HaystackInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    try:
        assert inspect.iscoroutinefunction(InMemoryBM25Retriever.run_async)
        traced = await expansion_pipeline(store).run_async({"expander": {"query": query}})
    finally:
        instrumentor.uninstrument()
    assert plain == traced
    spans = span_exporter.get_finished_spans()
    check_expansion_trace(spans, query, traced["multi"]["documents"], "retrieve InMemoryBM25Retriever", "bm25", MQ_TEXT)


def test_expander_failure_is_degraded_with_the_original_query(instrument):
    expander = QueryExpander(chat_generator=ScriptedChatGenerator("not json at all"), n_expansions=2)
    out = expander.run(query="solar")
    assert out == {"queries": ["solar"]}
    (span,) = instrument.get_finished_spans()
    a = attrs(span)
    pop_all(a, {sc.STAGE_STATUS: "degraded", sc.STAGE_FAILURE_CLASS: "no_expansion", sc.STAGE_FALLBACK: "original_query"})
    assert span.events == ()


async def test_multi_query_run_async_direct(instrument):
    store = make_store()
    multi = MultiQueryTextRetriever(retriever=InMemoryBM25Retriever(store, top_k=1))
    out = await multi.run_async(queries=["solar", "coal"])
    spans = instrument.get_finished_spans()
    fuse = one(spans, "fuse MultiQueryTextRetriever")
    inner = spans_named(spans, "retrieve InMemoryBM25Retriever")
    assert {s.parent.span_id for s in inner} == {fuse.context.span_id}
    # the caller's own queries are hops of their own (roots, in the order given): nothing untracked
    hops = {attrs(s)[sc.QUERY_TEXT]: (attrs(s)[sc.QUERY_HOP], attrs(s).get(sc.QUERY_PARENT_HOP), attrs(s)[sc.QUERY_TRANSFORM]) for s in inner}
    assert hops == {"solar": (0, None, "none"), "coal": (1, None, "none")}
    assert [attrs(s).get(sc.STAGE_FINDINGS) for s in spans] == [None] * len(spans)
    assert [(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_HOP]) for e in events(fuse, sc.EVENT_CANDIDATE)] == [
        (d.id, 0 if d.id == "solar" else 1) for d in out["documents"]
    ]


# --- no double spans, context, concurrency --------------------------------------------------------
def test_run_async_calling_run_in_an_executor_records_one_span(instrument):
    """run_async -> (store) -> asyncio.to_thread(retriever.run): the same component, one span."""

    class ThreadedStore(InMemoryDocumentStore):
        retriever = None

        async def bm25_retrieval_async(self, query, filters=None, top_k=10, scale_score=False):
            out = await asyncio.to_thread(self.retriever.run, query=query, filters=filters, top_k=top_k, scale_score=scale_score)
            return out["documents"]

    store = ThreadedStore()
    store.write_documents([Document(id=i, content=c, meta=m) for i, c, m in CORPUS])
    retriever = InMemoryBM25Retriever(store, top_k=2)
    store.retriever = retriever
    out = asyncio.run(retriever.run_async(query="wind"))
    assert out["documents"][0].id == "wind"
    (span,) = instrument.get_finished_spans()
    assert span.name == "retrieve InMemoryBM25Retriever"
    assert [e[sc.CANDIDATE_ID] for e in events(span, sc.EVENT_CANDIDATE)] == [d.id for d in out["documents"]]


def test_suppress_instrumentation_records_nothing(instrument):
    with suppress_instrumentation():
        out = InMemoryBM25Retriever(make_store()).run(query="solar")
    assert out["documents"]
    assert instrument.get_finished_spans() == ()


def test_outer_ragtrail_stage_is_the_root(instrument):
    import ragtrail

    @ragtrail.pipeline
    def answer(query):
        return expansion_pipeline(make_store()).run({"expander": {"query": query}})

    answer("solar electricity")
    spans = instrument.get_finished_spans()
    assert [s.name for s in spans if s.parent is None] == ["pipeline answer"]
    assert spans_named(spans, "pipeline Pipeline") == []


def test_fifty_concurrent_pipelines_make_fifty_separate_traces(instrument):
    store = make_store()
    words = ["solar", "wind", "water", "heat", "coal", "batteries"]
    queries = [f"{words[i % 6]} electricity {i}" for i in range(50)]

    def run(q):
        return expansion_pipeline(store, f'{{"queries": ["{q} power", "{q} energy"]}}').run({"expander": {"query": q}})

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(run, queries))
    assert all(r["multi"]["documents"] for r in results)
    spans = instrument.get_finished_spans()
    by_trace: dict[int, list] = {}
    for s in spans:
        by_trace.setdefault(s.context.trace_id, []).append(s)
    assert len(by_trace) == 50
    seen_queries = set()
    for trace_spans in by_trace.values():
        names = sorted(s.name for s in trace_spans)
        assert (
            names == ["fuse MultiQueryTextRetriever", "pipeline Pipeline", "query_transform QueryExpander"] + ["retrieve InMemoryBM25Retriever"] * 3
        )
        root = one(trace_spans, "pipeline Pipeline")
        q = attrs(root)[sc.QUERY_TEXT]
        seen_queries.add(q)
        ids = {s.context.span_id for s in trace_spans}
        assert all(s.parent.span_id in ids for s in trace_spans if s is not root)
        inner_texts = sorted(attrs(s)[sc.QUERY_TEXT] for s in spans_named(trace_spans, "retrieve InMemoryBM25Retriever"))
        assert inner_texts == sorted([q, f"{q} power", f"{q} energy"])
    assert seen_queries == set(queries)


async def test_fifty_concurrent_async_pipelines(instrument):
    store = make_store()
    queries = [f"solar wind {i}" for i in range(50)]
    results = await asyncio.gather(
        *[expansion_pipeline(store, f'{{"queries": ["{q} x", "{q} y"]}}').run_async({"expander": {"query": q}}) for q in queries]
    )
    assert len(results) == 50
    spans = instrument.get_finished_spans()
    roots = spans_named(spans, "pipeline Pipeline")
    assert len(roots) == 50 and len({s.context.trace_id for s in spans}) == 50
    for root in roots:
        q = attrs(root)[sc.QUERY_TEXT]
        mine = [s for s in spans if s.context.trace_id == root.context.trace_id]
        assert len(mine) == 6
        assert sorted(attrs(s)[sc.QUERY_TEXT] for s in spans_named(mine, "retrieve InMemoryBM25Retriever")) == sorted([q, f"{q} x", f"{q} y"])


WINDOW = "haystack.components.retrievers.sentence_window_retriever.SentenceWindowRetriever"


def test_sentence_window_is_a_retrieve_stage_of_what_it_read(tracer_provider, span_exporter):
    """The window's neighbours are read from the store: they are the stage's outputs (read units for
    coverage), the hit its input, no query, no scores; the finding says what the window was."""
    texts = ["Alpha one.", "Bravo two.", "Charlie three.", "Delta four.", "Echo five."]
    store = InMemoryDocumentStore()
    store.write_documents([Document(id=f"s{i}", content=t, meta={"source_id": "doc", "split_id": i}) for i, t in enumerate(texts)])
    hit = Document(id="s2", content=texts[2], score=1.5, meta={"source_id": "doc", "split_id": 2})
    window = SentenceWindowRetriever(document_store=store, window_size=1)
    plain, traced, spans = run_plain_then_instrumented(tracer_provider, span_exporter, lambda: window.run(retrieved_documents=[hit]))
    assert plain == traced
    assert [d.id for d in traced["context_documents"]] == ["s1", "s2", "s3"]
    (span,) = spans
    assert span.name == "retrieve SentenceWindowRetriever"
    finding = "a window of 1 split(s) either side of each of the 1 hit(s), read from the document store by split_id: 2 document(s) beside the hits"
    check_span(
        span,
        kind="retrieve",
        component=WINDOW,
        own=ok_counts(1, 3, 0, [finding]),
        cands=[candidate(d, i, "none", hop=None) for i, d in enumerate(traced["context_documents"])],
    )


def test_uninstrument_restores_every_method(tracer_provider, span_exporter):
    originals = {
        cls: (cls.__dict__["run"], cls.__dict__.get("run_async"))
        for cls in (
            InMemoryBM25Retriever,
            InMemoryEmbeddingRetriever,
            DocumentJoiner,
            LostInTheMiddleRanker,
            MetaFieldRanker,
            QueryExpander,
            MultiQueryTextRetriever,
            MultiQueryEmbeddingRetriever,
            SentenceWindowRetriever,
            AutoMergingRetriever,
            Pipeline,
        )
    }
    import haystack.components.retrievers.multi_query_text_retriever as mq

    executor = mq.ThreadPoolExecutor
    instrumentor = HaystackInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    assert InMemoryBM25Retriever.__dict__["run"] is not originals[InMemoryBM25Retriever][0]
    assert mq.ThreadPoolExecutor is not executor
    instrumentor.uninstrument()
    for cls, (run, run_async) in originals.items():
        assert cls.__dict__["run"] is run
        assert cls.__dict__.get("run_async") is run_async
    assert mq.ThreadPoolExecutor is executor
    InMemoryBM25Retriever(make_store()).run(query="solar")
    assert span_exporter.get_finished_spans() == ()


def test_hash_mode_keeps_queries_and_expansions_out_of_every_span(instrument, monkeypatch):
    from ragtrail import settings as config

    monkeypatch.setenv("RAGTRAIL_CAPTURE_QUERY", "hash")
    config.reset()
    query = "secret solar electricity"
    expansion_pipeline(make_store(), '{"queries": ["secret sunlight power", "secret wind turbines"]}').run({"expander": {"query": query}})
    spans = instrument.get_finished_spans()
    assert len(spans) == 6
    dumped = repr([(s.name, dict(s.attributes), [(e.name, dict(e.attributes)) for e in s.events], s.status.description) for s in spans])
    assert "secret" not in dumped
    expander = one(spans, "query_transform QueryExpander")
    assert [e[sc.QUERY_SHA256] for e in events(expander, sc.EVENT_QUERY)] == [
        receipt("secret sunlight power").sha256,
        receipt("secret wind turbines").sha256,
    ]


def test_a_concatenate_join_keeps_each_scores_own_kind(instrument):
    """Issue 24 (wrong scores): a concatenate join hands on each document with the score its
    retriever gave it; an id found by both retrievers must not take the kind of the other one
    (BM25 scores read ``similarity`` before)."""
    store = make_store()
    p = Pipeline()
    p.add_component("bm25", InMemoryBM25Retriever(store, top_k=2))
    p.add_component("embedder", BagOfWordsEmbedder())
    p.add_component("dense", InMemoryEmbeddingRetriever(store, top_k=2))
    p.add_component("joiner", DocumentJoiner(join_mode="concatenate"))
    p.connect("embedder.embedding", "dense.query_embedding")
    p.connect("bm25", "joiner")
    p.connect("dense", "joiner")
    q = "solar electricity"
    out = p.run({"bm25": {"query": q}, "embedder": {"text": q}}, include_outputs_from={"bm25", "dense"})
    made = {(d.id, d.score): "bm25" for d in out["bm25"]["documents"]} | {(d.id, d.score): "similarity" for d in out["dense"]["documents"]}
    # the store ranks "solar" first for both: BM25's score (above 1) wins the concatenation
    assert [d.id for d in out["bm25"]["documents"]] == ["solar", "battery"] and [d.id for d in out["dense"]["documents"]][0] == "solar"
    joined = out["joiner"]["documents"]
    fuse = one(instrument.get_finished_spans(), "fuse DocumentJoiner")
    fused = events(fuse, sc.EVENT_CANDIDATE)
    assert [(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_SCORE], e[sc.CANDIDATE_SCORE_KIND]) for e in fused] == [
        (d.id, d.score, made[(d.id, d.score)]) for d in joined
    ]
    assert fused[0][sc.CANDIDATE_ID] == "solar" and fused[0][sc.CANDIDATE_SCORE_KIND] == "bm25"
    # the copies it dropped (the embedding retriever's) keep their own kind too
    dropped = [(e[sc.CANDIDATE_ID], e[sc.EXCLUSION_REASON], e[sc.CANDIDATE_SCORE_KIND]) for e in events(fuse, sc.EVENT_EXCLUSION)]
    assert dropped == [(d.id, "deduplicated", "similarity") for d in out["dense"]["documents"] if d.id in {j.id for j in joined} and d not in joined]
    assert dropped


MERGING = "haystack.components.retrievers.auto_merging_retriever.AutoMergingRetriever"


def hierarchy() -> tuple[list[Document], InMemoryDocumentStore]:
    """AutoMergingRetriever's own docstring example: a three-level tree of one text (block sizes 10 and
    3 words), every document with children in the parents' store."""
    from haystack.components.preprocessors import HierarchicalDocumentSplitter

    text = "The sun rose early in the morning. It cast a warm glow over the trees. Birds began to sing."
    docs = HierarchicalDocumentSplitter(block_sizes={10, 3}, split_overlap=0, split_by="word").run([Document(content=text)])["documents"]
    parents = InMemoryDocumentStore()
    parents.write_documents([d for d in docs if d.meta["__children_ids"]])
    return docs, parents


def test_auto_merging_is_a_retrieve_stage_of_the_parents_it_read(tracer_provider, span_exporter):
    """The parents AutoMergingRetriever reads from its store in place of the leaves are its outputs
    (``merge@1`` naming the leaves, each leaf ``custom:merged`` into it): read units, never "of
    unknown origin", and no leaf vanishes unexplained. A leaf two levels below its output (the first
    level merged again) names that output through the parents' ``__children_ids``."""
    from ragtrail.contract.columns import replaced_ids_cell

    docs, parents = hierarchy()
    root, first, second = (d for d in docs if d.meta["__level"] < 2)
    leaves = [d for d in docs if not d.meta["__children_ids"]]
    assert [len(first.meta["__children_ids"]), len(second.meta["__children_ids"])] == [4, 3]
    found = [leaves[0], leaves[1], leaves[2], leaves[4], leaves[5]]  # 3 of 4 under `first`, 2 of 3 under `second`
    retriever = AutoMergingRetriever(parents, threshold=0.5)
    plain, traced, spans = run_plain_then_instrumented(tracer_provider, span_exporter, lambda: retriever.run(documents=found))
    assert plain == traced
    assert [d.id for d in traced["documents"]] == [root.id]  # both blocks merge, then the two blocks into the root
    (span,) = spans
    assert span.name == "retrieve AutoMergingRetriever"
    out = candidate(root, 0, "none", hop=None)
    out[sc.CANDIDATE_TRANSFORM_RULE] = sc.RULE_MERGE
    out[sc.CANDIDATE_TRANSFORM_DERIVED_FROM] = replaced_ids_cell([d.id for d in found])
    check_span(
        span,
        kind="retrieve",
        component=MERGING,
        own=ok_counts(
            5,
            1,
            5,
            ["1 parent(s) read from the document store in place of 5 of the 5 leaves (more than threshold=0.5 of a parent's children found)"],
        ),
        cands=[out],
        excl=[excluded(d, i, "none", sc.REASON_MERGED, f"into {root.id}", hop=None) for i, d in enumerate(found)],
    )


def test_auto_merging_run_async_is_the_same_stage(instrument):
    """``run_async`` (an AsyncPipeline's call) records the same stage: the parent it read, the leaves it replaced."""
    docs, parents = hierarchy()
    leaves = [d for d in docs if not d.meta["__children_ids"]]
    second = next(d for d in docs if d.meta["__level"] == 1 and len(d.meta["__children_ids"]) == 3)
    found = [leaves[4], leaves[5], leaves[0]]  # 2 of 3 under `second`, 1 of 4 under the other block
    out = asyncio.run(AutoMergingRetriever(parents, threshold=0.5).run_async(documents=found))
    assert [d.id for d in out["documents"]] == [leaves[0].id, second.id]
    (span,) = instrument.get_finished_spans()
    a = attrs(span)
    assert (a[sc.CANDIDATES_IN], a[sc.CANDIDATES_OUT], a[sc.CANDIDATES_EXCLUDED]) == (3, 2, 2)
    assert [(e[sc.CANDIDATE_ID], e[sc.EXCLUSION_REASON], e[sc.EXCLUSION_DETAIL]) for e in events(span, sc.EVENT_EXCLUSION)] == [
        (leaves[4].id, sc.REASON_MERGED, f"into {second.id}"),
        (leaves[5].id, sc.REASON_MERGED, f"into {second.id}"),
    ]
