"""DSPy: ``dspy.retrievers.Embeddings`` searches and ``dspy.Retrieve`` as ``retrieve`` stages.

``search(query)`` (``Embeddings.__call__`` / ``forward``, and ``EmbeddingsWithScores``, as in DSPy's
RAG tutorial) is one stage, opened in the caller's thread around ``forward``: a child of the span
current where the app searched. What is recorded:

* the query text as the stage's query (a hop of the question);
* ids: the passage's **index in the retriever's corpus** (``indices`` in DSPy's prediction: the
  position in the ``corpus`` list the retriever was built with, as a string), with the passage text
  as the content;
* scores: DSPy's own ranking scores (the dot product of the query and passage embeddings: cosine
  similarity when ``normalize=True``, its default), kind ``similarity``. ``EmbeddingsWithScores``
  returns them; ``Embeddings`` computes them and drops them, so they are read from its search's own
  result (below). When neither is at hand, no score (kind ``none``), never a recomputation;
* ``top_k`` from the retriever's ``k``; the corpus size from ``len(corpus)`` (held in memory, no
  request), the retriever object being the store.

**The search thread.** ``Embeddings`` does not search in the caller's thread: ``forward`` queues the
query for a worker thread of its own (``dspy.utils.unbatchify.Unbatchify``), which embeds a batch of
queued queries and ranks them in ``_batch_forward``. The trace context does not cross a queue by
itself, so the embedder's own spans (an embedding API's instrumentation, a user's span) would start
unrelated traces. The worker's ``_batch_forward`` is wrapped: it looks up the waiting callers of its
queries, and when the batch holds one caller's query (the usual case) it runs under that caller's
trace context (the retrieve stage current), and hands the caller the scores it computed for that
query. Several callers batched together (concurrent searches on one retriever) share one embedder
call: it is nested under none of them, and each stage says so in a finding. A retriever built
before ``instrument()`` holds the unwrapped method: its stage is recorded, without that crossing
(and without scores for ``Embeddings``).

**The program as the pipeline.** The outermost ``dspy.Module`` call (``rag(question=...)``) that
holds a retriever is the ``pipeline`` root, so a program that searches several times (a multi-hop
module) is one trace with one hop numbering, its ``question`` / ``query`` argument as hop 0. "Holds a
retriever": an ``Embeddings`` or ``Retrieve`` among the attributes of the module or of a module it
holds as an attribute (one level, never a walk of the program), or named by the module's
``forward`` or ``aforward`` as a global (the tutorial's ``search``). A module
without one records nothing (no empty pipeline trace); a module called inside another ragtrail stage
is part of it.

**Async programs** (DSPy's async guide: ``await program.acall(...)`` running an ``aforward`` that
awaits ``predictor.acall(...)``) record the same: ``Module.acall`` is the pipeline root as
``__call__`` is, ``Predict.aforward`` hands its inputs' passages on as ``Predict.forward`` does, and
``BaseLM.acall`` is the generate stage, each a real coroutine whose stage covers the awaited work
in the task that awaits it (concurrent ``acall`` runs, ``asyncio.gather``, are each their own trace,
as their context is their own). A retriever called from async code (``search(q)`` inside
``aforward``, or in a thread through ``asyncio.to_thread`` / ``dspy.asyncify``, which copy the
context) is the same retrieve stage, a child of the span current where it was called.

**DSPy's thread pools** (``dspy.Parallel``, ``Module.batch``, ``dspy.Evaluate``) are left alone:
each example runs in a worker thread without the caller's trace context, so each example is a trace
of its own, as it is one question of its own (several questions in one trace would share hop 0).

``dspy.Retrieve(k)(query)`` (the configured ``dspy.settings.rm``) is one stage with the query and
``k``; it returns passage texts only, so each candidate is identified by the sha256 of its text (the
recorder's rule for an item without an id), said in a finding.

**The generation.** Inside the pipeline, a language-model call (``dspy.LM`` / any ``BaseLM``, as
``dspy.Predict`` and ``dspy.ChainOfThought`` make it) is a ``generate`` stage when its predictor was
handed, as one of its inputs, the very list of passages a recorded search returned (the same
object: ``context = search(question).passages`` then ``self.respond(context=context, ...)``). Those
passages are the stage's inputs; its outputs are the ones whose whole text occurs in the messages
the model received (arithmetic on the prompt, :mod:`ragtrail.instrumentation._generate`), the
others are excluded ``custom:not_in_prompt``. A predictor given no such list (passages copied,
joined into one string, or a search made outside the pipeline) is no generation: what reached the
model stays unknown, never guessed from field names. The model's raw completion is not recorded as
the answer (DSPy parses its fields from it). The retriever's results are only read, never changed;
an exception raised by the search passes through unchanged.

Usage: ``DSPyInstrumentor().instrument()`` or ``opentelemetry-instrument`` (entry point
``ragtrail_dspy``).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import weakref
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import content_id
from ragtrail.hooks import Args, Call, Kwargs, argument, async_wrapper, guard, run, run_async, sync_wrapper
from ragtrail.instrumentation._base import RagtrailInstrumentor
from ragtrail.instrumentation._generate import record_generation, set_model
from ragtrail.instrumentation._vectorstore import Outcome, Query, Row, StoreStages, call_through, plain
from ragtrail.recorder.candidates import Candidate
from ragtrail.recorder.stage import Stage, current_stage

_KEY = "ragtrail.dspy"
_EMBEDDINGS = "dspy.retrievers.embeddings"
_RETRIEVE = "dspy.retrievers.retrieve"
_MODULE = "dspy.primitives.module"
_PREDICT = "dspy.predict.predict"
_LM = "dspy.clients.base_lm"
_QUERY_KEYS = ("question", "query")


@dataclass
class _Search:
    """One caller's query waiting for the search thread: the caller's trace context, and what the
    thread computed for it (``(passages, indices, scores)``)."""

    query: Any
    context: otel_context.Context
    result: Any = None
    batched_with: int = 0
    claimed: bool = False


@dataclass
class _ProgramRun:
    """One program run recorded as a pipeline: the passage lists its searches returned (by identity,
    the list kept alive with its candidates)."""

    passages: dict[int, tuple[Any, list[Candidate]]] = field(default_factory=dict)

    def offer(self, passages: Any, candidates: Sequence[Candidate]) -> None:
        self.passages[id(passages)] = (passages, [Candidate(id=c.id, content=c.content) for c in candidates])

    def offered(self, inputs: Kwargs) -> list[Candidate]:
        """The passages of the lists among ``inputs`` that are the very lists a search returned."""
        found: list[Candidate] = []
        for value in inputs.values():
            entry = self.passages.get(id(value))
            if entry is not None and entry[0] is value:
                found.extend(c for c in entry[1] if c.id not in {f.id for f in found})
        return found


_program_run: contextvars.ContextVar[_ProgramRun | None] = contextvars.ContextVar("ragtrail_dspy_program", default=None)
# the passages offered to the predictor running now (what its model call is a generation of)
_offered: contextvars.ContextVar[list[Candidate] | None] = contextvars.ContextVar("ragtrail_dspy_offered", default=None)
_lock = threading.Lock()
# retriever -> the searches its worker thread has not taken yet
_waiting: weakref.WeakKeyDictionary[Any, list[_Search]] = weakref.WeakKeyDictionary()


class DSPyInstrumentor(RagtrailInstrumentor):
    """Records DSPy ``Embeddings`` retriever searches and ``dspy.Retrieve`` calls as retrieve stages."""

    _instruments: Collection[str] = ("dspy >= 2.6",)

    def _patch(self, **kwargs: Any) -> None:
        self.when_imported(_EMBEDDINGS, self._patch_embeddings)
        self.when_imported(_RETRIEVE, lambda: self.wrap(_RETRIEVE, "Retrieve.forward", self._retrieve))
        self.when_imported(_MODULE, self._patch_module)
        self.when_imported(_PREDICT, self._patch_predict)
        self.when_imported(_LM, self._patch_lm)

    def _patch_module(self) -> None:
        self.wrap(_MODULE, "Module.__call__", sync_wrapper(_ProgramCall, lambda: self.tracer))
        self.wrap(_MODULE, "Module.acall", async_wrapper(_ProgramCall, lambda: self.tracer))

    def _patch_predict(self) -> None:
        self.wrap(_PREDICT, "Predict.forward", _predict)
        self.wrap(_PREDICT, "Predict.aforward", _apredict)

    def _patch_lm(self) -> None:
        self.wrap(_LM, "BaseLM.__call__", self._lm)
        self.wrap(_LM, "BaseLM.acall", self._alm)

    def _lm(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        offered = _offered.get()
        if not offered:
            return wrapped(*args, **kwargs)
        return run(_GenerateCall(self.tracer, wrapped, instance, args, kwargs, offered))

    async def _alm(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        """``BaseLM.acall``: the same rule as :meth:`_lm`, the stage covering the awaited call."""
        offered = _offered.get()
        if not offered:
            return await wrapped(*args, **kwargs)
        return await run_async(_GenerateCall(self.tracer, wrapped, instance, args, kwargs, offered))

    def _patch_embeddings(self) -> None:
        for name in ("Embeddings", "EmbeddingsWithScores"):
            self.wrap(_EMBEDDINGS, f"{name}.forward", self._forward)
        self.wrap(_EMBEDDINGS, "Embeddings._batch_forward", _batch_forward)

    def _forward(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        query = argument(args, kwargs, 0, "query")
        opened: list[_EmbeddingsStages] = []

        def start() -> _EmbeddingsStages:
            opened.append(_start_embeddings(self.tracer, instance, query))
            return opened[0]

        def search(*a: Any, **kw: Any) -> Any:
            waiting = guard("dspy.register", _register, instance, query) if opened and opened[0].active else None
            if waiting is not None:
                opened[0].search = waiting
            try:
                return wrapped(*a, **kw)
            finally:
                if waiting is not None:
                    guard("dspy.unregister", _unregister, instance, waiting)

        return call_through(
            _KEY, start, search, args, kwargs, lambda stages, result: stages.complete(lambda: _embeddings_outcome(stages, instance, result))
        )

    def _retrieve(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        query = argument(args, kwargs, 0, "query")
        k = argument(args, kwargs, 1, "k")
        k = k if k is not None else getattr(instance, "k", None)

        def start() -> StoreStages:
            row = Row(query=Query(text=query) if isinstance(query, str) else None, top_k=k if isinstance(k, int) else None, score_kind=sc.SCORE_NONE)
            return StoreStages(self.tracer, "dspy.Retrieve").start(row)

        return call_through(_KEY, start, wrapped, args, kwargs, lambda stages, result: stages.complete(lambda: _retrieve_outcome(result, k)))


class _ProgramCall(Call):
    """The outermost DSPy module call that holds a retriever: the ``pipeline`` root."""

    site = "dspy.program"
    per_instance = False  # modules called inside it are part of it

    def open(self) -> Stage | None:
        if current_stage() is not None or not _holds_retriever(self.instance):
            return None
        s = self.new_stage(sc.KIND_PIPELINE)
        query = next((self.kwargs[k] for k in _QUERY_KEYS if isinstance(self.kwargs.get(k), str)), None)
        if query is None and self.args and isinstance(self.args[0], str):
            query = self.args[0]
        if s.recording:
            self.set_var(_program_run, _ProgramRun())
            if query is not None:
                s.query(query)
        return s


class _GenerateCall(Call):
    """A model call by a predictor that was handed a search's passages: a ``generate`` stage."""

    site = "dspy.generate"

    def __init__(self, tracer: Any, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs, offered: list[Candidate]) -> None:
        super().__init__(tracer, wrapped, instance, args, kwargs)
        self.offered = offered

    def open(self) -> Stage:
        s = self.new_stage(sc.KIND_GENERATE)
        if s.recording:
            set_model(s, self.instance)
        return s

    def after(self, s: Stage, result: Any) -> None:
        messages = argument(self.args, self.kwargs, None, "messages")
        prompt = messages if messages is not None else argument(self.args, self.kwargs, 0, "prompt")
        record_generation(s, [Candidate(id=c.id, content=c.content) for c in self.offered], prompt, None)


@contextlib.contextmanager
def _offering(inputs: Kwargs) -> Iterator[None]:
    """While a predictor runs: the passages among its ``inputs`` that a search of this program
    returned are what its model call is a generation of (nothing set when there are none)."""
    program = _program_run.get()
    offered = guard("dspy.offered", program.offered, inputs) if program is not None else None
    token = _offered.set(offered) if offered else None
    try:
        yield
    finally:
        if token is not None:
            _offered.reset(token)


def _predict(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """``Predict.forward(**inputs)``: its model call is a generation of the passages among its inputs."""
    with _offering(kwargs):
        return wrapped(*args, **kwargs)


async def _apredict(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """``Predict.aforward(**inputs)``: as :func:`_predict`, in the task that awaits it."""
    with _offering(kwargs):
        return await wrapped(*args, **kwargs)


def _is_retriever(value: Any) -> bool:
    from dspy.retrievers.embeddings import Embeddings
    from dspy.retrievers.retrieve import Retrieve

    return isinstance(value, (Embeddings, Retrieve))


def _holds_retriever(module: Any) -> bool:
    """A retriever among the attributes of ``module`` or of a module it holds (one level: no walk
    through lists or deep trees, this runs on every outermost module call), or a global its
    ``forward`` names (DSPy's RAG tutorial searches through a module-level ``search``)."""
    from dspy.primitives.base_module import BaseModule

    for value in vars(module).values():
        if _is_retriever(value) or (isinstance(value, BaseModule) and any(_is_retriever(v) for v in vars(value).values())):
            return True
    for method in ("forward", "aforward"):
        fn = getattr(type(module), method, None)
        code, names = getattr(fn, "__code__", None), getattr(fn, "__globals__", None)
        if code is not None and isinstance(names, dict) and any(_is_retriever(names.get(name)) for name in code.co_names):
            return True
    return False


class _EmbeddingsStages(StoreStages):
    top_k: int | None = None
    query: Any = None
    search: _Search | None = None


def _start_embeddings(tracer: Any, retriever: Any, query: Any) -> _EmbeddingsStages:
    stages = _EmbeddingsStages(tracer, f"dspy.{type(retriever).__qualname__}")
    k = getattr(retriever, "k", None)
    stages.top_k = k if isinstance(k, int) else None
    stages.query = query
    return stages.start(Row(query=Query(text=query) if isinstance(query, str) else None, top_k=stages.top_k, score_kind=sc.SCORE_SIMILARITY))


def _register(retriever: Any, query: Any) -> _Search:
    waiting = _Search(query=query, context=otel_context.get_current())
    with _lock:
        _waiting.setdefault(retriever, []).append(waiting)
    return waiting


def _unregister(retriever: Any, waiting: _Search) -> None:
    with _lock:
        found = _waiting.get(retriever)
        if found is not None and waiting in found:
            found.remove(waiting)


def _claim(retriever: Any, queries: Sequence[Any]) -> list[_Search | None]:
    """The waiting searches of a batch, in its order (``None`` for a query nobody registered: a
    search made before ``instrument()``); the same object first, then an equal query."""
    with _lock:
        found = _waiting.get(retriever) or []
        claimed: list[_Search | None] = []
        for query in queries:
            match = next((w for w in found if not w.claimed and w.query is query), None)
            match = match or next((w for w in found if not w.claimed and w.query == query), None)
            if match is not None:
                match.claimed = True
                match.batched_with = len(queries) - 1
            claimed.append(match)
        return claimed


def _hand_results(searches: Sequence[_Search | None], results: Any) -> None:
    for waiting, result in zip(searches, results, strict=False):
        if waiting is not None:
            waiting.result = result


def _batch_forward(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """In DSPy's search thread: the batch runs under its caller's trace context (one caller)."""
    queries = argument(args, kwargs, 0, "queries")
    searches = guard("dspy.claim", _claim, instance, queries) if isinstance(queries, list) else None
    only = searches[0] if searches is not None and len(searches) == 1 else None
    token = guard("dspy.attach", otel_context.attach, only.context) if only is not None else None
    try:
        result = wrapped(*args, **kwargs)
    finally:
        if token is not None:
            guard("dspy.detach", otel_context.detach, token)
    if searches:
        guard("dspy.results", _hand_results, searches, result)
    return result


def _embeddings_outcome(stages: _EmbeddingsStages, retriever: Any, prediction: Any) -> Outcome:
    passages = getattr(prediction, "passages", None)
    indices = getattr(prediction, "indices", None)
    scores = getattr(prediction, "scores", None)
    search = stages.search
    result = search.result if search is not None else None
    if scores is None and isinstance(result, tuple) and len(result) == 3 and indices is not None and list(result[1]) == list(indices):
        scores = result[2]  # Embeddings drops the scores its search computed: read from that search's own result
    corpus = getattr(retriever, "corpus", None)

    def row(_index: int) -> Row:
        kind = sc.SCORE_SIMILARITY if scores is not None else sc.SCORE_NONE
        found = Row(query=None, top_k=stages.top_k, score_kind=kind)
        if search is not None and search.batched_with:
            found.findings.append(
                f"searched in one batch with {search.batched_with} other quer{'y' if search.batched_with == 1 else 'ies'} "
                "(DSPy's search thread batches concurrent calls): the embedder's work is not nested under this stage"
            )
        if not isinstance(passages, list) or not isinstance(indices, list) or len(passages) != len(indices):
            found.findings.append("the retriever's result has no passages/indices lists of one length: no candidate recorded")
            return found
        found.candidates = [
            Candidate(id=str(plain(index)), content=text, score=plain(scores[i]) if scores is not None and i < len(scores) else None, score_kind=kind)
            for i, (text, index) in enumerate(zip(passages, indices, strict=True))
        ]
        program = _program_run.get()
        if program is not None:
            program.offer(passages, found.candidates)
        return found

    size = (lambda: len(corpus)) if isinstance(corpus, list) else None
    return Outcome(rows=1, row=row, corpus_size=size, store=retriever)


def _retrieve_outcome(prediction: Any, k: Any) -> Outcome:
    passages = getattr(prediction, "passages", None)

    def row(_index: int) -> Row:
        found = Row(top_k=k if isinstance(k, int) else None, score_kind=sc.SCORE_NONE)
        if not isinstance(passages, list):
            found.findings.append("dspy.Retrieve returned no passages list: no candidate recorded")
            return found
        found.findings.append(f"dspy.Retrieve returns passage texts only: the {len(passages)} passages are identified by the sha256 of their text")
        found.candidates = [Candidate(id=content_id(text), content=text, score_kind=sc.SCORE_NONE) for text in passages]
        program = _program_run.get()
        if program is not None:
            program.offer(passages, found.candidates)
        return found

    return Outcome(rows=1, row=row)


__all__ = ["DSPyInstrumentor"]
