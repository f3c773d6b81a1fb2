"""LangChain auto-instrumentation against the real libraries, offline.

Real langchain-core / langchain-classic / langchain-community objects run end to end: BM25 over
rank_bm25, InMemoryVectorStore over a deterministic hash embedding, EnsembleRetriever,
MultiQueryRetriever with a scripted LLM, compression pipelines. Each test checks the exact span
attributes and events, and that the instrumented call returns (or raises) exactly what the
uninstrumented call does.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from spanutil import rec_events

pytest.importorskip("langchain_classic")
pytest.importorskip("langchain_community")
pytest.importorskip("rank_bm25")

import numpy as np  # noqa: E402
from langchain_classic.retrievers import ContextualCompressionRetriever, EnsembleRetriever, MultiQueryRetriever  # noqa: E402
from langchain_classic.retrievers.document_compressors import (  # noqa: E402
    CrossEncoderReranker,
    DocumentCompressorPipeline,
    EmbeddingsFilter,
    LLMChainFilter,
    LLMListwiseRerank,
)
from langchain_community.document_transformers import EmbeddingsRedundantFilter, LongContextReorder  # noqa: E402
from langchain_community.retrievers import BM25Retriever  # noqa: E402
from langchain_community.retrievers.bm25 import default_preprocessing_func  # noqa: E402
from langchain_core.callbacks import CallbackManagerForRetrieverRun  # noqa: E402
from langchain_core.cross_encoders import BaseCrossEncoder  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.language_models import FakeListLLM  # noqa: E402
from langchain_core.language_models.llms import LLM  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402
from langchain_core.runnables import RunnableLambda  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore  # noqa: E402
from opentelemetry.instrumentation.utils import suppress_instrumentation  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402
from rank_bm25 import BM25Okapi  # noqa: E402

from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.langchain import LangChainInstrumentor  # noqa: E402
from ragtrail.recorder.errors import internal_error_count  # noqa: E402

from .test_langchain_support import (  # noqa: E402
    TEXTS,
    HashEmbeddings,
    assert_events,
    candidate_event,
    corpus,
    docs_equal,
    exclusion_event,
    one,
    pop_stage,
    query_attributes,
    retrieval_mirrors,
    stage_attributes,
)

BM25 = "langchain_community.retrievers.bm25.BM25Retriever"
VSR = "langchain_core.vectorstores.base.VectorStoreRetriever"
IMVS = "langchain_core.vectorstores.in_memory.InMemoryVectorStore"
ENSEMBLE = "langchain_classic.retrievers.ensemble.EnsembleRetriever"
MULTI = "langchain_classic.retrievers.multi_query.MultiQueryRetriever"
PIPELINE = "langchain_classic.retrievers.document_compressors.base.DocumentCompressorPipeline"
EFILTER = "langchain_classic.retrievers.document_compressors.embeddings_filter.EmbeddingsFilter"
REDUNDANT = "langchain_community.document_transformers.embeddings_redundant_filter.EmbeddingsRedundantFilter"
REORDER = "langchain_community.document_transformers.long_context_reorder.LongContextReorder"
CCR = "langchain_classic.retrievers.contextual_compression.ContextualCompressionRetriever"


@pytest.fixture
def instrumentor(tracer_provider, span_exporter):
    inst = LangChainInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield inst
    inst.uninstrument()


def outcome(fn: Callable[[], Any]) -> tuple:
    try:
        result = fn()
    except Exception as exc:  # noqa: BLE001 - the point is to compare any exception
        return ("raised", type(exc), str(exc))
    return ("returned", result)


def same_with_and_without(instrumentor, tracer_provider, span_exporter, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` uninstrumented, then instrumented; both outcomes must be identical. Returns the
    instrumented outcome; the exporter then holds only the instrumented run's spans."""
    instrumentor.uninstrument()
    plain = outcome(fn)
    assert span_exporter.get_finished_spans() == ()
    instrumentor.instrument(tracer_provider=tracer_provider)
    traced = outcome(fn)
    assert plain[0] == traced[0], (plain, traced)
    if plain[0] == "raised":
        assert plain[1:] == traced[1:]
    elif isinstance(plain[1], list) and plain[1] and isinstance(plain[1][0], Document):
        assert docs_equal(plain[1], traced[1])
    else:
        assert repr(plain[1]) == repr(traced[1])
    return traced


def bm25_expected(query: str, k: int) -> list[tuple[int, float]]:
    """Independent computation of what BM25Retriever ranks (rank_bm25 directly)."""
    bm = BM25Okapi([default_preprocessing_func(t) for t in TEXTS])
    scores = bm.get_scores(default_preprocessing_func(query))
    top = np.argsort(scores)[::-1][:k]
    return [(int(i), float(scores[i])) for i in top]


def cosine(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def similarities(query: str) -> list[tuple[int, float]]:
    emb = HashEmbeddings()
    q = emb.embed_query(query)
    pairs = [(i, cosine(q, v)) for i, v in enumerate(emb.embed_documents(TEXTS))]
    return pairs


# --- retrieve -------------------------------------------------------------------------------------
def test_bm25_retrieve_records_every_hit_with_its_bm25_score(instrumentor, tracer_provider, span_exporter):
    retriever = BM25Retriever.from_documents(corpus(), k=3)
    same_with_and_without(instrumentor, tracer_provider, span_exporter, lambda: retriever.invoke("cat on the mat"))
    span = one(span_exporter.get_finished_spans(), "BM25Retriever")
    assert span.name == "retrieve BM25Retriever" and span.kind == SpanKind.CLIENT and span.parent is None
    hits = bm25_expected("cat on the mat", 3)
    left = pop_stage(
        span,
        {
            **stage_attributes("retrieve", BM25, n_in=0, n_out=3, n_excluded=0),
            **query_attributes("cat on the mat"),
            sc.STAGE_TOP_K: 3,
            sc.COVERAGE_CORPUS_SIZE: len(TEXTS),
            **retrieval_mirrors(BM25, "cat on the mat", [(f"d{i}", s) for i, s in hits], 3),
        },
    )
    assert left == {}
    assert_events(
        span, [(sc.EVENT_CANDIDATE, candidate_event(f"d{i}", rank, TEXTS[i], score=s, score_kind="bm25", hop=0)) for rank, (i, s) in enumerate(hits)]
    )


def test_vectorstore_retriever_recovers_similarity_scores(instrumentor, tracer_provider, span_exporter):
    store = InMemoryVectorStore(HashEmbeddings())
    store.add_documents(corpus())
    retriever = store.as_retriever(search_kwargs={"k": 4})
    same_with_and_without(instrumentor, tracer_provider, span_exporter, lambda: retriever.invoke("cat mat"))
    spans = span_exporter.get_finished_spans()
    assert len(spans) == 1  # the store's scored search fed the retriever's stage: no second span
    span = spans[0]
    ranked = sorted(similarities("cat mat"), key=lambda p: -p[1])
    got = [(e.attributes[sc.CANDIDATE_ID], e.attributes[sc.CANDIDATE_SCORE]) for e in rec_events(span)]
    assert [s for _, s in got] == pytest.approx([s for _, s in ranked[:4]])
    assert {i for i, _ in got} <= {f"d{i}" for i, _ in ranked}
    left = pop_stage(
        span,
        {
            **stage_attributes("retrieve", VSR, n_in=0, n_out=4, n_excluded=0),
            **query_attributes("cat mat"),
            sc.STAGE_TOP_K: 4,
            sc.COVERAGE_CORPUS_SIZE: len(TEXTS),
            **retrieval_mirrors(VSR, "cat mat", got, 4),
        },
    )
    assert left == {}
    assert_events(
        span,
        [
            (sc.EVENT_CANDIDATE, candidate_event(ident, rank, TEXTS[int(ident[1:])], score=s, score_kind="similarity", hop=0))
            for rank, (ident, s) in enumerate(got)
        ],
    )


class RelevanceStore(InMemoryVectorStore):
    """An in-memory store that defines relevance (cosine similarity is already in [0, 1] here)."""

    def _select_relevance_score_fn(self):
        return lambda similarity: similarity


def test_score_threshold_exclusions_carry_scores_and_reason(instrumentor, tracer_provider, span_exporter):
    store = RelevanceStore(HashEmbeddings())
    store.add_documents(corpus())
    retriever = store.as_retriever(search_type="similarity_score_threshold", search_kwargs={"k": 5, "score_threshold": 0.3})
    traced = same_with_and_without(instrumentor, tracer_provider, span_exporter, lambda: retriever.invoke("the cat mat"))
    spans = span_exporter.get_finished_spans()
    assert len(spans) == 1
    span = spans[0]
    top5 = sorted(similarities("the cat mat"), key=lambda p: -p[1])[:5]
    kept = [(i, s) for i, s in top5 if s >= 0.3]
    cut = [(rank, i, s) for rank, (i, s) in enumerate(top5) if s < 0.3]
    assert kept and cut, "the corpus must exercise both sides of the threshold"
    assert [d.page_content for d in traced[1]] == [TEXTS[i] for i, _ in kept]
    ids = [e.attributes[sc.CANDIDATE_ID] for e in rec_events(span) if e.name == sc.EVENT_CANDIDATE]
    left = pop_stage(
        span,
        {
            **stage_attributes("retrieve", VSR, n_in=5, n_out=len(kept), n_excluded=len(cut)),
            **query_attributes("the cat mat"),
            sc.STAGE_TOP_K: 5,
            sc.STAGE_THRESHOLD: 0.3,
            sc.COVERAGE_CORPUS_SIZE: len(TEXTS),
            **retrieval_mirrors(VSR, "the cat mat", [(ident, s) for ident, (_, s) in zip(ids, kept, strict=False)], 5),
        },
    )
    assert left == {}
    excluded = [e for e in rec_events(span) if e.name == sc.EVENT_EXCLUSION]
    assert [(e.attributes[sc.CANDIDATE_RANK], e.attributes[sc.EXCLUSION_REASON]) for e in excluded] == [
        (rank, "below_score_threshold") for rank, _, _ in cut
    ]
    for event, (_, i, s) in zip(excluded, cut, strict=False):
        assert event.attributes[sc.CANDIDATE_SCORE] == pytest.approx(s)
        assert event.attributes[sc.CANDIDATE_SCORE_KIND] == "similarity"
        assert event.attributes[sc.EXCLUSION_DETAIL] == f"score={s:g} < threshold=0.3"
        assert event.attributes[sc.CANDIDATE_CONTENT_SHA256] == one_sha(TEXTS[i])


def one_sha(text: str) -> str:
    from ragtrail.contract.receipts import receipt

    return receipt(text).sha256


def test_direct_vectorstore_searches_are_retrieve_stages(instrumentor, tracer_provider, span_exporter):
    store = RelevanceStore(HashEmbeddings())
    store.add_documents(corpus())
    traced = same_with_and_without(instrumentor, tracer_provider, span_exporter, lambda: store.similarity_search_with_score("dogs park", k=2))
    span = one(span_exporter.get_finished_spans(), "RelevanceStore")
    component = f"{RelevanceStore.__module__}.RelevanceStore"
    hits = [(d.id, s) for d, s in traced[1]]
    left = pop_stage(
        span,
        {
            **stage_attributes("retrieve", component, n_in=0, n_out=2, n_excluded=0),
            **query_attributes("dogs park"),
            sc.STAGE_TOP_K: 2,
            sc.COVERAGE_CORPUS_SIZE: len(TEXTS),
            **retrieval_mirrors(component, "dogs park", hits, 2),
        },
    )
    assert left == {}
    assert [e.attributes[sc.CANDIDATE_SCORE_KIND] for e in rec_events(span)] == ["similarity", "similarity"]

    span_exporter.clear()
    result = store.similarity_search_with_relevance_scores("dogs park", k=3, score_threshold=0.2)
    spans = span_exporter.get_finished_spans()
    assert len(spans) == 1, [s.name for s in spans]
    attributes = dict(spans[0].attributes)
    assert attributes[sc.STAGE_THRESHOLD] == 0.2 and attributes[sc.CANDIDATES_OUT] == len(result)
    assert attributes[sc.CANDIDATES_IN] == 3
    assert attributes[sc.CANDIDATES_EXCLUDED] == 3 - len(result)


def test_in_memory_relevance_search_raises_the_same_and_the_stage_says_failed(instrumentor, tracer_provider, span_exporter):
    store = InMemoryVectorStore(HashEmbeddings())
    store.add_documents(corpus())
    retriever = store.as_retriever(search_type="similarity_score_threshold", search_kwargs={"score_threshold": 0.5})
    traced = same_with_and_without(instrumentor, tracer_provider, span_exporter, lambda: retriever.invoke("cat"))
    assert traced[0] == "raised" and traced[1] is NotImplementedError
    spans = span_exporter.get_finished_spans()
    assert len(spans) == 1
    span = spans[0]
    assert span.status.status_code == StatusCode.ERROR
    attributes = dict(span.attributes)
    assert attributes[sc.STAGE_STATUS] == "failed"
    assert attributes[sc.STAGE_FAILURE_CLASS] == "exception:NotImplementedError"


class Exploding(BaseRetriever):
    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        raise ValueError(f"index offline for {query!r}")


def test_retriever_exception_passes_through_unchanged(instrumentor, tracer_provider, span_exporter):
    retriever = Exploding()
    traced = same_with_and_without(instrumentor, tracer_provider, span_exporter, lambda: retriever.invoke("q1"))
    assert traced[1] is ValueError and traced[2] == "index offline for 'q1'"
    with pytest.raises(ValueError, match="index offline"):
        asyncio.run(retriever.ainvoke("q2"))
    spans = span_exporter.get_finished_spans()
    assert [s.attributes[sc.STAGE_STATUS] for s in spans] == ["failed", "failed"]
    assert [s.attributes[sc.STAGE_FAILURE_CLASS] for s in spans] == ["exception:ValueError"] * 2


# --- fuse -----------------------------------------------------------------------------------------
def rrf(doc_lists: list[list[Document]], weights: list[float], c: int = 60) -> dict[str, float]:
    scores: dict[str, float] = defaultdict(float)
    for docs, weight in zip(doc_lists, weights, strict=False):
        for rank, doc in enumerate(docs, start=1):
            scores[doc.page_content] += weight / (rank + c)
    return scores


def build_ensemble() -> tuple[EnsembleRetriever, BM25Retriever, Any]:
    store = InMemoryVectorStore(HashEmbeddings())
    store.add_documents(corpus())
    bm25 = BM25Retriever.from_documents(corpus(), k=4)
    dense = store.as_retriever(search_kwargs={"k": 4})
    return EnsembleRetriever(retrievers=[bm25, dense], weights=[0.7, 0.3]), bm25, dense


def test_ensemble_is_a_fuse_stage_with_rrf_scores_and_child_retrievals(instrumentor, tracer_provider, span_exporter):
    ensemble, bm25, dense = build_ensemble()
    query = "cat sat on the mat"
    instrumentor.uninstrument()
    lists = [bm25.invoke(query), dense.invoke(query)]
    instrumentor.instrument(tracer_provider=tracer_provider)
    traced = same_with_and_without(instrumentor, tracer_provider, span_exporter, lambda: ensemble.invoke(query))
    spans = span_exporter.get_finished_spans()
    fuse = one(spans, "EnsembleRetriever")
    children = [s for s in spans if s.parent is not None and s.parent.span_id == fuse.context.span_id]
    assert sorted(s.name for s in children) == ["retrieve BM25Retriever", "retrieve VectorStoreRetriever"]
    assert fuse.parent is None and len(spans) == 3

    scores = rrf(lists, [0.7, 0.3])
    fused = traced[1]
    union: list[Document] = []
    for doc in lists[0] + lists[1]:
        if doc.id not in {u.id for u in union}:
            union.append(doc)
    kept_ids = [d.id for d in fused]
    dropped = [(rank, d) for rank, d in enumerate(union) if d.id not in kept_ids]
    # d0 and d6 share their content: LangChain fuses by content, keeping the first seen
    assert dropped and all(d.page_content in {f.page_content for f in fused} for _, d in dropped)
    left = pop_stage(
        fuse,
        {
            **stage_attributes("fuse", ENSEMBLE, n_in=len(union), n_out=len(fused), n_excluded=len(dropped)),
            **query_attributes(query),
            sc.OPENINFERENCE_SPAN_KIND: "RERANKER",
            sc.OI_INPUT_VALUE: query,
            # a fusion root with no pipeline around it carries the run's coverage: both stores summed
            # (BM25 over the corpus, the vector store over the same corpus), only the fused hits retrieved
            sc.COVERAGE_CORPUS_SIZE: 2 * len(corpus()),
            sc.COVERAGE_STORES: 2,
            sc.COVERAGE_RETRIEVED: len(fused),
            sc.COVERAGE_CITED: 0,
        },
    )
    assert left == {}
    kept_by_content = {d.page_content: d.id for d in fused}
    assert_events(
        fuse,
        [
            (sc.EVENT_CANDIDATE, candidate_event(d.id, rank, d.page_content, score=scores[d.page_content], score_kind="rrf", hop=0))
            for rank, d in enumerate(fused)
        ]
        + [
            (
                sc.EVENT_EXCLUSION,
                exclusion_event(
                    d.id,
                    rank,
                    d.page_content,
                    "deduplicated",
                    f"same content as {kept_by_content[d.page_content]}",
                    # the kind the last stage that output it gave it
                    score_kind="similarity" if d.id in {x.id for x in lists[1]} else "bm25",
                    hop=0,
                ),
            )  # exclusions carry the hop that found them
            for rank, d in dropped
        ],
    )


def test_async_ensemble_gives_the_same_spans(instrumentor, tracer_provider, span_exporter):
    ensemble, _, _ = build_ensemble()
    sync_result = ensemble.invoke("cats purr")
    sync_spans = sorted(s.name for s in span_exporter.get_finished_spans())
    span_exporter.clear()
    async_result = asyncio.run(ensemble.ainvoke("cats purr"))
    assert docs_equal(sync_result, async_result)
    spans = span_exporter.get_finished_spans()
    assert sorted(s.name for s in spans) == sync_spans
    fuse = one(spans, "EnsembleRetriever")
    assert all(s.parent.span_id == fuse.context.span_id for s in spans if s is not fuse)
    assert [e.attributes[sc.CANDIDATE_SCORE_KIND] for e in rec_events(fuse) if e.name == sc.EVENT_CANDIDATE] == ["rrf"] * len(async_result)


# --- query hops -----------------------------------------------------------------------------------
def test_multi_query_hops_say_which_variant_found_which_document(instrumentor, tracer_provider, span_exporter):
    bm25 = BM25Retriever.from_documents(corpus(), k=2)
    llm_answer = "cats purr happy\nstock markets"

    def run():
        mq = MultiQueryRetriever.from_llm(retriever=bm25, llm=FakeListLLM(responses=[llm_answer]), include_original=True)
        return mq.invoke("cat on the mat")

    traced = same_with_and_without(instrumentor, tracer_provider, span_exporter, run)
    spans = span_exporter.get_finished_spans()
    outer = one(spans, "MultiQueryRetriever")
    subs = [s for s in spans if s.name == "retrieve BM25Retriever"]
    assert len(subs) == 3 and all(s.parent.span_id == outer.context.span_id for s in subs)
    by_text = {s.attributes[sc.QUERY_TEXT]: s for s in subs}
    assert by_text["cats purr happy"].attributes[sc.QUERY_HOP] == 1
    assert by_text["cats purr happy"].attributes[sc.QUERY_TRANSFORM] == "multi_query"
    assert by_text["cats purr happy"].attributes[sc.QUERY_PARENT_HOP] == 0
    assert by_text["stock markets"].attributes[sc.QUERY_HOP] == 2
    assert by_text["cat on the mat"].attributes[sc.QUERY_HOP] == 0
    found_by: dict[str, int] = {}
    for hop, text in ((1, "cats purr happy"), (2, "stock markets"), (0, "cat on the mat")):
        for i, _ in bm25_expected(text, 2):
            found_by.setdefault(f"d{i}", hop)
        assert [e.attributes[sc.CANDIDATE_HOP] for e in rec_events(by_text[text])] == [hop, hop]

    # a fuse stage: its inputs are every inner hit in query order (duplicates included), the
    # surplus copies of an id are deduplicated
    texts = {f"d{i}": d.page_content for i, d in enumerate(corpus())}
    inner = [f"d{i}" for text in ("cats purr happy", "stock markets", "cat on the mat") for i, _ in bm25_expected(text, 2)]
    kept = [d.id for d in traced[1]]
    assert kept == list(dict.fromkeys(inner))
    seen: set[str] = set()
    dropped = []
    for rank, ident in enumerate(inner):
        if ident in seen:
            dropped.append((rank, ident))
        seen.add(ident)
    left = pop_stage(
        outer,
        {
            **stage_attributes("fuse", MULTI, n_in=len(inner), n_out=len(kept), n_excluded=len(dropped)),
            **query_attributes("cat on the mat"),
            sc.OPENINFERENCE_SPAN_KIND: "RERANKER",
            sc.OI_INPUT_VALUE: "cat on the mat",  # the mirrors of a fuse
            # the run's coverage on the root: one BM25 store searched three times, counted once
            sc.COVERAGE_CORPUS_SIZE: len(corpus()),
            sc.COVERAGE_RETRIEVED: len(kept),
            sc.COVERAGE_CITED: 0,
        },
    )
    assert left == {}
    assert_events(
        outer,
        [
            (sc.EVENT_QUERY, query_attributes("cats purr happy", hop=1, transform="multi_query", parent=0)),
            (sc.EVENT_QUERY, query_attributes("stock markets", hop=2, transform="multi_query", parent=0)),
        ]
        + [(sc.EVENT_CANDIDATE, candidate_event(d.id, rank, d.page_content, hop=found_by[d.id])) for rank, d in enumerate(traced[1])]
        + [
            (sc.EVENT_EXCLUSION, exclusion_event(ident, rank, texts[ident], "deduplicated", f"duplicate id of {ident}", hop=found_by[ident]))
            for rank, ident in dropped
        ],
    )


def test_generate_queries_alone_is_a_query_transform_stage(instrumentor, tracer_provider, span_exporter):
    bm25 = BM25Retriever.from_documents(corpus(), k=2)
    mq = MultiQueryRetriever.from_llm(retriever=bm25, llm=FakeListLLM(responses=["a b\ncat on the mat\nc d"]))
    from langchain_core.callbacks import CallbackManagerForRetrieverRun as Run

    queries = mq.generate_queries("cat on the mat", Run.get_noop_manager())
    assert queries == ["a b", "cat on the mat", "c d"]
    span = one(span_exporter.get_finished_spans(), "MultiQueryRetriever")
    assert span.name == "query_transform MultiQueryRetriever"
    # the repeated question is the same query, not a new hop
    assert [(e.attributes[sc.QUERY_HOP], e.attributes[sc.QUERY_TEXT]) for e in rec_events(span)] == [(1, "a b"), (2, "c d")]


# --- compressors and transformers ------------------------------------------------------------------
def compression_retriever() -> ContextualCompressionRetriever:
    store = InMemoryVectorStore(HashEmbeddings())
    store.add_documents(corpus())
    pipeline = DocumentCompressorPipeline(
        transformers=[
            EmbeddingsRedundantFilter(embeddings=HashEmbeddings()),
            EmbeddingsFilter(embeddings=HashEmbeddings(), k=3),
            LongContextReorder(),
        ]
    )
    return ContextualCompressionRetriever(base_compressor=pipeline, base_retriever=store.as_retriever(search_kwargs={"k": 6}))


def _ids(span: Any, name: str) -> list[str]:
    return [e.attributes[sc.CANDIDATE_ID] for e in rec_events(span) if e.name == name]


def test_compression_pipeline_every_exclusion_has_its_reason(instrumentor, tracer_provider, span_exporter):
    """A DocumentCompressorPipeline is a container, not a stage: its inner compressors and
    transformers are the stages, children of the compression retriever's span, chained in -> out,
    each exclusion recorded once, by the stage that made it."""
    retriever = compression_retriever()
    traced = same_with_and_without(instrumentor, tracer_provider, span_exporter, lambda: retriever.invoke("the cat sat on the mat"))
    spans = span_exporter.get_finished_spans()
    names = [s.name for s in spans]
    assert names == [
        "retrieve VectorStoreRetriever",
        "filter EmbeddingsRedundantFilter",
        "filter EmbeddingsFilter",
        "rerank LongContextReorder",
        "retrieve ContextualCompressionRetriever",
    ]
    retrieve, redundant, efilter, reorder, outer = spans
    assert outer.parent is None
    assert [s.parent.span_id for s in spans[:-1]] == [outer.context.span_id] * 4
    retrieved = _ids(retrieve, sc.EVENT_CANDIDATE)
    assert retrieved[:2] == ["d0", "d6"] or retrieved[:2] == ["d6", "d0"]
    assert len(retrieved) == 6

    # the stages chain: what one handed on is exactly what the next took in (same identities,
    # also through Documents rebuilt without id), and in == out + excluded for each
    for before, after in ((retrieve, redundant), (redundant, efilter), (efilter, reorder)):
        handed_on = _ids(before, sc.EVENT_CANDIDATE)
        attributes = dict(after.attributes)
        assert attributes[sc.CANDIDATES_IN] == len(handed_on) == attributes[sc.CANDIDATES_OUT] + attributes[sc.CANDIDATES_EXCLUDED]
        assert sorted(_ids(after, sc.EVENT_CANDIDATE) + _ids(after, sc.EVENT_EXCLUSION)) == sorted(handed_on)

    # the duplicate content is dropped by the redundant filter: deduplicated
    assert _ids(redundant, sc.EVENT_EXCLUSION) == [retrieved[1]]
    assert rec_events(redundant)[-1].attributes[sc.EXCLUSION_REASON] == "deduplicated"
    assert rec_events(redundant)[-1].attributes[sc.EXCLUSION_DETAIL] == "embedding similarity > 0.95 with a kept document"
    assert dict(redundant.attributes)[sc.CANDIDATES_IN] == 6
    # EmbeddingsFilter rebuilds Documents without ids: the identities are still the retrieved ones
    out_ids = _ids(efilter, sc.EVENT_CANDIDATE)
    assert set(out_ids) <= set(retrieved) and len(out_ids) == 3
    assert all(d.id is None for d in traced[1])
    sims = dict(similarities("the cat sat on the mat"))
    for event in rec_events(efilter):
        if event.name == sc.EVENT_CANDIDATE:
            assert event.attributes[sc.CANDIDATE_SCORE] == pytest.approx(sims[int(event.attributes[sc.CANDIDATE_ID][1:])])
            assert event.attributes[sc.CANDIDATE_SCORE_KIND] == "similarity"
    cut = [e for e in rec_events(efilter) if e.name == sc.EVENT_EXCLUSION]
    assert len(cut) == 2 and {e.attributes[sc.EXCLUSION_REASON] for e in cut} == {"below_rank_cutoff"}
    assert {e.attributes[sc.EXCLUSION_DETAIL] for e in cut} == {"top_k=3"}
    left = pop_stage(
        efilter,
        {
            **stage_attributes("filter", EFILTER, n_in=5, n_out=3, n_excluded=2),
            **query_attributes("the cat sat on the mat"),
            sc.STAGE_TOP_K: 3,
            sc.OPENINFERENCE_SPAN_KIND: "RERANKER",
            sc.OI_INPUT_VALUE: "the cat sat on the mat",
        },
    )
    assert left == {}
    # reorder: same set, no exclusion
    assert dict(reorder.attributes)[sc.CANDIDATES_EXCLUDED] == 0
    id_of_content = {TEXTS[int(i[1:])]: i for i in out_ids}
    assert _ids(reorder, sc.EVENT_CANDIDATE) == [id_of_content[d.page_content] for d in traced[1]]
    assert _ids(outer, sc.EVENT_CANDIDATE) == _ids(reorder, sc.EVENT_CANDIDATE)
    # each exclusion is in the trace once, with the reason of the stage that made it
    exclusions = [
        (s.name, e.attributes[sc.CANDIDATE_ID], e.attributes[sc.EXCLUSION_REASON])
        for s in spans
        for e in rec_events(s)
        if e.name == sc.EVENT_EXCLUSION
    ]
    assert len(exclusions) == 3 and len({ident for _, ident, _ in exclusions}) == 3
    assert PIPELINE not in {dict(s.attributes)[sc.STAGE_COMPONENT] for s in spans}  # the container is no stage


def test_compression_pipeline_manifest_lists_each_exclusion_once(tmp_path):
    """The inspector's manifest of a compression-pipeline trace: one row per exclusion, naming the
    inner stage that made it; the stages as LangChain ran them."""
    from opentelemetry.sdk.trace import TracerProvider

    from ragtrail.export.local_store import LocalStoreSpanExporter
    from ragtrail.export.whole_trace import WholeTraceSpanProcessor
    from ragtrail.inspect.manifest import build
    from ragtrail.inspect.sources import FileSource

    provider = TracerProvider()
    provider.add_span_processor(WholeTraceSpanProcessor(LocalStoreSpanExporter(tmp_path), schedule_delay_millis=10, grace_millis=10))
    inst = LangChainInstrumentor()
    inst.instrument(tracer_provider=provider)
    try:
        retriever = compression_retriever()
        with provider.get_tracer("tests").start_as_current_span("request") as root:
            retriever.invoke("the cat sat on the mat")
        trace_id = format(root.get_span_context().trace_id, "032x")
    finally:
        inst.uninstrument()
        provider.force_flush()
        provider.shutdown()
    m = build(FileSource(tmp_path).get(trace_id)).as_dict()
    assert [(s["kind"], s["component"], s["in"], s["out"], s["excluded_count"]) for s in m["stages"]] == [
        ("retrieve", CCR, 0, 3, 0),  # in start order: the compression retriever opens first
        ("retrieve", VSR, 0, 6, 0),
        ("filter", REDUNDANT, 6, 5, 1),
        ("filter", EFILTER, 5, 3, 2),
        ("rerank", REORDER, 3, 3, 0),
    ]
    retrieved = [c["id"] for c in m["stages"][1]["candidates"]]
    duplicate = retrieved[1]
    cut = sorted(set(c["id"] for c in m["stages"][2]["candidates"]) - set(c["id"] for c in m["stages"][3]["candidates"]))
    assert len(cut) == 2 and duplicate not in cut
    assert sorted((e["id"], e["stage"], e["component"], e["reason"], e["detail"]) for e in m["excluded"]) == sorted(
        [
            (duplicate, "filter", REDUNDANT, "deduplicated", "embedding similarity > 0.95 with a kept document"),
            *[(ident, "filter", EFILTER, "below_rank_cutoff", "top_k=3") for ident in cut],
        ]
    )
    assert len(m["excluded"]) == 3


def test_compression_pipeline_called_on_its_own_keeps_one_trace_and_identities(instrumentor, tracer_provider, span_exporter):
    """Called directly (no stage around it), the container opens a plain span, not a stage, so its
    steps form one trace; the ids EmbeddingsFilter's rebuilt Documents lost are still the inputs' ids
    in the reranker that follows."""
    pipeline = DocumentCompressorPipeline(
        transformers=[EmbeddingsFilter(embeddings=HashEmbeddings(), k=4), CrossEncoderReranker(model=OverlapCrossEncoder(), top_n=2)]
    )
    docs = [d for d in corpus() if d.id != "d6"]  # d6 repeats d0's text: id-less copies of it are d0's
    traced = same_with_and_without(instrumentor, tracer_provider, span_exporter, lambda: pipeline.compress_documents(docs, "the cat sat on the mat"))
    assert all(d.id is None for d in traced[1])
    efilter, rerank, container = span_exporter.get_finished_spans()
    assert (efilter.name, rerank.name, container.name) == (
        "filter EmbeddingsFilter",
        "rerank CrossEncoderReranker",
        "compress DocumentCompressorPipeline",
    )
    assert container.parent is None and dict(container.attributes) == {} and container.events == ()
    assert efilter.parent.span_id == rerank.parent.span_id == container.context.span_id
    kept = _ids(efilter, sc.EVENT_CANDIDATE)
    assert len(kept) == 4 and all(i in {d.id for d in docs} for i in kept)
    assert sorted(_ids(rerank, sc.EVENT_CANDIDATE) + _ids(rerank, sc.EVENT_EXCLUSION)) == sorted(kept)
    assert dict(rerank.attributes)[sc.CANDIDATES_IN] == 4 and dict(rerank.attributes)[sc.CANDIDATES_EXCLUDED] == 2
    text_of = {d.id: d.page_content for d in docs}
    assert [text_of[i] for i in _ids(rerank, sc.EVENT_CANDIDATE)] == [d.page_content for d in traced[1]]


def test_embeddings_filter_threshold_reason(instrumentor, tracer_provider, span_exporter):
    docs = corpus()
    efilter = EmbeddingsFilter(embeddings=HashEmbeddings(), k=None, similarity_threshold=0.3)
    traced = same_with_and_without(instrumentor, tracer_provider, span_exporter, lambda: efilter.compress_documents(docs, "the cat mat"))
    sims = dict(similarities("the cat mat"))
    kept = {i for i, s in sims.items() if s > 0.3}
    assert {d.page_content for d in traced[1]} == {TEXTS[i] for i in kept}
    span = one(span_exporter.get_finished_spans(), "EmbeddingsFilter")
    exclusions = [e for e in rec_events(span) if e.name == sc.EVENT_EXCLUSION]
    assert [e.attributes[sc.CANDIDATE_ID] for e in exclusions] == [f"d{i}" for i in range(len(TEXTS)) if i not in kept]
    assert {(e.attributes[sc.EXCLUSION_REASON], e.attributes[sc.EXCLUSION_DETAIL]) for e in exclusions} == {
        ("below_score_threshold", "similarity <= threshold=0.3")
    }


class KeywordLLM(LLM):
    """A scripted LLM for LLMChainFilter: YES when the context mentions the keyword."""

    keyword: str = "cat"

    @property
    def _llm_type(self) -> str:
        return "keyword"

    def _call(self, prompt: str, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> str:
        context = prompt.split(">>>\n", 1)[1].split("\n>>>", 1)[0]
        return "YES" if self.keyword in context else "NO"


def test_llm_chain_filter_reason(instrumentor, tracer_provider, span_exporter):
    docs = corpus()
    llm_filter = LLMChainFilter.from_llm(KeywordLLM())
    traced = same_with_and_without(instrumentor, tracer_provider, span_exporter, lambda: llm_filter.compress_documents(docs, "felines?"))
    assert [d.id for d in traced[1]] == ["d0", "d1", "d2", "d5", "d6"]
    span = one(span_exporter.get_finished_spans(), "LLMChainFilter")
    assert span.name == "filter LLMChainFilter"
    assert_events(
        span,
        [(sc.EVENT_CANDIDATE, candidate_event(f"d{i}", rank, TEXTS[i])) for rank, i in enumerate([0, 1, 2, 5, 6])]
        + [
            (sc.EVENT_EXCLUSION, exclusion_event(f"d{i}", i, TEXTS[i], "custom:llm_judged_irrelevant", "the LLM judged it not relevant to the query"))
            for i in (3, 4, 7)
        ],
    )


def test_llm_listwise_rerank_reasons(instrumentor, tracer_provider, span_exporter):
    docs = corpus()[:5]
    full = LLMListwiseRerank(reranker=RunnableLambda(lambda x: list(reversed(x["documents"]))), top_n=2)
    traced = same_with_and_without(instrumentor, tracer_provider, span_exporter, lambda: full.compress_documents(docs, "q"))
    assert [d.id for d in traced[1]] == ["d4", "d3"]
    span = one(span_exporter.get_finished_spans(), "LLMListwiseRerank")
    # the LLM ranked all five (observed through LangChain's callbacks): d2..d0 were cut by top_n
    assert [
        (e.attributes[sc.CANDIDATE_ID], e.attributes[sc.EXCLUSION_REASON], e.attributes[sc.EXCLUSION_DETAIL])
        for e in rec_events(span)
        if e.name == sc.EVENT_EXCLUSION
    ] == [
        ("d0", "below_rank_cutoff", "ranked 5 by the LLM, top_k=2"),
        ("d1", "below_rank_cutoff", "ranked 4 by the LLM, top_k=2"),
        ("d2", "below_rank_cutoff", "ranked 3 by the LLM, top_k=2"),
    ]
    span_exporter.clear()
    partial = LLMListwiseRerank(reranker=RunnableLambda(lambda x: [x["documents"][2]]), top_n=3)
    assert [d.id for d in partial.compress_documents(docs, "q")] == ["d2"]
    span = one(span_exporter.get_finished_spans(), "LLMListwiseRerank")
    assert [(e.attributes[sc.CANDIDATE_ID], e.attributes[sc.EXCLUSION_REASON]) for e in rec_events(span) if e.name == sc.EVENT_EXCLUSION] == [
        ("d0", "custom:not_ranked_by_llm"),
        ("d1", "custom:not_ranked_by_llm"),
        ("d3", "custom:not_ranked_by_llm"),
        ("d4", "custom:not_ranked_by_llm"),
    ]
    assert dict(span.attributes)[sc.OPENINFERENCE_SPAN_KIND] == "RERANKER"


@pytest.mark.parametrize("top_n", [1, 3])
def test_llm_listwise_reasons_do_not_depend_on_top_n(instrumentor, tracer_provider, span_exporter, top_n):
    """Issue 12: the LLM ranked one document; the others were not ranked, whatever top_n is (with
    top_n=1 the result alone cannot tell: the LLM's whole ranking is observed)."""
    docs = corpus()[:4]
    rerank = LLMListwiseRerank(reranker=RunnableLambda(lambda x: [x["documents"][2]]), top_n=top_n)
    traced = same_with_and_without(instrumentor, tracer_provider, span_exporter, lambda: rerank.compress_documents(docs, "q"))
    assert [d.id for d in traced[1]] == ["d2"]
    span = one(span_exporter.get_finished_spans(), "LLMListwiseRerank")
    assert [
        (e.attributes[sc.CANDIDATE_ID], e.attributes[sc.EXCLUSION_REASON], e.attributes[sc.EXCLUSION_DETAIL])
        for e in rec_events(span)
        if e.name == sc.EVENT_EXCLUSION
    ] == [(f"d{i}", "custom:not_ranked_by_llm", "left out of the LLM's ranking") for i in (0, 1, 3)]
    assert dict(span.attributes)[sc.STAGE_TOP_K] == top_n


def test_llm_listwise_from_llm_inside_a_compression_retriever(instrumentor, tracer_provider, span_exporter):
    """The real from_llm chain (prompt | structured LLM | parse) under ContextualCompressionRetriever:
    the observer finds the reranker's run under the retriever's run."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    class StructuredFake(GenericFakeChatModel):
        def with_structured_output(self, schema, **kwargs):
            return self | RunnableLambda(lambda message: schema(ranked_document_ids=[3]))

    docs = corpus()[:4]
    base = BM25Retriever.from_documents(docs, k=4)
    llm = StructuredFake(messages=iter([AIMessage(content="[3]")] * 2))
    retriever = ContextualCompressionRetriever(base_compressor=LLMListwiseRerank.from_llm(llm, top_n=1), base_retriever=base)
    traced = same_with_and_without(instrumentor, tracer_provider, span_exporter, lambda: retriever.invoke("cat mat"))
    [only] = traced[1]
    span = one(span_exporter.get_finished_spans(), "LLMListwiseRerank")
    ranked_away = [e.attributes for e in rec_events(span) if e.name == sc.EVENT_EXCLUSION]
    assert len(ranked_away) == 3 and {e[sc.EXCLUSION_REASON] for e in ranked_away} == {"custom:not_ranked_by_llm"}
    assert only.id not in {e[sc.CANDIDATE_ID] for e in ranked_away}


class OverlapCrossEncoder(BaseCrossEncoder):
    """A deterministic cross-encoder: word overlap between query and passage."""

    def score(self, text_pairs: list[tuple[str, str]]) -> list[float]:
        return [len(set(q.lower().split()) & set(p.lower().split())) / (1 + len(p.split())) for q, p in text_pairs]


def test_cross_encoder_reranker_records_the_scores_it_computed(instrumentor, tracer_provider, span_exporter):
    docs = corpus()
    model = OverlapCrossEncoder()
    reranker = CrossEncoderReranker(model=model, top_n=3)
    query = "the cat on the mat"
    traced = same_with_and_without(instrumentor, tracer_provider, span_exporter, lambda: reranker.compress_documents(docs, query))
    scores = model.score([(query, d.page_content) for d in docs])
    order = sorted(range(len(docs)), key=lambda i: scores[i], reverse=True)
    assert [d.id for d in traced[1]] == [f"d{i}" for i in order[:3]]
    span = one(span_exporter.get_finished_spans(), "CrossEncoderReranker")
    component = "langchain_classic.retrievers.document_compressors.cross_encoder_rerank.CrossEncoderReranker"
    mirrors = {sc.OPENINFERENCE_SPAN_KIND: "RERANKER", sc.OI_INPUT_VALUE: query, sc.OI_RERANKER_QUERY: query, sc.OI_RERANKER_TOP_K: 3}
    for n, i in enumerate(order[:3]):
        mirrors[f"reranker.output_documents.{n}.document.id"] = f"d{i}"
        mirrors[f"reranker.output_documents.{n}.document.score"] = scores[i]
    for n in range(len(docs)):
        mirrors[f"reranker.input_documents.{n}.document.id"] = f"d{n}"
    left = pop_stage(
        span, {**stage_attributes("rerank", component, n_in=8, n_out=3, n_excluded=5), **query_attributes(query), sc.STAGE_TOP_K: 3, **mirrors}
    )
    assert left == {}
    assert_events(
        span,
        [(sc.EVENT_CANDIDATE, candidate_event(f"d{i}", rank, TEXTS[i], score=scores[i], score_kind="rerank")) for rank, i in enumerate(order[:3])]
        + [
            (sc.EVENT_EXCLUSION, exclusion_event(f"d{i}", i, TEXTS[i], "below_rank_cutoff", f"top_k=3 rerank_score={scores[i]:g}"))
            for i in range(len(docs))
            if i not in order[:3]
        ],
    )


def test_async_compressor_through_the_base_executor_is_one_span(instrumentor, tracer_provider, span_exporter):
    docs = corpus()
    reranker = CrossEncoderReranker(model=OverlapCrossEncoder(), top_n=2)
    sync_result = reranker.compress_documents(docs, "cat mat")
    span_exporter.clear()
    async_result = asyncio.run(reranker.acompress_documents(docs, "cat mat"))
    assert docs_equal(list(sync_result), list(async_result))
    spans = span_exporter.get_finished_spans()
    assert [s.name for s in spans] == ["rerank CrossEncoderReranker"]
    assert [e.attributes[sc.CANDIDATE_SCORE_KIND] for e in rec_events(spans[0]) if e.name == sc.EVENT_CANDIDATE] == ["rerank"] * 2


def test_async_compression_pipeline_matches_sync(instrumentor, tracer_provider, span_exporter):
    retriever = compression_retriever()
    sync_result = retriever.invoke("cats purr when happy")
    sync_spans = [
        (s.name, [(e.name, e.attributes.get(sc.CANDIDATE_ID), e.attributes.get(sc.EXCLUSION_REASON)) for e in rec_events(s)])
        for s in span_exporter.get_finished_spans()
    ]
    span_exporter.clear()
    async_result = asyncio.run(retriever.ainvoke("cats purr when happy"))
    assert docs_equal(sync_result, async_result)
    async_spans = [
        (s.name, [(e.name, e.attributes.get(sc.CANDIDATE_ID), e.attributes.get(sc.EXCLUSION_REASON)) for e in rec_events(s)])
        for s in span_exporter.get_finished_spans()
    ]
    assert async_spans == sync_spans


def test_wrapped_methods_keep_their_signatures(instrumentor):
    reranker = CrossEncoderReranker(model=OverlapCrossEncoder(), top_n=2)
    assert "callbacks" in inspect.signature(reranker.compress_documents).parameters
    assert inspect.iscoroutinefunction(BaseRetriever.ainvoke)


# --- concurrency, context, switches ------------------------------------------------------------------
def traces_of(spans) -> dict[int, list[Any]]:
    traces: dict[int, list[Any]] = defaultdict(list)
    for span in spans:
        traces[span.context.trace_id].append(span)
    return traces


def check_trace(spans: list[Any]) -> str:
    """One well-formed trace: one root, every parent inside the trace, every stage saw the root's query."""
    ids = {s.context.span_id for s in spans}
    roots = [s for s in spans if s.parent is None]
    assert len(roots) == 1
    assert all(s.parent.span_id in ids for s in spans if s.parent is not None)
    query = roots[0].attributes[sc.QUERY_TEXT]
    assert {s.attributes.get(sc.QUERY_TEXT) for s in spans if sc.QUERY_TEXT in s.attributes} == {query}
    return query


def test_fifty_concurrent_async_queries_make_fifty_clean_traces(instrumentor, tracer_provider, span_exporter):
    ensemble, _, _ = build_ensemble()
    retriever = ContextualCompressionRetriever(
        base_retriever=ensemble,
        base_compressor=DocumentCompressorPipeline(
            transformers=[EmbeddingsFilter(embeddings=HashEmbeddings(), k=3), CrossEncoderReranker(model=OverlapCrossEncoder(), top_n=2)]
        ),
    )
    queries = [f"{TEXTS[i % len(TEXTS)]} {i}" for i in range(50)]
    instrumentor.uninstrument()
    expected = [retriever.invoke(q) for q in queries]
    instrumentor.instrument(tracer_provider=tracer_provider)

    async def main():
        return await asyncio.gather(*(retriever.ainvoke(q) for q in queries))

    results = asyncio.run(main())
    assert all(docs_equal(a, b) for a, b in zip(expected, results, strict=False))
    traces = traces_of(span_exporter.get_finished_spans())
    assert len(traces) == 50
    seen = set()
    for spans in traces.values():
        assert len(spans) == 6  # ccr, fuse, 2 retrieves, filter, rerank (the compressor pipeline is no stage)
        seen.add(check_trace(spans))
    assert seen == set(queries)


def test_batch_in_langchain_thread_pool_keeps_traces_apart(instrumentor, tracer_provider, span_exporter):
    ensemble, _, _ = build_ensemble()
    queries = [f"query {i} cat" for i in range(12)]
    results = ensemble.batch(queries, config={"max_concurrency": 4})
    assert len(results) == 12
    traces = traces_of(span_exporter.get_finished_spans())
    assert len(traces) == 12
    assert {check_trace(spans) for spans in traces.values()} == set(queries)


def test_query_hash_mode_writes_the_query_nowhere(instrumentor, tracer_provider, span_exporter, monkeypatch):
    from ragtrail import settings as config

    monkeypatch.setenv("RAGTRAIL_CAPTURE_QUERY", "hash")
    config.reset()
    bm25 = BM25Retriever.from_documents(corpus(), k=2)
    secret = "zebracorn password 1234"
    mq = MultiQueryRetriever.from_llm(retriever=bm25, llm=FakeListLLM(responses=["zebracorn alpha\nzebracorn beta"]))
    mq.invoke(secret)
    spans = span_exporter.get_finished_spans()
    assert len(spans) == 3
    blob = json.dumps([[s.name, dict(s.attributes), [dict(e.attributes) for e in s.events]] for s in spans], default=str)
    assert "zebracorn" not in blob
    assert one(spans, "MultiQueryRetriever").attributes[sc.QUERY_SHA256] == one_sha(secret)


def test_suppressed_instrumentation_records_nothing(instrumentor, span_exporter):
    retriever = compression_retriever()
    with suppress_instrumentation():
        retriever.invoke("cat")
    assert span_exporter.get_finished_spans() == ()


def test_uninstrument_removes_every_wrapper(tracer_provider, span_exporter):
    inst = LangChainInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    reranker = CrossEncoderReranker(model=OverlapCrossEncoder(), top_n=2)
    reranker.compress_documents(corpus(), "cat")  # patches the model class lazily
    assert hasattr(OverlapCrossEncoder.score, "__wrapped__")
    inst.uninstrument()
    span_exporter.clear()
    assert not hasattr(OverlapCrossEncoder.score, "__wrapped__")
    assert not hasattr(BaseRetriever.invoke, "__wrapped__")
    assert not hasattr(EmbeddingsFilter.compress_documents, "__wrapped__")
    compression_retriever().invoke("cat")
    reranker.compress_documents(corpus(), "cat")
    assert span_exporter.get_finished_spans() == ()
    from ragtrail.recorder.candidates import lookup_adapter

    assert lookup_adapter(Document) is None


def test_instrumentation_errors_never_reach_the_app(instrumentor, tracer_provider, span_exporter, monkeypatch):
    from ragtrail.instrumentation.langchain import _retrievers

    def broken(call, s, result):
        raise RuntimeError("recorder bug")

    monkeypatch.setattr(_retrievers.BM25Retrieval, "record", broken)
    retriever = BM25Retriever.from_documents(corpus(), k=2)
    instrumentor.uninstrument()
    expected = retriever.invoke("cat")
    instrumentor.instrument(tracer_provider=tracer_provider)
    before = internal_error_count()
    assert docs_equal(retriever.invoke("cat"), expected)
    assert internal_error_count() == before + 1
    assert len(span_exporter.get_finished_spans()) == 1


class TwoLogitCrossEncoder(BaseCrossEncoder):
    """Like HuggingFaceCrossEncoder on a two-logit model: returns a lazy ``map`` of relevance logits."""

    def score(self, text_pairs: list[tuple[str, str]]):
        return map(lambda pair: len(set(pair[0].split()) & set(pair[1].split())) / 10.0, text_pairs)


def test_cross_encoder_returning_an_iterator_is_recorded_without_consuming_it_first(instrumentor, tracer_provider, span_exporter):
    reranker = CrossEncoderReranker(model=TwoLogitCrossEncoder(), top_n=2)
    traced = same_with_and_without(
        instrumentor, tracer_provider, span_exporter, lambda: reranker.compress_documents(corpus(), "the cat sat on the mat")
    )
    assert [d.id for d in traced[1]] == ["d0", "d6"]
    span = one(span_exporter.get_finished_spans(), "CrossEncoderReranker")
    assert [(e.attributes[sc.CANDIDATE_ID], e.attributes[sc.CANDIDATE_SCORE]) for e in rec_events(span) if e.name == sc.EVENT_CANDIDATE] == [
        ("d0", 0.5),
        ("d6", 0.5),
    ]
    # outside a reranker stage the model's result is handed back untouched
    assert isinstance(TwoLogitCrossEncoder().score([("a", "a")]), map)


def test_async_direct_relevance_search_and_query_generation(instrumentor, tracer_provider, span_exporter):
    store = RelevanceStore(HashEmbeddings())
    store.add_documents(corpus())

    async def main():
        hits = await store.asimilarity_search_with_relevance_scores("cats purr", k=4, score_threshold=0.25)
        mq = MultiQueryRetriever.from_llm(retriever=store.as_retriever(), llm=FakeListLLM(responses=["x y\nz"]))
        from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun as Run

        queries = await mq.agenerate_queries("cats purr", Run.get_noop_manager())
        return hits, queries

    hits, queries = asyncio.run(main())
    assert queries == ["x y", "z"]
    spans = span_exporter.get_finished_spans()
    assert [s.name for s in spans] == ["retrieve RelevanceStore", "query_transform MultiQueryRetriever"]
    search = dict(spans[0].attributes)
    assert (search[sc.CANDIDATES_IN], search[sc.CANDIDATES_OUT], search[sc.STAGE_THRESHOLD]) == (4, len(hits), 0.25)
    assert {e.attributes[sc.EXCLUSION_REASON] for e in rec_events(spans[0]) if e.name == sc.EVENT_EXCLUSION} <= {"below_score_threshold"}
    assert [e.attributes[sc.QUERY_TEXT] for e in rec_events(spans[1])] == ["x y", "z"]


def test_a_failure_while_opening_a_stage_leaves_the_hosts_context_as_it_was(instrumentor, tracer_provider, span_exporter, monkeypatch):
    from opentelemetry import trace

    from ragtrail.instrumentation.langchain import _retrievers
    from ragtrail.instrumentation.langchain._common import _sink
    from ragtrail.recorder.stage import current_stage

    def broken(store):
        raise RuntimeError("cannot size this store")

    monkeypatch.setattr(_retrievers, "store_size", broken)  # fails after the stage was started
    store = InMemoryVectorStore(HashEmbeddings())
    store.add_documents(corpus())
    retriever = store.as_retriever(search_kwargs={"k": 2})
    instrumentor.uninstrument()
    expected = retriever.invoke("cat")
    instrumentor.instrument(tracer_provider=tracer_provider)
    before = internal_error_count()
    assert docs_equal(retriever.invoke("cat"), expected)
    # the retriever's stage could not open, so the store's own search opened one, and so did the scored
    # search beneath it (each a direct search now): same failure, counted each time
    assert internal_error_count() == before + 3
    assert trace.get_current_span() is trace.INVALID_SPAN
    assert current_stage() is None and _sink.get() is None
    spans = span_exporter.get_finished_spans()
    # both were started, then closed: never left open, never the parent of anything after them
    assert sorted(s.name for s in spans) == ["retrieve InMemoryVectorStore", "retrieve InMemoryVectorStore", "retrieve VectorStoreRetriever"]
    assert all(s.parent is None for s in spans)


class ExtractLLM(LLM):
    """A scripted extractor: the first three words of a context mentioning 'cat', else NO_OUTPUT."""

    @property
    def _llm_type(self) -> str:
        return "extract"

    def _call(self, prompt: str, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> str:
        context = prompt.split(">>>\n", 1)[1].split("\n>>>", 1)[0]
        return " ".join(context.split()[:3]) if "cat" in context else "NO_OUTPUT"


def test_llm_chain_extractor_keeps_identity_and_declares_the_transform(instrumentor, tracer_provider, span_exporter):
    from langchain_classic.retrievers.document_compressors import LLMChainExtractor

    docs = corpus()[:4]
    extractor = LLMChainExtractor.from_llm(ExtractLLM())
    traced = same_with_and_without(instrumentor, tracer_provider, span_exporter, lambda: extractor.compress_documents(docs, "cats?"))
    assert [d.page_content for d in traced[1]] == ["the cat sat", "dogs chase cats", "a cat and"]
    span = one(span_exporter.get_finished_spans(), "LLMChainExtractor")
    expected = []
    for rank, (i, extract) in enumerate([(0, "the cat sat"), (1, "dogs chase cats"), (2, "a cat and")]):
        event = candidate_event(f"d{i}", rank, extract)
        event[sc.CANDIDATE_TRANSFORM_RULE] = "llm_extract@1"
        event[sc.CANDIDATE_TRANSFORM_DERIVED_FROM] = one_sha(TEXTS[i])
        expected.append((sc.EVENT_CANDIDATE, event))
    expected.append(
        (sc.EVENT_EXCLUSION, exclusion_event("d3", 3, TEXTS[3], "custom:llm_extracted_nothing", "the LLM found nothing relevant to extract"))
    )
    assert_events(span, expected)


def test_sampled_out_requests_record_nothing_and_change_nothing(span_exporter):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    retriever = compression_retriever()
    bm25 = BM25Retriever.from_documents(corpus(), k=2)
    mq = MultiQueryRetriever.from_llm(retriever=bm25, llm=FakeListLLM(responses=["a\nb"]))
    expected = (retriever.invoke("cat mat"), mq.invoke("cat"))
    inst = LangChainInstrumentor()
    inst.instrument(tracer_provider=provider)
    try:
        before = internal_error_count()
        got = (retriever.invoke("cat mat"), asyncio.run(mq.ainvoke("cat")))
    finally:
        inst.uninstrument()
    assert docs_equal(expected[0], got[0]) and docs_equal(expected[1], got[1])
    assert internal_error_count() == before
    assert exporter.get_finished_spans() == () and span_exporter.get_finished_spans() == ()


def test_plain_thread_pool_concurrency_keeps_traces_apart(instrumentor, tracer_provider, span_exporter):
    from concurrent.futures import ThreadPoolExecutor

    retriever = ContextualCompressionRetriever(
        base_retriever=build_ensemble()[0], base_compressor=CrossEncoderReranker(model=OverlapCrossEncoder(), top_n=2)
    )
    queries = [f"cats and dogs {i}" for i in range(24)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(retriever.invoke, queries))
    assert all(len(r) == 2 for r in results)
    traces = traces_of(span_exporter.get_finished_spans())
    assert len(traces) == 24
    assert {check_trace(spans) for spans in traces.values()} == set(queries)
    assert all(len(spans) == 5 for spans in traces.values())
