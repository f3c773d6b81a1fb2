"""Issue 24, "wrong scores and reasons": documentation apps whose scores were recorded under the
wrong kind or not at all, run plain and under ``opentelemetry-instrument`` and read back with the
real ``ragtrail`` CLI."""

from __future__ import annotations

import hashlib

from tests.apps.runner import assert_host_untouched, run_app
from tests.apps.test_langchain_haystack_apps import COMMUNITY_WARNING, manifests, stages_of


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_time_weighted_retriever_records_its_recency_adjusted_score(tmp_path):
    """The page's "high decay rate" example: "hello world" (the query itself, last accessed a day
    ago) is the best similarity hit, yet "hello foo" (new) is returned. Before, the cut read only
    "rank 0 … below_rank_cutoff top_k=1"; now the score the retriever sorted by, and its parts."""
    run = run_app("langchain_time_weighted.py", tmp_path)
    assert_host_untouched(run, stderr_empty=False)
    assert COMMUNITY_WARNING in run.stderr
    assert run.stdout == "['hello foo']\n"
    [m] = manifests(run)
    assert stages_of(m) == [
        ("retrieve", "TimeWeightedVectorStoreRetriever", 2, 1, 1),
        ("retrieve", "FAISS", 2, 2, 0),
        ("retrieve", "IndexFlatL2", 0, 2, 0),
    ]
    outer, store, _ = m["stages"]
    [kept] = outer["candidates"]
    [cut] = outer["excluded"]
    by_text = {c["sha256"]: c for c in store["candidates"]}
    world, foo = by_text[sha("hello world")], by_text[sha("hello foo")]
    assert (world["score"], world["score_kind"]) == (1.0, "similarity")  # the best similarity
    assert (kept["id"], kept["score_kind"]) == (foo["id"], "rerank")
    assert abs(kept["score"] - (1.0 + foo["score"])) < 1e-3  # recency just under 1 (accessed moments ago) + its similarity
    assert (cut["id"], cut["reason"], cut["rank"]) == (world["id"], "below_rank_cutoff", 1)
    assert cut["detail"].startswith("top_k=1 by recency-adjusted score 1 = similarity 1 + recency ")
    assert float(cut["detail"].rsplit(" ", 1)[1]) < 1e-20  # (1 - 0.999) ** 24 hours
    assert [(h["hop"], h["transform"], h["hit_index"]) for h in m["query_hops"]] == [(0, "none", True)]
    coverage = m["coverage"]
    assert (coverage["corpus_size"], coverage["retrieved"], coverage["in_context"]) == (2, 1, None)  # the outermost retrieval handed on 1
    assert m["in_context"] is None
    fate = run.ragtrail("show", "last", "--doc", world["id"]).stdout
    assert "recency-adjusted score" in fate and "below_rank_cutoff" in fate
