"""``ragtrail.answer()`` and ``ragtrail.run.status`` on the pipeline span (docs/semconv.md §5), on the
real SDK: exact attributes under each content capture mode, and each case of the run-status roll-up."""

from __future__ import annotations

import logging

import pytest

import mirrorutil
import ragtrail
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import receipt, sorted_events_digest
from spanutil import attrs, by_name, pop_all

ANSWER = "Enterprise customers have 14 days. " * 10  # 350 characters: longer than a preview
DOCS = [{"id": "a", "content": "Refunds within 14 days.", "score": 0.9}, {"id": "b", "content": "Refunds within 30 days.", "score": 0.5}]


def _pipeline_attributes(span, *, retrieved: int, run_status: str, status: str = sc.STATUS_OK, findings: list[str] | None = None) -> dict:
    """Pop every attribute a pipeline span with no query, no events and no citations carries (all
    but the answer's); returns what is left. No stage defined the context: no ``in_context``."""
    a = attrs(span)
    own = {
        sc.OPENINFERENCE_SPAN_KIND: sc.OI_CHAIN,
        sc.SCHEMA: sc.SCHEMA_VERSION,
        sc.STAGE_KIND: sc.KIND_PIPELINE,
        sc.STAGE_COMPONENT: "app",
        sc.STAGE_STATUS: status,
        sc.COVERAGE_RETRIEVED: retrieved,
        sc.COVERAGE_CITED: 0,
        sc.RUN_STATUS: run_status,
        sc.CANDIDATES_IN: 0,
        sc.CANDIDATES_OUT: 0,
        sc.CANDIDATES_EXCLUDED: 0,
        sc.EVENTS_COUNT: 0,
        sc.EVENTS_DIGEST: sorted_events_digest([]),
    }
    if status in (sc.STATUS_FAILED, sc.STATUS_DEGRADED):
        own[sc.STAGE_FAILURE_CLASS] = ...
    if findings:
        own[sc.STAGE_FINDINGS] = findings
    pop_all(a, own)
    mirrorutil.pop_mirrors(a, span)  # output.value: the answer as captured
    return a


def _answer_receipt(text: str) -> dict:
    return receipt(text).as_attributes(sc.ANSWER_RECEIPT_PREFIX)


def _run_with_answer(**answer_kwargs) -> None:
    with ragtrail.stage("pipeline", "app"):
        with ragtrail.stage("retrieve", "store") as s:
            s.outputs(DOCS)
        ragtrail.answer(ANSWER, **answer_kwargs)


@pytest.mark.parametrize(
    "mode, shown",
    [
        ("off", {}),
        ("preview", {sc.ANSWER_PREVIEW: ANSWER[:256]}),
        ("full", {sc.ANSWER_TEXT: ANSWER}),
    ],
)
def test_answer_receipt_under_each_content_mode(span_exporter, mode, shown):
    ragtrail.set_capture(content=mode)
    _run_with_answer(claim="presence")
    root = by_name(span_exporter.get_finished_spans(), "pipeline app")
    left = _pipeline_attributes(root, retrieved=2, run_status=sc.RUN_AVAILABLE)
    pop_all(left, {**_answer_receipt(ANSWER), **shown, sc.ANSWER_CLAIM: "presence", sc.ANSWER_REFUSED: False})
    assert left == {}


def test_refused_answer_without_claim(span_exporter):
    _run_with_answer(refused=True)
    root = by_name(span_exporter.get_finished_spans(), "pipeline app")
    left = _pipeline_attributes(root, retrieved=2, run_status=sc.RUN_AVAILABLE)
    pop_all(left, {**_answer_receipt(ANSWER), sc.ANSWER_REFUSED: True})
    assert left == {}


def test_invalid_claim_is_a_finding_not_an_error(span_exporter):
    errors = ragtrail.internal_error_count()
    _run_with_answer(claim="certain")
    root = by_name(span_exporter.get_finished_spans(), "pipeline app")
    finding = "invalid answer claim 'certain' (not one of presence, absence, none): not recorded"
    left = _pipeline_attributes(root, retrieved=2, run_status=sc.RUN_AVAILABLE, findings=[finding])
    pop_all(left, {**_answer_receipt(ANSWER), sc.ANSWER_REFUSED: False})
    assert left == {}
    assert ragtrail.internal_error_count() == errors


def test_answer_outside_a_pipeline_does_nothing(span_exporter, caplog):
    errors = ragtrail.internal_error_count()
    with caplog.at_level(logging.DEBUG, logger="ragtrail"):
        ragtrail.answer("no pipeline here", claim="none")
        with ragtrail.stage("retrieve", "store") as s:  # a stage, but no pipeline
            s.outputs(DOCS)
            ragtrail.answer("still no pipeline")
    span = by_name(span_exporter.get_finished_spans(), "retrieve store")
    assert not any(k.startswith(sc.ANSWER_RECEIPT_PREFIX) for k in span.attributes)
    assert ragtrail.internal_error_count() == errors
    said = [r for r in caplog.records if "outside any recorded pipeline" in r.getMessage()]
    assert len(said) <= 1 and all(r.levelno == logging.DEBUG for r in said)


def test_answer_of_the_inner_pipeline_only(span_exporter):
    with ragtrail.stage("pipeline", "outer"), ragtrail.stage("pipeline", "inner"):
        ragtrail.answer("inner answer")
    spans = span_exporter.get_finished_spans()
    inner, outer = by_name(spans, "pipeline inner"), by_name(spans, "pipeline outer")
    assert inner.attributes[sc.ANSWER_SHA256] == receipt("inner answer").sha256
    assert sc.ANSWER_SHA256 not in outer.attributes


# --- run status: each case of the roll-up ----------------------------------------------------------
def _run(stages, *, raise_in_pipeline: bool = False) -> str:
    """Run a pipeline of (kind, outputs, status) stages; return the pipeline's run status."""
    try:
        with ragtrail.stage("pipeline", "app"):
            for index, (kind, outputs, status) in enumerate(stages):
                with ragtrail.stage(kind, f"s{index}") as s:
                    if outputs is not None:
                        s.outputs(outputs)
                    if status is not None:
                        s.set_status(status, failure_class="timeout", fallback="cache" if status == sc.STATUS_DEGRADED else None)
            if raise_in_pipeline:
                raise RuntimeError("the app failed after retrieval")
    except RuntimeError:
        pass
    return by_name(ragtrail_spans(), "pipeline app").attributes[sc.RUN_STATUS]


_exporter = None


def ragtrail_spans():
    return _exporter.get_finished_spans()


@pytest.fixture(autouse=True)
def _keep_exporter(span_exporter):
    global _exporter
    _exporter = span_exporter
    yield


def test_run_available_when_evidence_was_retrieved():
    assert _run([("retrieve", DOCS, None), ("rerank", DOCS[:1], None)]) == sc.RUN_AVAILABLE


def test_run_empty_when_nothing_was_retrieved():
    assert _run([("retrieve", [], None), ("rerank", [], None)]) == sc.RUN_EMPTY


def test_run_empty_with_no_stage_at_all():
    assert _run([]) == sc.RUN_EMPTY


def test_run_degraded_when_a_stage_degraded():
    assert _run([("retrieve", DOCS, sc.STATUS_DEGRADED), ("rerank", DOCS, None)]) == sc.RUN_DEGRADED


def test_run_degraded_wins_over_empty():
    assert _run([("retrieve", [], sc.STATUS_DEGRADED)]) == sc.RUN_DEGRADED


def test_run_failed_when_a_stage_failed():
    assert _run([("retrieve", DOCS, sc.STATUS_DEGRADED), ("rerank", None, sc.STATUS_FAILED)]) == sc.RUN_FAILED


def test_run_failed_when_a_stage_raised_and_the_app_recovered(span_exporter):
    with ragtrail.stage("pipeline", "app"):
        with ragtrail.stage("retrieve", "good") as s:
            s.outputs(DOCS)
        try:
            with ragtrail.stage("rerank", "api"):
                raise TimeoutError("reranker timed out")
        except TimeoutError:
            pass
    root = by_name(span_exporter.get_finished_spans(), "pipeline app")
    left = _pipeline_attributes(root, retrieved=2, run_status=sc.RUN_FAILED)
    assert left == {}


def test_run_failed_when_the_pipeline_raised(span_exporter):
    assert _run([("retrieve", DOCS, None)], raise_in_pipeline=True) == sc.RUN_FAILED
    root = by_name(span_exporter.get_finished_spans(), "pipeline app")
    assert root.attributes[sc.STAGE_STATUS] == sc.STATUS_FAILED


def test_run_status_only_on_pipeline_spans(span_exporter):
    _run([("retrieve", DOCS, None)])
    spans = span_exporter.get_finished_spans()
    assert [s.name for s in spans if sc.RUN_STATUS in s.attributes] == ["pipeline app"]


def test_decorated_pipeline_rolls_up_too(span_exporter):
    @ragtrail.retriever
    def search(query):
        return []

    @ragtrail.pipeline
    def run(query):
        search(query)
        ragtrail.answer("I found nothing.", claim="absence", refused=False)
        return "done"

    assert run("refund window") == "done"
    root = by_name(span_exporter.get_finished_spans(), "pipeline run")
    assert root.attributes[sc.RUN_STATUS] == sc.RUN_EMPTY
    assert root.attributes[sc.ANSWER_CLAIM] == sc.CLAIM_ABSENCE
