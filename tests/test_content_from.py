"""Schema 4's ``content.from`` (docs/semconv.md §3): a stage whose rows carry exactly the content an
earlier stage of the pipeline wrote receipts for points to that stage's span instead of restating
chars, bytes and sha256 per row; the reader fills the receipts back in, by span id and candidate id,
so every record reads as before. Recorded on the real SDK, read back from the local store: a pointer
that resolves reads as intact, a changed content is restated (never pointed), captured payloads
always have their own receipts, and a pointer that cannot be followed is an alarm, never a match."""

from __future__ import annotations

from typing import Any

from opentelemetry import trace

import ragtrail
from fixtures.ragtrail_traces import DOCS, attr, rag_run, record, rewrite_store, trace_id_now
from fixtures.ragtrail_traces import manifest_stage as _stage
from fixtures.ragtrail_traces import spans_by_name as _spans
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import receipt
from ragtrail.inspect.manifest import build
from ragtrail.inspect.sources import FileSource
from ragtrail.recorder.candidates import Candidate

# the content receipt's columns (schema 5: ASCII content says its bytes are its chars once)
_CONTENT_COLUMNS = (sc.COLUMN_CONTENT_CHARS, sc.COLUMN_CONTENT_ENCODING, sc.COLUMN_CONTENT_SHA256)


def test_later_stages_point_to_the_retrieval_and_read_back_its_receipts(tmp_path) -> None:
    ragtrail.set_capture(content="off")
    trace_id = record(tmp_path, rag_run)
    spans = _spans(tmp_path, trace_id)
    retrieve, filt, rerank = spans["retrieve bm25"], spans["filter status"], spans["rerank rerank"]
    # the retrieval states its receipts; the filter's outputs and its exclusion event point to it
    assert all(k in retrieve.attributes for k in _CONTENT_COLUMNS) and sc.COLUMN_CONTENT_FROM not in retrieve.attributes
    assert filt.attributes[sc.COLUMN_CONTENT_FROM] == retrieve.span_id
    assert not any(k in filt.attributes for k in _CONTENT_COLUMNS)
    (excluded,) = [e for e in filt.events if e.name == sc.EVENT_EXCLUSION]
    assert excluded.attributes[sc.COLUMN_CONTENT_FROM] == retrieve.span_id
    assert not any(k in excluded.attributes for k in _CONTENT_COLUMNS)
    # the rerank's inputs came through the filter unchanged: it points to the retrieval too
    assert rerank.attributes[sc.COLUMN_CONTENT_FROM] == retrieve.span_id

    m = build(FileSource(tmp_path).get(trace_id)).as_dict()
    expected = {d["id"]: receipt(d["content"]) for d in DOCS}
    for name in ("filter tests.status", "rerank tests.rerank"):
        stage = _stage(m, name)
        for row in stage["candidates"] + stage["excluded"]:
            assert (row["sha256"], row["chars"]) == (expected[row["id"]].sha256, expected[row["id"]].chars), (name, row)
    f = m["fidelity"]
    assert f["alarms"] == [] and f["notes"] == []
    # the same verdicts as schema 3's restated receipts: 5 query receipts, the 5 retrieved first seen
    # (not captured), then the filter's 5 rows and the rerank's 4 as intact handoffs
    assert (f["intact"], f["changed_cited"], f["changed_uncited"], f["unverifiable"], f["not_captured"]) == (14, 0, 0, 0, 5)


def _changing_run(tracer: trace.Tracer) -> str:
    """retrieve -> a budget stage that trims one document (a declared transform) -> a filter."""
    docs: list[Any] = [{"id": "a", "content": "alpha " * 20}, {"id": "b", "content": "beta"}]
    with ragtrail.stage("pipeline", "tests.trim", tracer=tracer):
        with ragtrail.stage("retrieve", "tests.r", tracer=tracer) as s:
            s.query("q")
            s.outputs(docs)
        trimmed = [
            Candidate(id="a", content=docs[0]["content"][:12], transform_rule="budget_trim@1", derived_from=receipt(docs[0]["content"]).sha256),
            docs[1],
        ]
        with ragtrail.stage("budget", "tests.budget", tracer=tracer) as s:
            s.inputs(docs)
            s.outputs(trimmed)
        with ragtrail.stage("filter", "tests.after", tracer=tracer) as s:
            s.inputs(trimmed)
            s.outputs(trimmed)
        return trace_id_now()


def test_a_stage_that_changed_content_restates_it_and_no_later_stage_points_past_it(tmp_path) -> None:
    ragtrail.set_capture(content="off")
    trace_id = record(tmp_path, _changing_run)
    spans = _spans(tmp_path, trace_id)
    budget, after = spans["budget budget"], spans["filter after"]
    # "a" changed at the budget: its receipts are stated there, and "a" now has two contents in the
    # pipeline, so the filter after it states its receipts rather than point to either stage
    assert sc.COLUMN_CONTENT_FROM not in budget.attributes and budget.attributes[sc.COLUMN_CONTENT_CHARS] == [12, 4]
    assert sc.COLUMN_CONTENT_FROM not in after.attributes and after.attributes[sc.COLUMN_CONTENT_CHARS] == [12, 4]
    f = build(FileSource(tmp_path).get(trace_id)).as_dict()["fidelity"]
    assert f["alarms"] == [] and (f["changed_cited"], f["changed_uncited"]) == (1, 0)


def test_captured_payloads_keep_their_own_receipts(tmp_path) -> None:
    ragtrail.set_capture(content="preview")
    trace_id = record(tmp_path, rag_run)
    for span in _spans(tmp_path, trace_id).values():
        assert sc.COLUMN_CONTENT_FROM not in span.attributes
        assert all(sc.COLUMN_CONTENT_FROM not in e.attributes for e in span.events)


def test_a_pointer_to_a_span_that_did_not_arrive_is_an_alarm_not_a_match(tmp_path) -> None:
    ragtrail.set_capture(content="off")
    trace_id = record(tmp_path, rag_run)
    gone = rewrite_store(tmp_path, lambda span: span["attributes"].clear() if span["name"] == "retrieve bm25" else None)
    m = build(FileSource(gone).get(trace_id)).as_dict()
    pointer = [(a["stage"], a["candidate"], a["problem"]) for a in m["fidelity"]["alarms"] if a["field"] == sc.CANDIDATE_CONTENT_FROM]
    # the retrieval span arrived without its attributes: it is no ragtrail stage, so nothing holds the
    # receipts the filter's 5 rows and the rerank's 4 point to
    filt = [
        ("filter tests.status", i, "unverifiable") for i in ("policy-2024-11", "policy-2026-01", "sales-deck-q1", "sla-2025", "policy-2026-01-draft")
    ]
    rerank = [("rerank tests.rerank", i, "unverifiable") for i in ("policy-2024-11", "policy-2026-01", "sales-deck-q1", "sla-2025")]
    assert sorted(pointer) == sorted(filt + rerank)
    f = m["fidelity"]
    # the 4 query receipts that did arrive and the cite stage's id-only record; no content row reads as intact
    assert (f["intact"], f["unverifiable"], f["not_captured"]) == (4, 9, 0), f
    rows = _stage(m, "filter tests.status")["candidates"]
    assert all("sha256" not in r for r in rows)


def test_a_redirected_pointer_breaks_the_stage_receipt(tmp_path) -> None:
    ragtrail.set_capture(content="off")
    trace_id = record(tmp_path, rag_run)
    spans = _spans(tmp_path, trace_id)
    other = spans["filter status"].span_id  # a real span of the trace, holding the same ids' outputs

    def edit(span: dict[str, Any]) -> None:
        if span["name"] == "rerank rerank":
            attr(span, sc.COLUMN_CONTENT_FROM)["stringValue"] = other

    alarms = build(FileSource(rewrite_store(tmp_path, edit)).get(trace_id)).as_dict()["fidelity"]["alarms"]
    assert (sc.COLUMN_CONTENT_FROM, "changed_uncited") in [(a["field"], a["problem"]) for a in alarms]
