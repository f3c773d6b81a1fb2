"""langchain-postgres' ``PGVector`` app (SQLAlchemy on psycopg 3) run plain and under
``opentelemetry-instrument`` against a real PostgreSQL with pgvector (tests/pgutil.py), read back with
the real ``ragtrail`` CLI: the LangChain stage (query hop, the store's ids, distances, k) with the
psycopg stage of SQLAlchemy's statement nested in it (the ``id`` column of ``langchain_pg_embedding``
under SQLAlchemy's label, the JSONB filter), no alarm, and the server receives the same statements."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("psycopg")
pytest.importorskip("pgserver")
pytest.importorskip("langchain_postgres")

from tests.apps.runner import APPS, AppRun, _clean_env, assert_host_untouched, run_app  # noqa: E402
from tests.apps.test_pgvector_app import manifests, server_env  # noqa: E402

from pgutil import Postgres, running_postgres  # noqa: E402


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    import psycopg

    with running_postgres() as server:
        with psycopg.connect(server.uri, autocommit=True) as conn:
            conn.execute("CREATE DATABASE langchain")
        yield server


def plain_statements(pg: Postgres, env: dict[str, str], tmp_path: Path) -> int:
    """The statements one plain run of the app sends (after a first run made its tables)."""
    before = pg.statements()
    subprocess.run(
        [sys.executable, str(APPS / "pgvector_langchain.py")], env={**_clean_env(), **env}, cwd=tmp_path, check=True, capture_output=True, timeout=300
    )
    return pg.statements() - before


def stages_of(run: AppRun) -> list[list[dict]]:
    return [m["stages"] for m in manifests(run)]


def test_langchain_postgres_app(pg: Postgres, tmp_path: Path) -> None:
    env = server_env(pg, tmp_path)
    plain_statements(pg, env, tmp_path)  # the first run creates the extension, tables and collection
    per_run = plain_statements(pg, env, tmp_path)
    before = pg.statements()
    run = run_app("pgvector_langchain.py", tmp_path, enabled=["ragtrail_psycopg", "ragtrail_langchain"], extra_env=env)
    assert pg.statements() - before == 2 * per_run  # the plain and the instrumented run: ragtrail asks nothing
    assert_host_untouched(run)
    printed = [line.split(" ") for line in run.stdout.splitlines()]
    scored, retrieved = printed[:2], printed[2:]
    assert [line[0] for line in scored] == ["1", "2"] and len(retrieved) == 3
    direct, retriever = stages_of(run)  # one trace per search: the app runs no pipeline around them
    for stages, k, component, ids, scores in (
        (direct, 2, "langchain_postgres.vectorstores.PGVector", [line[0] for line in scored], [float(line[1]) for line in scored]),
        (retriever, 3, "langchain_core.vectorstores.base.VectorStoreRetriever", [line[0] for line in retrieved], None),
    ):
        outer, inner = stages
        assert (outer["kind"], outer["component"], outer["knobs"], outer["status"], outer["findings"]) == (
            "retrieve",
            component,
            {"top_k": k},
            "ok",
            [],
        )
        assert (inner["kind"], inner["component"], inner["collection"], inner["knobs"]) == (
            "retrieve",
            "psycopg.Cursor",
            "langchain_pg_embedding",
            {"top_k": k},
        )
        assert inner["parent_span_id"] == outer["span_id"] and inner["findings"] == [] and inner["query"] is None
        # the store's own ids (langchain_pg_embedding.id, labelled langchain_pg_embedding_id by SQLAlchemy)
        for stage in (outer, inner):
            assert [c["id"] for c in stage["candidates"]] == ids
            assert {c["score_kind"] for c in stage["candidates"]} == {"distance"}
        assert [c["score"] for c in outer["candidates"]] == [c["score"] for c in inner["candidates"]]
        if scores is not None:
            assert [round(c["score"], 4) for c in outer["candidates"]] == scores
    assert direct[0]["query"]["text"] == "cats" and retriever[0]["query"]["text"] == "kitty"
    # the JSONB filter as SQLAlchemy bound it (the collection's uuid is the run's own)
    where = json.loads(direct[1]["filter"])
    assert where["params"][1:] == ["$.topic == $value", {"value": "animals"}]
    assert where["where"].startswith("langchain_pg_embedding.collection_id = %(collection_id_1)s::UUID AND jsonb_path_match(")
    assert json.loads(retriever[1]["filter"])["where"] == "langchain_pg_embedding.collection_id = %(collection_id_1)s::UUID"
