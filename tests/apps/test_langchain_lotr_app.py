"""LangChain's LOTR (MergerRetriever) page, an app nobody on the team had written: two Chroma stores
behind a similarity and an MMR retriever, merged, then EmbeddingsRedundantFilter and
LongContextReorder in a DocumentCompressorPipeline. It read true; kept as a regression guard.

The page as written (``search_kwargs={"k": 5, "include_metadata": True}``) fails on
langchain-community's Chroma (chromadb refuses the keyword): every stage ``failed``, and coverage then
said "empty result: the search found nothing (not a failure)" (no pipeline span stamped a run status);
tests/test_coverage_truth.py keeps that case."""

from __future__ import annotations

from tests.apps.runner import assert_host_untouched, run_app
from tests.apps.test_langchain_haystack_apps import COMMUNITY_WARNING, manifests, stages_of

BRANCHES = [
    ("retrieve", "VectorStoreRetriever", 3, 3, 0),
    ("retrieve", "Collection", 0, 3, 0),
    ("retrieve", "VectorStoreRetriever", 5, 3, 2),
    ("retrieve", "Collection", 0, 5, 0),
]
MERGED = ["doc-1", "doc-1", "doc-0", "doc-0", "doc-3", "doc-3"]


def test_lotr_merger_dedup_and_reorder(tmp_path):
    run = run_app("langchain_lotr.py", tmp_path)
    assert_host_untouched(run, stderr_empty=False)
    assert COMMUNITY_WARNING in run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 9 and [line.split()[0] for line in lines] == ["merged"] * 6 + ["final"] * 3
    bare, compressed = manifests(run)
    assert stages_of(bare) == [("retrieve", "MergerRetriever", 6, 6, 0), *BRANCHES]
    assert stages_of(compressed) == [
        ("retrieve", "ContextualCompressionRetriever", 0, 3, 0),
        ("retrieve", "MergerRetriever", 6, 6, 0),
        *BRANCHES,
        ("filter", "EmbeddingsRedundantFilter", 6, 3, 3),
        ("rerank", "LongContextReorder", 3, 3, 0),
    ]
    for m in (bare, compressed):
        merger, similar, chroma_all, mmr, chroma_mmr = m["stages"][-5:] if m is bare else m["stages"][1:6]
        # the merger interleaves its retrievers' lists, one from each in turn: the ids the app wrote
        assert [c["id"] for c in merger["candidates"]] == MERGED
        assert [c["id"] for c in similar["candidates"]] == [c["id"] for c in chroma_all["candidates"]] == ["doc-1", "doc-0", "doc-3"]
        assert [c["id"] for c in chroma_mmr["candidates"]] == ["doc-1", "doc-0", "doc-3", "doc-2", "doc-4"]
        assert [(e["id"], e["reason"]) for e in mmr["excluded"]] == [("doc-2", "custom:not_picked_by_mmr"), ("doc-4", "custom:not_picked_by_mmr")]
    dedup, reorder = compressed["stages"][-2:]
    assert [(e["id"], e["reason"]) for e in dedup["excluded"]] == [("doc-1", "deduplicated"), ("doc-0", "deduplicated"), ("doc-3", "deduplicated")]
    assert [c["id"] for c in reorder["candidates"]] == ["doc-1", "doc-3", "doc-0"] == [c["id"] for c in compressed["stages"][0]["candidates"]]
    assert bare["coverage"]["statement"] == (
        "what reached the model is unknown: no budget, context or generate stage recorded it "
        "(3 retrieved of a corpus of unknown size): an absence claim is not supported"
    )
    assert compressed["coverage"]["statement"] == "3 read of a corpus of unknown size: an absence claim is not supported"
