"""Haystack's MetaFieldRanker and LostInTheMiddleRanker pages, each ranker after a BM25 retriever in
a pipeline (issue 24: every component that cuts candidates is a stage, each cut with the rule that
made it)."""

from __future__ import annotations

import hashlib

from tests.apps.runner import assert_host_untouched, run_app
from tests.apps.test_langchain_haystack_apps import manifests, stages_of

PARIS = "Paris is a city in Europe with many museums"
BERLIN = "Berlin is a city in Europe with many parks"
BARCELONA = "Barcelona is a city in Europe by the sea"
LISBON = "Lisbon is a city in Europe on seven hills"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_meta_field_and_lost_in_the_middle_rankers(tmp_path):
    run = run_app("haystack_rankers.py", tmp_path)
    assert_host_untouched(run, stderr_empty=False)  # Haystack's own warning about Lisbon's missing rating, in both runs
    assert "currently set to 'rating' but the Documents with IDs" in run.stderr
    assert run.stdout == f"{BARCELONA} 2.1\n{PARIS} 1.3\n{PARIS}\n{BARCELONA}\n{BERLIN}\n"
    meta, litm = manifests(run)
    assert stages_of(meta) == [("retrieve", "InMemoryBM25Retriever", 0, 4, 0), ("rerank", "MetaFieldRanker", 4, 2, 2)]
    retrieve, ranker = meta["stages"]
    ids = {c["sha256"]: c["id"] for c in retrieve["candidates"]}
    assert [c["id"] for c in ranker["candidates"]] == [ids[sha(BARCELONA)], ids[sha(PARIS)]]
    assert [c["score_kind"] for c in ranker["candidates"]] == ["rrf", "rrf"]  # ranking_mode reciprocal_rank_fusion
    assert sorted((e["id"], e["reason"], e["detail"]) for e in ranker["excluded"]) == sorted(
        [
            (ids[sha(BERLIN)], "below_rank_cutoff", "top_k=2"),
            (ids[sha(LISBON)], "below_rank_cutoff", "top_k=2 (meta field 'rating' missing: ranked last, missing_meta=bottom)"),
        ]
    )
    assert sorted(meta["in_context"]) == sorted([ids[sha(BARCELONA)], ids[sha(PARIS)]])
    assert (meta["coverage"]["corpus_size"], meta["coverage"]["retrieved"], meta["coverage"]["in_context"]) == (4, 4, 2)

    assert stages_of(litm) == [("retrieve", "InMemoryBM25Retriever", 0, 4, 0), ("rerank", "LostInTheMiddleRanker", 4, 3, 1)]
    retrieve, ranker = litm["stages"]
    order = [c["id"] for c in retrieve["candidates"]]
    assert order[0] == ids[sha(PARIS)]  # "museums" is only in Paris
    # lost in the middle: best first, second best last; the fourth would pass 20 words
    assert [c["id"] for c in ranker["candidates"]] == [order[0], order[2], order[1]]
    assert ranker["knobs"] == {"budget_limit": 20, "budget_used": 27, "budget_unit": "words"}
    assert [(e["id"], e["reason"], e["detail"]) for e in ranker["excluded"]] == [
        (order[3], "budget_exceeded", "27 words >= word_count_threshold=20 before this document")
    ]
    assert (litm["coverage"]["corpus_size"], litm["coverage"]["retrieved"], litm["coverage"]["in_context"]) == (4, 4, 3)
    assert meta["findings"] == [] and litm["findings"] == []
    # neither ranker fell back: lost in the middle keeps the retriever's best first by design and gives no
    # scores of its own, so handing the upstream order and scores on is no evidence of a silent fallback
    assert [t["insights"] for t in run.traces()] == [[], []]
    assert "Insights: none found" in run.show_text(litm["trace_id"])
