"""The stage recorder: one span per pipeline stage, carrying its retrieval manifest (SPEC §1-3).

It knows no library. Callers (decorators, instrumentations) hand it the query, the candidates that
entered and left, and any reasons they know; the recorder derives the rest (exclusions by identity,
counts, receipts) and writes it at the end of the stage, when everything is known:

1. mirror attributes for other tools first (the SDK evicts the oldest attributes first, so they are
   the ones lost under a tight attribute limit),
2. the stage's own attributes,
3. one event per output candidate and per exclusion, spilling into continuation child spans rather
   than letting the SDK evict the top-ranked candidates,
4. ``ragtrail.events.count`` and ``ragtrail.events.digest`` last, so they are the last to be lost.

Every method is safe to call in any state: errors inside ragtrail are caught, counted and logged
once, never raised into the application. When the span is not recording (sampled out) nothing is
adapted, hashed or built.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from ragtrail import settings
from ragtrail.contract import semconv as sc
from ragtrail.recorder.candidates import Candidate, adapt
from ragtrail.recorder.errors import record_internal_error
from ragtrail.recorder.pipeline import Hop, PipelineState, _pipeline_state, current_pipeline
from ragtrail.contract.receipts import content_id
from ragtrail.contract.receipts import canonical_json, events_digest, finite_or_none, receipt

_log = logging.getLogger("ragtrail")
_TRACER_NAME = "ragtrail"
_STAGE_ATTRIBUTE_RESERVE = 40  # span attributes kept free for ragtrail's own when mirroring documents
_MIRROR_ATTRS_PER_DOC = 2

class QueryRecord(NamedTuple):
    """A query as one stage saw or produced it: its hop, the hop it came from, the transform, the
    text and its receipt (docs/semconv.md §2)."""

    hop: int
    parent: int | None
    transform: str
    text: Any
    receipt: Any


_current_stage: contextvars.ContextVar["Stage | None"] = contextvars.ContextVar("ragtrail_stage", default=None)


def current_stage() -> "Stage | None":
    """The innermost ragtrail stage open in this context (for ``exclude()`` calls inside a decorated function)."""
    return _current_stage.get()


def short_component(component: str) -> str:
    return component.rsplit(".", 1)[-1] if component else "stage"


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
        self._tracer = tracer
        self._span_kind = span_kind or (SpanKind.CLIENT if kind == sc.KIND_RETRIEVE else SpanKind.INTERNAL)
        self._extra = dict(attributes or {})
        self.span: trace.Span = trace.INVALID_SPAN
        self.recording = False
        self._token: object | None = None
        self._stage_token: contextvars.Token | None = None
        self._pipeline_token: contextvars.Token | None = None
        self._state: PipelineState | None = None
        self._owns_state = False
        self._closed = False
        self._errors = 0
        self._config = None
        self._content_key: str | None = None
        # what the stage saw
        self._query: QueryRecord | None = None
        self._variants: list[QueryRecord] = []
        self._answer: dict[str, Any] | None = None
        self._inputs: list[Candidate] | None = None
        self._outputs: list[Candidate] | None = None
        self._explicit: dict[str, tuple[str, str | None, Candidate | None]] = {}
        self._status: str | None = None
        self._failure_class: str | None = None
        self._fallback: str | None = None
        self._findings: list[str] = []
        self._receipt_memo: dict[int, tuple[Any, Any]] = {}
        self._string_exclusions: set[str] = set()

    # --- lifecycle --------------------------------------------------------------------------------
    def start(self) -> "Stage":
        """Open the span and make it current. Never raises."""
        try:
            tracer = self._tracer or trace.get_tracer(_TRACER_NAME)
            name = f"{self.kind} {short_component(self.component)}"
            self.span = tracer.start_span(name, kind=self._span_kind)
            self._token = otel_context.attach(trace.set_span_in_context(self.span))
            self._stage_token = _current_stage.set(self)
            self.recording = self.span.is_recording()
            if self.recording:
                self._config = config = settings.get()
                if config.content_for("") is not None:  # content capture is on: preview or full
                    self._content_key = (sc.CANDIDATE_CONTENT_PREVIEW if config.content_is_preview()
                                         else sc.CANDIDATE_CONTENT_TEXT)
                state = _pipeline_state.get()
                if state is None or self.kind == sc.KIND_PIPELINE:
                    state = PipelineState()
                    self._pipeline_token = _pipeline_state.set(state)
                    self._owns_state = True
                    if self.kind == sc.KIND_PIPELINE:
                        state.pipeline_stage = self
                self._state = state
        except Exception as exc:  # pragma: no cover - defensive
            self.record_error("start", exc)
        return self

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
                self._write(exc)
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
        for var, token in ((_pipeline_state, self._pipeline_token), (_current_stage, self._stage_token)):
            if token is not None:
                try:
                    var.reset(token)
                except ValueError:
                    # finished in another context (a callback, another task): fall back to clearing
                    pass
        if self._token is not None:
            try:
                otel_context.detach(self._token)
            except Exception:  # pragma: no cover - the SDK logs a mismatched detach itself
                pass
        self._token = self._stage_token = self._pipeline_token = None

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
        if not self.recording or text is None:
            return None
        try:
            rec = receipt(text)
            known, new = self._state.claim_untracked(rec.sha256)
            parent = known.parent if parent_hop is None else parent_hop
            if new and known.transform == sc.TRANSFORM_UNTRACKED and transform is None:
                self._findings.append(f"query hop {known.number} was changed by no instrumented transform (untracked)")
            self._query = QueryRecord(known.number, parent, transform or known.transform, text, rec)
            return known.number
        except Exception as exc:
            self.record_error("query", exc)
            return None

    def add_query_variant(self, text: Any, *, transform: str = sc.TRANSFORM_REWRITE, parent_hop: int | None = None) -> int | None:
        """Record a query this stage produced (a rewrite, an expansion, one of several multi-query
        variants, a HyDE document); returns the new hop. Its parent defaults to this stage's query."""
        if not self.recording or text is None:
            return None
        try:
            rec = receipt(text)
            if parent_hop is None and self._query is not None:
                parent_hop = self._query.hop
            hop, new = self._state.new_hop(rec.sha256, parent_hop, transform)
            if new:
                self._variants.append(QueryRecord(hop.number, parent_hop, transform, text, rec))
            return hop.number
        except Exception as exc:
            self.record_error("add_query_variant", exc)
            return None

    def inputs(self, candidates: Iterable[Any] | None, *, score_kind: str | None = None) -> None:
        """The candidates that entered the stage, in input order (snapshotted now: some libraries
        sort or rescore their input in place)."""
        if not self.recording:
            return
        try:
            self._inputs = self._adapt_list(candidates, score_kind, "inputs", inherit=True)
        except Exception as exc:
            self.record_error("inputs", exc)

    def outputs(self, candidates: Iterable[Any] | None, *, score_kind: str | None = None, hop: int | None = None) -> None:
        """The candidates the stage handed on, in output order."""
        if not self.recording:
            return
        try:
            self._outputs = self._adapt_list(candidates, score_kind, "outputs")
            if hop is not None:
                for candidate in self._outputs:
                    if candidate.hop is None:
                        candidate.hop = hop
        except Exception as exc:
            self.record_error("outputs", exc)

    def exclude(self, candidate: Any, reason: str, detail: Any = None) -> None:
        """Say why a candidate did not leave the stage. An explicit reason wins over a derived one."""
        if not self.recording:
            return
        try:
            if not sc.is_valid_reason(reason):
                self._findings.append(f"invalid reason code {reason!r} replaced by custom:invalid")
                reason = sc.REASON_CUSTOM_PREFIX + "invalid"
            if isinstance(candidate, str):
                # an id, or a string candidate itself (identified by its content): resolved at write
                ident, adapted = candidate, None
                self._string_exclusions.add(candidate)
            else:
                adapted = adapt(candidate)
                ident = adapted.id
            self._explicit[ident] = (reason, None if detail is None else str(detail), adapted)
        except Exception as exc:
            self.record_error("exclude", exc)

    def set_status(self, status: str, *, failure_class: str | None = None, fallback: str | None = None) -> None:
        """``ok``, ``empty``, ``degraded`` (a fallback ran) or ``failed``; the last two need a failure class."""
        if not self.recording:
            return
        if status not in sc.STATUSES:
            self._findings.append(f"invalid status {status!r}")
            return
        self._status = status
        if failure_class is not None:
            self._failure_class = failure_class
        if fallback is not None:
            self._fallback = fallback

    def set(self, *, top_k: int | None = None, threshold: float | None = None, budget_limit: float | None = None,
            budget_used: float | None = None, budget_unit: str | None = None) -> None:
        """Record the stage's knobs as it actually ran."""
        if top_k is not None:
            self.top_k = top_k
        if threshold is not None:
            self.threshold = threshold
        if budget_limit is not None:
            self.budget_limit = budget_limit
        if budget_used is not None:
            self.budget_used = budget_used
        if budget_unit is not None:
            self.budget_unit = budget_unit

    def corpus_size(self, size: int | None) -> None:
        """How many items the searched store holds (for the coverage statement)."""
        if not self.recording or size is None:
            return
        try:
            size = int(size)
            self._extra[sc.COVERAGE_CORPUS_SIZE] = size
            self._state.add_corpus_size(size)
        except Exception as exc:
            self.record_error("corpus_size", exc)

    def set_attribute(self, key: str, value: Any) -> None:
        """An extra attribute (e.g. the filter a vector store applied), written with the stage's own."""
        if self.recording:
            self._extra[key] = value

    def finding(self, text: str) -> None:
        """Something the stage did that a reader should know about (bad input, an odd output)."""
        if self.recording:
            self._findings.append(text)

    def record_answer(self, attributes: Mapping[str, Any]) -> None:
        """The answer receipt (built by :func:`ragtrail.answer`), written with the pipeline's own
        attributes at its end."""
        if self.recording and not self._closed:
            self._answer = dict(attributes)

    def cite(self, ids: Iterable[Any]) -> None:
        if not self.recording:
            return
        try:
            self._state.add_cited(ids)
        except Exception as exc:
            self.record_error("cite", exc)

    # --- recording ---------------------------------------------------------------------------------
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
        if candidates is None:
            return []
        if isinstance(candidates, (str, bytes, Mapping)):
            self._findings.append(f"{which} is a {type(candidates).__name__}, not a candidate list")
            return []
        items = list(candidates)
        known = self._state._score_kind_of if inherit else {}
        hops = self._state._hop_of_candidate
        kind = score_kind or (None if inherit else self.score_kind)
        result = []
        memo = self._receipt_memo
        for item in items:
            candidate = adapt(item)
            if candidate.score_kind is None:
                candidate.score_kind = kind or known.get(candidate.id)
            if inherit and candidate.hop is None:
                candidate.hop = hops.get(candidate.id)
            content = candidate.content
            if content is not None and candidate._receipt is None:
                # the same content object seen as input and output is hashed once per stage
                cached = memo.get(id(content))
                if cached is not None and cached[0] is content:
                    candidate._receipt = cached[1]
                else:
                    memo[id(content)] = (content, candidate.receipt)
            result.append(candidate)
        return result

    def _write(self, exc: BaseException | None) -> None:
        config = self._config
        span = self.span
        limits = getattr(span, "_limits", None)
        outputs = self._outputs or []
        inputs = self._inputs
        if self._outputs is None and inputs is not None and exc is None:
            self._findings.append("outputs not recorded: no exclusions derived")
        self._resolve_string_exclusions(inputs)
        exclusions = self._exclusions(inputs, outputs, failed=self._outputs is None)
        self._assign_hops(outputs)
        status, failure_class = self._final_status(exc, outputs)

        # 1. mirrors (written first: the first to go under a tight attribute limit)
        attributes: dict[str, Any] = {}
        if config.mirror_genai and self.kind == sc.KIND_RETRIEVE:
            attributes[sc.GEN_AI_OPERATION_NAME] = sc.GEN_AI_OPERATION_RETRIEVAL
            attributes[sc.GEN_AI_DATA_SOURCE_ID] = self.component
            if self.top_k is not None:
                attributes[sc.GEN_AI_REQUEST_TOP_K] = int(self.top_k)
        if config.mirror_openinference:
            attributes.update(self._openinference(limits, inputs, outputs))
        if attributes:
            span.set_attributes(attributes)

        # 2. the stage's own attributes
        own: dict[str, Any] = {
            sc.SCHEMA: sc.SCHEMA_VERSION,
            sc.STAGE_KIND: self.kind,
            sc.STAGE_COMPONENT: self.component,
            sc.STAGE_STATUS: status,
        }
        if failure_class:
            own[sc.STAGE_FAILURE_CLASS] = failure_class
        if self._fallback:
            own[sc.STAGE_FALLBACK] = self._fallback
        for key, value in ((sc.STAGE_TOP_K, self.top_k), (sc.STAGE_THRESHOLD, self.threshold),
                           (sc.STAGE_BUDGET_LIMIT, self.budget_limit), (sc.STAGE_BUDGET_USED, self.budget_used),
                           (sc.STAGE_BUDGET_UNIT, self.budget_unit)):
            if value is not None:
                own[key] = value
        if self._query is not None:
            own.update(self._query_attributes(self._query))
        for key, value in self._extra.items():
            own[key] = _attribute_value(value)
        if self.kind == sc.KIND_PIPELINE and self._owns_state:
            own.update(self._state.coverage())
            own[sc.RUN_STATUS] = self._state.run_status(exc is not None)
            if self._answer:
                own.update(self._answer)
        elif self.kind != sc.KIND_PIPELINE:
            self._state.add_stage_status(status)
        self._track(outputs)
        if inputs is not None:
            n_in = len(inputs)
        elif self.kind in sc.PRODUCING_KINDS:
            n_in = 0
        else:
            # a narrowing stage whose inputs were never handed over: say so rather than write in=0
            n_in = len(outputs) + len(exclusions)
            if self._outputs is not None:
                self._findings.append("inputs not recorded: candidates.in is out + excluded")
        own[sc.CANDIDATES_IN] = n_in
        own[sc.CANDIDATES_OUT] = len(outputs)
        own[sc.CANDIDATES_EXCLUDED] = len(exclusions)
        if self._findings:
            own[sc.STAGE_FINDINGS] = list(self._findings)
        span.set_attributes(own)
        if exc is not None:
            self._record_exception(exc)

        # 3. events (spilling into continuation spans), 4. count and digest last
        events = self._events(outputs, exclusions)
        spans = self._emit(events, limits)
        digest_items = [_digest_item(name, attrs) for name, attrs in events]
        final: dict[str, Any] = {}
        if self._errors:
            final[sc.STAGE_INSTRUMENTATION_ERRORS] = self._errors
        if spans > 1:
            final[sc.EVENTS_SPANS] = spans
        final[sc.EVENTS_COUNT] = len(events)
        final[sc.EVENTS_DIGEST] = events_digest(digest_items)
        span.set_attributes(final)

    def _final_status(self, exc: BaseException | None, outputs: Sequence[Candidate]) -> tuple[str, str | None]:
        status = self._status
        failure_class = self._failure_class
        if exc is not None:
            status = sc.STATUS_FAILED
            if failure_class is None:
                failure_class = _failure_class_of(exc)
        elif status is None:
            status = sc.STATUS_EMPTY if (self._outputs is not None and not outputs and self.kind != sc.KIND_PIPELINE) else sc.STATUS_OK
        if status in (sc.STATUS_FAILED, sc.STATUS_DEGRADED) and not failure_class:
            failure_class = "unspecified"
        return status, failure_class

    def _record_exception(self, exc: BaseException) -> None:
        if self._config.query_text_allowed():
            self.span.record_exception(exc)
            self.span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        else:
            # the message may quote the query: in hash/off mode only the type leaves the process
            self.span.set_status(Status(StatusCode.ERROR, type(exc).__name__))

    def _query_attributes(self, query: "QueryRecord") -> dict[str, Any]:
        """A query's attributes, the same on the stage span and on a ``ragtrail.query`` event."""
        attributes: dict[str, Any] = {sc.QUERY_HOP: query.hop, sc.QUERY_TRANSFORM: query.transform}
        if query.parent is not None:
            attributes[sc.QUERY_PARENT_HOP] = query.parent
        config = self._config
        if not config.query_receipt_allowed():
            return attributes
        attributes.update(query.receipt.as_attributes(sc.QUERY_RECEIPT_PREFIX))
        if config.query_text_allowed():
            attributes[sc.QUERY_TEXT] = wire_text(query.text)
        return attributes

    def _exclusions(self, inputs: list[Candidate] | None, outputs: list[Candidate],
                    failed: bool = False) -> list[tuple[int, Candidate, str, str | None]]:
        """(input rank, candidate, reason, detail) for every input that did not leave, by identity.
        Duplicate ids are matched as a multiset; the copy that left is the same object when there
        is one (libraries keep the best-scored copy, not always the first), else the one with the
        same score, else the first. The surplus copies are ``deduplicated``. A stage that failed
        before producing output excluded nothing: only explicit exclusions are said."""
        result: list[tuple[int, Candidate, str, str | None]] = []
        if inputs is None or failed:
            for ident, (reason, detail, candidate) in self._explicit.items():
                rank = next((i for i, c in enumerate(inputs or ()) if c.id == ident), -1)
                result.append((rank, candidate or Candidate(id=ident), reason, detail))
            return result
        positions: dict[str, list[int]] = {}
        for index, candidate in enumerate(inputs):
            positions.setdefault(candidate.id, []).append(index)
        kept: set[int] = set()
        for out in outputs:
            free = [i for i in positions.get(out.id, ()) if i not in kept]
            if not free:
                continue
            if len(free) > 1:
                same = [i for i in free if out.raw is not None and inputs[i].raw is out.raw]
                scored = [i for i in free if finite_or_none(inputs[i].score) == finite_or_none(out.score)]
                free = same or scored or free
            kept.add(free[0])
        seen: set[str] = {inputs[i].id for i in kept}
        kept_by_sha = {c.receipt.sha256: c.id for c in outputs if c.content is not None}
        output_ids = {c.id for c in outputs}
        explicit_used: set[str] = set()
        for rank, candidate in enumerate(inputs):
            if rank in kept:
                continue
            if candidate.id in self._explicit and candidate.id not in explicit_used:
                reason, detail, _ = self._explicit[candidate.id]
                explicit_used.add(candidate.id)
            elif candidate.id in seen or candidate.id in output_ids:
                reason, detail = sc.REASON_DEDUPLICATED, f"duplicate id of {candidate.id}"
            else:
                reason, detail = self._derive_reason(candidate, outputs, kept_by_sha)
            seen.add(candidate.id)
            result.append((rank, candidate, reason, detail))
        for ident, (reason, detail, candidate) in self._explicit.items():
            if ident not in explicit_used and ident not in output_ids and ident not in seen:
                # excluded before it was handed to us as input (e.g. a pre-filter): still said
                self._findings.append(f"exclusion of {ident} that was not among the recorded inputs")
                result.append((-1, candidate or Candidate(id=ident), reason, detail))
        return result

    def _resolve_string_exclusions(self, inputs: list[Candidate] | None) -> None:
        """``exclude("text")`` names a string candidate by its content when no input has that id."""
        if not self._string_exclusions or inputs is None:
            return
        ids = {c.id for c in inputs}
        for text in self._string_exclusions:
            if text not in ids and text in self._explicit:
                alias = content_id(text)
                if alias in ids:
                    self._explicit[alias] = self._explicit.pop(text)

    def _derive_reason(self, candidate: Candidate, outputs: Sequence[Candidate], kept_by_sha: Mapping[str, str]) -> tuple[str, str | None]:
        if candidate.content is not None and candidate.receipt.sha256 in kept_by_sha:
            return sc.REASON_DEDUPLICATED, f"same content as {kept_by_sha[candidate.receipt.sha256]}"
        score = finite_or_none(candidate.score)
        if self.threshold is not None and score is not None:
            distance = (candidate.score_kind or self.score_kind) == sc.SCORE_DISTANCE
            if (score > self.threshold) if distance else (score < self.threshold):
                op = ">" if distance else "<"
                return sc.REASON_BELOW_SCORE_THRESHOLD, f"score={score:g} {op} threshold={self.threshold:g}"
        if self.top_k is not None and len(outputs) <= int(self.top_k):
            return sc.REASON_BELOW_RANK_CUTOFF, f"top_k={self.top_k}"
        if self.budget_limit is not None:
            used = "" if self.budget_used is None else f" used={self.budget_used:g}"
            unit = f" {self.budget_unit}" if self.budget_unit else ""
            return sc.REASON_BUDGET_EXCEEDED, f"limit={self.budget_limit:g}{unit}{used}"
        return sc.REASON_UNEXPLAINED, None

    def _assign_hops(self, outputs: Sequence[Candidate]) -> None:
        state = self._state
        default = self._query.hop if self._query is not None else None
        for candidate in outputs:
            if candidate.score_kind is None:
                candidate.score_kind = self.score_kind
            if candidate.hop is None:
                # a retrieval's hits were found by its own query; later stages inherit the finder's hop
                known = None if self.kind == sc.KIND_RETRIEVE else state.candidate_hop(candidate.id)
                candidate.hop = known if known is not None else (default if self.kind in sc.PRODUCING_KINDS else None)
            state.remember_candidate(candidate.id, candidate.hop, candidate.score_kind)

    def _track(self, outputs: Sequence[Candidate]) -> None:
        state = self._state
        if self._outputs is None or self.kind == sc.KIND_PIPELINE:
            return
        state.track(self.kind, [c.id for c in outputs])

    def _candidate_attributes(self, candidate: Candidate, rank: int, default_kind: str | None) -> dict[str, Any]:
        config = self._config
        attributes: dict[str, Any] = {sc.CANDIDATE_ID: wire_str(candidate.id), sc.CANDIDATE_RANK: rank}
        if candidate.score is not None:
            score = finite_or_none(candidate.score)
            if score is not None:
                attributes[sc.CANDIDATE_SCORE] = score
            else:
                attributes[sc.CANDIDATE_SCORE_RAW] = _score_text(candidate.score)
        attributes[sc.CANDIDATE_SCORE_KIND] = candidate.score_kind or default_kind or sc.SCORE_NONE
        if candidate.hop is not None:
            attributes[sc.CANDIDATE_HOP] = candidate.hop
        rec = candidate.receipt
        if rec is not None:
            attributes[sc.CANDIDATE_CONTENT_CHARS] = rec.chars
            attributes[sc.CANDIDATE_CONTENT_BYTES] = rec.bytes
            attributes[sc.CANDIDATE_CONTENT_SHA256] = rec.sha256
            if self._content_key is not None:
                attributes[self._content_key] = config.content_for(wire_text(candidate.content))
        if candidate.transform_rule:
            attributes[sc.CANDIDATE_TRANSFORM_RULE] = candidate.transform_rule
        if candidate.derived_from:
            attributes[sc.CANDIDATE_TRANSFORM_DERIVED_FROM] = candidate.derived_from
        if config.metadata and candidate.metadata:
            for key in config.metadata:
                if key in candidate.metadata:
                    attributes[sc.CANDIDATE_META_PREFIX + key] = _attribute_value(candidate.metadata[key])
        return attributes

    def _events(self, outputs: Sequence[Candidate], exclusions: Sequence[tuple[int, Candidate, str, str | None]]) -> list[tuple[str, dict[str, Any]]]:
        events: list[tuple[str, dict[str, Any]]] = []
        mode = self._config.query
        for variant in self._variants:
            events.append((sc.EVENT_QUERY, self._query_attributes(variant)))
        for rank, candidate in enumerate(outputs):
            events.append((sc.EVENT_CANDIDATE, self._candidate_attributes(candidate, rank, self.score_kind)))
        for rank, candidate, reason, detail in exclusions:
            attributes = self._candidate_attributes(candidate, rank, None)
            if rank < 0:
                del attributes[sc.CANDIDATE_RANK]
            attributes[sc.EXCLUSION_REASON] = reason
            if detail is not None:
                attributes[sc.EXCLUSION_DETAIL] = wire_str(detail)
            events.append((sc.EVENT_EXCLUSION, attributes))
        return events

    def _emit(self, events: list[tuple[str, dict[str, Any]]], limits: Any) -> int:
        """Add the events, spilling into continuation child spans so the SDK never evicts any.
        Returns how many spans carry this stage's events."""
        capacity = self._config.events_per_span
        sdk_limit = getattr(limits, "max_events", None)
        if sdk_limit is not None:
            # leave room for an exception event and one other
            sdk_capacity = max(1, sdk_limit - 2)
            capacity = sdk_capacity if capacity is None else min(capacity, sdk_capacity)
        if capacity is None or len(events) <= capacity:
            _add_events(self.span, events)
            return 1
        chunks = [events[i:i + capacity] for i in range(0, len(events), capacity)]
        _add_events(self.span, chunks[0])
        tracer = self._tracer or trace.get_tracer(_TRACER_NAME)
        parent = trace.set_span_in_context(self.span)
        span_name = f"{self.kind} {short_component(self.component)}"
        for index, chunk in enumerate(chunks[1:], start=1):
            child = tracer.start_span(span_name, context=parent, kind=SpanKind.INTERNAL, attributes={
                sc.SCHEMA: sc.SCHEMA_VERSION,
                sc.STAGE_KIND: self.kind,
                sc.STAGE_COMPONENT: self.component,
                sc.STAGE_CONTINUATION: True,
                sc.STAGE_CONTINUATION_INDEX: index,
            })
            _add_events(child, chunk)
            child.set_attribute(sc.EVENTS_COUNT, len(chunk))
            child.end()
        return len(chunks)

    def _openinference(self, limits: Any, inputs: list[Candidate] | None, outputs: list[Candidate]) -> dict[str, Any]:
        attributes: dict[str, Any] = {}
        if self.kind == sc.KIND_RETRIEVE:
            attributes[sc.OPENINFERENCE_SPAN_KIND] = sc.OI_RETRIEVER
        elif self.kind == sc.KIND_RERANK:
            attributes[sc.OPENINFERENCE_SPAN_KIND] = sc.OI_RERANKER
        else:
            attributes[sc.OPENINFERENCE_SPAN_KIND] = sc.OI_CHAIN
        if self._query is not None and self._config.query_text_allowed():
            text = wire_text(self._query.text)
            attributes[sc.OI_INPUT_VALUE] = text
            if self.kind == sc.KIND_RERANK:
                attributes[sc.OI_RERANKER_QUERY] = text
        if self.kind == sc.KIND_RERANK and self.top_k is not None:
            attributes[sc.OI_RERANKER_TOP_K] = int(self.top_k)
        max_attributes = getattr(limits, "max_span_attributes", None)
        room = None if max_attributes is None else max(0, max_attributes - _STAGE_ATTRIBUTE_RESERVE - len(attributes) - len(self._extra))
        if self.kind == sc.KIND_RETRIEVE:
            lists = [(sc.OI_RETRIEVAL_DOCUMENTS, outputs)]
        elif self.kind == sc.KIND_RERANK:
            lists = [(sc.OI_RERANKER_OUTPUT_DOCUMENTS, outputs), (sc.OI_RERANKER_INPUT_DOCUMENTS, inputs or [])]
        else:
            return attributes
        for prefix, candidates in lists:
            for index, candidate in enumerate(candidates):
                if room is not None and room < _MIRROR_ATTRS_PER_DOC:
                    return attributes
                attributes[f"{prefix}.{index}.{sc.OI_DOCUMENT_ID}"] = candidate.id
                score = finite_or_none(candidate.score)
                if score is not None:
                    attributes[f"{prefix}.{index}.{sc.OI_DOCUMENT_SCORE}"] = score
                if room is not None:
                    room -= _MIRROR_ATTRS_PER_DOC
        return attributes


def _sdk_event_parts() -> tuple[Any, Any, Any] | None:
    try:
        from opentelemetry.attributes import BoundedAttributes
        from opentelemetry.sdk.trace import Event, Span as SdkSpan

        probe = BoundedAttributes(1, None, immutable=False, max_value_len=None)
        if not isinstance(getattr(probe, "_dict", None), dict) or not hasattr(SdkSpan, "_add_event"):
            return None
        return BoundedAttributes, Event, SdkSpan
    except Exception:  # pragma: no cover - another SDK: the public path is used
        return None


_SDK_EVENT_PARTS = _sdk_event_parts()


def _add_events(span: Any, events: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """Add ragtrail's events to a span.

    The SDK's ``add_event`` re-validates every attribute value (about 6 µs an event, more than half
    of a 100-candidate stage). ragtrail builds its event attributes itself from str, int, float, bool
    and tuples of those, so on an SDK span with no value-length limit and room for every attribute
    the result of that check is known in advance: the events are built exactly as ``add_event``
    would build them (immutable ``BoundedAttributes``, the span's count limit, no drops), without
    the re-check. Any other case — a value-length limit (the SDK must cut, and the receipts must
    catch it), a tighter count limit, another SDK — goes through the public ``add_event``.
    ``tests/test_stage.py`` pins the two paths to identical exported events."""
    parts = _SDK_EVENT_PARTS
    limits = getattr(span, "_limits", None)
    if parts is None or limits is None or limits.max_attribute_length is not None or not isinstance(span, parts[2]):
        for name, attributes in events:
            span.add_event(name, attributes)
        return
    bounded_cls, event_cls, _ = parts
    max_attributes = limits.max_event_attributes
    for name, attributes in events:
        if max_attributes is not None and len(attributes) > max_attributes:
            span.add_event(name, attributes)
            continue
        bounded = bounded_cls(max_attributes, None, immutable=False, max_value_len=None)
        bounded._dict.update(attributes)
        bounded._immutable = True
        span._add_event(event_cls(name=name, attributes=bounded))


def _digest_item(name: str, attributes: Mapping[str, Any]) -> tuple[str, str, str]:
    """SPEC §3 digest entry; a query event is identified as ``hop:<n>`` with the query's sha256."""
    if name == sc.EVENT_QUERY:
        return name, f"hop:{attributes[sc.QUERY_HOP]}", attributes.get(sc.QUERY_SHA256, "")
    return name, attributes[sc.CANDIDATE_ID], attributes.get(sc.CANDIDATE_CONTENT_SHA256, "")


def _failure_class_of(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timeout"
    return f"exception:{type(exc).__name__}"


def wire_str(value: str) -> str:
    """A string as OTLP can carry it: lone surrogates backslash-escaped, exactly as the receipt's
    canonical bytes escape them (so the received text still verifies as intact)."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")


def wire_text(value: Any) -> str:
    """A payload as wire text: a string (wire-escaped), decoded bytes, or canonical JSON."""
    if isinstance(value, str):
        return wire_str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return canonical_json(value)


def _score_text(value: Any) -> str:
    try:
        return repr(float(value))
    except (TypeError, ValueError):
        return type(value).__name__


def _attribute_value(value: Any) -> Any:
    """OTel attributes take str/bool/int/float and homogeneous lists of them; anything else becomes
    canonical JSON (deterministic), so nested metadata is kept rather than dropped."""
    if isinstance(value, str):
        return wire_str(value)
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (list, tuple)) and value:
        # OTel takes homogeneous lists of str, bool, int or float as they are
        for kind in (str, bool, int, float):
            if all(type(v) is kind for v in value):
                return tuple(wire_str(v) for v in value) if kind is str else tuple(value)
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():
        try:
            return _attribute_value(item())
        except Exception:  # pragma: no cover
            pass
    return canonical_json(value)


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
    return Stage(kind, component, top_k=top_k, threshold=threshold, budget_limit=budget_limit,
                 budget_unit=budget_unit, score_kind=score_kind, tracer=tracer, span_kind=span_kind,
                 attributes=attributes)
