"""langchain-qdrant in memory (issue 24, principle 5: one id per document): a point langchain-qdrant
returns carries its Qdrant id in ``metadata["_id"]`` (the Document's own ``id`` is empty), so every
stage records it under that id, the one the Qdrant client's own stage records, never a content hash
beside it."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_qdrant")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.embeddings import Embeddings  # noqa: E402
from langchain_qdrant import QdrantVectorStore  # noqa: E402
from qdrant_client import QdrantClient  # noqa: E402
from qdrant_client.http import models  # noqa: E402

from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.langchain import LangChainInstrumentor  # noqa: E402
from ragtrail.instrumentation.qdrant import QdrantInstrumentor  # noqa: E402
from spanutil import attrs, events  # noqa: E402

TEXTS = ["solar panels make electricity", "wind turbines make electricity", "coal is a fossil fuel", "batteries store solar power"]
IDS = [
    "0d706099-6dd9-412a-9df6-a71043e020de",
    "44ec7094-b061-45ac-8fbf-014b0f18e8aa",
    "5c56c793-69f3-4fbf-87e6-c4bf54c28c26",
    "7b1f3a90-2c4d-4e5f-8a9b-0c1d2e3f4a5b",
]


class WordEmbeddings(Embeddings):
    def _vec(self, text: str) -> list[float]:
        v = [0.0] * 16
        for w in text.lower().split():
            v[sum(map(ord, w)) % 16] += 1.0
        return v

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vec(text)


@pytest.fixture
def store(tracer_provider, span_exporter):
    client = QdrantClient(":memory:")
    client.create_collection("demo", vectors_config=models.VectorParams(size=16, distance=models.Distance.COSINE))
    vs = QdrantVectorStore(client=client, collection_name="demo", embedding=WordEmbeddings())
    vs.add_documents([Document(page_content=t, metadata={"n": i}) for i, t in enumerate(TEXTS)], ids=IDS)
    lc, qd = LangChainInstrumentor(), QdrantInstrumentor()
    lc.instrument(tracer_provider=tracer_provider)
    qd.instrument(tracer_provider=tracer_provider)
    span_exporter.clear()
    yield vs
    qd.uninstrument()
    lc.uninstrument()


@pytest.mark.parametrize(
    "search_type,kwargs",
    [("similarity", {"k": 2}), ("mmr", {"k": 2, "fetch_k": 4}), ("similarity_score_threshold", {"k": 3, "score_threshold": 0.1})],
)
def test_a_point_has_one_id_the_qdrant_id(store, span_exporter, search_type, kwargs):
    docs = store.as_retriever(search_type=search_type, search_kwargs=kwargs).invoke("solar electricity")
    assert docs and all(d.id is None for d in docs)  # langchain-qdrant leaves Document.id empty
    expected = [d.metadata["_id"] for d in docs]
    spans = span_exporter.get_finished_spans()
    retriever = next(s for s in spans if s.name.startswith("retrieve VectorStoreRetriever"))
    assert [e[sc.CANDIDATE_ID] for e in events(retriever, sc.EVENT_CANDIDATE)] == expected
    seen = {e[sc.CANDIDATE_ID] for s in spans for name in (sc.EVENT_CANDIDATE, sc.EVENT_EXCLUSION) for e in events(s, name)}
    assert not any(i.startswith("sha256:") for i in seen), seen
    assert seen <= set(IDS)
    assert attrs(retriever)[sc.STAGE_KIND] == "retrieve"


def test_mmr_pool_is_recorded_where_qdrant_picks(store, span_exporter):
    """Issue 24, principle 5: langchain-qdrant hands MMR to Qdrant (``NearestQuery`` with ``mmr``). The
    LangChain stage does not see the pool and says so (its lambda kept); the in-memory client's stage
    beneath records the pool it picked from (Qdrant ids and similarities) and each point it did not
    pick, ``custom:not_picked_by_mmr``. One id per point in both stages."""
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    from .test_langchain_support import pop_stage, query_attributes, retrieval_mirrors, stage_attributes

    with suppress_instrumentation():
        plain = store.max_marginal_relevance_search("solar electricity", k=2, fetch_k=3)
        pool = store.similarity_search_with_score("solar electricity", k=3)
    docs = store.max_marginal_relevance_search("solar electricity", k=2, fetch_k=3)
    assert docs == plain
    picked = [d.metadata["_id"] for d in docs]
    pool_ids = [d.metadata["_id"] for d, _ in pool]
    [unpicked] = [i for i in pool_ids if i not in picked]
    spans = span_exporter.get_finished_spans()
    outer = next(s for s in spans if s.name == "retrieve QdrantVectorStore")
    inner = next(s for s in spans if s.name == "retrieve query_points")
    assert inner.parent.span_id == outer.context.span_id
    component = "langchain_qdrant.qdrant.QdrantVectorStore"
    finding = "maximal marginal relevance picked from 3 fetched candidates (fetch_k): the ones it did not pick are not recorded at this stage"
    left = pop_stage(
        outer,
        {
            # its inputs: what the client's stage beneath handed up
            **stage_attributes("retrieve", component, n_in=2, n_out=2, n_excluded=0),
            **query_attributes("solar electricity"),
            sc.STAGE_TOP_K: 2,
            sc.STAGE_MMR_LAMBDA: 0.5,
            sc.STAGE_FINDINGS: [finding],
            # the trace's root: coverage over the store of 4 (the pool's unpicked point is not retrieved)
            sc.COVERAGE_CORPUS_SIZE: 4,
            sc.COVERAGE_RETRIEVED: 2,
            sc.COVERAGE_CITED: 0,
            **retrieval_mirrors(component, "solar electricity", [(i, None) for i in picked], 2),
        },
    )
    assert left == {}
    assert [e[sc.CANDIDATE_ID] for e in events(outer, sc.EVENT_CANDIDATE)] == picked
    a = attrs(inner)
    assert (a[sc.CANDIDATES_IN], a[sc.CANDIDATES_OUT], a[sc.CANDIDATES_EXCLUDED]) == (3, 2, 1)
    assert sc.STAGE_FINDINGS not in a and a[sc.STAGE_MMR_LAMBDA] == 0.5
    assert [e[sc.CANDIDATE_ID] for e in events(inner, sc.EVENT_CANDIDATE)] == picked
    [cut] = events(inner, sc.EVENT_EXCLUSION)
    detail = "in the candidates_limit pool of 3, not picked: maximal marginal relevance took 2, diversity=0.5"
    assert (cut[sc.CANDIDATE_ID], cut[sc.EXCLUSION_REASON], cut[sc.EXCLUSION_DETAIL]) == (unpicked, "custom:not_picked_by_mmr", detail)
    assert (cut[sc.CANDIDATE_RANK], cut[sc.CANDIDATE_SCORE]) == (pool_ids.index(unpicked), dict((d.metadata["_id"], s) for d, s in pool)[unpicked])
