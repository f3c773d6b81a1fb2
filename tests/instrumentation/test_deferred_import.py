"""``instrument()`` imports none of the instrumented library (``opentelemetry-instrument`` calls it for
every installed instrumentation at start-up; llama-index, chromadb and qdrant cost ~1 s each to
import, the torch-based rerankers 5-10 s); the patching happens when the application imports the
library afterwards, and the app's calls are recorded.

Each case runs in a fresh interpreter (``sys.modules`` is process-wide): instrument with an SDK
provider, list which of the library's modules are loaded, import and use the library for real, and
report the stage spans recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import json, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
from {module} import {cls}
{cls}().instrument(tracer_provider=provider)
loaded = sorted(m for m in list(sys.modules) if any(m == p or m.startswith(p + ".") for p in {packages!r}))
print(json.dumps(loaded))
"""
EPILOGUE = """
print(json.dumps(sorted(s.name for s in exporter.get_finished_spans() if "ragtrail.stage.kind" in s.attributes)))
"""

CASES = {
    "llama_index": (
        "ragtrail.instrumentation.llama_index",
        "LlamaIndexInstrumentor",
        ["llama_index"],
        """
        from llama_index.core.postprocessor import SimilarityPostprocessor
        from llama_index.core.schema import NodeWithScore, TextNode
        nodes = [NodeWithScore(node=TextNode(text="x", id_="a"), score=0.9),
                 NodeWithScore(node=TextNode(text="y", id_="b"), score=0.1)]
        SimilarityPostprocessor(similarity_cutoff=0.5).postprocess_nodes(nodes, query_str="q")
    """,
        ["filter SimilarityPostprocessor"],
    ),
    "haystack": (
        "ragtrail.instrumentation.haystack",
        "HaystackInstrumentor",
        ["haystack", "haystack_integrations"],
        """
        from haystack import Document
        from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
        from haystack.document_stores.in_memory import InMemoryDocumentStore
        store = InMemoryDocumentStore()
        store.write_documents([Document(content="cats sleep"), Document(content="dogs bark")])
        InMemoryBM25Retriever(store).run(query="cats")
    """,
        ["retrieve InMemoryBM25Retriever"],
    ),
    "chromadb": (
        "ragtrail.instrumentation.chromadb",
        "ChromaInstrumentor",
        ["chromadb"],
        """
        import chromadb
        from chromadb.config import Settings
        client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
        col = client.create_collection("docs", embedding_function=None)
        col.add(ids=["a", "b"], embeddings=[[0.0, 1.0], [1.0, 0.0]], documents=["x", "y"])
        col.query(query_embeddings=[[0.0, 1.0]], n_results=1)
    """,
        ["retrieve Collection"],
    ),
    "qdrant": (
        "ragtrail.instrumentation.qdrant",
        "QdrantInstrumentor",
        ["qdrant_client"],
        """
        import asyncio
        from qdrant_client import AsyncQdrantClient, QdrantClient, models
        points = [models.PointStruct(id=i, vector=[1.0, float(i), 0.0], payload={"text": f"p{i}"}) for i in range(3)]
        client = QdrantClient(location=":memory:")
        client.create_collection("c", vectors_config=models.VectorParams(size=3, distance=models.Distance.COSINE))
        client.upsert("c", points=points)
        client.query_points("c", query=[1.0, 0.5, 0.0], limit=2)
        async def main():
            aclient = AsyncQdrantClient(":memory:")
            await aclient.create_collection("c", vectors_config=models.VectorParams(size=3, distance=models.Distance.DOT))
            await aclient.upsert("c", points=points)
            await aclient.query_points("c", query=[1.0, 0.5, 0.0], limit=2)
        asyncio.run(main())
    """,
        ["retrieve query_points", "retrieve query_points"],
    ),
    "faiss": (
        "ragtrail.instrumentation.faiss",
        "FaissInstrumentor",
        ["faiss"],
        """
        import faiss, numpy as np
        index = faiss.IndexFlatL2(2)
        index.add(np.array([[0.0, 0.0], [1.0, 1.0]], dtype="float32"))
        index.search(np.array([[0.0, 0.1]], dtype="float32"), 1)
    """,
        ["retrieve IndexFlatL2"],
    ),
    "cohere": (
        "ragtrail.instrumentation.cohere",
        "CohereInstrumentor",
        ["cohere"],
        """
        import httpx, cohere
        def handler(request):
            return httpx.Response(200, json={"results": [{"index": 1, "relevance_score": 0.8}]})
        co = cohere.ClientV2(api_key="k", httpx_client=httpx.Client(transport=httpx.MockTransport(handler)))
        co.rerank(model="m", query="q", documents=["a", "b"], top_n=1)
    """,
        ["rerank ClientV2"],
    ),
    "lancedb": (
        "ragtrail.instrumentation.lancedb",
        "LanceDBInstrumentor",
        ["lancedb"],
        """
        import os, tempfile
        os.environ["LANCEDB_LOG"] = "error"
        import lancedb
        table = lancedb.connect(tempfile.mkdtemp()).create_table("t", data=[{"id": 1, "vector": [0.0, 1.0]}, {"id": 2, "vector": [1.0, 0.0]}])
        table.search([0.0, 1.0]).limit(1).to_list()
    """,
        ["retrieve LanceVectorQueryBuilder"],
    ),
    "milvus": (
        "ragtrail.instrumentation.milvus",
        "MilvusInstrumentor",
        ["pymilvus"],
        """
        import tempfile
        from pymilvus import MilvusClient
        client = MilvusClient(tempfile.mkdtemp() + "/m.db")
        client.create_collection("c", dimension=2)
        client.insert("c", [{"id": 1, "vector": [0.0, 1.0]}, {"id": 2, "vector": [1.0, 0.0]}])
        client.search("c", data=[[0.0, 1.0]], limit=1)
        client.close()
    """,
        ["retrieve search"],
    ),
    "elasticsearch": (
        "ragtrail.instrumentation.elasticsearch",
        "ElasticsearchInstrumentor",
        ["elasticsearch"],
        """
        import json, threading
        from http.server import BaseHTTPRequestHandler, HTTPServer
        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                hits = {"total": {"value": 1, "relation": "eq"}, "hits": [{"_id": "a", "_score": 0.5}]}
                data = json.dumps({"took": 1, "timed_out": False, "hits": hits}).encode()
                self.send_response(200); self.send_header("Content-Type", "application/json"); self.send_header("X-Elastic-Product", "Elasticsearch")
                self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)
            def log_message(self, *a): pass
        server = HTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        from elasticsearch import Elasticsearch
        with Elasticsearch("http://127.0.0.1:%d" % server.server_address[1]) as es:
            es.search(index="i", knn={"field": "v", "query_vector": [0.0, 1.0], "k": 1, "num_candidates": 5})
        server.shutdown()
    """,
        ["retrieve search"],
    ),
    "pinecone": (
        "ragtrail.instrumentation.pinecone",
        "PineconeInstrumentor",
        ["pinecone"],
        """
        import json, threading
        from http.server import BaseHTTPRequestHandler, HTTPServer
        class H(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                data = json.dumps({"matches": [{"id": "a", "score": 0.5}], "namespace": "", "usage": {"readUnits": 1}}).encode()
                self.send_response(200); self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)
            def log_message(self, *a): pass
        server = HTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        from pinecone import Pinecone
        with Pinecone(api_key="k").Index(host="http://127.0.0.1:%d" % server.server_address[1]) as index:
            index.query(vector=[0.0, 1.0], top_k=1)
        server.shutdown()
    """,
        ["retrieve query"],
    ),
    "dspy": (
        "ragtrail.instrumentation.dspy",
        "DSPyInstrumentor",
        ["dspy"],
        """
        import dspy
        embedder = dspy.Embedder(lambda texts: [[float(len(t)), 1.0] for t in texts], caching=False)
        dspy.retrievers.Embeddings(corpus=["a", "bb"], embedder=embedder, k=1)("a")
    """,
        ["retrieve Embeddings"],
    ),
    "weaviate": (
        "ragtrail.instrumentation.weaviate",
        "WeaviateInstrumentor",
        ["weaviate"],
        """
        import weaviate
        from weaviate.collections.queries.near_vector.query.sync import _NearVectorQuery
        from weaviate.collections.queries.bm25.query.async_ import _BM25QueryAsync
        # a server is needed for a query: the patch itself is what this checks (the query path: tests/instrumentation/test_weaviate.py)
        assert getattr(_NearVectorQuery.near_vector, "__wrapped__", None) is not None
        assert getattr(_BM25QueryAsync.bm25, "__wrapped__", None) is not None
    """,
        [],
    ),
    "psycopg2": (
        "ragtrail.instrumentation.psycopg2",
        "Psycopg2Instrumentor",
        ["psycopg2"],
        """
        import psycopg2
        try:
            psycopg2.connect("host=/nonexistent-ragtrail-socket-dir dbname=x connect_timeout=1")
        except psycopg2.OperationalError:
            pass  # no server here: the wrap of connect is what is checked (the query path: tests/instrumentation/test_psycopg2.py)
        assert getattr(psycopg2.connect, "__wrapped__", None) is not None
    """,
        [],
    ),
}
TORCH_CASES = {
    "rerankers": (
        "ragtrail.instrumentation.rerankers",
        "RerankersInstrumentor",
        ["rerankers"],
        """
        from rerankers.models.ranker import BaseRanker
        from rerankers.results import RankedResults, Result
        from rerankers.utils import prep_docs
        class KeywordRanker(BaseRanker):
            def __init__(self):
                self.model_name = "keyword"
            def score(self, query, doc):
                return float(len(set(query.split()) & set(doc.split())))
            def rank(self, query, docs, doc_ids=None, metadata=None):
                prepared = prep_docs(docs, doc_ids, metadata)
                scored = sorted(((self.score(query, d.text), d) for d in prepared), key=lambda x: -x[0])
                return RankedResults([Result(d, score=s, rank=i + 1) for i, (s, d) in enumerate(scored)], query, True)
        # defined after rerankers was patched: recorded once met through BaseRanker.rank_async
        import asyncio
        asyncio.run(KeywordRanker().rank_async("cats sleep", ["cats sleep", "dogs bark"]))
    """,
        ["rerank KeywordRanker"],
    ),
    "sentence_transformers": (
        "ragtrail.instrumentation.sentence_transformers",
        "SentenceTransformersInstrumentor",
        ["sentence_transformers"],
        """
        from sentence_transformers import CrossEncoder
        # a model needs weights; the patch itself is what this checks
        assert hasattr(CrossEncoder.rank, "__wrapped__") and hasattr(CrossEncoder.predict, "__wrapped__")
    """,
        [],
    ),
    "flashrank": (
        "ragtrail.instrumentation.flashrank",
        "FlashrankInstrumentor",
        ["flashrank"],
        """
        from flashrank import Ranker
        assert hasattr(Ranker.rerank, "__wrapped__")
    """,
        [],
    ),
}


def run_case(module: str, cls: str, packages: list[str], use: str) -> tuple[list[str], list[str]]:
    script = PRELUDE.format(module=module, cls=cls, packages=packages) + textwrap.dedent(use) + EPILOGUE
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RAGTRAIL_"))}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"})
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-4000:]
    loaded, spans = out.stdout.strip().splitlines()[-2:]
    return json.loads(loaded), json.loads(spans)


@pytest.mark.parametrize("name", sorted(CASES))
def test_instrument_imports_nothing_and_patches_on_import(name: str) -> None:
    module, cls, packages, use, want = CASES[name]
    pytest.importorskip(packages[0])
    loaded, spans = run_case(module, cls, packages, use)
    assert loaded == [], f"instrument() imported {loaded[:5]}"
    assert spans == want


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(TORCH_CASES))
def test_instrument_imports_no_torch_library_and_patches_on_import(name: str) -> None:
    module, cls, packages, use, want = TORCH_CASES[name]
    pytest.importorskip(packages[0])
    loaded, spans = run_case(module, cls, packages, use)
    assert loaded == [], f"instrument() imported {loaded[:5]}"
    assert spans == want


def test_a_hook_left_by_uninstrument_does_nothing() -> None:
    """instrument(), uninstrument(), instrument() again, uninstrument() again, then the import: no
    hook of either round patches anything."""
    pytest.importorskip("faiss")
    use = """
        from ragtrail.instrumentation.faiss import FaissInstrumentor
        inst = FaissInstrumentor()
        inst.uninstrument()
        inst.instrument(tracer_provider=provider)
        inst.uninstrument()
        import faiss, numpy as np
        index = faiss.IndexFlatL2(2)
        index.add(np.array([[0.0, 0.0]], dtype="float32"))
        index.search(np.array([[0.0, 0.0]], dtype="float32"), 1)
        assert not hasattr(faiss.IndexFlat.search, "__wrapped__") and inst.patched == []
    """
    loaded, spans = run_case("ragtrail.instrumentation.faiss", "FaissInstrumentor", ["faiss"], use)
    assert loaded == [] and spans == []
