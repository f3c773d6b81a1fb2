"""Per-search cost of the issue-27 integrations: LanceDB (embedded), Milvus Lite, pgvector through
psycopg2, a LangChain vector store searched directly, DSPy's Embeddings retriever, Weaviate v4 on a
real server (the tests' weaviate-server, built by ``scripts/build-backends.sh weaviate``), and the
framework pgvector stores (LlamaIndex's ``PGVectorStore`` on psycopg2, pgvector-haystack's
``PgvectorDocumentStore`` on psycopg 3: the framework stage and the SQL stage nested in it). Beside
bench_vectorstores.py / bench_pgvector.py.

Each case times the same search with the library not instrumented, instrumented and recorded (real
SDK, a span processor that discards), and instrumented under a sampled-out parent. Medians in
microseconds. Usage::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_reach.py --repeat 200 \
        [--only lancedb,milvus,psycopg2,langchain,llama_pg,haystack_pg,dspy,weaviate]
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np
from bench_vectorstores import Discard, median_us
from opentelemetry import context, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased

Case = tuple[str, Callable[[], Any]]
RNG = np.random.default_rng(0)
DATA = RNG.standard_normal((2000, 64)).astype("float32")
QUERY = RNG.standard_normal(64).astype("float32")


def lancedb_cases(stack: ExitStack) -> tuple[Any, list[Case]]:
    import lancedb

    from ragtrail.instrumentation.lancedb import LanceDBInstrumentor

    db = lancedb.connect(stack.enter_context(tempfile.TemporaryDirectory()))
    table = db.create_table("items", data=[{"id": i, "text": f"doc {i}", "category": "ab"[i % 2], "vector": DATA[i]} for i in range(len(DATA))])
    return LanceDBInstrumentor(), [
        ("lancedb 2k x 64, k=10", lambda: table.search(QUERY).limit(10).to_list()),
        ("lancedb 2k x 64, k=100", lambda: table.search(QUERY).limit(100).to_list()),
        ("lancedb 2k x 64, where, k=10", lambda: table.search(QUERY).where("category = 'a'").limit(10).to_list()),
    ]


def milvus_cases(stack: ExitStack) -> tuple[Any, list[Case]]:
    from pymilvus import MilvusClient

    from ragtrail.instrumentation.milvus import MilvusInstrumentor

    directory = stack.enter_context(tempfile.TemporaryDirectory())
    client = MilvusClient(f"{directory}/bench.db")
    stack.callback(client.close)
    client.create_collection("items", dimension=64)
    client.insert("items", [{"id": i, "vector": DATA[i].tolist(), "text": f"doc {i}", "category": "ab"[i % 2]} for i in range(len(DATA))])
    q = [QUERY.tolist()]
    return MilvusInstrumentor(), [
        ("milvus lite 2k x 64, k=10", lambda: client.search("items", data=q, limit=10, output_fields=["text"])),
        ("milvus lite 2k x 64, k=100", lambda: client.search("items", data=q, limit=100, output_fields=["text"])),
        ("milvus lite 2k x 64, filter, k=10", lambda: client.search("items", data=q, filter='category == "a"', limit=10, output_fields=["text"])),
    ]


def psycopg2_cases(stack: ExitStack) -> tuple[Any, list[Case]]:
    import psycopg2
    from bench_pgvector import postgres
    from pgvector.psycopg2 import register_vector

    from ragtrail.instrumentation.psycopg2 import Psycopg2Instrumentor

    uri = stack.enter_context(postgres())
    inst = Psycopg2Instrumentor()
    inst.instrument()  # the connection must be opened instrumented (its cursor factory); measured plain under suppression below
    conn = psycopg2.connect(uri)
    inst.uninstrument()
    conn.autocommit = True
    stack.callback(conn.close)
    with conn.cursor() as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS vector")
    register_vector(conn)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE items (id bigint PRIMARY KEY, content text, category text, embedding vector(64))")
        cur.executemany("INSERT INTO items VALUES (%s, %s, %s, %s)", [(i, f"doc {i}", "ab"[i % 2], DATA[i]) for i in range(len(DATA))])
    knn = "SELECT id, content, embedding <=> %s AS distance FROM items ORDER BY distance LIMIT %s"

    def run(sql: str, params: Any) -> Any:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall()

    return inst, [
        ("psycopg2 non-vector SELECT", lambda: run("SELECT id, content FROM items WHERE id = %s", (7,))),
        ("psycopg2 pgvector cosine, k=10", lambda: run(knn, (QUERY, 10))),
        ("psycopg2 pgvector cosine, k=100", lambda: run(knn, (QUERY, 100))),
    ]


def langchain_cases(stack: ExitStack) -> tuple[Any, list[Case]]:
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.vectorstores import InMemoryVectorStore

    from ragtrail.instrumentation.langchain import LangChainInstrumentor

    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=64))
    store.add_texts([f"doc {i}" for i in range(500)])
    return LangChainInstrumentor(), [
        ("langchain InMemory similarity_search k=4", lambda: store.similarity_search("doc 7", k=4)),
        ("langchain InMemory similarity_search k=50", lambda: store.similarity_search("doc 7", k=50)),
        ("langchain InMemory MMR k=4", lambda: store.max_marginal_relevance_search("doc 7", k=4, fetch_k=20)),
    ]


class Both:
    """Two instrumentors as one: the framework's and its driver's."""

    def __init__(self, *instrumentors: Any) -> None:
        self.instrumentors = instrumentors

    def instrument(self, **kwargs: Any) -> None:
        for inst in self.instrumentors:
            inst.instrument(**kwargs)

    def uninstrument(self) -> None:
        for inst in self.instrumentors:
            inst.uninstrument()


def llama_pg_cases(stack: ExitStack) -> tuple[Any, list[Case]]:
    import asyncio

    from bench_pgvector import postgres
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.schema import QueryBundle, TextNode
    from llama_index.vector_stores.postgres import PGVectorStore
    from psycopg.conninfo import conninfo_to_dict

    from ragtrail.instrumentation.llama_index import LlamaIndexInstrumentor
    from ragtrail.instrumentation.psycopg2 import Psycopg2Instrumentor

    info = conninfo_to_dict(stack.enter_context(postgres()))
    user, host = info.get("user") or "postgres", info["host"]
    store = PGVectorStore.from_params(
        connection_string=f"postgresql+psycopg2://{user}@/postgres?host={host}",
        async_connection_string=f"postgresql+asyncpg://{user}@/postgres?host={host}",
        table_name="items",
        embed_dim=64,
    )
    stack.callback(lambda: asyncio.run(store.close()))
    driver = Psycopg2Instrumentor()
    driver.instrument()  # SQLAlchemy's pooled connection must be opened instrumented (its cursor factory)
    nodes = [TextNode(id_=f"n{i}", text=f"doc {i}", embedding=DATA[i].tolist()) for i in range(len(DATA))]
    index = VectorStoreIndex(nodes, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=MockEmbedding(embed_dim=64))
    driver.uninstrument()
    query = QueryBundle(query_str="doc 7", embedding=QUERY.tolist())
    k10, k100 = index.as_retriever(similarity_top_k=10), index.as_retriever(similarity_top_k=100)
    return Both(LlamaIndexInstrumentor(), driver), [
        ("llama_index PGVectorStore retrieve, k=10", lambda: k10.retrieve(query)),
        ("llama_index PGVectorStore retrieve, k=100", lambda: k100.retrieve(query)),
    ]


def haystack_pg_cases(stack: ExitStack) -> tuple[Any, list[Case]]:
    from bench_pgvector import postgres
    from haystack import Document
    from haystack.utils import Secret
    from haystack_integrations.components.retrievers.pgvector import PgvectorEmbeddingRetriever
    from haystack_integrations.document_stores.pgvector import PgvectorDocumentStore

    from ragtrail.instrumentation.haystack import HaystackInstrumentor
    from ragtrail.instrumentation.psycopg import PsycopgInstrumentor

    store = PgvectorDocumentStore(connection_string=Secret.from_token(stack.enter_context(postgres())), embedding_dimension=64, recreate_table=True)
    stack.callback(store.close)
    store.write_documents([Document(id=f"d{i}", content=f"doc {i}", embedding=DATA[i].tolist()) for i in range(len(DATA))])
    k10, k100 = PgvectorEmbeddingRetriever(document_store=store, top_k=10), PgvectorEmbeddingRetriever(document_store=store, top_k=100)
    q = QUERY.tolist()
    return Both(HaystackInstrumentor(), PsycopgInstrumentor()), [
        ("haystack PgvectorEmbeddingRetriever, k=10", lambda: k10.run(query_embedding=q)),
        ("haystack PgvectorEmbeddingRetriever, k=100", lambda: k100.run(query_embedding=q)),
    ]


def dspy_cases(stack: ExitStack) -> tuple[Any, list[Case]]:
    import dspy
    from dspy.utils.unbatchify import Unbatchify

    from ragtrail.instrumentation.dspy import DSPyInstrumentor

    vectors = {f"doc {i}": DATA[i] for i in range(len(DATA))}
    embedder = dspy.Embedder(lambda texts: np.stack([vectors.get(t, QUERY) for t in texts]), caching=False)
    search = dspy.retrievers.Embeddings(corpus=list(vectors), embedder=embedder, k=10)
    # the search thread calls _batch_forward late-bound, so it runs the wrapped method once instrumented
    # (a retriever built before instrument() holds the plain one); the same extra call in every series
    search.search_fn.close()
    search.search_fn = Unbatchify(lambda queries: search._batch_forward(queries))
    stack.callback(search.search_fn.close)
    # a module call that holds no retriever: what the Module/Predict/LM hooks cost when they record nothing
    from dspy.utils import DummyLM

    predict = dspy.Predict("question -> answer")
    lm = DummyLM([{"answer": "x"}] * 1_000_000)

    def ask() -> Any:
        with dspy.context(lm=lm):
            return predict(question="q")

    return DSPyInstrumentor(), [("dspy Embeddings 2k x 64, k=10", lambda: search("query")), ("dspy Predict (DummyLM), no retriever", ask)]


def weaviate_cases(stack: ExitStack) -> tuple[Any, list[Case]]:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import weaviate
    from weaviate.classes.config import Configure, DataType, Property
    from weaviate.classes.data import DataObject
    from weaviate.classes.query import Filter, MetadataQuery

    from ragtrail.instrumentation.weaviate import WeaviateInstrumentor
    from weaviateutil import binary_path, running_weaviate

    if not binary_path().is_file():
        raise SystemExit(f"no weaviate-server at {binary_path()}: scripts/build-backends.sh weaviate")
    server = stack.enter_context(running_weaviate(binary_path()))
    client = weaviate.connect_to_local(host="127.0.0.1", port=server.http_port, grpc_port=server.grpc_port)
    stack.callback(client.close)
    props = [Property(name="text", data_type=DataType.TEXT), Property(name="category", data_type=DataType.TEXT)]
    # generate.* runs on Weaviate's offline generative-dummy module (enabled by tests/weaviateutil.py)
    generative = Configure.Generative.custom("generative-dummy")
    items = client.collections.create("Items", properties=props, vector_config=Configure.Vectors.self_provided(), generative_config=generative)
    rows = [DataObject(properties={"text": f"doc {i}", "category": ("red", "blue")[i % 2]}, vector=DATA[i].tolist()) for i in range(len(DATA))]
    assert not items.data.insert_many(rows).errors
    q, dist, score = QUERY.tolist(), MetadataQuery(distance=True), MetadataQuery(score=True)
    only_a = Filter.by_property("category").equal("red")
    return WeaviateInstrumentor(), [
        ("weaviate 2k x 64 near_vector, k=10", lambda: items.query.near_vector(q, limit=10, return_metadata=dist)),
        ("weaviate 2k x 64 near_vector, k=100", lambda: items.query.near_vector(q, limit=100, return_metadata=dist)),
        ("weaviate near_vector, filter, k=10", lambda: items.query.near_vector(q, limit=10, filters=only_a, return_metadata=dist)),
        ("weaviate bm25, k=10", lambda: items.query.bm25("doc 7", limit=10, return_metadata=score)),
        ("weaviate hybrid, k=10", lambda: items.query.hybrid("doc 7", vector=q, limit=10, return_metadata=score)),
        ("weaviate generate.near_vector grouped_task, k=10", lambda: items.generate.near_vector(q, limit=10, grouped_task="t", return_metadata=dist)),
        ("weaviate fetch_objects, filter, k=10", lambda: items.query.fetch_objects(limit=10, filters=only_a)),
    ]


ENGINES = {
    "lancedb": lancedb_cases,
    "milvus": milvus_cases,
    "psycopg2": psycopg2_cases,
    "langchain": langchain_cases,
    "llama_pg": llama_pg_cases,
    "haystack_pg": haystack_pg_cases,
    "dspy": dspy_cases,
    "weaviate": weaviate_cases,
}


@contextmanager
def sampled_out_context() -> Iterator[Any]:
    off = TracerProvider(sampler=ParentBased(ALWAYS_OFF))
    parent = off.get_tracer("bench").start_span("sampled-out")
    yield trace.set_span_in_context(parent)
    parent.end()


def measure(instrumentor: Any, measured: list[Case], provider: TracerProvider, ctx: Any, repeat: int) -> None:
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    def plain_of(fn: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            with suppress_instrumentation():
                return fn()

        return run

    # the baseline: not instrumented at all (psycopg2: its cursors pass through, suppressed)
    plain = {name: median_us(plain_of(fn), repeat) for name, fn in measured}
    instrumentor.instrument(tracer_provider=provider)
    try:
        for name, fn in measured:

            def sampled_out(fn: Callable[[], Any] = fn) -> Any:
                token = context.attach(ctx)
                try:
                    return fn()
                finally:
                    context.detach(token)

            b = plain[name]
            r = median_us(fn, repeat)
            s = median_us(sampled_out, repeat)
            print(f"{name:44s} {b:9.1f} {r:9.1f} {r - b:9.1f} {s - b:12.1f}", flush=True)
    finally:
        instrumentor.uninstrument()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--only", default=",".join(ENGINES))
    args = parser.parse_args()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Discard()))
    trace.set_tracer_provider(provider)
    print(f"{'case':44s} {'plain':>9s} {'recorded':>9s} {'added':>9s} {'sampled-out':>12s}")
    with sampled_out_context() as ctx:
        for engine in args.only.split(","):
            with ExitStack() as stack:
                instrumentor, measured = ENGINES[engine](stack)
                measure(instrumentor, measured, provider, ctx, args.repeat)


if __name__ == "__main__":
    main()
