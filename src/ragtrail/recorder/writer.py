"""The end of a stage: its concluded record, written on its span in an order chosen for loss.

The writer sees only the :class:`ragtrail.recorder.record.StageRecord` (what the stage was told and,
in its ``conclusion``, what its end derived: :mod:`ragtrail.recorder.conclude`), never the stage.

1. mirror attributes for other tools first (the SDK evicts the oldest attributes first, so they are
   the ones lost under a tight attribute limit),
2. the stage's own attributes (status, knobs, query, counts, findings; coverage, run status and
   the answer on a pipeline),
   and the output candidates as columns (schema 3, ``events.Columns``),
3. one event per produced query and per exclusion reason, spilling into continuation child spans
   rather than letting the SDK evict any,
4. ``ragtrail.events.count`` and ``ragtrail.events.digest`` over every record, then
5. the stage receipt (``ragtrail.stage.receipt`` and ``.fields``) over every semantic field written
   above, last of all, so it is the last to be lost and nothing written after it goes uncovered.
"""

from __future__ import annotations

import functools
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from ragtrail import settings
from ragtrail.contract import semconv as sc
from ragtrail.recorder import events as event_rules
from ragtrail.recorder import mirrors
from ragtrail.recorder.candidates import Candidate
from ragtrail.recorder.conclude import INPUTS_NOT_RECORDED, is_cancellation
from ragtrail.recorder.record import Conclusion, StageRecord
from ragtrail.recorder.sdk_events import Event, held_attributes
from ragtrail.recorder.sdk_events import set_attributes as add_attributes
from ragtrail.recorder.values import attribute_value, wire_text

__all__ = ["TRACER_NAME", "short_component", "span_name", "write"]

TRACER_NAME = "ragtrail"


def short_component(component: str) -> str:
    """The last dotted part of a component (``stage`` for none): what a span name shows."""
    return component.rsplit(".", 1)[-1] if component else "stage"


def span_name(kind: str, component: str) -> str:
    """``<kind> <last part of the component>``, e.g. ``retrieve BM25Retriever``."""
    return f"{kind} {short_component(component)}"


def write(record: StageRecord, span: Any) -> None:
    """Write a concluded stage record's attributes and events on its span (not ending it)."""
    concluded = record.conclusion
    if concluded is None:  # pragma: no cover - the stage concludes its record before writing it
        raise RuntimeError("the stage record was not concluded")
    limits = getattr(span, "_limits", None)
    outputs = record.outputs or []
    exclusions = concluded.exclusions
    written_columns = event_rules.EventBuilder(record.config, record.knobs.score_kind, record.state, _span_id(span)).build(
        record.variants, outputs, exclusions
    )
    # the stage's own attributes are made before the mirrors (written after them), so the mirrors' cap
    # can leave room for exactly what ragtrail will write: nothing of ragtrail's is ever evicted by a mirror
    own = _own_attributes(record, concluded, outputs)
    own.update(written_columns.span_attributes)
    held = held_attributes(span)
    ragtrail_attributes = (len(held) if held is not None else 0) + len(own) + _WRITTEN_LAST
    attributes = _mirrors(record, concluded, limits, outputs, max(0, ragtrail_attributes - mirrors.STAGE_ATTRIBUTE_RESERVE))  # 1.
    if attributes:
        add_attributes(span, attributes)
    add_attributes(span, own)  # 2.
    findings_written = len(record.findings)
    _write_status(span, record, concluded)
    events = written_columns.events  # 3.
    spans = _emit(span, record, events, limits)
    final: dict[str, Any] = {}  # 4.
    if len(record.findings) > findings_written:  # found while building the events (a canonical form cut)
        final[sc.STAGE_FINDINGS] = list(record.findings)
    if record.errors:
        final[sc.STAGE_INSTRUMENTATION_ERRORS] = record.errors
    if spans > 1:
        final[sc.EVENTS_SPANS] = spans
    final[sc.EVENTS_COUNT] = event_rules.count(written_columns.items)
    final[sc.EVENTS_DIGEST] = event_rules.digest(written_columns.items)
    add_attributes(span, final)
    written = held_attributes(span)  # 5. what the SDK holds, as the reader will see it
    if written is None:  # pragma: no cover - not an SDK span: the attributes this stage wrote
        written = {**own, **final}
    stamp = event_rules.receipt(written, events, settings.receipt_key())
    add_attributes(span, {sc.STAGE_RECEIPT: stamp.receipt, sc.STAGE_RECEIPT_FIELDS: stamp.fields})


def _write_status(span: Any, record: StageRecord, concluded: Conclusion) -> None:
    """The span's status: the exception when the stage raised; OK or ERROR under the OpenInference mirror."""
    if concluded.raised is not None:
        _record_exception(span, record, concluded.raised)
    elif record.config.mirror_openinference:
        # OTel: instrumentation sets OK only when configured to; the OpenInference mirror is that
        # configuration (Phoenix and OpenInference's instrumentors show OK for a stage that worked)
        if concluded.status == sc.STATUS_FAILED:
            span.set_status(Status(StatusCode.ERROR, concluded.failure_class or sc.STATUS_FAILED))
        else:
            span.set_status(Status(StatusCode.OK))


def _emit(span: Any, record: StageRecord, events: list[Event], limits: Any) -> int:
    """Add the stage's events, spilling into continuation spans; returns how many spans carry them."""
    room = event_rules.capacity(record.config.events_per_span, limits)
    tracer = record.tracer or trace.get_tracer(TRACER_NAME)
    continuation = functools.partial(mirrors.continuation, record.kind) if record.config.mirror_openinference else None
    return event_rules.emit(span, events, room, tracer, span_name(record.kind, record.component), record.kind, record.component, continuation)


def _span_id(span: Any) -> str | None:
    """The span's id as readers print it (16 lowercase hex), ``None`` for a span without a valid one."""
    context = span.get_span_context()
    return sc.span_id_hex(context.span_id) if context.is_valid else None


# written after the mirrors and the stage's own attributes: findings, errors, events.spans, count and
# digest (4.), the receipt and its fields (5.), and the export's two segment stamps
_WRITTEN_LAST = 9


def _mirrors(record: StageRecord, concluded: Conclusion, limits: Any, outputs: list[Candidate], beyond_reserve: int) -> dict[str, Any]:
    """The mirror attributes; ``beyond_reserve``: how many of ragtrail's own attributes the stage
    will hold beyond the mirrors' reserve (``mirrors.STAGE_ATTRIBUTE_RESERVE``), so the cap leaves them room."""
    config = record.config
    if not (config.mirror_genai or config.mirror_openinference):
        return {}
    text_allowed = config.query_text_allowed()
    m = mirrors.MirrorInput(
        kind=record.kind,
        component=record.component,
        top_k=record.knobs.top_k,
        config=config,
        limits=limits,
        extra=beyond_reserve + (mirrors.GENAI_ATTRIBUTES if config.mirror_genai else 0),
        query_text=wire_text(record.query.text) if record.query is not None and text_allowed else None,
        produced_queries=[wire_text(v.text) for v in record.variants] if text_allowed else [],
        inputs=record.inputs,
        outputs=outputs,
        exclusions=concluded.exclusions,
        answer=concluded.answer,
        framework_output=_framework_output(record) if config.mirror_openinference else None,
        model=record.extra.get(sc.STAGE_MODEL),
        collection=record.extra.get(sc.STAGE_COLLECTION),
        within_retrieval=record.within_retrieval,
    )
    attributes: dict[str, Any] = {}
    oi = mirrors.openinference(m) if config.mirror_openinference else {}
    if config.mirror_genai:
        written = oi.get(sc.MIRROR_OUTPUT_DOCUMENTS_MIRRORED) if config.mirror_openinference else None
        attributes.update(mirrors.genai(m, written))
    attributes.update(oi)  # the OpenInference count wins: it is never more than GenAI's
    return attributes


def _framework_output(record: StageRecord) -> str | None:
    """A pipeline root's framework output as content capture allows it (``off``: ``None``)."""
    text = record.framework_output
    if text is None or record.kind != sc.KIND_PIPELINE:
        return None
    return record.config.content_for(wire_text(text))


def _own_attributes(record: StageRecord, concluded: Conclusion, outputs: list[Candidate]) -> dict[str, Any]:
    """ragtrail's own attributes of the stage: what it is, how it ended, its knobs, its query, what
    the caller set, the run's attributes it says, its counts and findings."""
    own: dict[str, Any] = {
        sc.SCHEMA: sc.SCHEMA_VERSION,
        sc.STAGE_KIND: record.kind,
        sc.STAGE_COMPONENT: record.component,
        sc.STAGE_STATUS: concluded.status,
    }
    if concluded.failure_class:
        own[sc.STAGE_FAILURE_CLASS] = concluded.failure_class
    if record.fallback:
        own[sc.STAGE_FALLBACK] = record.fallback
    knobs = record.knobs
    for key, value in (
        (sc.STAGE_TOP_K, knobs.top_k),
        (sc.STAGE_THRESHOLD, knobs.threshold),
        (sc.STAGE_BUDGET_LIMIT, knobs.budget_limit),
        (sc.STAGE_BUDGET_USED, knobs.budget_used),
        (sc.STAGE_BUDGET_UNIT, knobs.budget_unit),
    ):
        if value is not None:
            own[key] = value
    if record.query is not None:
        own.update(event_rules.query_attributes(record.query, record.config))
    for key, value in record.extra.items():
        own[key] = attribute_value(value)
    own.update(concluded.run)
    if concluded.inputs_unrecorded:
        record.findings.append(INPUTS_NOT_RECORDED)
    own[sc.CANDIDATES_IN] = concluded.count_in
    own[sc.CANDIDATES_OUT] = len(outputs)
    own[sc.CANDIDATES_EXCLUDED] = len(concluded.exclusions)
    if record.findings:
        own[sc.STAGE_FINDINGS] = list(record.findings)
    return own


def _exception_message(exc: BaseException) -> str | None:
    """``str(exc)``, or ``None`` when the exception's ``__str__`` itself raises: a broken message must
    not cost the stage its events, count and digest."""
    try:
        text = str(exc)
    except Exception:
        return None
    return text if isinstance(text, str) else None


def _record_exception(span: Any, record: StageRecord, exc: BaseException) -> None:
    """The exception on the span. Its message may quote the query: only in ``text`` query mode
    does it leave the process; otherwise only the type. A message that cannot be read (its
    ``__str__`` raises) is said as such, and the stage's record stays whole. A cancellation is
    not an error of the span: it is said by the stage's status alone."""
    if is_cancellation(exc):
        return
    name = type(exc).__name__
    if not record.config.exception_message_allowed():
        span.set_status(Status(StatusCode.ERROR, name))
        return
    message = _exception_message(exc)
    if message is not None:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, f"{name}: {message}"))
        return
    record.findings.append(f"the {name} raised by the stage has a message that could not be read (its __str__ raised)")
    span.add_event(
        "exception", {"exception.type": f"{type(exc).__module__}.{type(exc).__qualname__}", "exception.message": "<unreadable: __str__ raised>"}
    )
    span.set_status(Status(StatusCode.ERROR, name))
