"""The ``rerankers`` library (answerdotai): every ranker's ``rank`` and ``rank_async`` as ``rerank`` stages.

``rank`` is abstract on ``BaseRanker`` and implemented per ranker class, so every concrete class is
patched: those that exist when instrumenting, and (through ``BaseRanker.__init_subclass__``) those
an application defines later. A ranker whose ``rank`` calls another patched ``rank`` records once.

Identity: ``rank(query, docs, doc_ids=None, metadata=None)``. A document's id is the id the caller
gave (``doc_ids`` or ``Document.doc_id``); plain strings without ids get ``sha256:`` of their text,
not the positional integers rerankers invents for them (those collide across stages). Results are
tied back to inputs by the Document object or the ``doc_id`` rerankers assigned.

``BaseRanker.rank_async`` runs ``rank`` in the loop's default executor, which does not carry
``contextvars``: the span inside lost its parent (and re-entrancy guard). The wrapper opens the stage
in the caller's task and runs ``rank`` in the same executor inside a copy of the caller's context.
When it must not record (instrumentation suppressed, or an outer rerank stage already covers the
call) the library's own ``rank_async`` runs untouched; the ``rank`` it starts in the executor cannot
see the caller's context, so it is recognised by its arguments (the same instance and ``docs``
object) and passes straight through instead of opening a stray root span.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import threading
from typing import Any

import wrapt

from ragtrail.recorder.candidates import Candidate, adapt, normalize_id
from ragtrail.instrumentation._base import RagtrailInstrumentor, enabled, is_suppressed, suppressed
from ragtrail.instrumentation._rerank import (
    RerankCall,
    argument,
    component_of,
    finish_failed,
    finish_ok,
    inside_rerank_stage,
    open_stage,
    ranked,
    run_async,
    run_sync,
)
from ragtrail.contract.receipts import content_id
from ragtrail.recorder.stage import Stage

_KEY = "rerankers.rank"
# (id(ranker), id(docs)) of library rank_async calls passed through untouched -> how many in flight
_passing: dict[tuple[int, int], int] = {}
_passing_lock = threading.Lock()


def _document_content(document: Any) -> Any:
    for name in ("text", "base64", "image_path"):
        value = getattr(document, name, None)
        if value is not None:
            return value
    return None


def _adapt_document(document: Any) -> Candidate:
    content = _document_content(document)
    metadata = getattr(document, "metadata", None)
    ident = normalize_id(getattr(document, "doc_id", None)) or content_id(content if content is not None else "")
    return Candidate(id=ident, content=content, metadata=dict(metadata) if isinstance(metadata, dict) else None)


def _model_name(instance: Any) -> str | None:
    model = getattr(instance, "model", None)
    if isinstance(model, str):
        return model
    name = getattr(getattr(model, "config", None), "_name_or_path", None)
    if isinstance(name, str) and name:
        return name
    model_dir = getattr(model, "model_dir", None)  # flashrank's Ranker
    if model_dir is not None:
        return getattr(model_dir, "name", None) or str(model_dir)
    name = getattr(instance, "model_name", None) or getattr(instance, "model_name_or_path", None)
    return name if isinstance(name, str) else None


class _Lookup:
    """Ties each result's Document back to an input position."""

    def __init__(self) -> None:
        self.by_object: dict[int, int] = {}
        self.by_doc_id: dict[str, list[int]] = {}

    def index(self, document: Any) -> int | None:
        position = self.by_object.pop(id(document), None)
        if position is not None:
            return position
        positions = self.by_doc_id.get(normalize_id(getattr(document, "doc_id", None)) or "")
        return positions.pop(0) if positions else None


def _prepare(instance: Any, args: tuple, kwargs: dict) -> RerankCall:
    from rerankers.documents import Document

    call = RerankCall(component_of(instance), model=_model_name(instance))
    call.query = argument(args, kwargs, 0, "query")
    docs = argument(args, kwargs, 1, "docs")
    doc_ids = argument(args, kwargs, 2, "doc_ids")
    metadata = argument(args, kwargs, 3, "metadata")
    if isinstance(docs, (str, Document)):
        docs = [docs]
    if not isinstance(docs, (list, tuple)):
        call.findings.append(f"docs are a {type(docs).__name__}, not a list: not snapshotted")
        return call
    ids = list(doc_ids) if isinstance(doc_ids, (list, tuple)) and len(doc_ids) == len(docs) else None
    metas = list(metadata) if isinstance(metadata, (list, tuple)) and len(metadata) == len(docs) else None
    lookup = _Lookup()
    candidates: list[Candidate] = []
    for position, item in enumerate(docs):
        if isinstance(item, Document):
            lookup.by_object[id(item)] = position
            own = ids[position] if ids is not None else item.doc_id
            content, meta = _document_content(item), item.metadata
        else:
            own = ids[position] if ids is not None else None
            content, meta = item, None
            # rerankers numbers id-less strings 0..n-1 itself; results carry that number
            assigned = own if own is not None else position
            lookup.by_doc_id.setdefault(normalize_id(assigned) or "", []).append(position)
        if metas is not None:
            meta = metas[position]
        if own is not None and isinstance(item, Document):
            lookup.by_doc_id.setdefault(normalize_id(own) or "", []).append(position)
        ident = normalize_id(own) or content_id(content if content is not None else adapt(item).id)
        candidates.append(Candidate(id=ident, content=content, metadata=dict(meta) if isinstance(meta, dict) else None))
    call.documents = candidates
    call.lookup = lookup
    return call


def _record(s: Stage, call: RerankCall, result: Any) -> None:
    results = getattr(result, "results", None)
    if call.lookup is None:
        return
    if results is None:
        s.finding(f"rank returned a {type(result).__name__} without results: outputs not recorded")
        return
    lookup: _Lookup = call.lookup
    s.outputs(ranked(s, call, ((lookup.index(r.document), getattr(r, "score", None), r.document) for r in results),
                     orphan=lambda document: _adapt_document(document)))


class RerankersInstrumentor(RagtrailInstrumentor):
    """``opentelemetry_instrumentor`` entry point ``ragtrail_rerankers``."""

    _instruments = ("rerankers >= 0.6",)

    def _patch(self, **kwargs: Any) -> None:
        self._base = None
        self._patched: set[type] = set()
        self.when_imported("rerankers", self._patch_now)

    def _patch_now(self) -> None:
        from rerankers.documents import Document
        from rerankers.models import AVAILABLE_RANKERS  # noqa: F401 - imports every installed ranker class
        from rerankers.models.ranker import BaseRanker

        self.register_adapter(Document, _adapt_document)
        self._base = BaseRanker
        pending = list(BaseRanker.__subclasses__())
        while pending:
            cls = pending.pop()
            pending.extend(cls.__subclasses__())
            self._patch_class(cls)
        self.wrap("rerankers.models.ranker", "BaseRanker.rank_async", self._rank_async)
        # rankers the application defines later are patched as their class is created
        self._had_hook = "__init_subclass__" in BaseRanker.__dict__
        self._previous_hook = previous = BaseRanker.__dict__.get("__init_subclass__")
        instrumentor = self

        def __init_subclass__(cls: type, **kw: Any) -> None:
            if previous is not None:
                previous.__get__(None, cls)(**kw)
            else:
                super(BaseRanker, cls).__init_subclass__(**kw)
            try:
                instrumentor._patch_class(cls)
            except Exception:  # pragma: no cover - never break the app's class definition
                pass

        BaseRanker.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]

    def _patch_class(self, cls: type) -> None:
        rank = cls.__dict__.get("rank")
        if rank is None or cls in self._patched or getattr(rank, "__isabstractmethod__", False):
            return
        wrapt.wrap_function_wrapper(cls, "rank", self._rank)
        self._patched.add(cls)
        self._wrapped.append((cls, "rank"))

    def _uninstrument(self, **kwargs: Any) -> None:
        base = getattr(self, "_base", None)
        if base is not None:
            if self._had_hook:
                base.__init_subclass__ = self._previous_hook
            elif "__init_subclass__" in base.__dict__:
                del base.__init_subclass__
        super()._uninstrument(**kwargs)
        self._base = None
        self._patched = set()

    def _rank(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if _passing and _passed_through(instance, argument(args, kwargs, 1, "docs")):
            return wrapped(*args, **kwargs)
        return run_sync(self.tracer, _KEY, wrapped, args, kwargs, lambda: _prepare(instance, args, kwargs), _record)

    async def _rank_async(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if not enabled() or is_suppressed(_KEY) or inside_rerank_stage():
            return await _pass_through(wrapped, instance, args, kwargs)
        try:
            bound = inspect.signature(wrapped).bind(*args, **kwargs)
        except TypeError:
            return await wrapped(*args, **kwargs)  # let the library raise its own error
        query, docs, doc_ids = (bound.arguments.get(n) for n in ("query", "docs", "doc_ids"))
        code = getattr(getattr(wrapped, "__func__", wrapped), "__code__", None)
        if code is None or "run_in_executor" not in code.co_names or set(bound.arguments) - {"query", "docs", "doc_ids"}:
            # not the executor-based implementation this fix reproduces: record it as it is
            return await run_async(self.tracer, _KEY, wrapped, args, kwargs,
                                   lambda: _prepare(instance, (query, docs, doc_ids), {}), _record)

        async def in_executor() -> Any:
            # what BaseRanker.rank_async does, with the caller's context carried into the thread
            loop = asyncio.get_running_loop()
            context = contextvars.copy_context()
            return await loop.run_in_executor(None, functools.partial(context.run, instance.rank, query, docs, doc_ids))

        with suppressed(_KEY):
            s, call = open_stage(self.tracer, lambda: _prepare(instance, (query, docs, doc_ids), {}))
            if s is None:
                return await in_executor()
            try:
                result = await in_executor()
            except BaseException as exc:
                finish_failed(s, exc)
                raise
            finish_ok(s, call, result, _record)
            return result


def _passed_through(instance: Any, docs: Any) -> bool:
    with _passing_lock:
        return (id(instance), id(docs)) in _passing


async def _pass_through(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """The library's ``rank_async`` as it is; the ``rank`` it runs in the executor (without the
    caller's context) is marked so that it does not record either."""
    key = (id(instance), id(argument(args, kwargs, 1, "docs")))
    with _passing_lock:
        _passing[key] = _passing.get(key, 0) + 1
    try:
        return await wrapped(*args, **kwargs)
    finally:
        with _passing_lock:
            left = _passing.pop(key) - 1
            if left:
                _passing[key] = left
