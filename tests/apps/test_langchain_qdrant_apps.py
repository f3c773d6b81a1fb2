"""langchain-qdrant in memory, the integration page's searches (issue 24, principle 5): a direct
``QdrantVectorStore`` search records its query hop (before: only the client's ``query_points``, no
hop), each point has one id, the Qdrant id (before: a content hash beside it), and the MMR retriever
records its lambda and says the candidates Qdrant did not pick are hidden."""

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
        [("retrieve", "VectorStoreRetriever", 1, 1, 0), ("retrieve", "query_points", 0, 1, 0)],
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
    assert retriever["findings"] == [
        "maximal marginal relevance picked from 20 fetched candidates (fetch_k): the ones it did not pick are not recorded"
    ]
    mmr = ms[3]["stages"][1]
    assert mmr["knobs"] == {"top_k": 1, "mmr_lambda": 0.5}
    assert mmr["findings"] == ["maximal marginal relevance ran inside Qdrant over 20 candidates: the ones it did not pick are not returned"]
    assert [m["findings"] for m in ms[:3]] == [[], [], []]
