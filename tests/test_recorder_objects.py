"""What the recorder keeps alive per query: fewer objects for the host's garbage collector, the same
records (issue 25). A candidate is one object (no ``__dict__``); the hits handed up to an outer
retrieval stage are kept as columns once a nested stage of another kind ran; bare-id exclusions with
one reason share one record. Each is checked on what is recorded, not only on the objects."""

from __future__ import annotations

import pytest

import ragtrail
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import receipt
from ragtrail.recorder.candidates import Candidate, pack, unpack
from ragtrail.recorder.stage import handed_up
from spanutil import by_name, events

DOCS = [{"id": f"d{i}", "content": f"text number {i}", "score": 1.0 - i / 10} for i in range(4)]


def test_a_candidate_is_one_object_and_its_copy_keeps_the_receipt():
    stamped = receipt("alpha")
    original = Candidate("a", "alpha", 0.5, "similarity", {"k": 1}, 2, None, None, raw=object()).with_receipt(stamped)
    assert not hasattr(original, "__dict__")
    copy = original.copy(score=0.9)
    assert (copy.id, copy.content, copy.score, copy.score_kind, copy.metadata, copy.hop, copy.raw) == (
        "a",
        "alpha",
        0.9,
        "similarity",
        {"k": 1},
        2,
        original.raw,
    )
    assert copy._receipt is stamped and copy is not original and original.score == 0.5
    assert original.copy(content="beta").receipt == receipt("beta")  # new content: stamped again
    original._handed = True
    assert original.copy()._handed is False
    with pytest.raises(TypeError):
        original.copy(_receipt=None)


def test_packed_candidates_come_back_equal():
    raw = object()
    candidates = [
        Candidate("a", "alpha", 0.5, "bm25", None, 0, None, None, raw).with_receipt(receipt("alpha")),
        Candidate("b", None, None, None, {"x": "y"}, None, "rule", "sha", None),
    ]
    back = unpack(pack(candidates))
    assert back == candidates
    assert [(c._receipt, c.raw) for c in back] == [(receipt("alpha"), raw), (None, None)]
    assert unpack(pack([])) == []


def test_hits_handed_up_are_packed_once_a_filter_ran_inside_and_are_still_handed_up(span_exporter):
    with ragtrail.stage("retrieve", "tests.outer") as outer:
        outer.query("which text?")
        with ragtrail.stage("retrieve", "tests.store") as store:
            store.outputs(DOCS)
        before = handed_up(outer)
        record = outer._recorded()
        assert record is not None and len(record.inner) == 4 and record.inner_packed is None
        with ragtrail.stage("filter", "tests.cutoff") as cut:
            cut.inputs(DOCS)
            cut.outputs(DOCS[:2])
        assert record.inner == [] and record.inner_packed is not None  # no candidate object kept
        after = handed_up(outer)
        assert after == before and [c.receipt for c in after] == [c.receipt for c in before]
        outer.outputs(DOCS[:2])
    span = by_name(span_exporter.get_finished_spans(), "retrieve outer")
    # the outer stage's inputs are not the inner hits (a filter explained the drops), and its
    # retrieval is what the store found: the pipeline's coverage counts all four
    assert events(span, sc.EVENT_EXCLUSION) == []
    assert span.attributes[sc.COVERAGE_RETRIEVED] == 4


def test_bare_id_exclusions_with_one_reason_share_one_record(span_exporter):
    with ragtrail.stage("rerank", "tests.rerank", top_k=1) as s:
        s.inputs(DOCS)
        s.outputs(DOCS[:1])
        for doc in DOCS[1:3]:
            s.exclude(doc["id"], "below_rank_cutoff", "top_k=1")
        s.exclude(DOCS[3]["id"], "below_rank_cutoff", "top_k=1 and more")
        explicit = s._recorded().explicit
        assert explicit["d1"] is explicit["d2"] and explicit["d3"] is not explicit["d2"]
    (span,) = span_exporter.get_finished_spans()
    said = [(e[sc.CANDIDATE_ID], e[sc.EXCLUSION_REASON], e.get(sc.EXCLUSION_DETAIL)) for e in events(span, sc.EVENT_EXCLUSION)]
    assert said == [("d1", "below_rank_cutoff", "top_k=1"), ("d2", "below_rank_cutoff", "top_k=1"), ("d3", "below_rank_cutoff", "top_k=1 and more")]
