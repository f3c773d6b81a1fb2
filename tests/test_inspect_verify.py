"""verify: every receipt classified, events and spans counted, damage named down to the field.

Each test records a real trace, damages the exported bytes the way a limit, a collector or a
backend would, and checks that exactly the expected alarms appear, naming trace, span, stage,
candidate and field.
"""

from __future__ import annotations

from opentelemetry.sdk.trace import SpanLimits

import ragtrail
from fixtures.ragtrail_traces import attr, column, multi_query_run, rag_run, record, rewrite_store, row, trace_id_now
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import receipt
from ragtrail.inspect.manifest import build
from ragtrail.inspect.sources import FileSource
from ragtrail.recorder.candidates import Candidate


def _run(tmp_path, **capture):
    ragtrail.set_capture(content="preview", **capture)
    trace_id = record(tmp_path, rag_run)
    return trace_id


def _fidelity(path, trace_id):
    return build(FileSource(path).get(trace_id)).as_dict()["fidelity"]


def _span_id(path, trace_id, name):
    return next(s.span_id for s in FileSource(path).get(trace_id).spans if s.name == name)


def _alarms(f):
    return [(a["stage"], a["candidate"], a["field"], a["problem"]) for a in f["alarms"]]


def test_intact_trace_counts_every_receipt(tmp_path):
    trace_id = _run(tmp_path)
    f = _fidelity(tmp_path, trace_id)
    # 5 query receipts + 14 content receipts; policy-2024-11 (432 chars) is previewed at 256 chars 3 times
    assert (f["intact"], f["changed_cited"], f["changed_uncited"], f["unverifiable"], f["not_captured"]) == (16, 3, 0, 0, 0)
    assert (f["missing_events"], f["missing_spans"], f["dropped_events"], f["dropped_attributes"], f["partial"]) == (0, 0, 0, 0, False)
    assert f["alarms"] == [] and f["notes"] == []


def test_cut_preview_is_changed_uncited(tmp_path):
    trace_id = _run(tmp_path)
    rerank_id = _span_id(tmp_path, trace_id, "rerank rerank")

    def edit(span):
        if span["name"] == "rerank rerank":
            preview = column(span, sc.COLUMN_CONTENT_PREVIEW)[row(span, "policy-2026-01")]
            preview["stringValue"] = preview["stringValue"][:10]

    path = rewrite_store(tmp_path, edit)
    f = _fidelity(path, trace_id)
    assert f["changed_uncited"] == 1
    assert f["alarms"] == [
        {
            "trace_id": trace_id,
            "span_id": rerank_id,
            "stage": "rerank tests.rerank",
            "candidate": "policy-2026-01",
            "field": sc.CANDIDATE_CONTENT_PREVIEW,
            "problem": "changed_uncited",
            "detail": "received 10 chars, receipt 45 chars",
        }
    ]


def test_sha256_cut_in_transit_is_never_a_match(tmp_path):
    trace_id = _run(tmp_path)

    def edit(span):
        if span["name"] == "retrieve bm25":
            sha = column(span, sc.COLUMN_CONTENT_SHA256)[row(span, "sales-deck-q1")]
            sha["stringValue"] = sha["stringValue"][:40]

    f = _fidelity(rewrite_store(tmp_path, edit), trace_id)
    assert f["unverifiable"] == 1
    assert _alarms(f) == [
        ("retrieve tests.bm25", "sales-deck-q1", sc.EVENTS_DIGEST, "events changed in transit"),
        ("retrieve tests.bm25", "sales-deck-q1", sc.CANDIDATE_CONTENT_SHA256, "unverifiable"),
    ]


def test_lost_event_is_counted(tmp_path):
    trace_id = _run(tmp_path)

    def edit(span):
        if span["name"] == "retrieve bm25":  # the ids column lost its last row (a cut array)
            column(span, sc.COLUMN_IDS).pop()

    f = _fidelity(rewrite_store(tmp_path, edit), trace_id)
    assert f["missing_events"] == 1
    assert _alarms(f) == [("retrieve tests.bm25", "", sc.EVENTS_COUNT, "event count mismatch")]
    assert f["alarms"][0]["detail"] == "4 received, 5 stamped"


def test_reordered_events_verify_the_same(tmp_path):
    """Schema 2: backends reorder events (Jaeger v2 sorts them by name); the digest and the stage
    receipt are over a canonical order, so a reordering is no alarm (v1 alarmed: a false alarm)."""
    trace_id = record(tmp_path, multi_query_run)
    reordered = []

    def edit(span):
        if len(span.get("events", [])) > 1:
            span["events"].reverse()
            reordered.append(span["name"])

    f = _fidelity(rewrite_store(tmp_path, edit), trace_id)
    assert reordered  # query events and exclusion events (one per reason) served in reverse
    assert _alarms(f) == []


def test_lost_span_is_counted_against_span_count(tmp_path):
    trace_id = _run(tmp_path)
    root_id = _span_id(tmp_path, trace_id, "pipeline answer")

    def edit(span):
        if span["name"] == "filter status":
            span["name"] = "DROP"

    path = rewrite_store(tmp_path, edit)
    text = path.read_text()
    import json

    docs = [json.loads(line) for line in text.splitlines()]
    for doc in docs:
        for rs in doc["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                ss["spans"] = [s for s in ss["spans"] if s["name"] != "DROP"]
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    f = _fidelity(path, trace_id)
    assert f["missing_spans"] == 1
    assert [(a["span_id"], a["field"], a["problem"], a["detail"]) for a in f["alarms"]] == [
        (root_id, sc.TRACE_SPAN_COUNT, "missing spans", "5 received, 6 stamped")
    ]


def test_dropped_counts_are_alarms(tmp_path):
    trace_id = _run(tmp_path)

    def edit(span):
        if span["name"] == "retrieve bm25":
            span["droppedEventsCount"] = 3
            span["droppedAttributesCount"] = 2

    f = _fidelity(rewrite_store(tmp_path, edit), trace_id)
    assert (f["dropped_events"], f["dropped_attributes"]) == (3, 2)
    assert _alarms(f) == [
        ("retrieve tests.bm25", "", "droppedEventsCount", "events evicted by the SDK"),
        ("retrieve tests.bm25", "", "droppedAttributesCount", "attributes evicted by the SDK"),
    ]


def test_sdk_truncation_of_the_query_is_caught(tmp_path):
    """A real SDK limit (span attribute values cut at 64 code points) is caught by the query receipts."""
    ragtrail.set_capture(content="off")
    long_query = "what is the refund window for enterprise customers on annual contracts signed before 2026?"
    trace_id = record(tmp_path, lambda t: rag_run(t, query=long_query), span_limits=SpanLimits(max_span_attribute_length=64))
    f = _fidelity(tmp_path, trace_id)
    assert _alarms(f) == [
        ("pipeline tests.answer", "", sc.QUERY_TEXT, "changed_uncited"),
        ("query_transform tests.rewrite", "", sc.QUERY_TEXT, "changed_uncited"),
    ]
    assert f["alarms"][0]["detail"] == f"received 64 chars, receipt {len(long_query)} chars"
    assert f["changed_uncited"] == 2


def test_a_receipt_cut_below_64_hex_digits_is_unverifiable(tmp_path):
    """Under a tighter limit the SDK cuts the receipts themselves: never read as a match."""
    ragtrail.set_capture(content="off")
    trace_id = record(tmp_path, rag_run, span_limits=SpanLimits(max_span_attribute_length=12))
    f = _fidelity(tmp_path, trace_id)
    # schema 3 on: the candidates' columns are span attributes, so the span limit cuts their content
    # receipts too (each unverifiable, never a match); schema 4: the later stages' rows point to the
    # retrieval's receipts by span id, and a cut pointer names no span: those 8 rows are unverifiable
    # as well; only the cite stage's id-only record (no content) stays intact
    assert (f["intact"], f["unverifiable"], f["changed_uncited"]) == (1, 18, 0)
    assert sum(a["field"] == sc.CANDIDATE_CONTENT_FROM for a in f["alarms"]) == 8
    assert {(a["field"], a["problem"]) for a in f["alarms"]} == {
        (sc.EVENTS_DIGEST, "unverifiable"),
        (sc.QUERY_SHA256, "unverifiable"),
        (sc.CANDIDATE_CONTENT_SHA256, "unverifiable"),
        (sc.CANDIDATE_CONTENT_FROM, "unverifiable"),
        (sc.STAGE_RECEIPT, "unverifiable"),
    }  # schema 2 on: the stage receipt is cut too


def _budget_run(rule: str | None, derived_from_right: bool):
    def run(tracer):
        with ragtrail.stage("pipeline", "tests.budget_pipe", tracer=tracer):
            doc = {"id": "long", "content": "word " * 50}
            with ragtrail.stage("retrieve", "tests.r", tracer=tracer) as s:
                s.query("q")
                s.outputs([doc])
            with ragtrail.stage("budget", "tests.trim", budget_limit=10, budget_unit="words", tracer=tracer) as s:
                s.inputs([doc])
                source_sha = receipt(doc["content"]).sha256 if derived_from_right else "0" * 64
                s.outputs([Candidate(id="long", content="word " * 10, transform_rule=rule, derived_from=source_sha if rule else None)])
            return trace_id_now()

    return run


def test_a_trim_under_a_rule_is_changed_cited(tmp_path):
    trace_id = record(tmp_path, _budget_run("budget_trim@1", True))
    f = _fidelity(tmp_path, trace_id)
    assert (f["changed_cited"], f["changed_uncited"], f["alarms"]) == (1, 0, [])


def test_a_trim_without_a_rule_is_an_alarm(tmp_path):
    trace_id = record(tmp_path, _budget_run(None, True))
    f = _fidelity(tmp_path, trace_id)
    assert f["changed_uncited"] == 1
    assert _alarms(f) == [("budget tests.trim", "long", sc.CANDIDATE_CONTENT_SHA256, "changed_uncited")]
    assert f["alarms"][0]["detail"].startswith("content changed between stages with no transform rule")
    other = tmp_path / "other"
    trace_id = record(other, _budget_run("budget_trim@1", False))
    f = _fidelity(other, trace_id)
    assert _alarms(f) == [("budget tests.trim", "long", sc.CANDIDATE_CONTENT_SHA256, "changed_uncited")]
    assert "derived_from is not the upstream sha256" in f["alarms"][0]["detail"]


def test_missing_continuation_span(tmp_path):
    ragtrail.set_capture(events_per_span=4)
    docs = [{"id": f"d{i}", "content": f"c{i}"} for i in range(10)]

    def run(tracer):
        with ragtrail.stage("pipeline", "tests.p", tracer=tracer):
            with ragtrail.stage("filter", "tests.many", tracer=tracer) as s:  # 10 reasons: 10 events
                s.query("q")
                s.inputs(docs)
                for i, doc in enumerate(docs):
                    s.exclude(doc, f"custom:rule_{i}")
                s.outputs([])
            return trace_id_now()

    trace_id = record(tmp_path, run)
    import json

    path = next(tmp_path.glob("*.jsonl"))
    docs_json = [json.loads(line) for line in path.read_text().splitlines()]
    for doc in docs_json:
        for rs in doc["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                ss["spans"] = [s for s in ss["spans"] if (attr(s, sc.STAGE_CONTINUATION_INDEX) or {}).get("intValue") != "2"]
    path.write_text("".join(json.dumps(d) + "\n" for d in docs_json))
    f = _fidelity(tmp_path, trace_id)
    assert f["missing_events"] == 2  # 10 events in chunks of 4, 4, 2: the last continuation is gone
    assert [(a["field"], a["problem"]) for a in f["alarms"]] == [
        (sc.EVENTS_SPANS, "missing continuation spans"),
        (sc.EVENTS_COUNT, "event count mismatch"),
        (sc.TRACE_SPAN_COUNT, "missing spans"),
    ]
    assert f["missing_spans"] == 2  # counted once per check: the stage's announcement and the trace's span count
