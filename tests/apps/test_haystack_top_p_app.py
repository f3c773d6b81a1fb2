"""Haystack's TopPSampler page: BM25 -> TopPSampler -> PromptBuilder -> generator. The sampler's cut
is a ``filter`` stage whose drops carry the cumulative probability that put them past ``top_p``, and
the context is what the sampler kept (it once vanished from the trail: the generator read two of the
retriever's four)."""

from __future__ import annotations

import hashlib
import math

import pytest
from tests.apps.runner import assert_host_untouched, run_app
from tests.apps.test_langchain_haystack_apps import manifests, stages_of

pytestmark = pytest.mark.torch

BEES = "Bees make honey from the nectar of flowers and store the honey in wax combs."
WASPS = "Wasps eat other insects and sweet fruit in late summer, and they make no honey."
VEILS = "Beekeepers wear veils to keep the bees off their faces."
KEEPS = "Honey keeps for years because it holds so little water."


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


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
    total = sum(math.exp(s) for s in scores)
    cumulative = [sum(math.exp(s) for s in scores[: k + 1]) / total for k in range(4)]
    assert cumulative[1] < 0.9 < cumulative[2]
    assert [(c["id"], c["score"], c["score_kind"]) for c in sampler["candidates"]] == [
        (ids[sha(BEES)], scores[0], "bm25"),
        (ids[sha(WASPS)], scores[1], "bm25"),
    ]
    assert sampler["knobs"] == {"budget_limit": 0.9, "budget_used": pytest.approx(cumulative[1], rel=1e-5), "budget_unit": "probability"}
    got = [(e["id"], e["reason"], e["detail"]) for e in sampler["excluded"]]
    assert [(i, r) for i, r, _ in got] == [(ids[sha(VEILS)], "budget_exceeded"), (ids[sha(KEEPS)], "budget_exceeded")]
    for (_, _, detail), c in zip(got, cumulative[2:], strict=True):
        figure, rest = detail.removeprefix("cumulative probability ").split(" > ")
        assert float(figure) == pytest.approx(c, rel=1e-5) and rest == "top_p=0.9"
    assert [c["id"] for c in generate["candidates"]] == [ids[sha(BEES)], ids[sha(WASPS)]]
    assert sorted(m["in_context"]) == sorted([ids[sha(BEES)], ids[sha(WASPS)]])
    assert (m["coverage"]["corpus_size"], m["coverage"]["retrieved"], m["coverage"]["in_context"]) == (5, 4, 2)
    assert m["findings"] == []
    assert [t["insights"] for t in run.traces()] == [[]]
