"""LangChain and LlamaIndex pipelines (the real libraries, offline: hash embeddings, BM25) traced by
ragtrail into a real Phoenix: every stage as Phoenix shows it, against the documents themselves."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import phoenix_server as ps
import pytest

import ragtrail
from ragtrail import settings
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import preview
from spanutil import rec_events

TEXTS = [
    "the cat sat on the mat",
    "dogs chase cats in the park",
    "a cat and a dog became friends",
    "stock markets fell sharply today",
    "the park was full of dogs",
    "cats sleep most of the day",
]
KIND = {"retrieve": "RETRIEVER", "rerank": "RERANKER", "filter": "RERANKER", "fuse": "RERANKER", "budget": "RERANKER"}


@pytest.fixture(autouse=True)
def _reset_capture():
    settings.reset()
    yield
    settings.reset()


def hash_vector(text: str, dim: int = 32) -> list[float]:
    vector = [0.0] * dim
    for word in text.lower().split():
        vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % dim] += 1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


def check_every_stage(
    shown: list[dict[str, Any]], sent: list[Any], content_mode: str, metadata_of: dict[str, dict[str, Any]]
) -> tuple[set[str], int]:
    """Each ragtrail span in Phoenix: its stage's kind, status OK, the cards ragtrail sent; each card's
    content and metadata against the corpus; each excluded input's reason against ragtrail's event.
    Returns the stage kinds seen and how many input cards carried an exclusion reason."""
    by_id = {s["context"]["span_id"]: s for s in shown}
    kinds = set()
    with_reason = 0
    for span in sent:
        kind = span.attributes.get(sc.STAGE_KIND)
        if kind is None or span.attributes.get(sc.STAGE_CONTINUATION):
            continue
        kinds.add(kind)
        got = by_id[format(span.context.span_id, "016x")]
        assert got["span_kind"] == KIND.get(kind, "CHAIN"), span.name
        assert got["status_code"] == "OK", span.name
        prefixes = {"RETRIEVER": ["retrieval.documents"], "RERANKER": ["reranker.input_documents", "reranker.output_documents"]}.get(
            got["span_kind"], []
        )
        reasons = {e.attributes[sc.CANDIDATE_ID]: e.attributes[sc.EXCLUSION_REASON] for e in rec_events(span) if e.name == sc.EVENT_EXCLUSION}
        for prefix in prefixes:
            cards = ps.documents(got["attributes"], prefix)
            assert cards == ps.sent_cards(span.attributes, prefix), (span.name, prefix)
            for card in cards:
                text = TEXTS[int(card["id"].lstrip("docn"))]
                want = {"off": None, "preview": preview(text), "full": text}[content_mode]
                assert card.get("content") == want, (span.name, card)
                meta = dict(card.get("metadata", {}))
                reason = meta.pop(sc.EXCLUSION_REASON, None)
                meta.pop(sc.EXCLUSION_DETAIL, None)
                assert meta == metadata_of[card["id"]], (span.name, card)
                if prefix == "reranker.input_documents":
                    assert reason == reasons.get(card["id"]), (span.name, card)
                    with_reason += reason is not None
        if got["span_kind"] == "RERANKER":
            assert len(ps.documents(got["attributes"], "reranker.input_documents")) == span.attributes[sc.CANDIDATES_IN]
    return kinds, with_reason


def compression_retriever(docs: list[Any]) -> Any:
    """What both LangChain Phoenix tests run: BM25 and an in-memory vector store (hash embeddings)
    in an ``EnsembleRetriever``, under a ``ContextualCompressionRetriever`` whose
    ``EmbeddingsFilter`` keeps similarity >= 0.5. Built after ``instrument()``."""
    from langchain_classic.retrievers import ContextualCompressionRetriever, EnsembleRetriever
    from langchain_classic.retrievers.document_compressors import DocumentCompressorPipeline, EmbeddingsFilter
    from langchain_community.retrievers import BM25Retriever
    from langchain_core.embeddings import Embeddings
    from langchain_core.vectorstores import InMemoryVectorStore

    class HashEmbeddings(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [hash_vector(t) for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return hash_vector(text)

    embeddings = HashEmbeddings()
    bm25 = BM25Retriever.from_documents(docs, k=3)
    store = InMemoryVectorStore(embeddings)
    store.add_documents(docs)
    ensemble = EnsembleRetriever(retrievers=[bm25, store.as_retriever(search_kwargs={"k": 3})])
    compressor = DocumentCompressorPipeline(transformers=[EmbeddingsFilter(embeddings=embeddings, similarity_threshold=0.5)])
    return ContextualCompressionRetriever(base_compressor=compressor, base_retriever=ensemble)


@pytest.mark.parametrize("content_mode", ["off", "full"])
def test_langchain_ensemble_and_compression_in_phoenix(phoenix, content_mode):
    from langchain_core.documents import Document

    from ragtrail.instrumentation.langchain import LangChainInstrumentor

    ragtrail.set_capture(content=content_mode, metadata=["source"])
    docs = [Document(page_content=t, metadata={"source": f"s{i}", "secret": "x"}, id=f"doc{i}") for i, t in enumerate(TEXTS)]
    project = f"langchain-{content_mode}"
    with ps.sending(phoenix, project) as (provider, memory):
        instrumentor = LangChainInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            retriever = compression_retriever(docs)
            with ragtrail.stage("pipeline", "app", tracer=provider.get_tracer("app")):
                retriever.invoke("cats in the park")
        finally:
            instrumentor.uninstrument()
        sent = list(memory.get_finished_spans())
    shown = phoenix.wait_for_spans(project, ps.trace_id_of(memory), len(sent))
    kinds, with_reason = check_every_stage(shown, sent, content_mode, {f"doc{i}": {"source": f"s{i}"} for i in range(len(TEXTS))})
    assert {"retrieve", "fuse", "filter"} <= kinds and with_reason > 0


@pytest.mark.parametrize("content_mode", ["preview"])
def test_llama_index_retriever_and_postprocessor_in_phoenix(phoenix, content_mode):
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import BaseEmbedding
    from llama_index.core.postprocessor import SimilarityPostprocessor
    from llama_index.core.schema import QueryBundle, TextNode

    from ragtrail.instrumentation.llama_index import LlamaIndexInstrumentor

    class WordEmbedding(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return hash_vector(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return hash_vector(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return hash_vector(text)

    ragtrail.set_capture(content=content_mode, metadata=["i"])
    project = "llama-index"
    with ps.sending(phoenix, project) as (provider, memory):
        instrumentor = LlamaIndexInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            nodes = [TextNode(text=t, id_=f"n{i}", metadata={"i": i, "other": "y"}) for i, t in enumerate(TEXTS)]
            index = VectorStoreIndex(nodes, embed_model=WordEmbedding())
            with ragtrail.stage("pipeline", "app", tracer=provider.get_tracer("app")):
                found = index.as_retriever(similarity_top_k=4).retrieve("cats in the park")
                SimilarityPostprocessor(similarity_cutoff=0.5).postprocess_nodes(found, query_bundle=QueryBundle("cats in the park"))
        finally:
            instrumentor.uninstrument()
        sent = list(memory.get_finished_spans())
    shown = phoenix.wait_for_spans(project, ps.trace_id_of(memory), len(sent))
    kinds, with_reason = check_every_stage(shown, sent, content_mode, {f"n{i}": {"i": i} for i in range(len(TEXTS))})
    assert {"retrieve", "filter"} <= kinds and with_reason > 0


def test_langchain_compression_with_the_genai_mirror_alone_in_phoenix(phoenix):
    """GenAI mirror only: the ContextualCompressionRetriever stage's ``gen_ai.retrieval.documents``
    (the compressed documents), as Phoenix reads them back; the retrievers inside it are part of that
    one retrieval and carry no GenAI name (docs/semconv.md §6), so Phoenix gets no list from them."""
    from langchain_core.documents import Document

    from ragtrail.instrumentation.langchain import LangChainInstrumentor

    ragtrail.set_capture(content="off", mirror_openinference=False)
    docs = [Document(page_content=t, id=f"doc{i}") for i, t in enumerate(TEXTS)]
    with ps.sending(phoenix, "langchain-genai-only") as (provider, memory):
        instrumentor = LangChainInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            retriever = compression_retriever(docs)
            with ragtrail.stage("pipeline", "app", tracer=provider.get_tracer("app")):
                kept = retriever.invoke("cats in the park")
        finally:
            instrumentor.uninstrument()
        sent = list(memory.get_finished_spans())
    shown = phoenix.wait_for_spans("langchain-genai-only", ps.trace_id_of(memory), len(sent))
    by_name = {s["name"]: s for s in shown}
    # the compressed documents, with the similarity EmbeddingsFilter left in each one's state
    want = [{"id": f"doc{TEXTS.index(d.page_content)}", "score": d.state["query_similarity_score"]} for d in kept]
    assert len(want) == 2
    outer = by_name["retrieve ContextualCompressionRetriever"]
    assert outer["span_kind"] == "RETRIEVER"
    assert json.loads(outer["attributes"]["gen_ai.retrieval.documents"]) == want
    assert ps.documents(outer["attributes"], "retrieval.documents") == want  # Phoenix's conversion of the GenAI list
    assert [s.name for s in sent if s.attributes.get("gen_ai.operation.name") == "retrieval"] == [outer["name"]]
    for name in ("retrieve BM25Retriever", "retrieve VectorStoreRetriever"):
        inner = by_name[name]["attributes"]
        assert [k for k in inner if k.startswith(("gen_ai.", "retrieval.documents."))] == [], name
        sent_inner = [s for s in sent if s.name == name][0]
        assert sent_inner.attributes[sc.CANDIDATES_OUT] == 3  # ragtrail's own attributes keep their hits
    sent_outer = [s for s in sent if s.name == "retrieve ContextualCompressionRetriever"][0]
    assert sent_outer.attributes[sc.COLUMN_SCORE_KIND] == sc.SCORE_SIMILARITY


@pytest.mark.parametrize("content_mode", ["off", "full"])
def test_framework_roots_show_the_frameworks_answer_in_phoenix(phoenix, content_mode):
    """A LlamaIndex query engine's root and a LangChain chain's root, read back from Phoenix: the
    answer the framework returned is the root's output (the trace list's output column) under content
    capture, and there is none under ``off``."""
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.runnables import RunnableLambda
    from langchain_core.vectorstores import InMemoryVectorStore
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.llms import MockLLM
    from llama_index.core.schema import TextNode

    from ragtrail.instrumentation.langchain import LangChainInstrumentor
    from ragtrail.instrumentation.llama_index import LlamaIndexInstrumentor

    class HashEmbeddings(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [hash_vector(t) for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return hash_vector(text)

    ragtrail.set_capture(content=content_mode)
    answers = {}
    for project, framework in ((f"llama-root-{content_mode}", "llama"), (f"langchain-root-{content_mode}", "langchain")):
        with ps.sending(phoenix, project) as (provider, memory):
            instrumentor = LlamaIndexInstrumentor() if framework == "llama" else LangChainInstrumentor()
            instrumentor.instrument(tracer_provider=provider)
            try:
                if framework == "llama":
                    index = VectorStoreIndex([TextNode(text=t, id_=f"n{i}") for i, t in enumerate(TEXTS)], embed_model=MockEmbedding(embed_dim=8))
                    answers[framework] = index.as_query_engine(llm=MockLLM(max_tokens=4), similarity_top_k=2).query("cats in the park").response
                else:
                    store = InMemoryVectorStore(HashEmbeddings())
                    store.add_documents([Document(page_content=t, id=f"doc{i}") for i, t in enumerate(TEXTS)])
                    chain = (
                        store.as_retriever(search_kwargs={"k": 2})
                        | RunnableLambda(lambda docs: " / ".join(d.page_content for d in docs))
                        | StrOutputParser()
                    )
                    answers[framework] = chain.invoke("cats in the park")
            finally:
                instrumentor.uninstrument()
            sent = list(memory.get_finished_spans())
        shown = phoenix.wait_for_spans(project, ps.trace_id_of(memory), len(sent))
        roots = [s for s in shown if s["parent_id"] is None]
        assert len(roots) == 1, [s["name"] for s in shown]
        root = roots[0]
        assert root["name"] == {"llama": "pipeline RetrieverQueryEngine", "langchain": "pipeline RunnableSequence"}[framework]
        assert (root["span_kind"], root["status_code"]) == ("CHAIN", "OK")
        got = {k: v for k, v in root["attributes"].items() if k.startswith(("input.", "output."))}
        want = {"input.value": "cats in the park", "input.mime_type": "text/plain"}
        if content_mode == "full":
            want.update({"output.value": answers[framework], "output.mime_type": "text/plain"})
        assert got == want, framework
    assert answers["llama"] == "text text text text" and answers["langchain"].count(" / ") == 1  # MockLLM: max_tokens words; k=2
