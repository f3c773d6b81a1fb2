"""LlamaIndex's ``PGVectorStore`` under ragtrail, against a real PostgreSQL 18 with pgvector 0.8
(tests/pgutil.py), with hand-made 3-dimensional embeddings (no model: the default tier).

``retrieve`` runs SQLAlchemy on psycopg2: the LlamaIndex stage (node ids, the store's similarity
``1 - distance``) with the psycopg2 stage of the statement nested in it (the table's own ``id``
column, the cosine distances the server returned). ``aretrieve`` runs SQLAlchemy on asyncpg (a
prepared statement's ``fetch``, ``$n`` parameters, the query vector bound as pgvector's text form):
the asyncpg stage nests in the LlamaIndex one the same way. Exact attributes; the results and the
statements the server receives are the same with and without ragtrail."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("psycopg2")
pytest.importorskip("pgserver")
pytest.importorskip("llama_index.vector_stores.postgres")

from llama_index.core import StorageContext, VectorStoreIndex  # noqa: E402
from llama_index.core.embeddings import MockEmbedding  # noqa: E402
from llama_index.core.schema import QueryBundle, TextNode  # noqa: E402
from llama_index.vector_stores.postgres import PGVectorStore  # noqa: E402

import mirrorutil  # noqa: E402
import spanutil  # noqa: E402
from pgutil import Postgres, running_postgres  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.contract.receipts import receipt  # noqa: E402
from ragtrail.instrumentation.asyncpg import AsyncpgInstrumentor  # noqa: E402
from ragtrail.instrumentation.llama_index import LlamaIndexInstrumentor  # noqa: E402
from ragtrail.instrumentation.psycopg2 import Psycopg2Instrumentor  # noqa: E402

from .test_psycopg import check_span as check_sql_span  # noqa: E402

RETRIEVER = "llama_index.core.indices.vector_store.retrievers.retriever.VectorIndexRetriever"
NODES = [
    ("cats", "cats purr softly", [1.0, 0.0, 0.0]),
    ("dogs", "dogs bark loudly", [0.8, 0.6, 0.0]),
    ("stocks", "stocks fell today", [0.0, 1.0, 0.0]),
    ("rain", "rain tomorrow", [0.0, 0.0, 1.0]),
]
QUERY = [0.9, 0.2, 0.1]


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    from psycopg.conninfo import conninfo_to_dict

    with running_postgres() as server:
        info = conninfo_to_dict(server.uri)
        user, host = info.get("user") or "postgres", info["host"]
        urls = (f"postgresql+psycopg2://{user}@/postgres?host={host}", f"postgresql+asyncpg://{user}@/postgres?host={host}")
        store = make_store(server, urls)
        VectorStoreIndex(
            [TextNode(id_=ident, text=text, embedding=vector) for ident, text, vector in NODES],
            storage_context=StorageContext.from_defaults(vector_store=store),
            embed_model=MockEmbedding(embed_dim=3),
        )
        asyncio.run(store.close())
        server.urls = urls  # type: ignore[attr-defined]
        yield server


def make_store(pg: Postgres, urls: tuple[str, str]) -> PGVectorStore:
    return PGVectorStore.from_params(connection_string=urls[0], async_connection_string=urls[1], table_name="nodes", embed_dim=3)


def search(pg: Postgres, asynchronous: bool) -> list[tuple[str, float | None]]:
    """One retrieval through a store made now (its connections are opened under the current instrumentation)."""
    store = make_store(pg, pg.urls)  # type: ignore[attr-defined]
    retriever = VectorStoreIndex.from_vector_store(store, embed_model=MockEmbedding(embed_dim=3)).as_retriever(similarity_top_k=2)
    query = QueryBundle(query_str="what purrs?", embedding=QUERY)

    async def in_one_loop() -> Any:  # asyncpg's connections close on the loop that opened them
        try:
            return await retriever.aretrieve(query)
        finally:
            await store.close()

    if asynchronous:
        found = asyncio.run(in_one_loop())
    else:
        try:
            found = retriever.retrieve(query)
        finally:
            asyncio.run(store.close())
    return [(n.node.node_id, n.score) for n in found]


def traced(tracer_provider: Any, pg: Postgres, asynchronous: bool) -> tuple[Any, Any, int, int]:
    before = pg.statements()
    plain = search(pg, asynchronous)
    middle = pg.statements()
    instrumentors = (LlamaIndexInstrumentor(), Psycopg2Instrumentor(), AsyncpgInstrumentor())
    for inst in instrumentors:
        inst.instrument(tracer_provider=tracer_provider)
    try:
        result = search(pg, asynchronous)
    finally:
        for inst in instrumentors:
            inst.uninstrument()
    return plain, result, middle - before, pg.statements() - middle


def check_outer(span: Any, spans: Any, found: list[tuple[str, float | None]], own: dict[str, Any]) -> None:
    """The LlamaIndex stage: pop every expected attribute, then nothing may be left; one candidate
    event per node, in order."""
    a = spanutil.own(span)
    evs = spanutil.stitched(span, spans)
    spanutil.check_count_and_digest(span, evs)
    a.pop(sc.EVENTS_COUNT), a.pop(sc.EVENTS_DIGEST)
    text = receipt("what purrs?")
    expected = {
        sc.SCHEMA: 5,
        sc.STAGE_KIND: sc.KIND_RETRIEVE,
        sc.STAGE_COMPONENT: RETRIEVER,
        sc.STAGE_STATUS: "ok",
        sc.STAGE_TOP_K: 2,
        sc.CANDIDATES_OUT: len(found),
        sc.CANDIDATES_EXCLUDED: 0,
        sc.QUERY_TEXT: "what purrs?",
        sc.QUERY_HOP: 0,
        sc.QUERY_TRANSFORM: "none",
        sc.QUERY_CHARS: text.chars,
        sc.QUERY_BYTES: text.bytes,
        sc.QUERY_SHA256: text.sha256,
        sc.GEN_AI_OPERATION_NAME: "retrieval",
        sc.GEN_AI_DATA_SOURCE_ID: RETRIEVER,
        sc.GEN_AI_RETRIEVAL_TOP_K: 2,
        sc.OPENINFERENCE_SPAN_KIND: "RETRIEVER",
        **own,
    }
    for key, value in expected.items():
        assert key in a, key
        assert a.pop(key) == value, key
    for i, (ident, score) in enumerate(found):
        assert a.pop(f"retrieval.documents.{i}.document.id") == ident
        assert a.pop(f"retrieval.documents.{i}.document.score") == score
    mirrorutil.pop_mirrors(a, span, spans)
    assert a == {}, f"unexpected attributes {a}"
    texts = {ident: text for ident, text, _ in NODES}
    got = []
    for name, ev in evs:
        spanutil.pop_pointer(ev, {})
        got.append((name, ev))
    assert got == [
        (
            sc.EVENT_CANDIDATE,
            {
                sc.CANDIDATE_ID: ident,
                sc.CANDIDATE_RANK: rank,
                sc.CANDIDATE_SCORE: score,
                sc.CANDIDATE_SCORE_KIND: "similarity",
                sc.CANDIDATE_HOP: 0,
                sc.CANDIDATE_CONTENT_CHARS: receipt(texts[ident]).chars,
                sc.CANDIDATE_CONTENT_BYTES: receipt(texts[ident]).bytes,
                sc.CANDIDATE_CONTENT_SHA256: receipt(texts[ident]).sha256,
            },
        )
        for rank, (ident, score) in enumerate(found)
    ]


@pytest.mark.parametrize(("asynchronous", "component"), [(False, "psycopg2.cursor"), (True, "asyncpg.PreparedStatement")])
def test_retrieve_nests_the_sql_stage(tracer_provider, span_exporter, pg, asynchronous, component) -> None:
    """``retrieve`` on psycopg2 and ``aretrieve`` on asyncpg: the LlamaIndex stage, and inside it
    SQLAlchemy's statement as the driver's stage."""
    plain, found, plain_statements, traced_statements = traced(tracer_provider, pg, asynchronous)
    assert found == plain and [ident for ident, _ in found] == ["cats", "dogs"]
    assert traced_statements == plain_statements  # ragtrail asks the database nothing
    spans = span_exporter.get_finished_spans()
    outer = spanutil.by_name(spans, "retrieve VectorIndexRetriever")
    inner = spanutil.by_name(spans, f"retrieve {component.rsplit('.', 1)[-1]}")
    assert inner.parent.span_id == outer.context.span_id
    # the root of a trace with a stage beneath: it states the coverage
    check_outer(outer, spans, found, {sc.CANDIDATES_IN: 0, sc.COVERAGE_RETRIEVED: 2, sc.COVERAGE_CITED: 0})
    import psycopg

    with psycopg.connect(pg.uri) as conn:
        rows = dict(conn.execute("SELECT node_id, id FROM data_nodes").fetchall())
    check_sql_span(
        inner,
        spans,
        [rows[ident] for ident, _ in found],  # the table's own bigint ids
        component=component,
        top_k=2,
        kind="distance",
        scores=[1 - score for _, score in found],  # LlamaIndex's similarity is 1 - this distance
        vector=QUERY,  # asyncpg: bound as the text '[0.9,0.2,0.1]', the same float32 receipt
        contents=[text for ident, _ in found for node, text, _ in NODES if node == ident],
        table="public.data_nodes",
        nested=True,  # inside the framework's retrieval: no GenAI name of its own
    )
