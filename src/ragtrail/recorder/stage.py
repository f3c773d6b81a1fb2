"""The stage recorder: one span per pipeline stage, carrying its retrieval manifest (docs/semconv.md §1-3).

It knows no library. Callers (decorators, instrumentations) hand a :class:`Stage` the query, the
candidates that entered and left, and any reasons they know; the stage keeps what it was told
(:class:`ragtrail.recorder.writer.Seen`) and writes it all when it ends, when everything is known
(:mod:`ragtrail.recorder.writer`: exclusions derived, mirrors first, events spilled, count and
digest last).

Every method is safe to call in any state: errors inside ragtrail are caught, counted and logged
once, never raised into the application. When the span is not recording (sampled out) nothing is
adapted, hashed or built.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from ragtrail import settings
from ragtrail.contract import receipts as _receipts
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import receipt
from ragtrail.recorder.candidates import Candidate, adapt, content_id, take_over
from ragtrail.recorder.errors import record_internal_error
from ragtrail.recorder.exclusions import Explicit
from ragtrail.recorder.corpus import store_key, user_corpus_size
from ragtrail.recorder.pipeline import PipelineState, QueryRecord, _pipeline_state
from ragtrail.recorder.writer import TRACER_NAME, Seen, span_name, write

_T = TypeVar("_T")

_current_stage: contextvars.ContextVar["Stage | None"] = contextvars.ContextVar("ragtrail_stage", default=None)


def _cut_finding(cuts: tuple[str, ...]) -> None:
    """A value too big, too deep or too odd to put in canonical form whole (see
    ``contract.receipts.canonical_json``) is a finding of the stage that met it, once per kind of cut."""
    s = _current_stage.get()
    seen = s._recorded() if s is not None else None
    if seen is not None:
        text = f"canonical form cut ({'; '.join(cuts)}): the id or receipt covers only what was kept"
        if text not in seen.findings:
            seen.findings.append(text)


_receipts.set_cut_observer(_cut_finding)


def _reset(var: contextvars.ContextVar[_T], token: contextvars.Token[_T] | None) -> None:
    """Restore ``var`` to what it was before ``token``'s ``set``, if that happened in this context."""
    if token is not None:
        try:
            var.reset(token)
        except ValueError:
            # finished in another context (a callback, another task): fall back to clearing
            pass


def current_stage() -> "Stage | None":
    """The innermost ragtrail stage open in this context (for ``exclude()`` calls inside a decorated function)."""
    return _current_stage.get()


class Stage:
    """Records one stage. Use it through :func:`ragtrail.stage` or the decorators."""

    def __init__(self, kind: str, component: str | None = None, *, top_k: int | None = None,
                 threshold: float | None = None, budget_limit: float | None = None, budget_unit: str | None = None,
                 score_kind: str | None = None, tracer: trace.Tracer | None = None,
                 span_kind: SpanKind | None = None, attributes: Mapping[str, Any] | None = None) -> None:
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
        self._state: PipelineState | None = None
        self._owns_state = False
        self._closed = False
        self._errors = 0
        self._seen: Seen | None = None
        self._parent: "Stage | None" = None

    # --- lifecycle --------------------------------------------------------------------------------
    def start(self) -> "Stage":
        """Open the span and make it current. Never raises."""
        try:
            tracer = self._tracer or trace.get_tracer(TRACER_NAME)
            self.span = tracer.start_span(span_name(self.kind, self.component), kind=self._span_kind)
            self._token = otel_context.attach(trace.set_span_in_context(self.span))
            self._parent = _current_stage.get()
            self._stage_token = _current_stage.set(self)
            self.recording = self.span.is_recording()
            if self.recording:
                self._seen = Seen(settings.get(), dict(self._attributes or {}))
                self._state = self._join_pipeline()
        except Exception as exc:  # pragma: no cover - defensive
            self.record_error("start", exc)
        return self

    def _recorded(self) -> Seen | None:
        """What this stage keeps while it records; ``None`` when it does not (sampled out, or its
        start failed before the record was made)."""
        return self._seen if self.recording else None

    def _recording_in(self) -> tuple[Seen, PipelineState] | None:
        """The record and the pipeline it belongs to, both made at start; ``None`` when not recording."""
        if self.recording and self._seen is not None and self._state is not None:
            return self._seen, self._state
        return None

    def _join_pipeline(self) -> PipelineState:
        """The pipeline this stage belongs to; a pipeline stage (or a stage outside any) opens one."""
        state = _pipeline_state.get()
        if state is None or self.kind == sc.KIND_PIPELINE:
            state = PipelineState(outer=state)
            self._pipeline_token = _pipeline_state.set(state)
            self._owns_state = True
            if self.kind == sc.KIND_PIPELINE:
                state.pipeline_stage = self
        return state

    def __enter__(self) -> "Stage":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.finish(exc)

    async def __aenter__(self) -> "Stage":
        return self.start()

    async def __aexit__(self, exc_type, exc, tb) -> None:
        self.finish(exc)

    def finish(self, exc: BaseException | None = None) -> None:
        """Write everything and end the span (once). Never raises."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.recording:
                try:
                    self._private_string_ids()
                except Exception as error:  # pragma: no cover - defensive
                    self.record_error("exclude", error)
                write(self, exc)
            elif exc is not None and self.span.is_recording():  # pragma: no cover
                self.span.set_status(Status(StatusCode.ERROR))
        except Exception as error:
            self.record_error("finish", error)
            try:
                self.span.set_attribute(sc.STAGE_INSTRUMENTATION_ERRORS, self._errors)
            except Exception:  # pragma: no cover
                pass
        finally:
            try:
                self.span.end()
            except Exception as error:  # pragma: no cover
                self.record_error("end", error)
            self._detach()

    def _detach(self) -> None:
        _reset(_pipeline_state, self._pipeline_token)
        _reset(_current_stage, self._stage_token)
        if self._token is not None:
            try:
                otel_context.detach(self._token)
            except Exception:  # pragma: no cover - the SDK logs a mismatched detach itself
                pass
        self._token = self._stage_token = self._pipeline_token = None

    def _private_string_ids(self) -> None:
        """With content capture off, a string given to :meth:`exclude` that names no recorded
        candidate (by id, or as a string candidate's content) may be a document's text: it is
        named by its content id (the rule string candidates are identified by), never exported as
        it is, neither as the candidate id nor in a finding."""
        seen = self._seen
        if seen is None or not seen.string_ids or seen.config.free_text_allowed():
            return
        known = {c.id for c in seen.inputs or ()} | {c.id for c in seen.outputs or ()}
        for text in seen.string_ids:
            if text in seen.explicit and text not in known:
                alias = content_id(text)
                if alias not in seen.explicit:
                    seen.explicit[alias] = seen.explicit.pop(text)

    def record_error(self, site: str, exc: BaseException) -> None:
        """Count an error caught while recording this stage: in the process-wide count and on the
        span (``ragtrail.instrumentation.errors``), so a reader knows the record may be incomplete."""
        self._errors += 1
        record_internal_error(site, exc)

    # --- what the caller tells us ------------------------------------------------------------------
    def query(self, text: Any, *, transform: str | None = None, parent_hop: int | None = None) -> int | None:
        """Record the query this stage ran with; returns its hop number (``None`` when not recording).

        A text already seen in this pipeline keeps its hop; the first query is hop 0; a text that
        appears with no instrumented transform behind it gets a new hop marked ``untracked``."""
        live = self._recording_in()
        if live is None or text is None:
            return None
        seen, state = live
        try:
            rec = receipt(text)
            known, new = state.claim_untracked(rec.sha256)
            parent = known.parent if parent_hop is None else parent_hop
            if new and known.transform == sc.TRANSFORM_UNTRACKED and transform is None:
                seen.findings.append(f"query hop {known.number} was changed by no instrumented transform (untracked)")
            seen.query = QueryRecord(known.number, parent, transform or known.transform, text, rec)
            return known.number
        except Exception as exc:
            self.record_error("query", exc)
            return None

    def add_query_variant(self, text: Any, *, transform: str = sc.TRANSFORM_REWRITE, parent_hop: int | None = None) -> int | None:
        """Record a query this stage produced (a rewrite, an expansion, one of several multi-query
        variants, a HyDE document); returns the new hop. Its parent defaults to this stage's query."""
        live = self._recording_in()
        if live is None or text is None:
            return None
        seen, state = live
        try:
            rec = receipt(text)
            if parent_hop is None and seen.query is not None:
                parent_hop = seen.query.hop
            hop, new = state.new_hop(rec.sha256, parent_hop, transform)
            if new:
                seen.variants.append(QueryRecord(hop.number, parent_hop, transform, text, rec))
            return hop.number
        except Exception as exc:
            self.record_error("add_query_variant", exc)
            return None

    def inputs(self, candidates: Iterable[Any] | None, *, score_kind: str | None = None) -> None:
        """The candidates that entered the stage, in input order (snapshotted now: some libraries
        sort or rescore their input in place)."""
        seen = self._recorded()
        if seen is None:
            return
        try:
            seen.inputs = self._adapt_list(candidates, score_kind, "inputs", inherit=True)
        except Exception as exc:
            self.record_error("inputs", exc)

    def outputs(self, candidates: Iterable[Any] | None, *, score_kind: str | None = None, hop: int | None = None) -> None:
        """The candidates the stage handed on, in output order."""
        seen = self._recorded()
        if seen is None:
            return
        try:
            outputs = seen.outputs = self._adapt_list(candidates, score_kind, "outputs")
            if hop is not None:
                for candidate in outputs:
                    if candidate.hop is None:
                        candidate.hop = hop
        except Exception as exc:
            self.record_error("outputs", exc)

    def exclude(self, candidate: Any, reason: str, detail: Any = None) -> None:
        """Say why a candidate did not leave the stage. An explicit reason wins over a derived one."""
        seen = self._recorded()
        if seen is None:
            return
        try:
            if not sc.is_valid_reason(reason):
                seen.findings.append(f"invalid reason code {reason!r} replaced by custom:invalid")
                reason = sc.REASON_CUSTOM_PREFIX + "invalid"
            adapted: Candidate | None
            if isinstance(candidate, str):
                # an id, or a string candidate itself (identified by its content): resolved at write
                ident, adapted = candidate, None
                seen.string_ids.add(candidate)
            else:
                adapted = adapt(candidate)
                ident = adapted.id
            seen.explicit[ident] = Explicit(reason, None if detail is None else str(detail), adapted)
        except Exception as exc:
            self.record_error("exclude", exc)

    def set_status(self, status: str, *, failure_class: str | None = None, fallback: str | None = None) -> None:
        """``ok``, ``empty``, ``degraded`` (a fallback ran) or ``failed``; the last two need a failure class."""
        seen = self._recorded()
        if seen is None:
            return
        if status not in sc.STATUSES:
            seen.findings.append(f"invalid status {status!r}")
            return
        seen.status = status
        if failure_class is not None:
            seen.failure_class = failure_class
        if fallback is not None:
            seen.fallback = fallback

    def set(self, *, top_k: int | None = None, threshold: float | None = None, budget_limit: float | None = None,
            budget_used: float | None = None, budget_unit: str | None = None) -> None:
        """Record the stage's knobs as it actually ran."""
        for name, value in (("top_k", top_k), ("threshold", threshold), ("budget_limit", budget_limit),
                            ("budget_used", budget_used), ("budget_unit", budget_unit)):
            if value is not None:
                setattr(self, name, value)

    def corpus_size(self, size: int | None, *, store: Any = None, approximate: bool = False) -> None:
        """How many items the searched store holds (for the coverage statement). ``store`` is the
        store's identity (the client or index object, or a name): the pipeline's corpus is the sum
        over distinct stores, each counted once however many stages search it; without one, the
        stage's component names the store (stages of one retriever search one store). ``approximate`` when the figure is an estimate (a store's
        approximate count): an absence claim is then never supported. A size the user set with
        :func:`ragtrail.corpus_size` for this store wins over ``size``."""
        live = self._recording_in()
        if live is None:
            return
        seen, state = live
        try:
            if store is not None:
                known = user_corpus_size(store)
                if known is not None:
                    size, approximate = known
            if size is None:
                return
            size = int(size)
            seen.extra[sc.COVERAGE_CORPUS_SIZE] = size
            if approximate:
                seen.extra[sc.COVERAGE_CORPUS_APPROXIMATE] = True
            key = store_key(store) if store is not None else ("component", self.component)
            state.add_corpus_size(size, key, bool(approximate))
        except Exception as exc:
            self.record_error("corpus_size", exc)

    def set_attribute(self, key: str, value: Any) -> None:
        """An extra attribute (e.g. the filter a vector store applied), written with the stage's own.
        A filter follows the query's capture mode (it is often built from the query):
        :meth:`ragtrail.settings.CaptureSettings.filter_for` decides what of it may leave."""
        seen = self._recorded()
        if seen is None:
            return
        try:
            if key == sc.STAGE_FILTER:
                value = seen.config.filter_for(value if isinstance(value, str) else _receipts.canonical_json(value))
            seen.extra[key] = value
        except Exception as exc:
            self.record_error("set_attribute", exc)

    def finding(self, text: str) -> None:
        """Something the stage did that a reader should know about (bad input, an odd output)."""
        seen = self._recorded()
        if seen is not None:
            seen.findings.append(text)

    def record_answer(self, attributes: Mapping[str, Any]) -> None:
        """The answer receipt (built by :func:`ragtrail.answer`), written with the pipeline's own
        attributes at its end."""
        seen = self._recorded()
        if seen is not None and not self._closed:
            seen.answer = dict(attributes)

    def cite(self, ids: Iterable[Any]) -> None:
        """Candidates the answer cited (counted in the pipeline's coverage)."""
        live = self._recording_in()
        if live is None:
            return
        try:
            live[1].add_cited(ids)
        except Exception as exc:
            self.record_error("cite", exc)

    def adapt(self, candidates: Iterable[Any] | None, *, score_kind: str | None = None,
              inherit: bool = False) -> list[Candidate]:
        """Adapt a list of library objects the way this stage adapts its own inputs (``inherit``:
        each keeps the hop and score kind an earlier stage of this pipeline gave it) or outputs.
        Content receipts are memoised per stage. ``[]`` when not recording (sampled out: nothing
        is adapted) or on an internal error (counted)."""
        if not self.recording:
            return []
        try:
            return self._adapt_list(candidates, score_kind, "candidates", inherit)
        except Exception as exc:
            self.record_error("adapt", exc)
            return []

    def _adapt_list(self, candidates: Iterable[Any] | None, score_kind: str | None, which: str,
                    inherit: bool = False) -> list[Candidate]:
        """Adapt every item. Inputs keep the score kind an earlier stage gave them (a reranker's
        input scores are the retriever's similarities, not rerank scores)."""
        live = self._recording_in()
        if candidates is None or live is None:
            return []
        seen, state = live
        if isinstance(candidates, (str, bytes, Mapping)):
            seen.findings.append(f"{which} is a {type(candidates).__name__}, not a candidate list")
            return []
        kind = score_kind or (None if inherit else self.score_kind)
        memo = seen.receipts
        kind_of, hop_of = state.candidate_score_kind, state.candidate_hop
        result: list[Candidate] = []
        append = result.append
        for item in list(candidates):  # once per candidate per stage: lookups bound above
            candidate = take_over(item) or adapt(item)
            if candidate.score_kind is None:
                candidate.score_kind = kind or (kind_of(candidate.id) if inherit else None)
            if inherit and candidate.hop is None:
                candidate.hop = hop_of(candidate.id)
            content = candidate.content
            if content is not None and candidate._receipt is None:
                # the same content object seen as input and output is hashed once per stage
                cached = memo.get(id(content))
                if cached is not None and cached[0] is content:
                    candidate._receipt = cached[1]
                else:
                    memo[id(content)] = (content, candidate.receipt)
            append(candidate)
        return result


def stage(kind: str, component: str | None = None, *, top_k: int | None = None, threshold: float | None = None,
          budget_limit: float | None = None, budget_unit: str | None = None, score_kind: str | None = None,
          tracer: trace.Tracer | None = None, span_kind: SpanKind | None = None,
          attributes: Mapping[str, Any] | None = None) -> Stage:
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
    return Stage(kind, component, top_k=top_k, threshold=threshold, budget_limit=budget_limit,
                 budget_unit=budget_unit, score_kind=score_kind, tracer=tracer, span_kind=span_kind,
                 attributes=attributes)
