"""Haystack's TopPSampler page: BM25 -> TopPSampler -> PromptBuilder -> generator. The sampler's cut
is a ``filter`` stage whose drops carry the cumulative probability that put them past ``top_p``, and
the context is what the sampler kept (it once vanished from the trail: the generator read two of the
retriever's four)."""

from __future__ import annotations

import pytest
from tests.apps.runner import assert_host_untouched, run_app
from tests.apps.test_haystack_ranker_apps import sha
from tests.apps.test_langchain_haystack_apps import manifests, stages_of

pytestmark = pytest.mark.torch

BEES = "Bees make honey from the nectar of flowers and store the honey in wax combs."
WASPS = "Wasps eat other insects and sweet fruit in late summer, and they make no honey."
VEILS = "Beekeepers wear veils to keep the bees off their faces."
KEEPS = "Honey keeps for years because it holds so little water."


def test_top_p_sampler_cut_is_a_filter_stage(tmp_path):
    run = run_app("haystack_top_p.py", tmp_path)
    assert_host_untouched(run)
    assert run.stdout == f"2.841 {BEES}\n1.655 {WASPS}\nBees make honey from the nectar of flowers.\n"
    [m] = manifests(run)
    assert stages_of(m) == [
        ("retrieve", "InMemoryBM25Retriever", 0, 4, 0),
        ("filter", "TopPSampler", 4, 2, 2),
        ("generate", "FakeGenerator", 2, 2, 0),
    ]
    retrieve, sampler, generate = m["stages"]
    ids = {c["sha256"]: c["id"] for c in retrieve["candidates"]}
    assert [c["sha256"] for c in retrieve["candidates"]] == [sha(BEES), sha(WASPS), sha(VEILS), sha(KEEPS)]
    scores = [c["score"] for c in retrieve["candidates"]]
    from tests.instrumentation.test_haystack_top_p import check_top_p_cut  # imports haystack and torch

    got = [(e["id"], e["reason"], e["detail"]) for e in sampler["excluded"]]
    within = check_top_p_cut([c["id"] for c in retrieve["candidates"]], scores, 0.9, got)
    assert [(c["id"], c["score"], c["score_kind"]) for c in sampler["candidates"]] == [
        (ids[sha(BEES)], scores[0], "bm25"),
        (ids[sha(WASPS)], scores[1], "bm25"),
    ]
    assert sampler["knobs"] == {"budget_limit": 0.9, "budget_used": pytest.approx(within[-1], rel=1e-5), "budget_unit": "probability"}
    assert [c["id"] for c in generate["candidates"]] == [ids[sha(BEES)], ids[sha(WASPS)]]
    assert sorted(m["in_context"]) == sorted([ids[sha(BEES)], ids[sha(WASPS)]])
    assert (m["coverage"]["corpus_size"], m["coverage"]["retrieved"], m["coverage"]["in_context"]) == (5, 4, 2)
    assert m["findings"] == []
    assert [t["insights"] for t in run.traces()] == [[]]
