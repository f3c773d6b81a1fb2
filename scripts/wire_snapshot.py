"""Print a normalised JSON of every span ragtrail records for a fixed set of pipelines (offline).

A refactor of the recorder must not change a byte on the wire: run this before and after and diff.

    .venv/bin/python scripts/wire_snapshot.py                 # every section
    .venv/bin/python scripts/wire_snapshot.py --only demo     # the demo pipeline alone (tests pin it)

Sections: the bundled demo under three capture modes, a decorator pipeline (exclusions, hops,
metadata, events spilling into continuation spans, a failing stage, an answer), LangChain
(BM25 + vector store + ensemble + compression), LlamaIndex (vector index + postprocessor),
Haystack (BM25 + embedding retrieval + joiner) and the vector stores faiss and Qdrant (in memory).
Every run uses the real SDK with an in-memory exporter. Trace and span ids become ``T0``, ``S0`` ...
in order of appearance; timestamps are left out; an exception's stack trace keeps only its last
line (frames carry file line numbers, which a refactor moves).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from opentelemetry.sdk.trace import SpanLimits, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.sdk.trace.id_generator import IdGenerator  # noqa: E402

import ragtrail  # noqa: E402
from ragtrail import settings  # noqa: E402
from ragtrail.contract.semconv import COLUMN_CONTENT_FROM  # noqa: E402


# --- normalisation -----------------------------------------------------------------------------------
def _value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


class SequentialIds(IdGenerator):
    """Span and trace ids 1, 2, 3 ...: schema 4's ``content.from`` names a span id, and the stage
    receipt covers it, so the snapshot's receipts are stable only with ids that are."""

    def __init__(self) -> None:
        self._span = 0
        self._trace = 0

    def generate_span_id(self) -> int:
        self._span += 1
        return self._span

    def generate_trace_id(self) -> int:
        self._trace += 1
        return self._trace


def _pointers(attributes: dict[str, Any], ids: dict[int, str]) -> dict[str, Any]:
    """``content.from`` span ids as the placeholders the snapshot gives spans."""
    for key, value in attributes.items():
        if key == COLUMN_CONTENT_FROM and isinstance(value, str):
            attributes[key] = ids.get(int(value, 16), "outside")
    return attributes


def normalise(spans: Any) -> list[dict[str, Any]]:
    """Spans in export order as plain JSON-able dicts, ids replaced by stable placeholders."""
    traces: dict[int, str] = {}
    ids: dict[int, str] = {}
    for span in spans:
        ids.setdefault(span.context.span_id, f"S{len(ids)}")
    out = []
    for span in spans:
        trace_id = traces.setdefault(span.context.trace_id, f"T{len(traces)}")
        parent = None
        if span.parent is not None:
            parent = ids.get(span.parent.span_id, "outside")
        events = []
        for event in span.events:
            attributes = _pointers({k: _value(v) for k, v in sorted((event.attributes or {}).items())}, ids)
            if "exception.stacktrace" in attributes:
                attributes["exception.stacktrace"] = str(attributes["exception.stacktrace"]).strip().splitlines()[-1]
            events.append(
                {
                    "name": event.name,
                    "attributes": attributes,
                    "dropped_attributes": event.attributes.dropped if hasattr(event.attributes, "dropped") else 0,
                }
            )
        out.append(
            {
                "trace": trace_id,
                "span": ids[span.context.span_id],
                "parent": parent,
                "name": span.name,
                "kind": span.kind.name,
                "status": {"code": span.status.status_code.name, "description": span.status.description},
                "attributes": _pointers({k: _value(v) for k, v in sorted((span.attributes or {}).items())}, ids),
                "events": events,
                "dropped_attributes": span.dropped_attributes,
                "dropped_events": span.dropped_events,
            }
        )
    return out


@contextmanager
def _recording(limits: SpanLimits | None = None, **capture: Any) -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = (
        TracerProvider(span_limits=limits, id_generator=SequentialIds()) if limits is not None else TracerProvider(id_generator=SequentialIds())
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings.reset()
    if capture:
        ragtrail.set_capture(**capture)
    try:
        yield provider, exporter
    finally:
        settings.reset()


# --- sections ---------------------------------------------------------------------------------------
def demo() -> dict[str, Any]:
    from ragtrail.demo.pipeline import QUESTION, load_corpus, make_pipeline

    result = {}
    for label, capture in (
        ("defaults", {}),
        ("hash+preview+metadata", {"query": "hash", "content": "preview", "metadata": ["updated_at", "status", "version"]}),
        ("off+full", {"query": "off", "content": "full"}),
    ):
        with _recording(**capture) as (provider, exporter):
            answer = make_pipeline(load_corpus(), tracer=provider.get_tracer("ragtrail.demo"), budget_words=90)
            answer(QUESTION)
            result[label] = normalise(exporter.get_finished_spans())
    return result


def decorators() -> dict[str, Any]:
    docs = [
        {
            "id": f"d{i}",
            "content": f"document {i} about refunds " + "x" * i,
            "score": 1.0 - i / 20,
            "metadata": {"status": "superseded" if i == 3 else "current", "version": i},
        }
        for i in range(8)
    ]
    docs.append(dict(docs[1]))  # a duplicate id

    def run(tracer: Any) -> None:
        @ragtrail.query_transform(transform="rewrite", tracer=tracer)
        def rewrite(query: str) -> list[str]:
            return [query + " policy", query]

        @ragtrail.retriever(top_k=9, score_kind="similarity", tracer=tracer)
        def search(query: str) -> list[dict[str, Any]]:
            return list(docs)

        @ragtrail.filter(tracer=tracer)
        def fresh(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
            ragtrail.current_stage().exclude(candidates[3], "superseded", "newer version exists")
            ragtrail.current_stage().exclude("d7", "not_a_reason!")
            return [c for c in candidates if c["metadata"]["status"] != "superseded"]

        @ragtrail.reranker(top_k=3, tracer=tracer)
        def rerank(query: str, candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [dict(c, score=c["score"] * 2) for c in sorted(candidates, key=lambda c: -c["score"])[:3]]

        @ragtrail.budgeter(limit=2, unit="docs", tracer=tracer)
        def budget(candidates: list[dict[str, Any]]) -> list[Any]:
            return candidates[:2]

        @ragtrail.reranker(tracer=tracer)
        def broken(query: str, candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
            raise TimeoutError(f"reranker timed out on {query}")

        @ragtrail.pipeline(tracer=tracer)
        def answer(question: str) -> str:
            queries = rewrite(question)
            hits = search(queries[0])
            with suppress(TimeoutError):
                broken(question, hits)
            context = budget(rerank(question, fresh(hits)))
            ragtrail.cite([context[0]["id"]], tracer=tracer)
            with ragtrail.stage("generate", "llm", tracer=tracer) as s:
                s.inputs(context)
            ragtrail.answer("Refunds within 14 days.", claim="presence")
            return "ok"

        answer("refund window")

    result = {}
    for label, capture, limits in (
        ("defaults", {}, None),
        ("spill+metadata", {"events_per_span": 4, "metadata": ["status", "version"], "content": "preview"}, None),
        ("value-limit", {"content": "full"}, SpanLimits(max_attribute_length=12)),
        ("hash", {"query": "hash"}, None),
    ):
        with _recording(limits, **capture) as (provider, exporter):
            run(provider.get_tracer("app"))
            result[label] = normalise(exporter.get_finished_spans())
    return result


def _hash_vector(text: str, dim: int = 32) -> list[float]:
    vector = [0.0] * dim
    for word in text.lower().split():
        vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % dim] += 1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


TEXTS = [
    "the cat sat on the mat",
    "dogs chase cats in the park",
    "a cat and a dog became friends",
    "stock markets fell sharply today",
    "the park was full of dogs",
    "cats sleep most of the day",
]


def langchain() -> list[dict[str, Any]]:
    from langchain_classic.retrievers import ContextualCompressionRetriever, EnsembleRetriever
    from langchain_classic.retrievers.document_compressors import DocumentCompressorPipeline, EmbeddingsFilter
    from langchain_community.retrievers import BM25Retriever
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.vectorstores import InMemoryVectorStore

    from ragtrail.instrumentation.langchain import LangChainInstrumentor

    class HashEmbeddings(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [_hash_vector(t) for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return _hash_vector(text)

    docs = [Document(page_content=t, metadata={"source": f"s{i}"}, id=f"doc{i}") for i, t in enumerate(TEXTS)]
    with _recording() as (provider, exporter):
        instrumentor = LangChainInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            embeddings = HashEmbeddings()
            bm25 = BM25Retriever.from_documents(docs, k=3)
            store = InMemoryVectorStore(embeddings)
            store.add_documents(docs)
            ensemble = EnsembleRetriever(retrievers=[bm25, store.as_retriever(search_kwargs={"k": 3})])
            compressor = DocumentCompressorPipeline(transformers=[EmbeddingsFilter(embeddings=embeddings, similarity_threshold=0.2)])
            retriever = ContextualCompressionRetriever(base_compressor=compressor, base_retriever=ensemble)
            with ragtrail.stage("pipeline", "app", tracer=provider.get_tracer("app")):
                retriever.invoke("cats in the park")
        finally:
            instrumentor.uninstrument()
        return normalise(exporter.get_finished_spans())


def llama_index() -> list[dict[str, Any]]:
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import BaseEmbedding
    from llama_index.core.postprocessor import SimilarityPostprocessor
    from llama_index.core.schema import QueryBundle, TextNode

    from ragtrail.instrumentation.llama_index import LlamaIndexInstrumentor

    class WordEmbedding(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return _hash_vector(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return _hash_vector(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return _hash_vector(text)

    with _recording() as (provider, exporter):
        instrumentor = LlamaIndexInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            nodes = [TextNode(text=t, id_=f"n{i}", metadata={"i": i}) for i, t in enumerate(TEXTS)]
            index = VectorStoreIndex(nodes, embed_model=WordEmbedding())
            retriever = index.as_retriever(similarity_top_k=4)
            with ragtrail.stage("pipeline", "app", tracer=provider.get_tracer("app")):
                found = retriever.retrieve("cats in the park")
                SimilarityPostprocessor(similarity_cutoff=0.3).postprocess_nodes(found, query_bundle=QueryBundle("cats in the park"))
        finally:
            instrumentor.uninstrument()
        return normalise(exporter.get_finished_spans())


def haystack() -> list[dict[str, Any]]:
    from haystack import Document, Pipeline, component
    from haystack.components.joiners import DocumentJoiner
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    from ragtrail.instrumentation.haystack import HaystackInstrumentor

    @component
    class Embedder:
        @component.output_types(embedding=list[float])
        def run(self, text: str) -> dict:
            return {"embedding": _hash_vector(text)}

    with _recording() as (provider, exporter):
        instrumentor = HaystackInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            store = InMemoryDocumentStore(embedding_similarity_function="cosine")
            store.write_documents([Document(id=f"h{i}", content=t, meta={"i": i}, embedding=_hash_vector(t)) for i, t in enumerate(TEXTS)])
            p = Pipeline()
            p.add_component("bm25", InMemoryBM25Retriever(store, top_k=3))
            p.add_component("embedder", Embedder())
            p.add_component("dense", InMemoryEmbeddingRetriever(store, top_k=3))
            p.add_component("joiner", DocumentJoiner(join_mode="reciprocal_rank_fusion", top_k=3))
            p.connect("embedder.embedding", "dense.query_embedding")
            p.connect("bm25", "joiner")
            p.connect("dense", "joiner")
            q = "cats in the park"
            p.run({"bm25": {"query": q}, "embedder": {"text": q}})
        finally:
            instrumentor.uninstrument()
        return normalise(exporter.get_finished_spans())


def vector_stores() -> dict[str, Any]:
    import numpy as np

    from ragtrail.instrumentation.faiss import FaissInstrumentor
    from ragtrail.instrumentation.qdrant import QdrantInstrumentor

    result: dict[str, Any] = {}
    with _recording() as (provider, exporter):
        instrumentor = FaissInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            import faiss

            vectors = np.array([_hash_vector(t) for t in TEXTS], dtype="float32")
            index = faiss.IndexFlatL2(vectors.shape[1])
            index.add(vectors)
            index.search(vectors[:2], 3)
        finally:
            instrumentor.uninstrument()
        result["faiss"] = normalise(exporter.get_finished_spans())
    with _recording(content="preview") as (provider, exporter):
        instrumentor = QdrantInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            from qdrant_client import QdrantClient, models

            client = QdrantClient(location=":memory:")
            client.create_collection("docs", vectors_config=models.VectorParams(size=32, distance=models.Distance.COSINE))
            # one payload with both "content" and "text": the one content-key order decides its receipt
            client.upsert(
                "docs",
                points=[
                    models.PointStruct(id=i, vector=_hash_vector(t), payload={"text": t, "content": t.upper()} if i == 0 else {"text": t})
                    for i, t in enumerate(TEXTS)
                ],
            )
            client.query_points("docs", query=_hash_vector("the cat"), limit=3, with_payload=True)
        finally:
            instrumentor.uninstrument()
        result["qdrant"] = normalise(exporter.get_finished_spans())
    return result


SECTIONS: dict[str, Callable[[], Any]] = {
    "demo": demo,
    "decorators": decorators,
    "langchain": langchain,
    "llama_index": llama_index,
    "haystack": haystack,
    "vector_stores": vector_stores,
}


def snapshot(only: list[str] | None = None) -> str:
    """The snapshot as JSON text (sorted keys, one stable layout)."""
    names = only or list(SECTIONS)
    return json.dumps({name: SECTIONS[name]() for name in names}, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=sorted(SECTIONS), help="a section (repeatable)")
    opts = parser.parse_args(argv)
    sys.stdout.write(snapshot(opts.only))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
