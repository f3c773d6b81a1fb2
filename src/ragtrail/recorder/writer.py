"""The end of a stage: everything it was told, written on its span in an order chosen for loss.

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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from ragtrail.contract import semconv as sc
from ragtrail.recorder import events as event_rules
from ragtrail.recorder import mirrors
from ragtrail.recorder.candidates import Candidate
from ragtrail.recorder.errors import exception_message, is_cancellation
from ragtrail.recorder.exclusions import Exclusion, Explicit, Knobs, derive, resolve_string_ids
from ragtrail.recorder.pipeline import PipelineState, QueryRecord
from ragtrail.recorder.sdk_events import held_attributes, set_attributes as add_attributes
from ragtrail.recorder.values import attribute_value, wire_text
from ragtrail import settings
from ragtrail.settings import CaptureSettings

if TYPE_CHECKING:  # pragma: no cover
    from ragtrail.recorder.stage import Stage

TRACER_NAME = "ragtrail"


@dataclass
class Seen:
    """What a recording stage was told, kept until it ends."""

    config: CaptureSettings
    extra: dict[str, Any]
    query: QueryRecord | None = None
    variants: list[QueryRecord] = field(default_factory=list)
    inputs: list[Candidate] | None = None
    outputs: list[Candidate] | None = None
    explicit: dict[str, Explicit] = field(default_factory=dict)
    string_ids: set[str] = field(default_factory=set)
    status: str | None = None
    failure_class: str | None = None
    fallback: str | None = None
    findings: list[str] = field(default_factory=list)
    answer: dict[str, Any] | None = None
    receipts: dict[int, tuple[Any, Any]] = field(default_factory=dict)  # id(content) -> (content, receipt)
    # what retrieval stages nested inside this one handed up (a retriever over a store, a wrapper
    # that trims its inner retriever's hits)
    inner: list[Candidate] = field(default_factory=list)
    # a nested stage of another kind (a compressor's filter, a splitter) ran inside this one: what it
    # dropped is explained there, so the inner hits are not this stage's inputs
    inner_other: bool = False


def _seen_of(stage: "Stage") -> Seen:
    """What a recording stage was told (every stage that writes is recording: it has one)."""
    seen = stage._seen
    if seen is None:  # pragma: no cover - write() runs only for a recording stage
        raise RuntimeError("stage is not recording")
    return seen


def _state_of(stage: "Stage") -> "PipelineState":
    """The pipeline state a recording stage joined (it always joins one)."""
    state = stage._state
    if state is None:  # pragma: no cover - write() runs only for a recording stage
        raise RuntimeError("stage is not recording")
    return state


def short_component(component: str) -> str:
    return component.rsplit(".", 1)[-1] if component else "stage"


def span_name(kind: str, component: str) -> str:
    """``<kind> <last part of the component>``, e.g. ``retrieve BM25Retriever``."""
    return f"{kind} {short_component(component)}"


def knobs_of(stage: "Stage") -> Knobs:
    return Knobs(stage.top_k, stage.threshold, stage.budget_limit, stage.budget_used, stage.budget_unit,
                 stage.score_kind)


def write(stage: "Stage", exc: BaseException | None) -> None:
    """Write a recording stage's attributes and events on its span (not ending it)."""
    seen = _seen_of(stage)
    span = stage.span
    limits = getattr(span, "_limits", None)
    outputs = seen.outputs or []
    inputs = seen.inputs = _inner_as_inputs(stage, seen)
    if seen.outputs is None and inputs is not None and exc is None:
        seen.findings.append("outputs not recorded: no exclusions derived")
    resolve_string_ids(seen.explicit, seen.string_ids, inputs)
    exclusions, findings = derive(inputs, outputs, seen.explicit, knobs_of(stage), failed=seen.outputs is None)
    seen.findings.extend(findings)
    _assign_hops(stage, outputs)
    status, failure_class = final_status(stage.kind, seen, exc, outputs)
    written_columns = event_rules.EventBuilder(seen.config, stage.score_kind, _state_of(stage),
                                               _span_id(span)).build(seen.variants, outputs, exclusions)
    # the stage's own attributes are made before the mirrors (written after them), so the mirrors' cap
    # can leave room for exactly what ragtrail will write: nothing of ragtrail's is ever evicted by a mirror
    own = _own_attributes(stage, seen, exc, status, failure_class, outputs, exclusions)
    own.update(written_columns.span_attributes)
    held = held_attributes(span)
    ragtrail_attributes = (len(held) if held is not None else 0) + len(own) + _WRITTEN_LAST
    attributes = _mirrors(stage, seen, limits, inputs, outputs, exclusions,
                          max(0, ragtrail_attributes - mirrors.STAGE_ATTRIBUTE_RESERVE))  # 1.
    if attributes:
        add_attributes(span, attributes)
    add_attributes(span, own)  # 2.
    findings_written = len(seen.findings)
    if exc is not None:
        _record_exception(span, seen, exc)
    elif seen.config.mirror_openinference:
        # OTel: instrumentation sets OK only when configured to; the OpenInference mirror is that
        # configuration (Phoenix and OpenInference's instrumentors show OK for a stage that worked)
        if status == sc.STATUS_FAILED:
            span.set_status(Status(StatusCode.ERROR, failure_class or sc.STATUS_FAILED))
        else:
            span.set_status(Status(StatusCode.OK))
    events = written_columns.events  # 3.
    room = event_rules.capacity(seen.config.events_per_span, limits)
    tracer = stage._tracer or trace.get_tracer(TRACER_NAME)
    continuation = (functools.partial(mirrors.continuation, stage.kind) if seen.config.mirror_openinference
                    else None)
    spans = event_rules.emit(span, events, room, tracer, span_name(stage.kind, stage.component), stage.kind,
                             stage.component, continuation)
    final: dict[str, Any] = {}  # 4.
    if len(seen.findings) > findings_written:  # found while building the events (a canonical form cut)
        final[sc.STAGE_FINDINGS] = list(seen.findings)
    if stage._errors:
        final[sc.STAGE_INSTRUMENTATION_ERRORS] = stage._errors
    if spans > 1:
        final[sc.EVENTS_SPANS] = spans
    final[sc.EVENTS_COUNT] = len(written_columns.items)
    final[sc.EVENTS_DIGEST] = event_rules.digest(written_columns.items)
    add_attributes(span, final)
    written = held_attributes(span)  # 5. what the SDK holds, as the reader will see it
    if written is None:  # pragma: no cover - not an SDK span: the attributes this stage wrote
        written = {**own, **final}
    stamp = event_rules.receipt(written, events, settings.receipt_key())
    add_attributes(span, {sc.STAGE_RECEIPT: stamp.receipt, sc.STAGE_RECEIPT_FIELDS: stamp.fields})


def _span_id(span: Any) -> str | None:
    """The span's id as readers print it (16 lowercase hex), ``None`` for a span without a valid one."""
    context = span.get_span_context()
    return sc.span_id_hex(context.span_id) if context.is_valid else None


# written after the mirrors and the stage's own attributes: findings, errors, events.spans, count and
# digest (4.), the receipt and its fields (5.), and the export's two segment stamps
_WRITTEN_LAST = 9


def _mirrors(stage: "Stage", seen: Seen, limits: Any, inputs: list[Candidate] | None,
             outputs: list[Candidate], exclusions: list[Exclusion], beyond_reserve: int) -> dict[str, Any]:
    """The mirror attributes; ``beyond_reserve``: how many of ragtrail's own attributes the stage
    will hold beyond the mirrors' reserve (``mirrors.STAGE_ATTRIBUTE_RESERVE``), so the cap leaves them room."""
    config = seen.config
    if not (config.mirror_genai or config.mirror_openinference):
        return {}
    text_allowed = config.query_text_allowed()
    answer = seen.answer
    pipeline = stage._state.pipeline_stage if stage._state is not None else None
    if answer is None and pipeline is not None and pipeline._seen is not None:
        answer = pipeline._seen.answer  # a cite/generate stage after ragtrail.answer()
    m = mirrors.MirrorInput(
        kind=stage.kind, component=stage.component, top_k=stage.top_k, config=config, limits=limits,
        extra=beyond_reserve + (mirrors.GENAI_ATTRIBUTES if config.mirror_genai else 0),
        query_text=wire_text(seen.query.text) if seen.query is not None and text_allowed else None,
        produced_queries=[wire_text(v.text) for v in seen.variants] if text_allowed else [],
        inputs=inputs, outputs=outputs, exclusions=exclusions, answer=answer,
        model=seen.extra.get(sc.STAGE_MODEL))
    attributes: dict[str, Any] = {}
    oi = mirrors.openinference(m) if config.mirror_openinference else {}
    if config.mirror_genai:
        written = oi.get(sc.MIRROR_OUTPUT_DOCUMENTS_MIRRORED) if config.mirror_openinference else None
        attributes.update(mirrors.genai(m, written))
    attributes.update(oi)  # the OpenInference count wins: it is never more than GenAI's
    return attributes


def _own_attributes(stage: "Stage", seen: Seen, exc: BaseException | None, status: str, failure_class: str | None,
                    outputs: list[Candidate], exclusions: list[Exclusion]) -> dict[str, Any]:
    own: dict[str, Any] = {sc.SCHEMA: sc.SCHEMA_VERSION, sc.STAGE_KIND: stage.kind,
                           sc.STAGE_COMPONENT: stage.component, sc.STAGE_STATUS: status}
    if failure_class:
        own[sc.STAGE_FAILURE_CLASS] = failure_class
    if seen.fallback:
        own[sc.STAGE_FALLBACK] = seen.fallback
    for key, value in ((sc.STAGE_TOP_K, stage.top_k), (sc.STAGE_THRESHOLD, stage.threshold),
                       (sc.STAGE_BUDGET_LIMIT, stage.budget_limit), (sc.STAGE_BUDGET_USED, stage.budget_used),
                       (sc.STAGE_BUDGET_UNIT, stage.budget_unit)):
        if value is not None:
            own[key] = value
    if seen.query is not None:
        own.update(event_rules.query_attributes(seen.query, seen.config))
    for key, value in seen.extra.items():
        own[key] = attribute_value(value)
    state = _state_of(stage)
    if stage.kind == sc.KIND_PIPELINE and stage._owns_state:
        own.update(state.coverage())
        # a cancelled run said as such, not as failed (nor as empty: it did not finish)
        own[sc.RUN_STATUS] = sc.RUN_CANCELLED if is_cancellation(exc) else state.run_status(exc is not None)
        if seen.answer:
            own.update(seen.answer)
    elif stage.kind != sc.KIND_PIPELINE:
        state.add_stage_status(status)
    if seen.outputs is not None and stage.kind != sc.KIND_PIPELINE:
        outer = _outer_retrieval(stage)
        if outer is not None and stage.kind in _RETRIEVAL:
            # nested: what it found is the outer stage's input, "retrieved" only once that stage
            # hands it on (a trimmed hit is the outer stage's exclusion, never retrieved)
            _seen_of(outer).inner.extend(outputs)
        else:
            if outer is not None:
                _seen_of(outer).inner_other = True
            ids = [c.id for c in outputs]
            if stage.kind in _RETRIEVAL and seen.inner_other and seen.inner:
                # a compression retriever: its base retriever read the store and compressors inside
                # it narrowed what came back, so it retrieved what the inner stage found; what it
                # hands on is the compressors' output, in the context (tracked by them)
                ids = [c.id for c in seen.inner]
            state.track(stage.kind, ids)
    if stage.kind in _RETRIEVAL and stage._owns_state and seen.inner:
        # a retrieval root over nested stores (fusion, a wrapper) with no pipeline around it: its
        # span is the only place the run's coverage (the sum over its stores) can be said
        own.update(state.coverage())
    own[sc.CANDIDATES_IN] = _count_in(stage.kind, seen, outputs, exclusions)
    own[sc.CANDIDATES_OUT] = len(outputs)
    own[sc.CANDIDATES_EXCLUDED] = len(exclusions)
    if seen.findings:
        own[sc.STAGE_FINDINGS] = list(seen.findings)
    return own


_RETRIEVAL = (sc.KIND_RETRIEVE, sc.KIND_FUSE)


def _outer_retrieval(stage: "Stage") -> "Stage | None":
    """The retrieval stage this one runs inside, in the same pipeline and still recording."""
    parent = stage._parent
    if parent is not None and parent.kind in _RETRIEVAL and parent.recording and not parent._closed \
            and parent._state is stage._state and parent._seen is not None:
        return parent
    return None


def _inner_as_inputs(stage: "Stage", seen: Seen) -> list[Candidate] | None:
    """A retrieval stage that declared no inputs takes what its nested retrieval stages handed up
    as its inputs (in the order they came, duplicates included), so what it did not hand on is an
    exclusion of its own. Not when a nested stage of another kind (a compressor's filter) ran inside
    it: those drops are explained there. Only when they share an id space (some inner id is among its outputs or exclusions: a
    store that numbers rows differently from the framework above it says nothing about trimming),
    or when it handed nothing on at all (then none of the inner hits reached anyone)."""
    if seen.inputs is not None or not seen.inner or stage.kind not in _RETRIEVAL or seen.outputs is None \
            or seen.inner_other:
        return seen.inputs
    mine = {c.id for c in seen.outputs} | set(seen.explicit)
    if seen.outputs and not mine & {c.id for c in seen.inner}:
        return None
    # duplicates kept: the same hit handed up twice (several inner searches) is a ``deduplicated``
    return list(seen.inner)


def _count_in(kind: str, seen: Seen, outputs: list[Candidate], exclusions: list[Exclusion]) -> int:
    if seen.inputs is not None:
        return len(seen.inputs)
    if kind in sc.PRODUCING_KINDS:
        return 0
    if seen.outputs is not None:
        # a narrowing stage whose inputs were never handed over: say so rather than write in=0
        seen.findings.append("inputs not recorded: candidates.in is out + excluded")
    return len(outputs) + len(exclusions)


def _assign_hops(stage: "Stage", outputs: list[Candidate]) -> None:
    """Each output's hop and score kind: its own, else (a retrieval's hits were found by its own
    query; later stages inherit the finder's hop) the pipeline's memory, else the stage's query."""
    state = _state_of(stage)
    query = _seen_of(stage).query
    default = query.hop if query is not None else None
    kind = stage.kind
    for candidate in outputs:
        if candidate.score_kind is None:
            candidate.score_kind = stage.score_kind
        if candidate.hop is None:
            known = None if kind == sc.KIND_RETRIEVE else state.candidate_hop(candidate.id)
            candidate.hop = known if known is not None else (default if kind in sc.PRODUCING_KINDS else None)
        state.remember_candidate(candidate.id, candidate.hop, candidate.score_kind)


def final_status(kind: str, seen: Seen, exc: BaseException | None, outputs: list[Candidate]) -> tuple[str, str | None]:
    """The stage's status and failure class: ``failed`` when it raised; what the caller set; else
    ``empty`` (no outputs, for a stage that recorded its outputs) or ``ok``."""
    status = seen.status
    failure_class = seen.failure_class
    if is_cancellation(exc):
        # stopped from outside (a cancelled task, Ctrl-C): not a failure of the retrieval
        return sc.STATUS_CANCELLED, None
    if exc is not None:
        status = sc.STATUS_FAILED
        if failure_class is None:
            failure_class = failure_class_of(exc)
    elif status is None:
        status = sc.STATUS_EMPTY if (seen.outputs is not None and not outputs and kind != sc.KIND_PIPELINE) else sc.STATUS_OK
    if status in (sc.STATUS_FAILED, sc.STATUS_DEGRADED) and not failure_class:
        failure_class = "unspecified"
    return status, failure_class


def failure_class_of(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timeout"
    return f"exception:{type(exc).__name__}"


def _record_exception(span: Any, seen: Seen, exc: BaseException) -> None:
    """The exception on the span. Its message may quote the query: only in ``text`` query mode
    does it leave the process; otherwise only the type. A message that cannot be read (its
    ``__str__`` raises) is said as such, and the stage's record stays whole. A cancellation is
    not an error of the span: it is said by the stage's status alone."""
    if is_cancellation(exc):
        return
    name = type(exc).__name__
    if not seen.config.exception_message_allowed():
        span.set_status(Status(StatusCode.ERROR, name))
        return
    message = exception_message(exc)
    if message is not None:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, f"{name}: {message}"))
        return
    seen.findings.append(f"the {name} raised by the stage has a message that could not be read (its __str__ raised)")
    span.add_event("exception", {"exception.type": f"{type(exc).__module__}.{type(exc).__qualname__}",
                                 "exception.message": "<unreadable: __str__ raised>"})
    span.set_status(Status(StatusCode.ERROR, name))
