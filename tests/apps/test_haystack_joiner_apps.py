"""Haystack's DocumentJoiner page, each join mode over one hybrid pipeline (issue 24: "wrong scores"
and "reached the context"): a concatenate join keeps the BM25 kind of the BM25 scores it hands on
(they read ``similarity`` before), the RRF and DBRF joins rescore, and the document the join's
``top_k`` cut is cut there, never "reached the context" (no context stage: what reached a model is
unknown)."""

from __future__ import annotations

from tests.apps.runner import assert_host_untouched, run_app
from tests.apps.test_langchain_haystack_apps import manifests, stages_of

MODES = [("concatenate", "bm25"), ("reciprocal_rank_fusion", "rrf"), ("distribution_based_rank_fusion", "relative")]


def test_joiner_modes(tmp_path):
    run = run_app("haystack_joiner_modes.py", tmp_path)
    assert_host_untouched(run)
    lines = run.stdout.splitlines()
    assert [line for line in lines if "_" in line or line in ("concatenate", "merge")] == [mode for mode, _ in MODES] + ["merge"]
    *ms, merged = manifests(run)
    assert len(ms) == len(MODES)
    check_merge(merged, [float(line.rsplit(" ", 1)[1]) for line in lines[lines.index("merge") + 1 :]])
    for m, (mode, kind) in zip(ms, MODES, strict=True):
        assert stages_of(m) == [
            ("retrieve", "InMemoryBM25Retriever", 0, 3, 0),
            ("retrieve", "InMemoryEmbeddingRetriever", 0, 3, 0),
            ("fuse", "DocumentJoiner", 6, 3, 3),
        ], mode
        bm25, dense, fuse = m["stages"]
        assert [c["score_kind"] for c in bm25["candidates"]] == ["bm25"] * 3
        assert [c["score_kind"] for c in dense["candidates"]] == ["similarity"] * 3
        bm25_ids, dense_ids = [c["id"] for c in bm25["candidates"]], [c["id"] for c in dense["candidates"]]
        assert bm25_ids[:2] == dense_ids[:2] and bm25_ids[2] != dense_ids[2]
        # the join keeps the BM25 list's three (the dense list's first two are the same documents)
        assert [(c["id"], c["score_kind"]) for c in fuse["candidates"]] == [(i, kind) for i in bm25_ids], mode
        if mode == "concatenate":  # the very scores BM25 gave
            assert [c["score"] for c in fuse["candidates"]] == [c["score"] for c in bm25["candidates"]]
        assert [(e["id"], e["reason"], e["detail"], e["score_kind"]) for e in fuse["excluded"]] == [
            (dense_ids[0], "deduplicated", f"duplicate id of {dense_ids[0]}", "similarity"),
            (dense_ids[1], "deduplicated", f"duplicate id of {dense_ids[1]}", "similarity"),
            (dense_ids[2], "below_rank_cutoff", "top_k=3", "similarity"),
        ], mode
        assert [(h["hop"], h["transform"], h["hit_index"]) for h in m["query_hops"]] == [(0, "none", True)]
        coverage = m["coverage"]
        assert (coverage["corpus_size"], coverage["retrieved"], coverage["in_context"]) == (6, 4, None)
        assert m["in_context"] is None and m["findings"] == []
    cut = ms[1]["stages"][1]["candidates"][2]["id"]
    fate = run.ragtrail("show", ms[1]["trace_id"], "--doc", cut).stdout
    assert "below_rank_cutoff" in fate and "reached the context" not in fate


def check_merge(m: dict, printed: list[float]) -> None:
    """The page's ``merge`` mode with weights [0.3, 0.7] (no one on the team had run it): each score is
    BM25 x 0.3 plus cosine x 0.7, added as they are. The fuse stage called it ``relative`` ("a
    normalised weighted fusion score"): it is no normalised score; now kind ``none`` and a finding."""
    assert stages_of(m) == [
        ("retrieve", "InMemoryBM25Retriever", 0, 3, 0),
        ("retrieve", "InMemoryEmbeddingRetriever", 0, 3, 0),
        ("fuse", "DocumentJoiner", 6, 3, 3),
    ]
    bm25, dense, fuse = m["stages"]
    weight = {"bm25": 0.3, "similarity": 0.7}
    summed: dict[str, float] = {}
    for c in bm25["candidates"] + dense["candidates"]:
        summed[c["id"]] = summed.get(c["id"], 0.0) + c["score"] * weight[c["score_kind"]]
    assert [round(c["score"], 4) for c in fuse["candidates"]] == printed
    assert [(c["id"], c["score_kind"]) for c in fuse["candidates"]] == [(i, "none") for i in sorted(summed, key=summed.get, reverse=True)[:3]]
    assert all(abs(c["score"] - summed[c["id"]]) < 1e-9 for c in fuse["candidates"])
    assert fuse["findings"] == [
        "join_mode=merge: each score is the sum of the document's input scores times their list's weight (weights [0.3, 0.7]), "
        "not normalised: scores of kind bm25, similarity added as they are (score kind none)"
    ]
