"""LanceDB's quickstart app run plain and under ``opentelemetry-instrument``, read back with the real
``ragtrail`` CLI: the app's output is untouched, ``verify`` raises no alarm, and the manifest has the
table's own ids, the distances and BM25 scores with their kinds, k, the filter and the query."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("lancedb")

from tests.apps.runner import assert_host_untouched, manifests, run_app  # noqa: E402
from tests.apps.runner import entry_point_env as runner_entry_point_env  # noqa: E402


def entry_point_env(name: str, target: str, tmp_path: Path) -> dict[str, str]:
    """:func:`tests.apps.runner.entry_point_env`, LanceDB's log kept off stderr."""
    return {"LANCEDB_LOG": "error", **runner_entry_point_env(name, target, tmp_path)}


def test_lancedb_quickstart_app(tmp_path: Path) -> None:
    env = entry_point_env("ragtrail_lancedb", "ragtrail.instrumentation.lancedb:LanceDBInstrumentor", tmp_path)
    run = run_app("lancedb_quickstart.py", tmp_path, enabled=["ragtrail_lancedb"], extra_env=env)
    assert_host_untouched(run)
    printed = [line.split(" ") for line in run.stdout.splitlines()]
    nearest, filtered, fts = printed[:2], printed[2:4], printed[4:]
    assert [p[0] for p in nearest] == ["3", "2"] and [p[0] for p in filtered] == ["2", "1"] and [p[0] for p in fts] == ["1", "3"]
    vector, where, text = manifests(run)  # one trace per search: the app runs no pipeline around them
    for m, component in ((vector, "LanceVectorQueryBuilder"), (where, "LanceVectorQueryBuilder"), (text, "LanceFtsQueryBuilder")):
        [stage] = m["stages"]
        assert (stage["kind"], stage["component"], stage["status"], stage["findings"]) == ("retrieve", f"lancedb.{component}", "ok", [])
        assert stage["collection"] == "my_table" and stage["excluded_count"] == 0
        assert m["coverage"]["corpus_size"] is None  # ragtrail asks the table nothing
    [v], [w], [t] = vector["stages"], where["stages"], text["stages"]
    assert v["knobs"] == {"top_k": 2} and v["filter"] is None and v["query"] is None  # a vector, receipted only
    assert [(c["id"], c["rank"], c["score_kind"]) for c in v["candidates"]] == [("3", 0, "distance"), ("2", 1, "distance")]
    assert [round(c["score"], 2) for c in v["candidates"]] == [float(p[-1]) for p in nearest]
    assert w["filter"] == '{"where":"price < 25"}' and [c["id"] for c in w["candidates"]] == ["2", "1"]
    assert [round(c["score"], 2) for c in w["candidates"]] == [float(p[-1]) for p in filtered]
    assert t["knobs"] == {"top_k": 10} and t["query"]["text"] == "puppy" and t["query"]["hop"] == 0
    assert [(c["id"], c["score_kind"]) for c in t["candidates"]] == [("1", "bm25"), ("3", "bm25")]
    assert [round(c["score"], 4) for c in t["candidates"]] == [float(p[-1]) for p in fts]


def test_milvus_quickstart_app(tmp_path: Path) -> None:
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    env = entry_point_env("ragtrail_milvus", "ragtrail.instrumentation.milvus:MilvusInstrumentor", tmp_path)
    run = run_app("milvus_quickstart.py", tmp_path, enabled=["ragtrail_milvus"], extra_env=env)
    assert_host_untouched(run, stderr_empty=False)
    printed = [line.split(" ") for line in run.stdout.splitlines()]
    plain, filtered = printed[:2], printed[2:]
    assert [p[0] for p in plain] == ["0", "1"] and [p[0] for p in filtered] == ["2"]
    first, second = manifests(run)
    for m in (first, second):
        [stage] = m["stages"]
        assert (stage["kind"], stage["component"], stage["status"], stage["findings"]) == ("retrieve", "pymilvus.MilvusClient.search", "ok", [])
        assert stage["collection"] == "demo_collection" and stage["knobs"] == {"top_k": 2} and stage["query"] is None
        assert m["coverage"]["corpus_size"] is None  # ragtrail asks Milvus nothing
    [a], [b] = first["stages"], second["stages"]
    # the quick-setup collection's metric is COSINE (seen in the app's own create_collection): similarity
    assert [(c["id"], c["rank"], c["score_kind"]) for c in a["candidates"]] == [("0", 0, "similarity"), ("1", 1, "similarity")]
    assert [round(c["score"], 4) for c in a["candidates"]] == [float(p[1]) for p in plain]
    assert a["filter"] is None and b["filter"] == '{"filter":"subject == \'biology\'"}'
    assert [(c["id"], round(c["score"], 4)) for c in b["candidates"]] == [("2", float(filtered[0][1]))]


def test_pgvector_psycopg2_readme_app(tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    pytest.importorskip("psycopg2")
    pytest.importorskip("pgserver")
    pytest.importorskip("pgvector")
    from pgutil import running_postgres

    env = entry_point_env("ragtrail_psycopg2", "ragtrail.instrumentation.psycopg2:Psycopg2Instrumentor", tmp_path)
    with running_postgres(databases=("pgvector_example",)) as pg:
        env.update(pg.libpq_env())
        run = run_app("pgvector_psycopg2.py", tmp_path, enabled=["ragtrail_psycopg2"], extra_env=env)
    assert_host_untouched(run)
    printed = [line.split(" ", 1) for line in run.stdout.splitlines()]
    nearest, cosine = printed[:4], printed[4:]
    assert [ident for ident, _ in nearest] == ["2", "1", "3", "4"]
    star, distance = manifests(run)
    for m in (star, distance):
        [stage] = m["stages"]
        assert (stage["kind"], stage["component"], stage["status"], stage["findings"]) == ("retrieve", "psycopg2.cursor", "ok", [])
        assert stage["collection"] == "items" and stage["filter"] is None and stage["query"] is None
        assert m["coverage"]["corpus_size"] is None  # ragtrail asks the database nothing
    [s], [d] = star["stages"], distance["stages"]
    # SELECT * ... LIMIT 5 over 4 rows: the table's ids in the app's order, no distance selected
    assert s["knobs"] == {"top_k": 5}
    assert [(c["id"], c["rank"], c["score"], c["score_kind"]) for c in s["candidates"]] == [(i, r, None, "none") for r, (i, _) in enumerate(nearest)]
    assert d["knobs"] == {"top_k": 2}
    assert [(c["id"], round(c["score"], 4), c["score_kind"]) for c in d["candidates"]] == [(i, float(v), "distance") for i, v in cosine]


def test_langchain_vector_store_searched_directly(tmp_path: Path) -> None:
    pytest.importorskip("langchain_core")
    run = run_app("langchain_vectorstore_direct.py", tmp_path, enabled=["ragtrail_langchain"])
    assert_host_untouched(run)
    printed = [line.split(" ", 1) for line in run.stdout.splitlines()]
    similar, scored, mmr = printed[:2], printed[2:3], printed[3:]
    query = "LangChain provides abstractions to make working with LLMs easy"
    traces = manifests(run)
    assert len(traces) == 3  # one per direct search: no retriever, no pipeline around them
    kinds = []
    expected = ((query, {"top_k": 2}), ("Will it be hot tomorrow?", {"top_k": 1}), (query, {"top_k": 2, "mmr_lambda": 0.5}))
    for m, (text, knobs) in zip(traces, expected, strict=True):
        [stage] = m["stages"]
        assert (stage["kind"], stage["component"], stage["status"]) == ("retrieve", "langchain_core.vectorstores.in_memory.InMemoryVectorStore", "ok")
        # MMR: lambda_mult is InMemoryVectorStore's own default (0.5, not passed), fetch_k=3 as passed
        assert stage["query"]["text"] == text and stage["knobs"] == knobs and stage["findings"] == []
        assert m["coverage"]["corpus_size"] == 4  # the store holds it in memory
        kinds.append({c["score_kind"] for c in stage["candidates"]})
    assert [[c["id"] for c in m["stages"][0]["candidates"]] for m in traces] == [
        [i for i, _ in similar],
        [i for i, _ in scored],
        [i for i, _ in mmr],
    ]
    assert kinds == [{"similarity"}, {"similarity"}, {"similarity"}]  # MMR's pick keeps its pool's similarities
    assert round(traces[1]["stages"][0]["candidates"][0]["score"], 4) == float(scored[0][1])
    # issue 24, principle 5: MMR's fetch_k pool of 3 is the stage's inputs, in similarity order, and the
    # one it did not pick an exclusion (the store's own id). The pool is the store's top 3 by similarity:
    # the two documents the first search printed, then the one MMR passed over
    [pick] = traces[2]["stages"]
    assert (pick["in"], pick["out"], pick["excluded_count"]) == (3, 2, 1)
    [cut] = pick["excluded"]
    assert sorted([*(i for i, _ in mmr), cut["id"]]) == sorted(["1", "2", "4"]) and cut["id"] == "4"
    detail = "in the fetch_k pool of 3, not picked: maximal marginal relevance took 2, lambda_mult=0.5"
    assert (cut["rank"], cut["score_kind"], cut["reason"], cut["detail"]) == (2, "similarity", "custom:not_picked_by_mmr", detail)
    assert cut["score"] < min(c["score"] for c in pick["candidates"])
    fate = run.ragtrail("show", traces[2]["trace_id"], "--doc", "4").stdout.splitlines()
    component = "retrieve langchain_core.vectorstores.in_memory.InMemoryVectorStore"
    assert [line.split() for line in fate[1:]] == [
        ["0", *component.split(), "EXCLUDED", "from", "input", "rank", "2,", "cut:", "custom:not_picked_by_mmr", *f"({detail})".split()],
        ["fate:", "excluded", "at", *component.split(), "(custom:not_picked_by_mmr)"],
    ]
