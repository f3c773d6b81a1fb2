"""Haystack's SentenceTransformersDiversityRanker page (issue 24, principle 5): the ranker, now in
``haystack_integrations``, is a stage alone and after a retriever. Before, alone it left no trace,
and a pipeline ending in it claimed every retrieved document while it dropped one."""

from __future__ import annotations

import ast
import hashlib

import pytest
from tests.apps.runner import assert_host_untouched, run_app
from tests.apps.test_langchain_haystack_apps import manifests, stages_of

pytestmark = pytest.mark.torch


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_diversity_ranker_alone_and_after_bm25(tmp_path):
    run = run_app("haystack_diversity_ranker.py", tmp_path)
    assert_host_untouched(run)
    alone, piped = manifests(run)
    assert stages_of(alone) == [("rerank", "SentenceTransformersDiversityRanker", 2, 2, 0)]
    [stage] = alone["stages"]
    order = run.stdout.splitlines()[0]
    assert order in ("['Berlin', 'Paris']", "['Paris', 'Berlin']")
    first = "Berlin" if order.startswith("['Berlin'") else "Paris"
    assert stage["candidates"][0]["sha256"] == sha(first)
    assert stage["knobs"] == {"top_k": 10} and [(h["hop"], h["text"]) for h in alone["query_hops"]] == [(0, "What is the capital of germany?")]

    assert stages_of(piped) == [("retrieve", "InMemoryBM25Retriever", 0, 3, 0), ("rerank", "SentenceTransformersDiversityRanker", 3, 2, 1)]
    retrieve, ranker = piped["stages"]
    assert ranker["knobs"] == {"top_k": 2, "mmr_lambda": 0.3}
    kept = [c["id"] for c in ranker["candidates"]]
    [cut] = ranker["excluded"]
    assert sorted([*kept, cut["id"]]) == sorted(c["id"] for c in retrieve["candidates"])
    assert (cut["reason"], cut["detail"]) == ("below_rank_cutoff", "top_k=2: not picked by maximum_margin_relevance (lambda_threshold=0.3)")
    texts = {c["id"]: c["sha256"] for c in retrieve["candidates"]}
    printed = ast.literal_eval(run.stdout.splitlines()[1])  # the app prints the kept contents
    assert [texts[i] for i in kept] == [sha(t) for t in printed]
    # what reached the context is what the ranker kept, not all three retrieved
    assert sorted(piped["in_context"]) == sorted(kept)
    assert (piped["coverage"]["corpus_size"], piped["coverage"]["retrieved"], piped["coverage"]["in_context"]) == (4, 3, 2)
    fate = run.ragtrail("show", piped["trace_id"], "--doc", cut["id"]).stdout
    assert "maximum_margin_relevance" in fate
    # the MMR pick gives no scores of its own: keeping the top of its input is no silent fallback
    assert [t["insights"] for t in run.traces()] == [[], []]
    assert "Insights: none found" in run.show_text(piped["trace_id"])
