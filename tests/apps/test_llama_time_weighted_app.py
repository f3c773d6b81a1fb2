"""LlamaIndex's "Time-Weighted Rerank" example: the postprocessor's own scores (similarity + the
decayed recency) reach the response synthesizer, which hands them on unchanged. That generate stage
read as a silent fallback (the finding ``rerank_is_identity``) though it
claims no rerank of its own (probe h74)."""

from __future__ import annotations

import pytest
from tests.apps.runner import assert_host_untouched, manifests, run_app
from tests.apps.test_derived_apps import assert_verifies_clean
from tests.apps.test_langchain_haystack_apps import stages_of


def test_time_weighted_rerank_scores_handed_on_are_no_fallback(tmp_path):
    run = run_app("llama_time_weighted.py", tmp_path)
    assert_host_untouched(run)
    assert run.stdout == "[('v3', 1.2933)]\n"
    [m] = manifests(run)
    assert stages_of(m) == [
        ("retrieve", "VectorIndexRetriever", 0, 3, 0),
        ("rerank", "TimeWeightedPostprocessor", 3, 1, 2),
        ("generate", "CompactAndRefine", 1, 1, 0),
        ("budget", "PromptHelper", 1, 1, 0),
        ("budget", "PromptHelper", 1, 1, 0),
    ]
    retrieve, rerank, generate = m["stages"][:3]
    similarity = {c["id"]: c["score"] for c in retrieve["candidates"]}
    assert [(c["id"], c["score_kind"]) for c in retrieve["candidates"]] == [("v2", "similarity"), ("v1", "similarity"), ("v3", "similarity")]
    # the pick: similarity + 0.5 ** hours since the last access (1, 24, 72 hours)
    assert [(c["id"], c["score_kind"]) for c in rerank["candidates"]] == [("v3", "rerank")]
    assert rerank["candidates"][0]["score"] == pytest.approx(similarity["v3"] + 0.5)
    assert [(e["id"], e["reason"], e["detail"]) for e in rerank["excluded"]] == [
        ("v2", "below_rank_cutoff", "top_k=1"),
        ("v1", "below_rank_cutoff", "top_k=1"),
    ]
    assert [(c["id"], c["score"], c["score_kind"]) for c in generate["candidates"]] == [("v3", rerank["candidates"][0]["score"], "rerank")]
    assert [s["findings"] for s in m["stages"]] == [[]] * 5
    assert m["in_context"] == ["v3"]
    assert (m["coverage"]["corpus_size"], m["coverage"]["retrieved"], m["coverage"]["in_context"]) == (3, 3, 1)
    assert [t["insights"] for t in run.traces()] == [[]]
    assert_verifies_clean(run, m["trace_id"])
