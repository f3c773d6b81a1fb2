"""The end of a stage, before anything is written: what follows from its record.

Pure of spans: from a :class:`ragtrail.recorder.record.StageRecord` alone it derives the exclusions
(``exclusions.derive``), the hops and score kinds of the outputs, the stage's status and failure
class, ``candidates.in``, and does the pipeline's bookkeeping (what was retrieved, what reached the
context, how the stages ended; a pipeline's coverage and run status). The result is the record's
:class:`ragtrail.recorder.record.Conclusion`, which :func:`ragtrail.recorder.writer.write` emits.
It works on the record in place, as the stage's end always did: the inputs a retrieval stage takes
from its nested stages, the hops given to the outputs, the findings.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from ragtrail import settings
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import content_id
from ragtrail.recorder.candidates import Candidate
from ragtrail.recorder.exclusions import derive, resolve_string_ids
from ragtrail.recorder.record import Conclusion, StageRecord

__all__ = [
    "CANCELLATIONS",
    "INPUTS_NOT_RECORDED",
    "RETRIEVAL_KINDS",
    "conclude",
    "failure_class_of",
    "final_status",
    "is_cancellation",
    "name_private_strings",
    "settle_status",
]

# raised to stop the work, not by it: a cancelled task, Ctrl-C, a closed generator
CANCELLATIONS: tuple[type[BaseException], ...] = (KeyboardInterrupt, GeneratorExit, asyncio.CancelledError, concurrent.futures.CancelledError)
RETRIEVAL_KINDS = (sc.KIND_RETRIEVE, sc.KIND_FUSE)
INPUTS_NOT_RECORDED = "inputs not recorded: candidates.in is out + excluded"


def is_cancellation(exc: BaseException | None) -> bool:
    """The call was stopped from outside (``asyncio.CancelledError``, ``KeyboardInterrupt``,
    ``GeneratorExit``): not a failure of the retrieval, so a stage says ``cancelled``, not ``failed``."""
    return isinstance(exc, CANCELLATIONS)


def name_private_strings(record: StageRecord) -> None:
    """With content capture off, a string given to ``Stage.exclude`` that names no recorded
    candidate (by id, or as a string candidate's content) may be a document's text: it is named by
    its content id (the rule string candidates are identified by), never exported as it is, neither
    as the candidate id nor in a finding."""
    if not record.string_ids or record.config.free_text_allowed():
        return
    known = {c.id for c in record.inputs or ()} | {c.id for c in record.outputs or ()}
    explicit = record.explicit
    for text in record.string_ids:
        if text in explicit and text not in known:
            alias = content_id(text)
            if alias not in explicit:
                explicit[alias] = explicit.pop(text)


def conclude(record: StageRecord, exc: BaseException | None) -> Conclusion:
    """Derive what follows from the record of a stage that ended (with ``exc`` when it raised), do
    the pipeline's bookkeeping, and keep the result as ``record.conclusion``."""
    outputs = record.outputs or []
    inputs = record.inputs = _inner_as_inputs(record)
    if record.outputs is None and inputs is not None and exc is None:
        record.findings.append("outputs not recorded: no exclusions derived")
    resolve_string_ids(record.explicit, record.string_ids, inputs)
    exclusions, findings = derive(inputs, outputs, record.explicit, record.knobs, failed=record.outputs is None)
    record.findings.extend(findings)
    _assign_hops(record, outputs)
    status, failure_class = final_status(record, exc, outputs)
    run = _run_attributes(record, exc, status, outputs)
    if inputs is not None:
        count_in, unrecorded = len(inputs), False
    elif record.kind in sc.PRODUCING_KINDS:
        count_in, unrecorded = 0, False
    else:
        # a narrowing stage whose inputs were never handed over: said rather than in=0
        unrecorded = record.outputs is not None
        count_in = len(outputs) + len(exclusions)
    answer = record.state.answer
    conclusion = record.conclusion = Conclusion(
        exc, status, failure_class, exclusions, count_in, unrecorded, run, answer.attributes if answer is not None else None
    )
    return conclusion


def _run_attributes(record: StageRecord, exc: BaseException | None, status: str, outputs: list[Candidate]) -> dict[str, Any]:
    """The pipeline's bookkeeping for this stage, and the run's attributes its span says: a
    pipeline's coverage, run status and answer; a retrieval root's coverage."""
    state, kind = record.state, record.kind
    run: dict[str, Any] = {}
    if kind == sc.KIND_PIPELINE and record.owns_state:
        run.update(state.coverage())
        # a cancelled run said as such, not as failed (nor as empty: it did not finish)
        run[sc.RUN_STATUS] = sc.RUN_CANCELLED if is_cancellation(exc) else state.run_status(exc is not None)
        run.update(settings.transform_policy_attributes())  # issue 28: the policy the run was recorded under
        answer = state.answer.attributes if state.answer is not None else None
        if answer:
            run.update(answer)
    elif kind != sc.KIND_PIPELINE:
        state.add_stage_status(status)
    if record.outputs is not None and kind != sc.KIND_PIPELINE:
        _track(record, outputs)
    if kind in RETRIEVAL_KINDS and record.owns_state and record.has_inner():
        # a retrieval root over nested stores (fusion, a wrapper) with no pipeline around it: its
        # span is the only place the run's coverage (the sum over its stores) can be said
        run.update(state.coverage())
    return run


def _track(record: StageRecord, outputs: list[Candidate]) -> None:
    """What the stage handed on, into the pipeline's coverage (or up to its outer retrieval stage)."""
    outer = _outer_retrieval(record)
    if outer is not None and record.kind in RETRIEVAL_KINDS:
        # nested: what it found is the outer stage's input, "retrieved" only once that stage
        # hands it on (a trimmed hit is the outer stage's exclusion, never retrieved)
        outer.hand_up(outputs)
        return
    if outer is not None:
        outer.other_ran()
    ids = [c.id for c in outputs]
    if record.kind in RETRIEVAL_KINDS and record.inner_other and record.has_inner():
        # a compression retriever: its base retriever read the store and compressors inside
        # it narrowed what came back, so it retrieved what the inner stage found; what it
        # hands on is the compressors' output, in the context (tracked by them)
        ids = record.inner_ids()
    record.state.track(record.kind, ids)


def _outer_retrieval(record: StageRecord) -> StageRecord | None:
    """The record of the retrieval stage this one runs inside, in the same pipeline and still open."""
    parent = record.parent
    if parent is not None and parent.kind in RETRIEVAL_KINDS and not parent.closed and parent.state is record.state:
        return parent
    return None


def _inner_as_inputs(record: StageRecord) -> list[Candidate] | None:
    """A retrieval stage that declared no inputs takes what its nested retrieval stages handed up
    as its inputs (in the order they came, duplicates included), so what it did not hand on is an
    exclusion of its own. Not when a nested stage of another kind (a compressor's filter) ran inside
    it: those drops are explained there. Only when they share an id space (some inner id is among its outputs or exclusions: a
    store that numbers rows differently from the framework above it says nothing about trimming),
    or when it handed nothing on at all (then none of the inner hits reached anyone)."""
    if record.inputs is not None or not record.inner or record.kind not in RETRIEVAL_KINDS or record.outputs is None or record.inner_other:
        return record.inputs
    mine = {c.id for c in record.outputs} | set(record.explicit)
    if record.outputs and not mine & {c.id for c in record.inner}:
        return None
    # duplicates kept: the same hit handed up twice (several inner searches) is a ``deduplicated``
    return list(record.inner)


def _assign_hops(record: StageRecord, outputs: list[Candidate]) -> None:
    """Each output's hop and score kind: its own, else (a retrieval's hits were found by its own
    query; later stages inherit the finder's hop) the pipeline's memory, else the stage's query."""
    state = record.state
    query = record.query
    default = query.hop if query is not None else None
    kind = record.kind
    score_kind = record.knobs.score_kind
    for candidate in outputs:
        if candidate.score_kind is None:
            candidate.score_kind = score_kind
        if candidate.hop is None:
            known = None if kind == sc.KIND_RETRIEVE else state.candidate_hop(candidate.id)
            candidate.hop = known if known is not None else (default if kind in sc.PRODUCING_KINDS else None)
        state.remember_candidate(candidate.id, candidate.hop, candidate.score_kind)


def final_status(record: StageRecord, exc: BaseException | None, outputs: list[Candidate]) -> tuple[str, str | None]:
    """The stage's status and failure class: ``failed`` when it raised; what the caller set; else
    ``empty`` (no outputs, for a stage that recorded its outputs) or ``ok``."""
    empty = record.outputs is not None and not outputs and record.kind != sc.KIND_PIPELINE
    return settle_status(record.status, record.failure_class, exc, empty)


def settle_status(status: str | None, failure_class: str | None, exc: BaseException | None, empty: bool) -> tuple[str, str | None]:
    """The rule of :func:`final_status` on what it reads (``empty``: the stage recorded outputs and
    they were none), shared with the metrics of a sampled-out stage (:mod:`ragtrail.recorder.metrics`)."""
    if is_cancellation(exc):
        # stopped from outside (a cancelled task, Ctrl-C): not a failure of the retrieval
        return sc.STATUS_CANCELLED, None
    if exc is not None:
        status = sc.STATUS_FAILED
        if failure_class is None:
            failure_class = failure_class_of(exc)
    elif status is None:
        status = sc.STATUS_EMPTY if empty else sc.STATUS_OK
    if status in (sc.STATUS_FAILED, sc.STATUS_DEGRADED) and not failure_class:
        failure_class = "unspecified"
    return status, failure_class


def failure_class_of(exc: BaseException) -> str:
    """The failure class a raised exception says: ``timeout``, else ``exception:<type name>``."""
    if isinstance(exc, TimeoutError):
        return "timeout"
    return f"exception:{type(exc).__name__}"
