"""A stage's record: everything a recording stage was told, then what its end concluded.

:class:`ragtrail.recorder.stage.Stage` fills a :class:`StageRecord` while it runs; when it ends,
:func:`ragtrail.recorder.conclude.conclude` derives what follows from it (exclusions, status, hops,
counts, the pipeline's bookkeeping) into its :class:`Conclusion`, and
:func:`ragtrail.recorder.writer.write` emits the two on the stage's span. The writer and the
conclude step see only this record, never the Stage, so each can be read and tested on a record
built by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace

from ragtrail.recorder.candidates import Candidate, Packed, pack, unpack
from ragtrail.recorder.exclusions import Exclusion, Explicit, Knobs
from ragtrail.recorder.pipeline import PipelineState, QueryRecord
from ragtrail.settings import CaptureSettings

__all__ = ["Conclusion", "StageRecord"]

_NO_KNOBS = Knobs()


@dataclass
class Conclusion:
    """What a stage's end derived from its record (:func:`ragtrail.recorder.conclude.conclude`).

    ``raised``: the exception the stage ended with; ``count_in``: ``ragtrail.candidates.in``;
    ``inputs_unrecorded``: that count is out + excluded because the inputs were never handed over
    (said as a finding where the stage's own attributes are written); ``run``: the run's attributes
    this span says (a pipeline's coverage, run status and answer; a retrieval root's coverage);
    ``answer``: the run's answer attributes, for the mirrors."""

    raised: BaseException | None
    status: str
    failure_class: str | None
    exclusions: list[Exclusion]
    count_in: int
    inputs_unrecorded: bool
    run: dict[str, Any]
    answer: dict[str, Any] | None


@dataclass
class StageRecord:
    """What a recording stage was told, kept until it ends, and what its end concluded."""

    kind: str
    component: str
    config: CaptureSettings
    extra: dict[str, Any]
    # the pipeline run the stage joined, and whether the stage opened it (a pipeline stage, or a
    # stage outside any pipeline)
    state: PipelineState
    owns_state: bool = False
    # the record of the stage this one runs inside, when that one records
    parent: StageRecord | None = None
    tracer: trace.Tracer | None = None  # the stage's own tracer (continuation spans); None: ragtrail's
    # opened inside another retrieve stage (at any depth, known at its start from the open stages): part
    # of that retrieval, not one of its own in the GenAI mirror (docs/semconv.md §6)
    within_retrieval: bool = False
    knobs: Knobs = _NO_KNOBS  # the knobs as the stage ran, handed over when it ends
    errors: int = 0  # internal errors counted while recording the stage, handed over when it ends
    closed: bool = False  # the stage has ended: no longer an outer stage for late inner ones
    query: QueryRecord | None = None
    variants: list[QueryRecord] = field(default_factory=list)
    inputs: list[Candidate] | None = None
    outputs: list[Candidate] | None = None
    explicit: dict[str, Explicit] = field(default_factory=dict)
    string_ids: set[str] = field(default_factory=set)
    status: str | None = None
    failure_class: str | None = None
    fallback: str | None = None
    # what the framework returned from a pipeline root (a query engine's answer), for the mirrors'
    # output.value only: not a ragtrail attribute (stage.framework_output)
    framework_output: Any = None
    findings: list[str] = field(default_factory=list)
    receipts: dict[int, tuple[Any, Any]] = field(default_factory=dict)  # id(content) -> (content, receipt)
    # what retrieval stages nested inside this one handed up (a retriever over a store, a wrapper
    # that trims its inner retriever's hits)
    inner: list[Candidate] = field(default_factory=list)
    # a nested stage of another kind (a compressor's filter, a splitter) ran inside this one: what it
    # dropped is explained there, so the inner hits are not this stage's inputs
    inner_other: bool = False
    # the inner hits as columns once a nested stage of another kind ran (``inner`` is then empty):
    # from then on they are read only as ids, or whole by ``handed_up``, and a hundred candidates
    # kept alive through the compressors' stages are a hundred objects more for the host's GC
    inner_packed: Packed | None = None
    conclusion: Conclusion | None = None  # set by conclude() when the stage ends
    # the last reason said for a bare id: the next bare id with the same reason and detail shares it
    # (a compressor's drops all say one "top_k=10": one record, not one per dropped id)
    last_said: Explicit | None = None

    def said(self, reason: str, detail: str | None) -> Explicit:
        """The reason said for an exclusion named by id alone (immutable: equal ones are shared)."""
        last = self.last_said
        if last is None or last.reason != reason or last.detail != detail:
            last = self.last_said = Explicit(reason, detail, None)
        return last

    def hand_up(self, outputs: list[Candidate]) -> None:
        """What a nested retrieval stage handed on becomes this stage's inner hits."""
        if self.inner_packed is None:
            self.inner.extend(outputs)
        else:
            self.inner_packed = pack([*unpack(self.inner_packed), *outputs])

    def other_ran(self) -> None:
        """A nested stage of another kind ended inside this one (see ``inner_other``)."""
        self.inner_other = True
        if self.inner:
            self.inner_packed = pack(self.inner)
            self.inner = []

    def has_inner(self) -> bool:
        return bool(self.inner) or self.inner_packed is not None

    def inner_ids(self) -> list[str]:
        return list(self.inner_packed[0]) if self.inner_packed is not None else [c.id for c in self.inner]

    def handed_up(self) -> list[Candidate]:
        """The inner hits, in the order they came (equal copies once packed)."""
        return unpack(self.inner_packed) if self.inner_packed is not None else list(self.inner)

    def close(self) -> None:
        """The stage has ended: no longer an outer stage for late inner ones, and (a pipeline) no
        answer is taken after this."""
        self.closed = True
        answer = self.state.answer
        if self.owns_state and answer is not None:
            answer.open = False
