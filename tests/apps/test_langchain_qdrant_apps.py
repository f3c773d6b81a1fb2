"""langchain-qdrant in memory, the integration page's searches (issue 24, principle 5): a direct
``QdrantVectorStore`` search records its query hop (before: only the client's ``query_points``, no
hop), each point has one id, the Qdrant id (before: a content hash beside it), and the MMR retriever
records its lambda; the in-memory client's stage records the pool Qdrant picked from and each point
it did not pick."""

from __future__ import annotations

from tests.apps.runner import assert_host_untouched, run_app
from tests.apps.test_langchain_haystack_apps import manifests, stages_of


def uid(n: int) -> str:
    return f"00000000-0000-0000-0000-{n:012d}"


def test_qdrant_integration_page_searches(tmp_path):
    run = run_app("langchain_qdrant_memory.py", tmp_path)
    assert_host_untouched(run)
    assert run.stdout.count("'_id': ") == 5 and "'_collection_name': 'demo_collection'" in run.stdout
    ms = manifests(run)  # four searches, no pipeline around them: four traces, none with an alarm
    assert [stages_of(m) for m in ms] == [
        [("retrieve", "QdrantVectorStore", 2, 2, 0), ("retrieve", "query_points", 0, 2, 0)],
        [("retrieve", "QdrantVectorStore", 1, 1, 0), ("retrieve", "query_points", 0, 1, 0)],
        [("retrieve", "QdrantVectorStore", 1, 1, 0), ("retrieve", "query_points", 0, 1, 0)],
        # the MMR pick: the local collection's pool of 6 (candidates_limit=20 over a collection of 6)
        [("retrieve", "VectorStoreRetriever", 1, 1, 0), ("retrieve", "query_points", 6, 1, 5)],
    ]
    queries = [
        "LangChain provides abstractions to make working with LLMs easy",
        "Will it be hot tomorrow",
        "Who are the best soccer players in the world?",
        "Stealing from the bank is a crime",
    ]
    for m, query in zip(ms, queries, strict=True):
        assert [(h["hop"], h["transform"], h["text"], h["hit_index"]) for h in m["query_hops"]] == [(0, "none", query, True)]
        outer, inner = m["stages"]
        # one id per point: the Qdrant id on both stages, never a content hash
        assert [c["id"] for c in outer["candidates"]] == [c["id"] for c in inner["candidates"]]
        assert m["coverage"]["corpus_size"] == 6 and m["in_context"] is None
    assert [[c["id"] for c in m["stages"][0]["candidates"]] for m in ms] == [[uid(6), uid(3)], [uid(5)], [uid(2)], [uid(2)]]
    assert ms[2]["stages"][1]["filter"] == '{"should":[{"key":"metadata.source","match":{"value":"news"}}]}'
    # the retriever's stage: search_type="mmr" with the store's own defaults (lambda_mult=0.5, fetch_k=20)
    retriever = ms[3]["stages"][0]
    assert retriever["knobs"] == {"top_k": 1, "mmr_lambda": 0.5}
    # langchain-qdrant hands MMR to Qdrant: this stage does not see the pool (the client's stage does)
    assert retriever["findings"] == [
        "maximal marginal relevance picked from 20 fetched candidates (fetch_k): the ones it did not pick are not recorded at this stage"
    ]
    mmr = ms[3]["stages"][1]
    assert mmr["knobs"] == {"top_k": 1, "mmr_lambda": 0.5} and mmr["findings"] == []
    # issue 24, principle 5: the in-memory client picks in this process, so the pool it picked from is
    # the stage's inputs (Qdrant ids, cosine similarities) and the five it did not pick are exclusions
    assert [c["id"] for c in mmr["candidates"]] == [uid(2)]
    detail = "in the candidates_limit pool of 6, not picked: maximal marginal relevance took 1, diversity=0.5"
    cuts = mmr["excluded"]
    assert [(c["rank"], c["score_kind"], c["reason"], c["detail"]) for c in cuts] == [
        (r, "similarity", "custom:not_picked_by_mmr", detail) for r in range(1, 6)
    ]
    assert sorted(c["id"] for c in cuts) == sorted(uid(n) for n in (1, 3, 4, 5, 6))
    scores = [c["score"] for c in cuts]
    assert scores == sorted(scores, reverse=True) and scores[0] < mmr["candidates"][0]["score"]  # the pool in Qdrant's order
    fate = run.ragtrail("show", ms[3]["trace_id"], "--doc", cuts[0]["id"]).stdout
    assert f"EXCLUDED from input rank 1, cut: custom:not_picked_by_mmr ({detail})" in fate
    assert "fate: excluded at retrieve qdrant_client.QdrantClient.query_points (custom:not_picked_by_mmr)" in fate
    assert [m["findings"] for m in ms[:3]] == [[], [], []]
