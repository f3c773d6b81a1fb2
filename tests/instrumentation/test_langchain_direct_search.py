"""LangChain vector stores searched directly (``similarity_search``, ``similarity_search_by_vector``,
``max_marginal_relevance_search``, and their async forms): one ``retrieve`` stage each, with the
query, the store's ids, the scores its own scored search computed beneath (of the store's kind), k
and the corpus size the store holds in memory; under a retriever they record nothing of their own.
Real InMemoryVectorStore and FAISS (faiss-cpu, with ragtrail's faiss stage nested inside)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

pytest.importorskip("langchain_community")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.embeddings import Embeddings  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore  # noqa: E402

from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.langchain import LangChainInstrumentor  # noqa: E402
from spanutil import rec_events  # noqa: E402

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


class TableEmbeddings(Embeddings):
    """Fixed vectors: ``twin`` is nearly ``near`` (redundant with it), ``other`` less similar to the
    query but unlike ``near``, ``far`` unlike the query."""

    VECTORS: ClassVar[dict[str, list[float]]] = {
        "query": [1.0, 0.0, 0.0],
        "near text": [1.0, 0.0, 0.0],
        "twin text": [0.99, 0.141, 0.0],
        "other text": [0.7, 0.0, 0.714],
        "far text": [0.0, 1.0, 0.0],
    }

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.VECTORS[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.VECTORS[text]


MMR_IDS = ["near", "twin", "other", "far"]


@pytest.fixture
def mmr_store() -> InMemoryVectorStore:
    s = InMemoryVectorStore(TableEmbeddings())
    s.add_documents([Document(page_content=f"{i} text", id=i) for i in MMR_IDS])
    return s


def mmr_expected(store: InMemoryVectorStore, component: str, picked: list[str]) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """The MMR stage: the pool of 3 (fetch_k) as inputs with the store's similarities, the pick as
    outputs, ``twin`` (the pool's rank 1) not picked."""
    pool = dict(scores_of(store, "query", 3))
    assert list(pool) == ["near", "twin", "other"]
    attributes = {
        **stage_attributes("retrieve", component, n_in=3, n_out=2, n_excluded=1),
        **query_attributes("query"),
        sc.STAGE_TOP_K: 2,
        sc.STAGE_MMR_LAMBDA: 0.3,
        sc.COVERAGE_CORPUS_SIZE: 4,
        **retrieval_mirrors(component, "query", [(i, pool[i]) for i in picked], 2),
    }
    events = [(sc.EVENT_CANDIDATE, candidate_event(i, r, f"{i} text", score=pool[i], score_kind="similarity", hop=0)) for r, i in enumerate(picked)]
    detail = "in the fetch_k pool of 3, not picked: maximal marginal relevance took 2, lambda_mult=0.3"
    events.append(
        (sc.EVENT_EXCLUSION, exclusion_event("twin", 1, "twin text", "custom:not_picked_by_mmr", detail, score=pool["twin"], score_kind="similarity"))
    )
    return attributes, events


def test_mmr_records_its_pool_and_what_it_did_not_pick(instrumentor, mmr_store, span_exporter) -> None:
    """Issue 24, principle 5: the fetch_k pool is the stage's inputs (the store's ids and
    similarities), the pick its outputs, and the candidate MMR passed over as redundant with ``near``
    (more similar to the query than ``other``, which was picked) an exclusion ``custom:not_picked_by_mmr``."""
    expected = plain(lambda: mmr_store.max_marginal_relevance_search("query", k=2, fetch_k=3, lambda_mult=0.3))
    docs = mmr_store.max_marginal_relevance_search("query", k=2, fetch_k=3, lambda_mult=0.3)
    assert docs_equal(docs, expected) and [d.id for d in docs] == ["near", "other"]
    [span] = span_exporter.get_finished_spans()
    attributes, events = mmr_expected(mmr_store, IMVS, ["near", "other"])
    assert pop_stage(span, attributes) == {}
    assert_events(span, events)


def test_an_mmr_retriever_records_the_same_pick(instrumentor, mmr_store, span_exporter) -> None:
    retriever = mmr_store.as_retriever(search_type="mmr", search_kwargs={"k": 2, "fetch_k": 3, "lambda_mult": 0.3})
    expected = plain(lambda: retriever.invoke("query"))
    docs = retriever.invoke("query")
    assert docs_equal(docs, expected)
    [span] = span_exporter.get_finished_spans()
    attributes, events = mmr_expected(mmr_store, "langchain_core.vectorstores.base.VectorStoreRetriever", ["near", "other"])
    assert pop_stage(span, attributes) == {}
    assert_events(span, events)


def test_async_mmr_records_the_pool_too(instrumentor, mmr_store, span_exporter) -> None:
    docs = asyncio.run(mmr_store.amax_marginal_relevance_search("query", k=2, fetch_k=3, lambda_mult=0.3))
    assert [d.id for d in docs] == ["near", "other"]
    [span] = span_exporter.get_finished_spans()
    assert_events(span, mmr_expected(mmr_store, IMVS, ["near", "other"])[1])


def test_mmr_whose_pool_is_not_seen_says_so(instrumentor, span_exporter) -> None:
    """A store whose MMR fetches its pool some other way: the pick as it came (no score, no inputs),
    and the finding that the ones it did not pick are not recorded (never a guessed pool)."""

    class OwnMmrStore(VectorStore):
        """A store of its own: MMR inside it, out of ragtrail's sight (a database's, say)."""

        def __init__(self, docs: list[Document]) -> None:
            self.docs = docs

        def add_texts(self, texts: Any, metadatas: Any = None, **kwargs: Any) -> list[str]:  # pragma: no cover - not used
            raise NotImplementedError

        @classmethod
        def from_texts(cls, texts: Any, embedding: Any, metadatas: Any = None, **kwargs: Any) -> OwnMmrStore:  # pragma: no cover - not used
            raise NotImplementedError

        def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
            return self.docs[:k]

        def max_marginal_relevance_search(self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any) -> list[Document]:
            return [self.docs[0], self.docs[2]][:k]

    store = OwnMmrStore([Document(page_content=f"{i} text", id=i) for i in MMR_IDS])
    docs = store.max_marginal_relevance_search("query", k=2, fetch_k=3)
    [span] = span_exporter.get_finished_spans()
    component = f"{OwnMmrStore.__module__}.{OwnMmrStore.__qualname__}"
    finding = "maximal marginal relevance picked from 3 fetched candidates (fetch_k): the ones it did not pick are not recorded at this stage"
    left = pop_stage(
        span,
        {
            **stage_attributes("retrieve", component, n_in=0, n_out=2, n_excluded=0),
            **query_attributes("query"),
            sc.STAGE_TOP_K: 2,
            sc.STAGE_MMR_LAMBDA: 0.5,
            sc.STAGE_FINDINGS: [finding],
            **retrieval_mirrors(component, "query", [(d.id, None) for d in docs], 2),
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


def test_faiss_mmr_pool_is_the_engine_stage_s_hits(instrumentor, tracer_provider, span_exporter) -> None:
    """LangChain's FAISS fetches its MMR pool with faiss's own search, which ragtrail's faiss stage
    records nested in the MMR stage under the docstore's ids: those hits are the pool (no filter, at
    most fetch_k), so the one MMR did not pick is ``custom:not_picked_by_mmr`` (before: a derived
    ``below_rank_cutoff`` beside a finding that it was not recorded)."""
    pytest.importorskip("faiss")
    from langchain_community.vectorstores import FAISS

    from ragtrail.instrumentation.faiss import FaissInstrumentor

    faiss_inst = FaissInstrumentor()
    faiss_inst.instrument(tracer_provider=tracer_provider)
    try:
        store = FAISS.from_documents([Document(page_content=f"{i} text", id=i) for i in MMR_IDS], TableEmbeddings())
        expected = plain(lambda: store.max_marginal_relevance_search("query", k=2, fetch_k=3, lambda_mult=0.3))
        docs = store.max_marginal_relevance_search("query", k=2, fetch_k=3, lambda_mult=0.3)
        spans = span_exporter.get_finished_spans()
        span_exporter.clear()
        filtered = store.max_marginal_relevance_search("query", k=2, fetch_k=3, lambda_mult=0.3, filter={"n": 1})
    finally:
        faiss_inst.uninstrument()
    assert docs_equal(docs, expected) and [d.id for d in docs] == ["near", "other"]
    outer = one(spans, "FAISS")
    [inner] = [s for s in spans if s is not outer]
    assert inner.parent.span_id == outer.context.span_id
    pool = [(e.attributes[sc.CANDIDATE_ID], e.attributes[sc.CANDIDATE_SCORE]) for e in rec_events(inner)]
    assert [i for i, _ in pool] == ["near", "twin", "other"]  # faiss's L2 distances, the docstore's ids
    component = "langchain_community.vectorstores.faiss.FAISS"
    left = pop_stage(
        outer,
        {
            **stage_attributes("retrieve", component, n_in=3, n_out=2, n_excluded=1),
            **query_attributes("query"),
            sc.STAGE_TOP_K: 2,
            sc.STAGE_MMR_LAMBDA: 0.3,
            sc.COVERAGE_CORPUS_SIZE: 4,
            sc.COVERAGE_RETRIEVED: 2,
            sc.COVERAGE_CITED: 0,
            **retrieval_mirrors(component, "query", [("near", None), ("other", None)], 2),
        },
    )
    assert left == {}  # no finding: the pool is recorded
    detail = "in the fetch_k pool of 3, not picked: maximal marginal relevance took 2, lambda_mult=0.3"
    assert_events(
        outer,
        [
            (sc.EVENT_CANDIDATE, candidate_event("near", 0, "near text", hop=0)),
            (sc.EVENT_CANDIDATE, candidate_event("other", 1, "other text", hop=0)),
            # no content receipt: faiss holds none, and FAISS builds a Document only for the picked ones
            (
                sc.EVENT_EXCLUSION,
                {
                    sc.CANDIDATE_ID: "twin",
                    sc.CANDIDATE_RANK: 1,
                    sc.CANDIDATE_SCORE: pool[1][1],
                    sc.CANDIDATE_SCORE_KIND: "distance",
                    sc.EXCLUSION_REASON: "custom:not_picked_by_mmr",
                    sc.EXCLUSION_DETAIL: detail,
                },
            ),
        ],
    )
    [filtered_outer] = [s for s in span_exporter.get_finished_spans() if s.name == "retrieve FAISS"]
    # a filter: FAISS fetched 2 x fetch_k and dropped some itself, so its hits are not taken for the pool;
    # the hits it did not return are unexplained (not picked, or filtered out), never a top-k cut (they
    # read "below_rank_cutoff" before, ranked above what a filtered MMR search may return)
    assert filtered == [] and list(filtered_outer.attributes[sc.STAGE_FINDINGS]) == [
        "maximal marginal relevance picked from 3 fetched candidates (fetch_k), a pool this stage did not see: "
        "the 4 fetched hits it did not return are unexplained (not picked, or removed before the pick)"
    ]
    unseen = "not returned by maximal marginal relevance: passed over by the pick or removed before it (not recorded at this stage)"
    assert [
        (e.attributes[sc.CANDIDATE_ID], e.attributes[sc.EXCLUSION_REASON], e.attributes[sc.EXCLUSION_DETAIL])
        for e in rec_events(filtered_outer)
        if e.name == sc.EVENT_EXCLUSION
    ] == [(ident, "unexplained", unseen) for ident in ["near", "twin", "other", "far"]]


def test_chroma_mmr_pool_is_the_chromadb_stage_s_hits(instrumentor, tracer_provider, span_exporter) -> None:
    """The same rule over chromadb (langchain-community's Chroma): the collection's hits, nested and
    under Chroma's own ids, are the pool; the one MMR did not pick is ``custom:not_picked_by_mmr``."""
    pytest.importorskip("chromadb")
    from langchain_community.vectorstores import Chroma

    from ragtrail.instrumentation.chromadb import ChromaInstrumentor

    chroma_inst = ChromaInstrumentor()
    chroma_inst.instrument(tracer_provider=tracer_provider)
    try:
        store = Chroma.from_documents([Document(page_content=f"{i} text") for i in MMR_IDS], TableEmbeddings(), ids=MMR_IDS)
        span_exporter.clear()
        docs = store.max_marginal_relevance_search("query", k=2, fetch_k=3, lambda_mult=0.3)
        spans = span_exporter.get_finished_spans()
    finally:
        chroma_inst.uninstrument()
        store.delete_collection()
    assert [d.page_content for d in docs] == ["near text", "other text"]
    outer = one(spans, "Chroma")
    [inner] = [s for s in spans if s is not outer]
    assert [e.attributes[sc.CANDIDATE_ID] for e in rec_events(inner)] == ["near", "twin", "other"]
    a = outer.attributes
    assert (a[sc.CANDIDATES_IN], a[sc.CANDIDATES_OUT], a[sc.CANDIDATES_EXCLUDED]) == (3, 2, 1) and sc.STAGE_FINDINGS not in a
    records = rec_events(outer)
    assert [(r.name, r.attributes[sc.CANDIDATE_ID]) for r in records] == [
        (sc.EVENT_CANDIDATE, "near"),
        (sc.EVENT_CANDIDATE, "other"),
        (sc.EVENT_EXCLUSION, "twin"),
    ]
    detail = "in the fetch_k pool of 3, not picked: maximal marginal relevance took 2, lambda_mult=0.3"
    assert (records[2].attributes[sc.EXCLUSION_REASON], records[2].attributes[sc.EXCLUSION_DETAIL]) == ("custom:not_picked_by_mmr", detail)
