"""The stage's end without a Stage: a record built by hand, concluded, then written on an SDK span.

``conclude`` derives what follows from a :class:`StageRecord` (exclusions, status, counts, the
pipeline's bookkeeping) and ``writer.write(record, span)`` emits it; neither needs a live Stage, so
each is pinned here on its own: every attribute popped, nothing left over.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import receipt, sorted_events_digest, stage_fields, stage_receipt
from ragtrail.recorder.answer import answer_attributes
from ragtrail.recorder.candidates import Candidate
from ragtrail.recorder.conclude import conclude
from ragtrail.recorder.exclusions import Exclusion, Explicit, Knobs
from ragtrail.recorder.pipeline import PipelineState, RunAnswer
from ragtrail.recorder.record import Conclusion, StageRecord
from ragtrail.recorder.writer import write
from ragtrail.settings import CaptureSettings
from spanutil import pop_all

NO_MIRRORS = CaptureSettings(mirror_genai=False, mirror_openinference=False)


def _sha(text: str) -> str:
    return receipt(text).sha256


def _candidates() -> tuple[Candidate, Candidate, Candidate]:
    return (
        Candidate(id="a", content="alpha", score=0.9),
        Candidate(id="b", content="beta", score=0.5),
        Candidate(id="c", content="gamma", score=0.2),
    )


def _written(record: StageRecord, name: str) -> Any:
    """``record`` written on a fresh SDK span, ended and exported."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    span = provider.get_tracer("test").start_span(name)
    write(record, span)
    span.end()
    (finished,) = exporter.get_finished_spans()
    return finished


def _pop_receipt(left: dict[str, Any], span: Any) -> None:
    """The stage receipt, recomputed over what the span carries."""
    stamp = stage_receipt(stage_fields(span.attributes, [(e.name, e.attributes) for e in span.events]))
    pop_all(left, {sc.STAGE_RECEIPT: stamp.receipt, sc.STAGE_RECEIPT_FIELDS: stamp.fields})


def test_a_filter_record_concludes_and_is_written_exactly() -> None:
    a, b, c = _candidates()
    state = PipelineState()
    record = StageRecord(
        sc.KIND_FILTER,
        "app.fresh",
        NO_MIRRORS,
        {},
        state,
        owns_state=True,
        knobs=Knobs(top_k=2),
        inputs=[a, b, c],
        outputs=[a, c],
        explicit={"b": Explicit(sc.REASON_SUPERSEDED, "newer", None)},
    )

    concluded = conclude(record, None)
    assert concluded is record.conclusion
    assert concluded == Conclusion(
        raised=None,
        status=sc.STATUS_OK,
        failure_class=None,
        exclusions=[Exclusion(rank=1, candidate=b, reason=sc.REASON_SUPERSEDED, detail="newer")],
        count_in=3,
        inputs_unrecorded=False,
        run={},
        answer=None,
    )
    assert (state.in_context, state.stage_statuses, record.findings) == (["a", "c"], [sc.STATUS_OK], [])

    span = _written(record, "filter fresh")
    left = dict(span.attributes)
    pop_all(
        left,
        {
            sc.SCHEMA: sc.SCHEMA_VERSION,
            sc.STAGE_KIND: sc.KIND_FILTER,
            sc.STAGE_COMPONENT: "app.fresh",
            sc.STAGE_STATUS: sc.STATUS_OK,
            sc.STAGE_TOP_K: 2,
            sc.CANDIDATES_IN: 3,
            sc.CANDIDATES_OUT: 2,
            sc.CANDIDATES_EXCLUDED: 1,
            sc.COLUMN_IDS: ("a", "c"),
            sc.COLUMN_SCORES: (0.9, 0.2),
            sc.COLUMN_SCORE_KIND: sc.SCORE_NONE,
            sc.COLUMN_CONTENT_CHARS: (5, 5),
            sc.COLUMN_CONTENT_ENCODING: sc.CONTENT_ASCII,
            sc.COLUMN_CONTENT_SHA256: (_sha("alpha"), _sha("gamma")),
            sc.EVENTS_COUNT: 3,
            sc.EVENTS_DIGEST: sorted_events_digest(
                [(sc.EVENT_CANDIDATE, "a", _sha("alpha")), (sc.EVENT_CANDIDATE, "c", _sha("gamma")), (sc.EVENT_EXCLUSION, "b", _sha("beta"))]
            ),
        },
    )
    _pop_receipt(left, span)
    assert left == {}
    (event,) = span.events
    assert event.name == sc.EVENT_EXCLUSION
    said = dict(event.attributes)
    pop_all(
        said,
        {
            sc.COLUMN_IDS: ("b",),
            sc.COLUMN_RANK_FIRST: 1,
            sc.COLUMN_SCORES: (0.5,),
            sc.COLUMN_SCORE_KIND: sc.SCORE_NONE,
            sc.COLUMN_CONTENT_CHARS: (4,),
            sc.COLUMN_CONTENT_ENCODING: sc.CONTENT_ASCII,
            sc.COLUMN_CONTENT_SHA256: (_sha("beta"),),
            sc.EXCLUSION_DETAIL: "newer",
            sc.EXCLUSION_REASON: sc.REASON_SUPERSEDED,
        },
    )
    assert said == {}


def test_a_pipeline_record_says_the_run_and_takes_no_answer_once_closed() -> None:
    a, b, _ = _candidates()
    state = PipelineState()
    pipeline = StageRecord(sc.KIND_PIPELINE, "app", NO_MIRRORS, {}, state, owns_state=True)
    state.answer = RunAnswer(pipeline.findings)
    retrieve = StageRecord(sc.KIND_RETRIEVE, "store", NO_MIRRORS, {}, state, parent=pipeline, outputs=[a, b])
    assert conclude(retrieve, None).run == {}
    assert (list(state.retrieved), state.stage_statuses) == (["a", "b"], [sc.STATUS_OK])

    given = answer_attributes(state.answer, "Refunds take 30 days.", "certain", False)
    state.answer.take(given)
    pipeline.close()
    state.answer.take(answer_attributes(state.answer, "a late answer", None, True))  # after the end: not taken
    invalid = "invalid answer claim 'certain' (not one of presence, absence, none): not recorded"
    assert pipeline.findings == [invalid]

    concluded = conclude(pipeline, None)
    run = {
        sc.COVERAGE_RETRIEVED: 2,  # no rerank, filter or budget stage: no in_context on the wire
        sc.COVERAGE_CITED: 0,
        sc.RUN_STATUS: sc.RUN_AVAILABLE,
        **receipt("Refunds take 30 days.").as_attributes(sc.ANSWER_RECEIPT_PREFIX),
        sc.ANSWER_REFUSED: False,
    }
    assert (concluded.status, concluded.count_in, concluded.exclusions, concluded.run) == (sc.STATUS_OK, 0, [], run)
    assert concluded.answer == given

    span = _written(pipeline, "pipeline app")
    left = dict(span.attributes)
    pop_all(
        left,
        {
            sc.SCHEMA: sc.SCHEMA_VERSION,
            sc.STAGE_KIND: sc.KIND_PIPELINE,
            sc.STAGE_COMPONENT: "app",
            sc.STAGE_STATUS: sc.STATUS_OK,
            **run,
            sc.STAGE_FINDINGS: (invalid,),
            sc.CANDIDATES_IN: 0,
            sc.CANDIDATES_OUT: 0,
            sc.CANDIDATES_EXCLUDED: 0,
            sc.EVENTS_COUNT: 0,
            sc.EVENTS_DIGEST: sorted_events_digest([]),
        },
    )
    _pop_receipt(left, span)
    assert left == {} and not span.events


def test_a_narrowing_record_without_inputs_says_so_where_its_attributes_are_written() -> None:
    a, _, c = _candidates()
    record = StageRecord(
        sc.KIND_RERANK,
        "app.rerank",
        NO_MIRRORS,
        {},
        PipelineState(),
        owns_state=True,
        outputs=[a, c],
        explicit={"b": Explicit(sc.REASON_BELOW_RANK_CUTOFF, None, None)},
    )
    concluded = conclude(record, None)
    assert (concluded.count_in, concluded.inputs_unrecorded) == (3, True)
    assert record.findings == []  # said by the writer, after anything found while building the events
    span = _written(record, "rerank rerank")
    assert span.attributes[sc.STAGE_FINDINGS] == ("inputs not recorded: candidates.in is out + excluded",)
    assert span.attributes[sc.CANDIDATES_IN] == 3
