"""Hops are numbered per run (issue 24, unseen app: two questions under one web request span). A
stage outside any pipeline opens a run of its own, so two retrievals under one span of the app's each
have a hop 0: verify must not take the second for a changed copy of the first (a false alarm), and
``show`` keeps the two runs' hops apart; inside one run a changed hop 0 still alarms."""

from __future__ import annotations

import json
from pathlib import Path

import ragtrail as rt
from fixtures.ragtrail_traces import record
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import receipt
from ragtrail.inspect.manifest import build
from ragtrail.inspect.sources import resolve


def two_requests_questions(tracer) -> None:
    with tracer.start_as_current_span("POST /ask"):  # the app's span, not ragtrail's
        for i, query in enumerate(("refund window?", "support hours?")):
            with rt.stage("retrieve", "tests.retriever", tracer=tracer) as s:
                s.query(query)
                s.outputs([{"id": f"d{i}", "content": f"doc {i}"}])


def manifest(store: Path) -> dict:
    return build(resolve(str(store), None)).as_dict()


def test_two_questions_under_one_app_span_verify_clean_and_show_apart(tmp_path):
    record(tmp_path, two_requests_questions)
    m = manifest(tmp_path)
    assert m["fidelity"]["alarms"] == []
    hops = [{k: h[k] for k in ("question", "hop", "text", "used_by", "hit_index")} for h in m["query_hops"]]
    assert hops == [
        {"question": 1, "hop": 0, "text": "refund window?", "used_by": ["retrieve tests.retriever"], "hit_index": True},
        {"question": 2, "hop": 0, "text": "support hours?", "used_by": ["retrieve tests.retriever"], "hit_index": True},
    ]
    assert m["findings"] == ["this trace holds 2 runs (q1 … q2, each with its own hops): coverage and what reached the context count them together"]


def test_one_run_reads_as_before_no_question_key(tmp_path):
    def one(tracer):
        with rt.stage("pipeline", "tests.answer", tracer=tracer) as p:
            p.query("refund window?")
            with rt.stage("retrieve", "tests.retriever", tracer=tracer) as s:
                s.query("refund window?")
                s.outputs([{"id": "d0", "content": "doc 0"}])

    record(tmp_path, one)
    m = manifest(tmp_path)
    assert [h["hop"] for h in m["query_hops"]] == [0] and "question" not in m["query_hops"][0]
    assert m["findings"] == []
    assert m["fidelity"]["alarms"] == []


def _restate(store: Path, component: str, text: str) -> None:
    """Rewrite one stage's query as another text with a receipt that holds for it: only the
    same-hop check across the run can see it."""
    r = receipt(text)
    new = {sc.QUERY_TEXT: {"stringValue": text}, sc.QUERY_SHA256: {"stringValue": r.sha256}, sc.QUERY_CHARS: {"intValue": str(r.chars)}}
    for file in store.glob("traces-*.jsonl"):
        lines = []
        for line in file.read_text().splitlines():
            doc = json.loads(line)
            for rs in doc["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    for span in ss["spans"]:
                        attrs = {a["key"]: a for a in span.get("attributes", [])}
                        if attrs.get(sc.STAGE_COMPONENT, {}).get("value", {}).get("stringValue") == component:
                            for key, value in new.items():
                                assert key in attrs, key
                                attrs[key]["value"] = value
            lines.append(json.dumps(doc))
        file.write_text("\n".join(lines) + "\n")


def test_a_changed_hop_0_inside_one_run_still_alarms(tmp_path):
    def nested(tracer):
        with tracer.start_as_current_span("POST /ask"), rt.stage("retrieve", "tests.outer", tracer=tracer) as outer:
            outer.query("refund window?")
            with rt.stage("retrieve", "tests.inner", tracer=tracer) as inner:
                inner.query("refund window?")
                inner.outputs([{"id": "d0", "content": "doc 0"}])
            outer.outputs([{"id": "d0", "content": "doc 0"}])

    record(tmp_path, nested)
    assert manifest(tmp_path)["fidelity"]["alarms"] == []
    _restate(tmp_path, "tests.inner", "support hours?")
    alarms = [(a["stage"], a["field"], a["problem"]) for a in manifest(tmp_path)["fidelity"]["alarms"]]
    # the stage's own receipt no longer holds its query text, and hop 0 differs from the outer stage's
    inner = "retrieve tests.inner"
    assert sorted(alarms) == [(inner, sc.QUERY_SHA256, "changed_uncited"), (inner, sc.QUERY_TEXT, "changed_uncited")]
