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
