"""The manifest rebuilt from real recorder traces read back from the local store."""

from __future__ import annotations

import json

import pytest

import ragtrail
from fixtures.ragtrail_traces import DOCS, rag_run, record
from ragtrail.inspect.coverage import coverage
from ragtrail.inspect.errors import NoRagtrailSpans
from ragtrail.inspect.manifest import build
from ragtrail.inspect.sources import FileSource


def _manifest(store, trace_id):
    return build(FileSource(store).get(trace_id)).as_dict()


def test_manifest_of_a_pipeline(tmp_path):
    ragtrail.set_capture(metadata=["updated_at", "status"])
    trace_id = record(tmp_path, rag_run)
    m = _manifest(tmp_path, trace_id)
    # ragtrail.cite's input count is the recorder's business: the manifest must carry what the wire says
    cite_in = next(s.attributes["ragtrail.candidates.in"] for s in FileSource(tmp_path).get(trace_id).spans if s.name == "cite cite")
    assert m["trace_id"] == trace_id
    # contract v2: candidates as columns, content receipts said once, rules said once
    assert m["schema"] == 5  # (schema 1 traces: tests/test_contract_v2.py)
    assert m["pipeline"]["component"] == "tests.answer" and m["pipeline"]["status"] == "ok"
    assert [(h["hop"], h["parent_hop"], h["transform"], h["text"], h["used_by"], h["produced_by"], h["hit_index"]) for h in m["query_hops"]] == [
        (0, None, "none", "refund window?", ["query_transform tests.rewrite"], None, False),
        (1, 0, "rewrite", "enterprise refund window", ["retrieve tests.bm25", "rerank tests.rerank"], "query_transform tests.rewrite", True),
    ]
    assert [(s["kind"], s["component"], s["status"], s["in"], s["out"], s["excluded_count"]) for s in m["stages"]] == [
        ("query_transform", "tests.rewrite", "ok", 0, 0, 0),
        ("retrieve", "tests.bm25", "ok", 0, 5, 0),
        ("filter", "tests.status", "ok", 5, 4, 1),
        ("rerank", "tests.rerank", "ok", 4, 2, 2),
        ("cite", "cite", "ok", cite_in, 1, 0),
    ]
    retrieve = m["stages"][1]
    assert retrieve["knobs"] == {"top_k": 5}
    assert [(c["id"], c["rank"], c["score"], c["score_kind"], c["hop"], c["meta"]) for c in retrieve["candidates"]] == [
        (d["id"], i, d["score"], "bm25", 1, d["metadata"]) for i, d in enumerate(DOCS)
    ]
    assert all(len(c["sha256"]) == 64 and "preview" not in c for c in retrieve["candidates"])
    rerank = m["stages"][3]
    assert [(c["id"], c["rank"], c["score"]) for c in rerank["candidates"]] == [("policy-2024-11", 0, 1.0), ("policy-2026-01", 1, 0.9)]
    assert [(e["id"], e["rank"], e["reason"], e["detail"]) for e in rerank["excluded"]] == [
        ("sales-deck-q1", 2, "below_rank_cutoff", "top_k=2"),
        ("sla-2025", 3, "below_rank_cutoff", "top_k=2"),
    ]
    assert m["excluded"] == [
        {
            "id": "policy-2026-01-draft",
            "stage": "filter",
            "component": "tests.status",
            "reason": "superseded",
            "detail": "replaced by policy-2026-01",
        },
        {"id": "sales-deck-q1", "stage": "rerank", "component": "tests.rerank", "reason": "below_rank_cutoff", "detail": "top_k=2"},
        {"id": "sla-2025", "stage": "rerank", "component": "tests.rerank", "reason": "below_rank_cutoff", "detail": "top_k=2"},
    ]
    assert m["cited"] == ["policy-2024-11"]
    assert [(r["id"], r["score"], r["cited"]) for r in m["retrieved"]] == [(d["id"], d["score"], d["id"] == "policy-2024-11") for d in DOCS]
    assert m["in_context"] == ["policy-2024-11", "policy-2026-01"]
    assert m["survival"] == [
        {"stage": "retrieve", "component": "tests.bm25", "in": 0, "out": 5, "excluded": 0},
        {"stage": "filter", "component": "tests.status", "in": 5, "out": 4, "excluded": 1},
        {"stage": "rerank", "component": "tests.rerank", "in": 4, "out": 2, "excluded": 2},
        {"stage": "cite", "component": "cite", "in": cite_in, "out": 1, "excluded": 0},
    ]
    cov = m["coverage"]
    assert (cov["corpus_size"], cov["retrieved"], cov["in_context"], cov["cited"], cov["exhaustive"]) == (1003, 5, 2, 1, False)
    assert cov["statement"] == "2 of 1003 read: an absence claim is not supported"
    assert {c["claim"]: c["supported"] for c in cov["claims"]} == {
        "quote": True,
        "absence": False,
        "universal": False,
        "latest": False,
        "count": False,
    }
    f = m["fidelity"]
    assert (f["alarms"], f["missing_events"], f["missing_spans"], f["changed_uncited"], f["unverifiable"]) == ([], 0, 0, 0, 0)
    # capture off: no payloads; the filter/rerank/cite receipts are checked against the stage upstream
    assert f["not_captured"] == 5 and f["intact"] > 0
    assert [f for f in m["findings"] if not f.startswith("cite ")] == []
    json.dumps(m)  # the manifest is plain JSON


def test_continuations_are_stitched_in_order(tmp_path):
    ragtrail.set_capture(events_per_span=4)
    docs = [{"id": f"doc-{i:03d}", "content": f"text {i}", "score": 1 - i / 100} for i in range(23)]

    def run(tracer):
        with ragtrail.stage("pipeline", "tests.big", tracer=tracer):
            with ragtrail.stage("retrieve", "tests.big_retriever", tracer=tracer) as s:
                s.query("q")
                s.outputs(docs)
            with ragtrail.stage("rerank", "tests.cut", top_k=3, tracer=tracer) as s:
                s.inputs(docs)
                for doc in docs[3:]:  # one exclusion event per reason: 20 events
                    s.exclude(doc, f"custom:cut_{doc['id']}")
                s.outputs(docs[:3])
        return ragtrail.stage  # unused

    record(tmp_path, run)
    source = FileSource(tmp_path)
    trace = source.get(source.latest())
    continuations = [s for s in trace.spans if s.attributes.get("ragtrail.stage.continuation")]
    assert len(continuations) == 4  # the outputs are columns (no event); 20 exclusion events in 5 spans
    m = build(trace).as_dict()
    assert [s["kind"] for s in m["stages"]] == ["retrieve", "rerank"]
    assert [c["id"] for c in m["stages"][0]["candidates"]] == [d["id"] for d in docs]
    assert [c["rank"] for c in m["stages"][0]["candidates"]] == list(range(23))
    assert [e["id"] for e in m["stages"][1]["excluded"]] == [d["id"] for d in docs[3:]]
    assert m["fidelity"]["alarms"] == [] and m["fidelity"]["missing_spans"] == 0


def test_sampling_is_read_back(tmp_path):
    for _ in range(40):  # the sampler keeps a trace by its id: try until one is kept
        trace_id = record(tmp_path, rag_run, probability=0.5)
        if any(tmp_path.glob("*.jsonl")) and trace_id in next(tmp_path.glob("*.jsonl")).read_text():
            break
    else:  # pragma: no cover - (1/2)^40
        pytest.fail("no trace kept at p=0.5")
    s = _manifest(tmp_path, trace_id)["sampling"]
    assert (s["probability"], s["adjusted_count"], s["source"]) == (0.5, 2.0, "span attributes")
    assert s["statement"] == "sampled at p=0.5: this trace stands for 2 requests"


def test_hash_mode_shows_no_text_but_keeps_the_chain(tmp_path):
    ragtrail.set_capture(query="hash")
    trace_id = record(tmp_path, rag_run)
    m = _manifest(tmp_path, trace_id)
    assert [(h["hop"], h["transform"], h["text"]) for h in m["query_hops"]] == [(0, "none", None), (1, "rewrite", None)]
    assert all(len(h["sha256"]) == 64 for h in m["query_hops"])
    assert "refund window" not in json.dumps(m)
    assert m["fidelity"]["alarms"] == []


def test_a_trace_without_ragtrail_spans(tmp_path):
    def run(tracer):
        with tracer.start_as_current_span("GET /health"):
            pass

    record(tmp_path, run)
    source = FileSource(tmp_path)
    with pytest.raises(NoRagtrailSpans, match="none from ragtrail"):
        build(source.get(source.latest()))


@pytest.mark.parametrize(
    "corpus, read, statement",
    [
        (1003, 6, "6 of 1003 read: an absence claim is not supported"),
        (20, 20, "all 20 of 20 read: absence, universal, latest and count claims are supported"),
        (None, 6, "6 read of a corpus of unknown size: an absence claim is not supported"),
        (1003, 0, "context failure: 8 retrieved, none reached the model: no claim is supported"),
    ],
)
def test_coverage_statements(corpus, read, statement):
    c = coverage(corpus, 8, read, 2).as_dict()
    assert c["statement"] == statement
    assert c["exhaustive"] is (corpus is not None and read >= corpus and read > 0)
    supported = {x["claim"]: x["supported"] for x in c["claims"]}
    assert supported["quote"] is (read > 0)
    assert supported["absence"] is c["exhaustive"]


@pytest.mark.parametrize(
    "args, kwargs, statement",
    [
        # seed 003: an empty result is not a failure; seed 004: zero retrieved in a failed run is
        ((1003, 0, 0, 0), {"run_status": "empty"}, "empty result: the search found nothing (not a failure): no claim is supported"),
        ((1003, 0, 0, 0), {"run_status": "failed"}, "retrieval failed: nothing retrieved: no claim is supported"),
        ((1003, 6, 0, 0), {"run_status": "available"}, "context failure: 6 retrieved, none reached the model: no claim is supported"),
        ((1003, 6, 6, 1), {"run_status": "degraded"}, "run degraded: 6 of 1003 read: an absence claim is not supported"),
        ((1003, 6, 6, 1), {"claim": "absence"}, "the answer claims absence: not supported (6 of 1003 read, 997 never read)"),
        ((20, 20, 20, 0), {"claim": "absence"}, "the answer claims absence: supported (all 20 of 20 read)"),
        ((None, 6, 6, 0), {"claim": "absence"}, "the answer claims absence: not supported (6 read of a corpus of unknown size)"),
        (
            (1003, 6, 6, 2),
            {"claim": "presence"},
            "the answer claims presence: supported by what was read (6 of 1003 read; an absence claim would not be)",
        ),
        ((1003, 6, 6, 2), {"claim": "none"}, "the answer makes no claim about the corpus (6 read of 1003)"),
        ((20, 20, 20, 0), {"approximate": True}, "20 of ~20 (approximate) read: an absence claim is not supported"),
        ((20, 20, 20, 0), {"approximate": True, "claim": "absence"}, "the answer claims absence: not supported (20 of ~20 (approximate) read)"),
    ],
)
def test_coverage_statement_says_the_claim_and_the_run(args, kwargs, statement):
    c = coverage(*args, **kwargs).as_dict()
    assert c["statement"] == statement
    absence = {x["claim"]: x["supported"] for x in c["claims"]}["absence"]
    assert absence is (args[0] is not None and args[2] >= args[0] > 0 and not kwargs.get("approximate"))
    if "claim" in kwargs:
        assert c["answer_claim"]["claim"] == kwargs["claim"]


def test_reading_and_building_pause_the_cycle_collector_and_restore_it(tmp_path):
    """The reader pauses Python's cyclic GC while it parses (the speed fix of issue 6); a library user's
    collector must come back exactly as it was, including when they had it off themselves."""
    import gc

    from ragtrail.inspect.gc_pause import gc_paused

    trace_id = record(tmp_path, rag_run)
    seen = []
    with gc_paused():
        seen.append(gc.isenabled())
    assert seen == [False] and gc.isenabled()
    assert build(FileSource(tmp_path).get(trace_id)).as_dict()["trace_id"] == trace_id and gc.isenabled()
    gc.disable()
    try:
        build(FileSource(tmp_path).get(trace_id))
        assert not gc.isenabled()
    finally:
        gc.enable()
