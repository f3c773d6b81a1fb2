"""Haystack's AutoMergingRetriever page (an app nobody on the team had written): a BM25 retriever over
the leaves of a HierarchicalDocumentSplitter tree, AutoMergingRetriever over the parents' store, the
prompt and a generator. No stage recorded the merge: the three leaves it replaced vanished after the
BM25 stage without a reason, and coverage said "1 of 13 read, and 1 in the context of unknown origin"
while the model read the parent holding all three. The merge is now a ``retrieve`` stage without a
query whose outputs are the leaf it kept and the parent it read (``merge@1``, each replaced leaf
``custom:merged`` into it), so coverage counts the 4 leaves read."""

from __future__ import annotations

import json

from tests.apps.runner import assert_host_untouched, run_app
from tests.apps.test_derived_apps import fate
from tests.apps.test_haystack_ranker_apps import sha
from tests.apps.test_langchain_haystack_apps import manifests, stages_of

WARM, SING, TREES, WATER = "warm glow over ", "began to sing.", "the trees. Birds ", "the water until "
BLOCK = "warm glow over the trees. Birds began to sing."


def test_auto_merged_parent_is_a_read_unit(tmp_path):
    run = run_app("haystack_auto_merging.py", tmp_path)
    assert_host_untouched(run)
    lines = run.stdout.splitlines()
    assert lines[-1] == "The birds began to sing in the warm morning."
    [m] = manifests(run)
    assert stages_of(m) == [
        ("retrieve", "InMemoryBM25Retriever", 0, 4, 0),
        ("retrieve", "AutoMergingRetriever", 4, 2, 3),
        ("generate", "FakeGenerator", 2, 2, 0),
    ]
    bm25, merging, generate = m["stages"]
    assert [(c["sha256"], c["score_kind"], c["hop"]) for c in bm25["candidates"]] == [
        (sha(WARM), "bm25", 0),
        (sha(SING), "bm25", 0),
        (sha(TREES), "bm25", 0),
        (sha(WATER), "bm25", 0),
    ]
    warm, sing, trees, water = (c["id"] for c in bm25["candidates"])
    assert merging["query"] is None
    kept, parent = merging["candidates"]
    assert (kept["id"], kept["score"], kept["score_kind"], kept["hop"]) == (water, bm25["candidates"][3]["score"], "bm25", 0)
    assert (parent["sha256"], parent["score"], parent["score_kind"], parent["hop"]) == (sha(BLOCK), None, "none", 0)
    assert (parent["transform_rule"], json.loads(parent["derived_from"])) == ("merge@1", [warm, sing, trees])
    assert [(e["id"], e["reason"], e["detail"]) for e in merging["excluded"]] == [
        (leaf, "custom:merged", f"into {parent['id']}") for leaf in (warm, sing, trees)
    ]
    # the printed ids are the recorded ones
    assert [line.split()[1] for line in lines[4:6]] == [water[:8], parent["id"][:8]]
    assert [c["id"] for c in generate["candidates"]] == [water, parent["id"]] == m["in_context"]
    cov = m["coverage"]
    # retrieved: the ids the retrieve stages handed on (4 leaves, the parent); read: the 4 leaves (3 in the parent)
    assert (cov["corpus_size"], cov["retrieved"], cov["in_context"], cov["unknown_origin"], cov["exhaustive"]) == (13, 5, 4, 0, False)
    assert cov["statement"] == "4 of 13 read: an absence claim is not supported"
    assert m["findings"] == [
        "retrieve haystack.components.retrievers.auto_merging_retriever.AutoMergingRetriever: 1 parent(s) read from the "
        "document store in place of 3 of the 4 leaves (more than threshold=0.5 of a parent's children found)"
    ]
    for leaf in (warm, sing, trees):
        chain = fate(run, m["trace_id"], leaf)
        assert (chain["merged_into"], chain["verdict"]) == (parent["id"], f"merged into {parent['id']}, which reached the context")
    assert fate(run, m["trace_id"], parent["id"])["verdict"] == "reached the context, not cited"
