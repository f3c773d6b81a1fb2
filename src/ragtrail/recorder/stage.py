"""The stage recorder: one span per pipeline stage, carrying its retrieval manifest (docs/semconv.md §1-3).

It knows no library. Callers (decorators, instrumentations) hand a :class:`Stage` the query, the
candidates that entered and left, and any reasons they know; the stage keeps what it was told in a
:class:`ragtrail.recorder.record.StageRecord` and, when it ends, hands that record to
:func:`ragtrail.recorder.conclude.conclude` (exclusions, status, hops, the pipeline's bookkeeping)
and then to :func:`ragtrail.recorder.writer.write` (mirrors first, events spilled, count and digest
last), when everything is known.

Every method is safe to call in any state: errors inside ragtrail are caught, counted and logged
once, never raised into the application. When the span is not recording (sampled out) nothing is
adapted, hashed or built.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from ragtrail import settings
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import canonical_json, receipt, set_cut_observer
from ragtrail.recorder.candidates import Candidate, adapt, adapt_all
from ragtrail.recorder.conclude import conclude, name_private_strings
from ragtrail.recorder.corpus import store_key, user_corpus_size
from ragtrail.recorder.errors import record_internal_error
from ragtrail.recorder.exclusions import Explicit, Knobs
from ragtrail.recorder.metrics import StageTally, close_tally, open_tally, sized_count
from ragtrail.recorder.pipeline import PipelineState, QueryRecord, RunAnswer, current_pipeline
from ragtrail.recorder.record import StageRecord
from ragtrail.recorder.writer import TRACER_NAME, span_name, write

__all__ = ["Stage", "counted", "current_stage", "framework_output", "handed_up", "stage"]

_T = TypeVar("_T")

_current_stage: contextvars.ContextVar[Stage | None] = contextvars.ContextVar("ragtrail_stage", default=None)


def _cut_finding(cuts: tuple[str, ...]) -> None:
    """A value too big, too deep or too odd to put in canonical form whole (see
    ``contract.receipts.canonical_json``) is a finding of the stage that met it, once per kind of cut."""
    s = _current_stage.get()
    record = s._recorded() if s is not None else None
    if record is not None:
        text = f"canonical form cut ({'; '.join(cuts)}): the id or receipt covers only what was kept"
        if text not in record.findings:
            record.findings.append(text)


set_cut_observer(_cut_finding)


def _reset(var: contextvars.ContextVar[_T], token: contextvars.Token[_T] | None) -> None:
    """Restore ``var`` to what it was before ``token``'s ``set``, if that happened in this context."""
    if token is not None:
        # try/except, not contextlib.suppress: this runs twice per stage, sampled out too, and a
        # suppress() object costs more than the reset itself
        try:  # noqa: SIM105
            var.reset(token)
        except ValueError:
            pass  # finished in another context (a callback, another task): left as it is


def counted(s: Stage) -> bool:
    """Whether the stage counts metrics (a MeterProvider is set up, docs/semconv.md §9): a hook that
    skips a sampled-out call may still hand it its outputs (only their number is kept) or its status."""
    return s._tally is not None


def handed_up(s: Stage) -> list[Candidate]:
    """What the retrieval stages nested in ``s`` handed up so far (a store's hits under the store's
    own ids), so a framework that builds its documents without ids can name them as the store did.
    ``[]`` when not recording."""
    record = s._recorded()
    return record.handed_up() if record is not None else []


def framework_output(s: Stage, text: Any) -> None:
    """What the framework itself returned from the pipeline root ``s`` (LlamaIndex's
    ``Response.response``, a LangChain chain's output string), for the OpenInference mirror's
    ``output.value`` only (docs/semconv.md §6): written as content capture allows, and only when the
    run's answer (``ragtrail.answer()``, a generate stage) is not there to say it. Not a
    ``ragtrail.*`` attribute: the stage receipt and ragtrail's own attributes are unchanged."""
    record = s._recorded()
    if record is not None and isinstance(text, str):
        record.framework_output = text


def current_stage() -> Stage | None:
    """The innermost ragtrail stage open in this context (for ``exclude()`` calls inside a decorated function)."""
    return _current_stage.get()


class Stage:
    """Records one stage. Use it through :func:`ragtrail.stage` or the decorators."""

    def __init__(
        self,
        kind: str,
        component: str | None = None,
        *,
        top_k: int | None = None,
        threshold: float | None = None,
        budget_limit: float | None = None,
        budget_unit: str | None = None,
        score_kind: str | None = None,
        tracer: trace.Tracer | None = None,
        span_kind: SpanKind | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> None:
        self.kind = kind
        self.component = component or kind
        self.top_k = top_k
        self.threshold = threshold
        self.budget_limit = budget_limit
        self.budget_unit = budget_unit
        self.budget_used: float | None = None
        self.score_kind = score_kind
        self.span: trace.Span = trace.INVALID_SPAN
        self.recording = False
        self._tracer = tracer
        self._span_kind = span_kind or (SpanKind.CLIENT if kind == sc.KIND_RETRIEVE else SpanKind.INTERNAL)
        self._attributes = attributes
        self._token: contextvars.Token[otel_context.Context] | None = None
        self._stage_token: contextvars.Token[Stage | None] | None = None
        self._pipeline_token: contextvars.Token[PipelineState | None] | None = None
        self._closed = False
        self._errors = 0
        self._record: StageRecord | None = None
        self._tally: StageTally | None = None  # what the metrics count, sampled in or out
        self._retrieving = False  # a retrieve stage, or one opened inside one: its inner stages are part of that retrieval

    # --- lifecycle --------------------------------------------------------------------------------
    def start(self) -> Stage:
        """Open the span and make it current. Never raises."""
        try:
            tracer = self._tracer or trace.get_tracer(TRACER_NAME)
            self.span = tracer.start_span(span_name(self.kind, self.component), kind=self._span_kind)
            self._token = otel_context.attach(trace.set_span_in_context(self.span))
            parent = _current_stage.get()
            within = parent is not None and parent._retrieving
            self._retrieving = within or self.kind == sc.KIND_RETRIEVE
            self._stage_token = _current_stage.set(self)
            self.recording = self.span.is_recording()
            self._tally = open_tally(self.kind, self.component, self.kind == sc.KIND_RETRIEVE and not within)
            if self.recording:
                outer = parent._recorded() if parent is not None else None
                self._record, self._pipeline_token = _open_record(self.kind, self.component, self._attributes, self._tracer, outer, within)
        except Exception as exc:  # pragma: no cover - defensive
            self.record_error("start", exc)
        return self

    def _recorded(self) -> StageRecord | None:
        """What this stage keeps while it records; ``None`` when not (sampled out, or a failed start)."""
        return self._record if self.recording else None

    def __enter__(self) -> Stage:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.finish(exc)

    async def __aenter__(self) -> Stage:
        return self.start()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.finish(exc)

    def finish(self, exc: BaseException | None = None) -> None:
        """Conclude the record, write it and end the span (once). Never raises."""
        if self._closed:
            return
        self._closed = True
        record = self._record if self.recording else None
        try:
            if record is not None:
                _conclude(self, record, exc)
                write(record, self.span)
            elif exc is not None and self.span.is_recording():  # pragma: no cover
                self.span.set_status(Status(StatusCode.ERROR))
        except Exception as error:
            self.record_error("finish", error)
            with contextlib.suppress(Exception):
                self.span.set_attribute(sc.STAGE_INSTRUMENTATION_ERRORS, self._errors)
        finally:
            try:
                self.span.end()
            except Exception as error:  # pragma: no cover
                self.record_error("end", error)
            close_tally(self._tally, record, exc, self.span)
            self._detach()

    def _detach(self) -> None:
        if self._pipeline_token is not None and self._record is not None:
            self._record.state.leave(self._pipeline_token)
        _reset(_current_stage, self._stage_token)
        if self._token is not None:
            try:  # noqa: SIM105 - every stage, sampled out too: no suppress() object (see _reset)
                otel_context.detach(self._token)
            except Exception:  # pragma: no cover - the SDK logs a mismatched detach itself
                pass
        self._token = self._stage_token = self._pipeline_token = None

    def record_error(self, site: str, exc: BaseException) -> None:
        """Count an error caught while recording: process-wide and on the span (the record may be incomplete)."""
        self._errors += 1
        record_internal_error(site, exc)

    # --- what the caller tells us ------------------------------------------------------------------
    def query(self, text: Any, *, transform: str | None = None, parent_hop: int | None = None) -> int | None:
        """Record the query this stage ran with; returns its hop number (``None`` when not recording).

        A text already seen in this pipeline keeps its hop; the first query is hop 0; a text that
        appears with no instrumented transform behind it gets a new hop marked ``untracked``."""
        record = self._recorded()
        if record is None or text is None:
            return None
        try:
            rec = receipt(text)
            known, new = record.state.claim_untracked(rec.sha256)
            parent = known.parent if parent_hop is None else parent_hop
            if new and known.transform == sc.TRANSFORM_UNTRACKED and transform is None:
                record.findings.append(f"query hop {known.number} was changed by no instrumented transform (untracked)")
            record.query = QueryRecord(known.number, parent, transform or known.transform, text, rec)
            return known.number
        except Exception as exc:
            self.record_error("query", exc)
            return None

    def add_query_variant(self, text: Any, *, transform: str = sc.TRANSFORM_REWRITE, parent_hop: int | None = None) -> int | None:
        """Record a query this stage produced (a rewrite, an expansion, one of several multi-query
        variants, a HyDE document); returns the new hop. Its parent defaults to this stage's query."""
        record = self._recorded()
        if record is None or text is None:
            return None
        try:
            rec = receipt(text)
            if parent_hop is None and record.query is not None:
                parent_hop = record.query.hop
            hop, new = record.state.new_hop(rec.sha256, parent_hop, transform)
            if new:
                record.variants.append(QueryRecord(hop.number, parent_hop, transform, text, rec))
            return hop.number
        except Exception as exc:
            self.record_error("add_query_variant", exc)
            return None

    def inputs(self, candidates: Iterable[Any] | None, *, score_kind: str | None = None) -> None:
        """The candidates that entered the stage, in input order (snapshotted now: some libraries
        sort or rescore their input in place)."""
        record = self._recorded()
        if record is None:
            return
        try:
            record.inputs = _adapt_list(record, candidates, score_kind, "inputs", inherit=True)
        except Exception as exc:
            self.record_error("inputs", exc)

    def outputs(self, candidates: Iterable[Any] | None, *, score_kind: str | None = None, hop: int | None = None) -> None:
        """The candidates the stage handed on, in output order."""
        record = self._recorded()
        if record is None:
            if self._tally is not None:
                self._tally.count_out = sized_count(candidates)
            return
        try:
            outputs = record.outputs = _adapt_list(record, candidates, score_kind or self.score_kind, "outputs")
            if hop is not None:
                for candidate in outputs:
                    if candidate.hop is None:
                        candidate.hop = hop
        except Exception as exc:
            self.record_error("outputs", exc)

    def exclude(self, candidate: Any, reason: str, detail: Any = None) -> None:
        """Say why a candidate did not leave the stage. An explicit reason wins over a derived one."""
        if self._tally is not None:
            self._tally.reasons.append(reason)
        record = self._recorded()
        if record is None:
            return
        try:
            if not sc.is_valid_reason(reason):
                record.findings.append(f"invalid reason code {reason!r} replaced by custom:invalid")
                reason = sc.REASON_CUSTOM_PREFIX + "invalid"
            said = None if detail is None else str(detail)
            if isinstance(candidate, str):
                # an id, or a string candidate itself (identified by its content): resolved at write
                record.string_ids.add(candidate)
                record.explicit[candidate] = record.said(reason, said)
            else:
                adapted = adapt(candidate)
                record.explicit[adapted.id] = Explicit(reason, said, adapted)
        except Exception as exc:
            self.record_error("exclude", exc)

    def set_status(self, status: str, *, failure_class: str | None = None, fallback: str | None = None) -> None:
        """``ok``, ``empty``, ``degraded`` (a fallback ran) or ``failed``; the last two need a failure class."""
        record = self._recorded()
        if record is None:
            if self._tally is not None:
                self._tally.said_status(status, failure_class)
            return
        if status not in sc.STATUSES:
            record.findings.append(f"invalid status {status!r}")
            return
        record.status = status
        if failure_class is not None:
            record.failure_class = failure_class
        if fallback is not None:
            record.fallback = fallback

    def set(
        self,
        *,
        top_k: int | None = None,
        threshold: float | None = None,
        budget_limit: float | None = None,
        budget_used: float | None = None,
        budget_unit: str | None = None,
    ) -> None:
        """Record the stage's knobs as it actually ran."""
        knobs = {"top_k": top_k, "threshold": threshold, "budget_limit": budget_limit, "budget_used": budget_used, "budget_unit": budget_unit}
        for name, value in knobs.items():
            if value is not None:
                setattr(self, name, value)

    def corpus_size(self, size: int | None, *, store: Any = None, approximate: bool = False) -> None:
        """How many items the searched store holds (for the coverage statement). ``store`` is the
        store's identity (the client or index object, or a name): the pipeline's corpus is the sum
        over distinct stores, each counted once however many stages search it; without one, the
        stage's component names the store (stages of one retriever search one store). ``approximate``
        when the figure is an estimate (a store's approximate count): an absence claim is then never
        supported. A size the user set with :func:`ragtrail.corpus_size` for this store wins over ``size``."""
        record = self._recorded()
        if record is None:
            return
        try:
            known = user_corpus_size(store) if store is not None else None
            size, approximate = known if known is not None else (size, approximate)
            if size is None:
                return
            record.extra[sc.COVERAGE_CORPUS_SIZE] = size = int(size)
            if approximate:
                record.extra[sc.COVERAGE_CORPUS_APPROXIMATE] = True
            record.state.add_corpus_size(size, store_key(store) if store is not None else ("component", self.component), bool(approximate))
        except Exception as exc:
            self.record_error("corpus_size", exc)

    def set_attribute(self, key: str, value: Any) -> None:
        """An extra attribute (e.g. the filter a vector store applied), written with the stage's own.
        A filter follows the query's capture mode (often built from the query): ``CaptureSettings.filter_for``."""
        record = self._recorded()
        if record is None:
            return
        try:
            if key == sc.STAGE_FILTER:
                value = record.config.filter_for(value if isinstance(value, str) else canonical_json(value))
            record.extra[key] = value
        except Exception as exc:
            self.record_error("set_attribute", exc)

    def finding(self, text: str) -> None:
        """Something the stage did that a reader should know about (bad input, an odd output)."""
        record = self._recorded()
        if record is not None:
            record.findings.append(text)

    def cite(self, ids: Iterable[Any]) -> None:
        """Candidates the answer cited (counted in the pipeline's coverage)."""
        record = self._recorded()
        if record is None:
            return
        try:
            record.state.add_cited(ids)
        except Exception as exc:
            self.record_error("cite", exc)

    def adapt(self, candidates: Iterable[Any] | None, *, score_kind: str | None = None, inherit: bool = False) -> list[Candidate]:
        """Adapt a list of library objects the way this stage adapts its own inputs (``inherit``:
        each keeps the hop and score kind an earlier stage of this pipeline gave it) or outputs.
        Content receipts are memoised per stage. ``[]`` when not recording (sampled out: nothing
        is adapted) or on an internal error (counted)."""
        record = self._recorded()
        if record is None:
            return []
        try:
            kind = score_kind or (None if inherit else self.score_kind)
            return _adapt_list(record, candidates, kind, "candidates", inherit)
        except Exception as exc:
            self.record_error("adapt", exc)
            return []


def _conclude(s: Stage, record: StageRecord, exc: BaseException | None) -> None:
    """Close the record (no answer taken after this), hand it the knobs as run and the errors counted, conclude it."""
    record.close()
    try:
        name_private_strings(record)
    except Exception as error:  # pragma: no cover - defensive
        s.record_error("exclude", error)
    record.knobs = Knobs(s.top_k, s.threshold, s.budget_limit, s.budget_used, s.budget_unit, s.score_kind)
    record.errors = s._errors
    conclude(record, exc)


def _open_record(
    kind: str, component: str, attributes: Mapping[str, Any] | None, tracer: trace.Tracer | None, parent: StageRecord | None, within: bool
) -> tuple[StageRecord, contextvars.Token[PipelineState | None] | None]:
    """The record of a stage that records, in the pipeline it belongs to: a pipeline stage (or a
    stage outside any) opens one (returned: the token to leave it with), and a pipeline stage takes
    the run's answer. ``within``: a retrieve stage is open around it (``StageRecord.within_retrieval``)."""
    state = current_pipeline()
    owns = state is None or kind == sc.KIND_PIPELINE
    if state is None or owns:
        state = PipelineState(outer=state)
    record = StageRecord(kind, component, settings.get(), dict(attributes or {}), state, owns, parent, tracer, within_retrieval=within)
    if not owns:
        return record, None
    token = state.enter()
    if kind == sc.KIND_PIPELINE:
        state.answer = RunAnswer(record.findings)
    return record, token


def _adapt_list(record: StageRecord, candidates: Iterable[Any] | None, score_kind: str | None, which: str, inherit: bool = False) -> list[Candidate]:
    """Adapt every item for ``record`` (``which``: what the list is, for a finding when it is no list).
    Inputs keep the score kind an earlier stage gave them (a reranker's input scores are the
    retriever's similarities, not rerank scores)."""
    if candidates is None:
        return []
    if isinstance(candidates, (str, bytes, Mapping)):
        record.findings.append(f"{which} is a {type(candidates).__name__}, not a candidate list")
        return []
    return adapt_all(candidates, score_kind, record.receipts, record.state if inherit else None)


def stage(
    kind: str,
    component: str | None = None,
    *,
    top_k: int | None = None,
    threshold: float | None = None,
    budget_limit: float | None = None,
    budget_unit: str | None = None,
    score_kind: str | None = None,
    tracer: trace.Tracer | None = None,
    span_kind: SpanKind | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> Stage:
    """A stage as a context manager (sync ``with`` or ``async with``)::

    with ragtrail.stage("filter", "my_app.freshness") as s:
        s.inputs(docs)
        kept = [d for d in docs if not d["superseded"]]
        for d in docs:
            if d["superseded"]:
                s.exclude(d, "superseded", "newer version exists")
        s.outputs(kept)
    """
    if kind not in sc.STAGE_KINDS:
        record_internal_error("stage kind", ValueError(f"unknown stage kind {kind!r}"))
    return Stage(
        kind,
        component,
        top_k=top_k,
        threshold=threshold,
        budget_limit=budget_limit,
        budget_unit=budget_unit,
        score_kind=score_kind,
        tracer=tracer,
        span_kind=span_kind,
        attributes=attributes,
    )
