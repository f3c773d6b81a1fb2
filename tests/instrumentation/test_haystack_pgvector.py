"""pgvector-haystack's retrievers as Haystack stages, against a real PostgreSQL 18 with pgvector 0.8
(tests/pgutil.py), with hand-made 3-dimensional embeddings (no model: the default tier).

``PgvectorEmbeddingRetriever``: the score kind of every ``vector_function`` (given to the store, or
to ``run``), the psycopg stage of the store's composed statement nested in it with the same ids and
scores; ``PgvectorKeywordRetriever``: ``ts_rank_cd`` scores of kind ``none``. Exact attributes; the
results and the statements the server receives are the same with and without ragtrail (the store's
``count_documents``, a ``COUNT(*)``, is not called)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("psycopg")
pytest.importorskip("pgserver")
pytest.importorskip("haystack_integrations.document_stores.pgvector")

import numpy as np  # noqa: E402
from haystack import Document  # noqa: E402
from haystack.utils import Secret  # noqa: E402
from haystack_integrations.components.retrievers.pgvector import PgvectorEmbeddingRetriever, PgvectorKeywordRetriever  # noqa: E402
from haystack_integrations.document_stores.pgvector import PgvectorDocumentStore  # noqa: E402

import mirrorutil  # noqa: E402
import spanutil  # noqa: E402
from pgutil import Postgres, running_postgres  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.haystack import HaystackInstrumentor  # noqa: E402
from ragtrail.instrumentation.psycopg import PsycopgInstrumentor  # noqa: E402

from .test_haystack import candidate, check_span, one, query_attrs  # noqa: E402
from .test_psycopg import check_span as check_sql_span  # noqa: E402

PG = "haystack_integrations.components.retrievers.pgvector."
EMBEDDING = PG + "embedding_retriever.PgvectorEmbeddingRetriever"
KEYWORD = PG + "keyword_retriever.PgvectorKeywordRetriever"
DOCS = [
    Document(id="cats", content="cats purr softly", meta={"topic": "pets"}, embedding=[1.0, 0.0, 0.0]),
    Document(id="dogs", content="dogs bark loudly at cats", meta={"topic": "pets"}, embedding=[0.8, 0.6, 0.0]),
    Document(id="stocks", content="stocks fell today", meta={"topic": "news"}, embedding=[0.0, 1.0, 0.0]),
    Document(id="rain", content="rain tomorrow", meta={"topic": "news"}, embedding=[0.0, 0.0, 1.0]),
]
QUERY = [0.9, 0.2, 0.1]


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    with running_postgres() as server:
        yield server


@pytest.fixture
def stores() -> Iterator[list[PgvectorDocumentStore]]:
    made: list[PgvectorDocumentStore] = []
    yield made
    for store in made:
        store.close()


def make_store(pg: Postgres, vector_function: str, made: list[PgvectorDocumentStore]) -> PgvectorDocumentStore:
    store = PgvectorDocumentStore(
        connection_string=Secret.from_token(pg.uri),
        table_name=f"docs_{vector_function}",
        keyword_index_name=f"keywords_{vector_function}",
        embedding_dimension=3,
        vector_function=vector_function,
        recreate_table=True,
    )
    made.append(store)
    store.write_documents(DOCS)
    return store


def traced(tracer_provider: Any, pg: Postgres, call: Any) -> tuple[Any, Any, int, int]:
    """``call()`` without, then with ragtrail: (plain result, traced result, statements each sent)."""
    before = pg.statements()
    plain = call()
    middle = pg.statements()
    instrumentors = (HaystackInstrumentor(), PsycopgInstrumentor())
    for inst in instrumentors:
        inst.instrument(tracer_provider=tracer_provider)
    try:
        result = call()
    finally:
        for inst in instrumentors:
            inst.uninstrument()
    return plain, result, middle - before, pg.statements() - middle


def vector_attrs(vector: list[float]) -> dict[str, Any]:
    return {sc.QUERY_VECTOR_DIM: len(vector), sc.QUERY_VECTOR_SHA256: hashlib.sha256(np.asarray(vector, "<f4").tobytes()).hexdigest()}


def check_outer(span: Any, spans: Any, docs: list[Document], kind: str, own: dict[str, Any]) -> None:
    """The Haystack stage: pop every expected attribute, then nothing may be left; one candidate event
    per document, in order (its content pointing to the psycopg stage's receipt of the same row)."""
    a = spanutil.own(span)
    evs = spanutil.stitched(span, spans)
    spanutil.check_count_and_digest(span, evs)
    a.pop(sc.EVENTS_COUNT), a.pop(sc.EVENTS_DIGEST)
    expected = {
        sc.SCHEMA: 5,
        sc.STAGE_KIND: sc.KIND_RETRIEVE,
        sc.STAGE_COMPONENT: EMBEDDING,
        sc.CANDIDATES_OUT: len(docs),
        sc.CANDIDATES_EXCLUDED: 0,
        sc.GEN_AI_OPERATION_NAME: "retrieval",
        sc.GEN_AI_DATA_SOURCE_ID: EMBEDDING,
        sc.OPENINFERENCE_SPAN_KIND: "RETRIEVER",
        **own,
    }
    for key, value in expected.items():
        assert key in a, key
        assert a.pop(key) == value, key
    for i, doc in enumerate(docs):
        assert a.pop(f"retrieval.documents.{i}.document.id") == doc.id
        assert a.pop(f"retrieval.documents.{i}.document.score") == doc.score
    mirrorutil.pop_mirrors(a, span, spans)
    assert a == {}, f"unexpected attributes {a}"
    got = []
    for name, ev in evs:
        spanutil.pop_pointer(ev, {})
        got.append((name, ev))
    assert got == [(sc.EVENT_CANDIDATE, candidate(d, i, kind, hop=None)) for i, d in enumerate(docs)]


@pytest.mark.parametrize(
    ("store_function", "run_function", "kind"),
    [
        ("cosine_similarity", None, "similarity"),  # 1 - (embedding <=> q)
        ("inner_product", None, "similarity"),  # (embedding <#> q) * -1
        ("l2_distance", None, "distance"),  # embedding <-> q
        ("cosine_similarity", "l2_distance", "distance"),  # the run's vector_function wins
    ],
)
def test_embedding_retriever_score_kinds_and_the_sql_stage_inside(
    tracer_provider, span_exporter, pg, stores, store_function, run_function, kind
) -> None:
    store = make_store(pg, store_function, stores)
    retriever = PgvectorEmbeddingRetriever(document_store=store, top_k=2, filters={"field": "meta.topic", "operator": "==", "value": "pets"})
    store.count_documents()  # the store's connection is open before both runs

    plain, result, plain_statements, traced_statements = traced(
        tracer_provider, pg, lambda: retriever.run(query_embedding=QUERY, vector_function=run_function)
    )
    assert [(d.id, d.score) for d in result["documents"]] == [(d.id, d.score) for d in plain["documents"]]
    assert traced_statements == plain_statements  # no COUNT(*) or anything else of ragtrail's
    docs = result["documents"]
    assert [d.id for d in docs] == ["cats", "dogs"]
    spans = span_exporter.get_finished_spans()
    outer = one(spans, "retrieve PgvectorEmbeddingRetriever")
    inner = one(spans, "retrieve Cursor")
    assert inner.parent.span_id == outer.context.span_id
    check_outer(
        outer,
        spans,
        docs,
        kind,
        {
            sc.STAGE_STATUS: "ok",
            sc.STAGE_TOP_K: 2,
            sc.GEN_AI_RETRIEVAL_TOP_K: 2,
            sc.STAGE_FILTER: '{"field":"meta.topic","operator":"==","value":"pets"}',
            # the root of its trace: the psycopg stage's rows are its inputs, and it states the coverage
            sc.CANDIDATES_IN: 2,
            sc.COVERAGE_RETRIEVED: 2,
            sc.COVERAGE_CITED: 0,
            **vector_attrs(QUERY),
        },
    )
    check_sql_span(
        inner,
        spans,
        [d.id for d in docs],
        top_k=2,
        kind=kind,
        scores=[d.score for d in docs],
        vector=QUERY,
        filter_json='{"params":["pets"],"where":"meta->>\'topic\' = %s"}',
        contents=[d.content for d in docs],
        table=f"public.docs_{store_function}",
        nested=True,  # inside the framework's retrieval: no GenAI name of its own
    )


def test_keyword_retriever_scores_have_no_named_kind(tracer_provider, span_exporter, pg, stores) -> None:
    store = make_store(pg, "cosine_similarity", stores)
    retriever = PgvectorKeywordRetriever(document_store=store, top_k=3)
    store.count_documents()
    plain, result, plain_statements, traced_statements = traced(tracer_provider, pg, lambda: retriever.run(query="cats"))
    assert [(d.id, d.score) for d in result["documents"]] == [(d.id, d.score) for d in plain["documents"]]
    assert traced_statements == plain_statements
    docs = result["documents"]
    assert [d.id for d in docs] == ["cats", "dogs"]
    spans = span_exporter.get_finished_spans()
    [span] = [s for s in spans if s.name.startswith("retrieve ")]  # full-text search: no psycopg stage
    check_span(
        span,
        kind="retrieve",
        component=KEYWORD,
        top_k=3,
        query="cats",
        own={
            sc.STAGE_STATUS: "ok",
            sc.STAGE_TOP_K: 3,
            sc.CANDIDATES_IN: 0,
            sc.CANDIDATES_OUT: 2,
            sc.CANDIDATES_EXCLUDED: 0,
            **query_attrs("cats", 0),
        },
        cands=[candidate(d, i, "none", hop=0) for i, d in enumerate(docs)],
    )
