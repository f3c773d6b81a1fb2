"""What the vector-store instrumentations (chromadb, qdrant, faiss) share.

A store call becomes ``retrieve`` stages, one per query the call carried:

* Stage 0 (the first query) is opened before the call and is the current span while it runs, so it
  covers the real duration of the call, sync or awaited, and the call's own child work nests in it.
  A call that raises ends it ``failed`` with the exception's class; the exception propagates as is.
* A batch call (several query texts or vectors in Chroma, Qdrant's ``query_batch_points``, a faiss
  search with ``n`` query rows) returns one ranked list per query. Every further query gets its own
  sibling stage, written after the call but back-dated to the call's start, so each query keeps its
  own 0-based ranks, ``top_k``, threshold, filter and score kind, and carries
  ``ragtrail.stage.batch.index`` / ``ragtrail.stage.batch.size``. (One span with a hop per query
  would interleave the lists: the second query's best hit would have rank ``k``.) Siblings are not
  built when they could not record anyway: no SDK, or a sampled-out parent span (siblings share its
  trace id and parent, so a parent-based or trace-id-ratio sampler decides the same for them).
  A call carrying more queries than ``RAGTRAIL_VECTORSTORE_MAX_QUERIES`` (default 1000) writes stages
  for the first that many only, and says so in a finding on stage 0 (its ``batch.size`` stays the
  true size): a bulk faiss search of a million rows must not cost a million spans.

Candidates are built straight from the store's result (ids normalised to strings, scores as the
store gave them with the store's score kind); a padding slot (faiss id ``-1``) is not a candidate.
A query that reached the store as a vector is receipted as its dimension and the sha256 of its
little-endian float32 bytes, so two runs can be compared without exporting the vector. The store's
result object is only read, never changed.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from opentelemetry import trace

from ragtrail import settings
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import canonical_json, finite_or_none
from ragtrail.hooks import Args, Call, Kwargs, run, run_async
from ragtrail.recorder.candidates import CONTENT_KEYS, Candidate
from ragtrail.recorder.errors import record_internal_error
from ragtrail.recorder.stage import Stage, stage

_log = logging.getLogger("ragtrail")
_S = TypeVar("_S", bound="StoreStages")  # a library's StoreStages subclass, carried through a call


@dataclass
class Query:
    """The query one ranked list answers: a text, or a vector (``binary`` for faiss binary indexes)."""

    text: Any = None
    vector: Any = None
    binary: bool = False


@dataclass
class Row:
    """One query's result, ready for a stage: candidates in the store's order plus the knobs it ran with."""

    candidates: Sequence[Candidate] = ()
    query: Query | None = None
    top_k: int | None = None
    threshold: float | None = None
    filter: str | None = None
    score_kind: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)
    # what the store fetched before it picked the candidates (an MMR pool): the stage's inputs, and
    # (id, reason, detail) for each one it did not hand back. ``None``: the inputs are not known
    inputs: Sequence[Candidate] | None = None
    exclusions: Sequence[tuple[str, str, str]] = ()


@dataclass
class Outcome:
    """What a call returned: ``rows`` ranked lists, built on demand by ``row(i)`` (only for stages
    that record), and the store's size when it is cheap and already known (never a request added
    to the query path): ``store`` is the store's identity (the index or collection: a store
    searched by several stages counts once in the corpus), ``approximate`` when the size is an
    estimate the store reported."""

    rows: int
    row: Callable[[int], Row]
    corpus_size: Callable[[], Any] | None = None
    store: Any = None
    approximate: bool = False


class _Backdated:
    """A tracer that starts stage spans at a given time: a batch's sibling stages are written after
    the call but cover it. Continuation spans (opened with an explicit parent context) start now."""

    def __init__(self, tracer: trace.Tracer, start_time: int) -> None:
        self._tracer = tracer
        self._start_time = start_time

    def start_span(self, name: str, context: Any = None, *args: Any, **kwargs: Any) -> trace.Span:
        if context is None and not args and kwargs.get("start_time") is None:
            kwargs["start_time"] = self._start_time
        return self._tracer.start_span(name, context, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tracer, name)


def vector_receipt(vector: Any, binary: bool = False) -> tuple[int, str] | None:
    """``(dimension, sha256)`` of a query vector as little-endian float32 bytes (uint8 for binary
    vectors); ``None`` when it is not a dense numeric vector (a point id, a sparse vector)."""
    import numpy as np

    try:
        array = np.asarray(vector, dtype=np.uint8 if binary else "<f4")
    except (TypeError, ValueError):
        return None
    if array.ndim == 0 or array.size == 0:
        return None
    return int(array.shape[-1]), hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def filter_json(value: Any) -> str | None:
    """A store's filter as canonical JSON (pydantic models dumped without unset fields), so equal
    filters give equal strings; ``None`` when there is no filter."""
    if value is None:
        return None
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        value = dump(mode="json", exclude_none=True)
    if isinstance(value, Mapping) and not value:
        return None
    return canonical_json(value)


def plain(value: Any) -> Any:
    """A numpy scalar as the Python number it holds; anything else unchanged."""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():
        try:
            return item()
        except Exception:  # pragma: no cover - defensive
            return value
    return value


def text_of(payload: Any) -> str | None:
    """The text a payload/metadata mapping carries under a usual key (what the receipt is over)."""
    if isinstance(payload, Mapping):
        for key in CONTENT_KEYS:
            value = payload.get(key)
            if isinstance(value, str):
                return value
    return None


class StoreStages:
    """The stages of one store call: stage 0 live around the call, more queries as sibling stages."""

    def __init__(self, tracer: trace.Tracer, component: str, *, collection: str | None = None) -> None:
        self._tracer = tracer
        self.component = component
        self.collection = collection
        self._stage0: Stage | None = None
        self._t0 = 0
        self._siblings = False
        self._pending: tuple[Outcome, int, Any] | None = None

    # --- before the call ---------------------------------------------------------------------------
    def start(self: _S, first: Row) -> _S:
        """Open stage 0 with what is known before the call (its query, knobs and filter)."""
        parent_valid = trace.get_current_span().get_span_context().is_valid
        self._t0 = time.time_ns()
        s = stage(
            sc.KIND_RETRIEVE, self.component, top_k=first.top_k, threshold=first.threshold, score_kind=first.score_kind, tracer=self._tracer
        ).start()
        self._stage0 = s
        try:
            # siblings share stage 0's start; they are worth building only if one could record
            self._t0 = getattr(s.span, "start_time", None) or self._t0
            valid = s.span.get_span_context().is_valid
            self._siblings = s.recording or (valid and not parent_valid)
            if s.recording:
                self._query(s, first.query)
                self._knobs(s, first)
        except Exception as exc:
            s.record_error("vectorstore.start", exc)
        return self

    @property
    def active(self) -> bool:
        """Whether anything may be recorded (so a wrapper can skip extra reads when it is not)."""
        return self._siblings

    # --- after the call ----------------------------------------------------------------------------
    @property
    def stage0(self) -> Stage | None:
        return self._stage0

    def complete(self, build: Callable[[], Outcome | None]) -> None:
        """Record the result into stage 0 (row 0) and keep the rest for :meth:`write_siblings`,
        which runs once stage 0 has ended (a sibling must not be its child)."""
        s0 = self._stage0
        if s0 is None:
            return
        outcome: Outcome | None = None
        size: Any = None
        limit = 1
        self._pending = None
        try:
            if self._siblings:
                outcome = build()
                if outcome is not None and outcome.corpus_size is not None:
                    value = _call(outcome.corpus_size, "vectorstore.corpus_size")
                    size = (value, outcome.store, outcome.approximate)
                if outcome is not None:
                    limit = settings.get().vectorstore_max_queries
                if s0.recording and outcome is not None:
                    row = outcome.row(0) if outcome.rows > 0 else Row()
                    if outcome.rows > limit:
                        s0.finding(f"batch of {outcome.rows} queries: stages written for the first {limit} only ({sc.ENV_VECTORSTORE_MAX_QUERIES})")
                    self._record(s0, row, 0, outcome.rows, size, first=True)
        except Exception as exc:
            s0.record_error("vectorstore.complete", exc)
        if outcome is not None and outcome.rows > 1:
            self._pending = (outcome, limit, size)

    def write_siblings(self) -> None:
        """Stages 1.. of a batch, after stage 0 ended."""
        pending, self._pending = self._pending, None
        if pending is not None:
            outcome, limit, size = pending
            for index in range(1, min(outcome.rows, limit)):
                self._sibling(outcome, index, size)

    def _sibling(self, outcome: Outcome, index: int, size: Any) -> None:
        try:
            # a Tracer by delegation (a stage calls only start_span), not by inheritance
            backdated = cast(trace.Tracer, _Backdated(self._tracer, self._t0))
            s = stage(sc.KIND_RETRIEVE, self.component, tracer=backdated).start()
        except Exception as exc:  # pragma: no cover - stage() never raises
            record_internal_error("vectorstore.sibling", exc)
            return
        try:
            if s.recording:
                self._record(s, outcome.row(index), index, outcome.rows, size, first=False)
        except Exception as exc:
            s.record_error("vectorstore.sibling", exc)
        finally:
            s.finish()

    # --- writing one stage -------------------------------------------------------------------------
    def _query(self, s: Stage, query: Query | None) -> None:
        if query is None:
            return
        if query.text is not None:
            s.query(query.text)
        if query.vector is not None and settings.get().query != "off":
            found = vector_receipt(query.vector, query.binary)
            if found is not None:
                s.set_attribute(sc.QUERY_VECTOR_DIM, found[0])
                s.set_attribute(sc.QUERY_VECTOR_SHA256, found[1])

    def _knobs(self, s: Stage, row: Row) -> None:
        s.set(top_k=row.top_k, threshold=row.threshold)
        if row.score_kind is not None:
            s.score_kind = row.score_kind
        if self.collection is not None:
            s.set_attribute(sc.STAGE_COLLECTION, self.collection)  # also GenAI's data source (the mirror)
        if row.filter is not None:
            s.set_attribute(sc.STAGE_FILTER, row.filter)
        for key, value in row.attributes.items():
            if value is not None:
                s.set_attribute(key, value)

    def _record(self, s: Stage, row: Row, index: int, rows: int, size: Any, *, first: bool) -> None:
        if not first:
            self._query(s, row.query)
        self._knobs(s, row)
        if rows > 1:
            s.set_attribute(sc.STAGE_BATCH_INDEX, index)
            s.set_attribute(sc.STAGE_BATCH_SIZE, rows)
        for finding in row.findings:
            s.finding(finding)
        nonfinite = sum(1 for c in row.candidates if c.score is not None and finite_or_none(c.score) is None)
        if nonfinite:
            s.finding(f"{nonfinite} of {len(row.candidates)} scores are not finite (NaN or inf); recorded as {sc.CANDIDATE_SCORE_RAW}")
        if size is not None:
            # a size the user set for this store (ragtrail.corpus_size) wins, also when none is known
            s.corpus_size(size[0], store=size[1], approximate=size[2])
        if row.inputs is not None:
            s.inputs(list(row.inputs))
        s.outputs(list(row.candidates))
        for ident, reason, detail in row.exclusions:
            s.exclude(ident, reason, detail)


def _call(fn: Callable[[], Any], site: str) -> Any:
    try:
        return fn()
    except Exception as exc:
        record_internal_error(site, exc)
        return None


class VectorStoreCall(Call, Generic[_S]):
    """A store call on the hook skeleton: ``start`` opens stage 0 (a :class:`StoreStages`, or a
    library's subclass that ``done`` then receives), ``done`` records the result into it, the
    siblings are written once it ended. One suppression key per library: a store call made inside
    another (a client calling itself) records once."""

    per_instance = False

    def __init__(
        self, site: str, start: Callable[[], _S | None], done: Callable[[_S, Any], None], wrapped: Callable[..., Any], args: Args, kwargs: Kwargs
    ) -> None:
        super().__init__(None, wrapped, None, args, kwargs)
        self.site = site
        self._start = start
        self._done = done
        self.store: _S | None = None

    def open(self) -> Stage | None:
        self.store = self._start()
        return self.store.stage0 if self.store is not None else None

    def records(self) -> bool:
        return self.store is not None and self.store.active

    def after(self, s: Stage, result: Any) -> None:
        if self.store is not None:  # always: after() runs only when records()
            self._done(self.store, result)

    def cleanup(self) -> None:
        if self.store is not None:
            self.store.write_siblings()


def call_through(
    key: str, start: Callable[[], _S | None], wrapped: Callable[..., Any], args: Args, kwargs: Kwargs, done: Callable[[_S, Any], None]
) -> Any:
    """Every vector-store wrapper: the client's call as :class:`VectorStoreCall` stages (see :mod:`ragtrail.hooks`)."""
    return run(VectorStoreCall(key, start, done, wrapped, args, kwargs))


async def acall_through(
    key: str, start: Callable[[], _S | None], wrapped: Callable[..., Any], args: Args, kwargs: Kwargs, done: Callable[[_S, Any], None]
) -> Any:
    """:func:`call_through` for async clients: the stages cover the awaited query."""
    return await run_async(VectorStoreCall(key, start, done, wrapped, args, kwargs))
