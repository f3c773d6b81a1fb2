"""Weaviate's "bring your own vectors" quickstart (tests/apps/weaviate_quickstart.py) run plain and under
``opentelemetry-instrument`` against a REAL Weaviate 1.35.2 server (tests/weaviateutil.py), read back
with the real ``ragtrail`` CLI: the app's output is untouched, ``verify`` raises no alarm, and each
manifest has the collection's own object ids, the distances / scores with their kind, k, the filter and
the query hop."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("weaviate")

from tests.apps.runner import assert_host_untouched, run_app  # noqa: E402
from tests.apps.test_embedded_store_apps import entry_point_env, manifests  # noqa: E402

from ragtrail.instrumentation.weaviate import GENERATED_ON_SERVER, UNRANKED  # noqa: E402
from weaviateutil import Weaviate  # noqa: E402


def test_weaviate_quickstart_app(weaviate_server: Weaviate, tmp_path: Path) -> None:
    env = entry_point_env("ragtrail_weaviate", "ragtrail.instrumentation.weaviate:WeaviateInstrumentor", tmp_path)
    env.update({"WEAVIATE_PORT": str(weaviate_server.http_port), "WEAVIATE_GRPC_PORT": str(weaviate_server.grpc_port)})
    before = weaviate_server.requests()
    run = run_app("weaviate_quickstart.py", tmp_path, enabled=["ragtrail_weaviate"], data="weaviate_jeopardy", extra_env=env)
    assert_host_untouched(run)
    sections = run.stdout.split("\n\n")  # the app prints a blank line after each query's results
    assert sections[-1] == ""
    nearest, animals, keyword, hybrid = ([line.split(" ", 2) for line in part.splitlines()] for part in sections[:4])
    generated, fetched = sections[4], [line.split(" ", 1) for line in sections[5].splitlines()]
    # what the app itself got from Weaviate (the same in both runs)
    assert [p[2] for p in nearest] == ["Liver", "species"]
    assert [p[2] for p in animals] == ["the diamondback rattler", "the nose or snout"]
    assert [p[2] for p in keyword] == ["species", "Antelope"]  # the two with "species"; limit 3
    assert [p[2] for p in hybrid][:2] == ["species", "Liver"] and len(hybrid) == 3
    # the RAG step: the server built the prompt from the two nearest objects' properties (the dummy module quotes it)
    assert generated.startswith("You want me to generate something based on the following prompt: Write a tweet with emojis about these facts.: [")
    assert [p[1] for p in fetched] == ["Antelope", "Elephant"]  # ANIMALS by answer (without a sort Weaviate's order varied between runs)
    vector, where, bm25, fused, rag, listing = manifests(run)  # one trace per query: the app runs no pipeline around them
    methods = ("near_vector", "near_vector", "bm25", "hybrid", "generate.near_vector", "fetch_objects")
    for m, method in zip((vector, where, bm25, fused, rag, listing), methods, strict=True):
        [stage] = m["stages"]
        assert (stage["kind"], stage["component"], stage["status"]) == ("retrieve", f"weaviate.{method}", "ok")
        assert stage["collection"] == "Question" and stage["excluded_count"] == 0
        assert m["coverage"]["corpus_size"] is None  # ragtrail asks Weaviate nothing (no aggregate)
    [v], [w], [k], [h] = vector["stages"], where["stages"], bm25["stages"], fused["stages"]
    # near_vector: the objects' own uuids, cosine distances (lower is better), k = limit, a vector receipted only
    assert v["knobs"] == {"top_k": 2} and v["filter"] is None and v["query"] is None
    assert [(c["id"], c["rank"], c["score_kind"]) for c in v["candidates"]] == [(p[0], i, "distance") for i, p in enumerate(nearest)]
    assert [round(c["score"], 4) for c in v["candidates"]] == [float(p[1]) for p in nearest]
    assert w["filter"] == '{"op":"FilterValue","operator":"Equal","target":"category","value":"ANIMALS"}'
    assert [(c["id"], round(c["score"], 4)) for c in w["candidates"]] == [(p[0], float(p[1])) for p in animals]
    # bm25: the query text as hop 0, BM25 scores
    assert k["knobs"] == {"top_k": 3} and k["query"]["text"] == "species" and k["query"]["hop"] == 0
    assert [(c["id"], c["score_kind"], round(c["score"], 4)) for c in k["candidates"]] == [(p[0], "bm25", float(p[1])) for p in keyword]
    # hybrid: the server's fused score under relativeScoreFusion (its default); the legs' own scores are not in the reply
    assert h["knobs"] == {"top_k": 3} and h["query"]["text"] == "species"
    assert [(c["id"], c["score_kind"], round(c["score"], 4)) for c in h["candidates"]] == [(p[0], "relative", float(p[1])) for p in hybrid]
    for m in (vector, where, bm25, fused):
        assert m["stages"][0]["findings"] == []
    # generate.near_vector: the same search as near_vector (ids, distances, k), the generation said to be the server's
    [g], [f] = rag["stages"], listing["stages"]
    assert [(c["id"], c["score_kind"]) for c in g["candidates"]] == [(c["id"], "none") for c in v["candidates"]]  # no return_metadata
    assert g["knobs"] == {"top_k": 2} and g["findings"] == [GENERATED_ON_SERVER.format("grouped_task")]
    assert "generate" not in [s["kind"] for s in rag["stages"]]
    # fetch_objects: the filtered objects in the order of the sort, no score, no query
    assert [(c["id"], c["score_kind"], c["rank"]) for c in f["candidates"]] == [(p[0], "none", i) for i, p in enumerate(fetched)]
    sort = ' (sort: {"op":"Sorting","sorts":[{"ascending":true,"op":"Sort","prop":"answer"}]})'
    assert f["knobs"] == {"top_k": 2} and f["query"] is None and f["findings"] == [UNRANKED.format(sort)]
    assert f["filter"] == '{"op":"FilterValue","operator":"Equal","target":"category","value":"ANIMALS"}'
    # the two runs asked the server the same: 6 searches each (generate and fetch are searches too), ragtrail added none
    searches = (weaviate_server.requests() - before)["grpc Search"]
    assert searches == 12
