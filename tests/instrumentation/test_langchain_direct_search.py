"""LangChain vector stores searched directly (``similarity_search``, ``similarity_search_by_vector``,
``max_marginal_relevance_search``, and their async forms): one ``retrieve`` stage each, with the
query, the store's ids, the scores its own scored search computed beneath (of the store's kind), k
and the corpus size the store holds in memory; under a retriever they record nothing of their own.
Real InMemoryVectorStore and FAISS (faiss-cpu, with ragtrail's faiss stage nested inside)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("langchain_community")

from langchain_core.vectorstores import InMemoryVectorStore  # noqa: E402

from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.langchain import LangChainInstrumentor  # noqa: E402
from spanutil import rec_events  # noqa: E402

from .test_langchain_support import TEXTS, HashEmbeddings, corpus, docs_equal, one, pop_stage, query_attributes, retrieval_mirrors, stage_attributes  # noqa: E402

IMVS = "langchain_core.vectorstores.in_memory.InMemoryVectorStore"


@pytest.fixture
def instrumentor(tracer_provider, span_exporter) -> Iterator[LangChainInstrumentor]:
    inst = LangChainInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield inst
    inst.uninstrument()


@pytest.fixture
def store() -> InMemoryVectorStore:
    s = InMemoryVectorStore(HashEmbeddings())
    s.add_documents(corpus())
    return s


def plain(fn: Any) -> Any:
    """The call without ragtrail (instrumentation suppressed for it)."""
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    with suppress_instrumentation():
        return fn()


def scores_of(store: InMemoryVectorStore, query: str, k: int) -> list[tuple[str, float]]:
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    with suppress_instrumentation():
        return [(d.id, s) for d, s in store.similarity_search_with_score(query, k=k)]


def test_similarity_search_is_a_scored_stage(instrumentor, store, span_exporter) -> None:
    expected = plain(lambda: store.similarity_search("dogs park", k=2))
    docs = store.similarity_search("dogs park", k=2)
    assert docs_equal(docs, expected)
    spans = span_exporter.get_finished_spans()
    assert len(spans) == 1  # the scored search beneath fed it: no stage of its own
    [span] = spans
    hits = scores_of(store, "dogs park", 2)
    assert [d.id for d in docs] == [i for i, _ in hits]
    left = pop_stage(
        span,
        {
            **stage_attributes("retrieve", IMVS, n_in=0, n_out=2, n_excluded=0),
            **query_attributes("dogs park"),
            sc.STAGE_TOP_K: 2,
            sc.COVERAGE_CORPUS_SIZE: len(TEXTS),
            **retrieval_mirrors(IMVS, "dogs park", hits, 2),
        },
    )
    assert left == {}
    assert [e.attributes[sc.CANDIDATE_SCORE_KIND] for e in rec_events(span)] == ["similarity", "similarity"]


def test_by_vector_records_a_receipt_of_the_vector(instrumentor, store, span_exporter) -> None:
    from ragtrail.instrumentation._vectorstore import vector_receipt

    vector = HashEmbeddings().embed_query("dogs park")
    docs = store.similarity_search_by_vector(vector, k=3)
    [span] = span_exporter.get_finished_spans()
    hits = scores_of(store, "dogs park", 3)
    dim, digest = vector_receipt(vector)
    left = pop_stage(
        span,
        {
            **stage_attributes("retrieve", IMVS, n_in=0, n_out=3, n_excluded=0),
            sc.STAGE_TOP_K: 3,
            sc.COVERAGE_CORPUS_SIZE: len(TEXTS),
            sc.QUERY_VECTOR_DIM: dim,
            sc.QUERY_VECTOR_SHA256: digest,
            **retrieval_mirrors(IMVS, None, hits, 3),
        },
    )
    assert left == {}
    assert [d.id for d in docs] == [i for i, _ in hits]


def test_mmr_has_ids_and_k_but_no_score(instrumentor, store, span_exporter) -> None:
    expected = plain(lambda: store.max_marginal_relevance_search("dogs park", k=2, fetch_k=4))
    docs = store.max_marginal_relevance_search("dogs park", k=2, fetch_k=4)
    assert docs_equal(docs, expected)
    [span] = span_exporter.get_finished_spans()
    left = pop_stage(
        span,
        {
            **stage_attributes("retrieve", IMVS, n_in=0, n_out=2, n_excluded=0),
            **query_attributes("dogs park"),
            sc.STAGE_TOP_K: 2,
            sc.COVERAGE_CORPUS_SIZE: len(TEXTS),
            **retrieval_mirrors(IMVS, "dogs park", [(d.id, None) for d in docs], 2),
        },
    )
    assert left == {}
    assert [e.attributes[sc.CANDIDATE_SCORE_KIND] for e in rec_events(span)] == ["none", "none"]


def test_async_search_records_once(instrumentor, store, span_exporter) -> None:
    docs = asyncio.run(store.asimilarity_search("dogs park", k=2))
    [span] = span_exporter.get_finished_spans()
    assert span.attributes[sc.CANDIDATES_OUT] == 2 and span.attributes[sc.QUERY_TEXT] == "dogs park"
    assert [e.attributes[sc.CANDIDATE_ID] for e in rec_events(span)] == [d.id for d in docs]


def test_under_a_retriever_the_search_is_the_retrievers(instrumentor, store, span_exporter) -> None:
    for search_type in ("similarity", "mmr"):
        span_exporter.clear()
        store.as_retriever(search_type=search_type, search_kwargs={"k": 2}).invoke("dogs park")
        spans = span_exporter.get_finished_spans()
        assert [s.name for s in spans] == ["retrieve VectorStoreRetriever"], search_type


def test_a_failing_search_raises_the_same(instrumentor, store, span_exporter) -> None:
    with pytest.raises(TypeError) as caught:
        store.similarity_search_by_vector("not a vector", k=2)
    with pytest.raises(TypeError) as bare:
        plain(lambda: store.similarity_search_by_vector("not a vector", k=2))
    assert str(caught.value) == str(bare.value)
    [span] = span_exporter.get_finished_spans()
    assert span.attributes[sc.STAGE_STATUS] == sc.STATUS_FAILED


def test_faiss_store_nests_the_engine_stage(instrumentor, tracer_provider, span_exporter) -> None:
    pytest.importorskip("faiss")
    from langchain_community.vectorstores import FAISS

    from ragtrail.instrumentation.faiss import FaissInstrumentor

    faiss_inst = FaissInstrumentor()
    faiss_inst.instrument(tracer_provider=tracer_provider)
    try:
        store = FAISS.from_documents(corpus(), HashEmbeddings())
        docs = store.similarity_search("dogs park", k=2)
    finally:
        faiss_inst.uninstrument()
    spans = span_exporter.get_finished_spans()
    outer = one(spans, "FAISS")
    inner = [s for s in spans if s is not outer]
    assert len(inner) == 1 and inner[0].parent.span_id == outer.context.span_id
    ids = [d.id for d in docs]
    assert [e.attributes[sc.CANDIDATE_ID] for e in rec_events(outer)] == ids
    assert [e.attributes[sc.CANDIDATE_ID] for e in rec_events(inner[0])] == ids  # the docstore's ids in both
    assert {e.attributes[sc.CANDIDATE_SCORE_KIND] for e in rec_events(outer)} == {"distance"}
