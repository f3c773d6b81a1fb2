"""diff: same evidence means look at the model; otherwise name the first stage where evidence differs."""

from __future__ import annotations

from fixtures.ragtrail_traces import rag_run, record
from ragtrail.inspect.diff import diff
from ragtrail.inspect.manifest import build
from ragtrail.inspect.sources import FileSource


def _two(tmp_path, a_kwargs, b_kwargs):
    a = record(tmp_path / "a", lambda t: rag_run(t, **a_kwargs))
    b = record(tmp_path / "b", lambda t: rag_run(t, **b_kwargs))
    return build(FileSource(tmp_path / "a").get(a)), build(FileSource(tmp_path / "b").get(b))


def test_same_evidence_points_at_the_model(tmp_path):
    a, b = _two(tmp_path, {}, {"cite": ("policy-2026-01",)})
    d = diff(a, b)
    assert d["same_evidence"] is True
    assert d["verdict"] == "same evidence at every stage: look at the model (it cited differently)"
    assert d["first_difference"] is None
    assert [s["same"] for s in d["stages"]] == [True, True, True, True, False]  # only cite differs
    assert (d["cited_a"], d["cited_b"]) == (["policy-2024-11"], ["policy-2026-01"])


def test_rerank_is_named_with_rank_deltas(tmp_path):
    a, b = _two(tmp_path, {}, {"rerank_order": ["sales-deck-q1", "policy-2024-11", "policy-2026-01", "sla-2025"]})
    d = diff(a, b)
    assert d["verdict"] == "evidence first differs at rerank (tests.rerank): +1 -1 candidates, 1 moved, exclusions"
    rerank = next(s for s in d["stages"] if s["kind"] == "rerank")
    assert rerank["added"] == [{"id": "sales-deck-q1", "rank": 0, "score": 1.0}]
    assert rerank["removed"] == [{"id": "policy-2026-01", "rank": 1, "score": 0.9}]
    assert rerank["moved"] == [{"id": "policy-2024-11", "rank_a": 0, "rank_b": 1, "delta": 1, "score_a": 1.0, "score_b": 0.9}]
    assert rerank["exclusions_new"] == [{"id": "policy-2026-01", "reason": "below_rank_cutoff", "detail": "top_k=2"}]
    assert rerank["exclusions_gone"] == [{"id": "sales-deck-q1", "reason": "below_rank_cutoff", "detail": "top_k=2"}]
    assert [s["kind"] for s in d["stages"] if not s["same"]] == ["rerank"]


def test_a_different_rewrite_differs_first_at_the_transform(tmp_path):
    a, b = _two(tmp_path, {}, {"rewritten": "enterprise refund policy"})
    d = diff(a, b)
    assert d["first_difference"] == {"kind": "query_transform", "component": "tests.rewrite"}
    assert d["verdict"] == "evidence first differs at query_transform (tests.rewrite): query"
    changed = [(s["kind"], s["query_a"], s["query_b"]) for s in d["stages"] if s["query_changed"]]
    assert changed == [
        ("query_transform", "enterprise refund window", "enterprise refund policy"),
        ("retrieve", "enterprise refund window", "enterprise refund policy"),
        ("rerank", "enterprise refund window", "enterprise refund policy"),
    ]
    assert d["query_hops"] == [
        {
            "hop": 1,
            "a": {"transform": "rewrite", "text": "enterprise refund window"},
            "b": {"transform": "rewrite", "text": "enterprise refund policy"},
        }
    ]


def test_thousand_candidates_by_id(tmp_path):
    docs = [{"id": f"d{i:04d}", "content": f"c{i}", "score": 1.0, "metadata": {"status": "active"}} for i in range(1000)]
    moved = docs[:]
    moved[10], moved[500] = moved[500], moved[10]
    a, b = _two(tmp_path, {"docs": docs, "top_k": 1000}, {"docs": moved, "top_k": 1000})
    d = diff(a, b)
    retrieve = next(s for s in d["stages"] if s["kind"] == "retrieve")
    assert sorted((m["id"], m["delta"]) for m in retrieve["moved"]) == [("d0010", 490), ("d0500", -490)]
    assert retrieve["added"] == retrieve["removed"] == []
    assert d["verdict"] == "evidence first differs at retrieve (tests.bm25): 2 moved"
