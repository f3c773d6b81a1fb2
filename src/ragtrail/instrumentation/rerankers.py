"""The ``rerankers`` library (answerdotai): every ranker's ``rank`` and ``rank_async`` as ``rerank`` stages.

``rank`` is abstract on ``BaseRanker`` and implemented per ranker class, so every concrete class is
patched where it defines ``rank``: the library's (``rerankers.models`` imports them all) and the
application's that exist when rerankers is patched. A class defined later is patched when one of its
instances is first awaited through ``rank_async`` (met at run time); until then, its direct ``rank``
calls are not recorded (decorate it with ``@ragtrail.reranker`` to record it from its first call).
The library's class creation is left alone. A ranker whose ``rank`` calls another patched ``rank``
records once (one suppression key for the library).

Identity: ``rank(query, docs, doc_ids=None, metadata=None)``. A document's id is the id the caller
gave (``doc_ids`` or ``Document.doc_id``); plain strings without ids get ``sha256:`` of their text,
not the positional integers rerankers invents for them (those collide across stages). Results are
tied back to inputs by the Document object or the ``doc_id`` rerankers assigned.

``BaseRanker.rank_async`` runs ``rank`` in the loop's default executor, which does not carry
``contextvars``: the span inside lost its parent (and the suppression of the ``rank`` it covers).
The library's own ``rank_async`` runs, recorded as the stage (it covers the awaited work); what it
hands to its executor, ``partial(self.rank, ...)``, is built in a copy of the caller's context
(``rerankers.models.ranker.partial`` is wrapped to bind ``contextvars.copy_context().run``), as
``asyncio.to_thread`` does. The ``rank`` in the executor thus sees the ``rank_async`` stage (and
records nothing twice), an outer rerank stage, or OTel's ``suppress_instrumentation()``.
"""

from __future__ import annotations

import contextvars
from typing import Any

import wrapt

from ragtrail.contract.receipts import content_id
from ragtrail.hooks import Args, Kwargs, argument, component_name, guard, run, run_async
from ragtrail.instrumentation._base import RagtrailInstrumentor
from ragtrail.instrumentation._rerank import RerankArgs, RerankCall, ranked
from ragtrail.recorder.candidates import Candidate, adapt, normalize_id
from ragtrail.recorder.stage import Stage

_KEY = "rerankers.rank"


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


def _prepare(instance: Any, args: Args, kwargs: Kwargs) -> RerankArgs:
    from rerankers.documents import Document

    request = RerankArgs(component_name(instance), model=_model_name(instance))
    request.query = argument(args, kwargs, 0, "query")
    docs = argument(args, kwargs, 1, "docs")
    doc_ids = argument(args, kwargs, 2, "doc_ids")
    metadata = argument(args, kwargs, 3, "metadata")
    if isinstance(docs, (str, Document)):
        docs = [docs]
    if not isinstance(docs, (list, tuple)):
        request.findings.append(f"docs are a {type(docs).__name__}, not a list: not snapshotted")
        return request
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
    request.documents = candidates
    request.lookup = lookup
    return request


def _record(s: Stage, request: RerankArgs, result: Any) -> None:
    results = getattr(result, "results", None)
    if request.lookup is None:
        return
    if results is None:
        s.finding(f"rank returned a {type(result).__name__} without results: outputs not recorded")
        return
    lookup: _Lookup = request.lookup
    s.outputs(
        ranked(
            s,
            request,
            ((lookup.index(r.document), getattr(r, "score", None), r.document) for r in results),
            orphan=lambda document: _adapt_document(document),
        )
    )


def _in_callers_context(wrapped: Any, instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """``partial(fn, ...)`` as ``rank_async`` builds it for its executor, bound to a copy of the
    current context: ``fn`` runs in the executor thread as if called here."""
    return wrapped(contextvars.copy_context().run, *args, **kwargs)


class RerankersInstrumentor(RagtrailInstrumentor):
    """``opentelemetry_instrumentor`` entry point ``ragtrail_rerankers``."""

    _instruments = ("rerankers >= 0.6",)

    def _patch(self, **kwargs: Any) -> None:
        self._patched: set[tuple[type, str]] = set()
        self.when_imported("rerankers", self._patch_now)

    def _patch_now(self) -> None:
        from rerankers.documents import Document
        from rerankers.models import AVAILABLE_RANKERS  # noqa: F401 - imports every installed ranker class
        from rerankers.models.ranker import BaseRanker

        self.register_adapter(Document, _adapt_document)
        self._patch_tree(BaseRanker)
        self.wrap("rerankers.models.ranker", "partial", _in_callers_context)

    def _patch_tree(self, base: type) -> None:
        pending = [base]
        while pending:
            cls = pending.pop()
            pending.extend(cls.__subclasses__())
            self._patch_class(cls)

    def _patch_class(self, cls: type) -> None:
        for name, wrapper in (("rank", self._rank), ("rank_async", self._rank_async)):
            method = cls.__dict__.get(name)
            if method is None or (cls, name) in self._patched or getattr(method, "__isabstractmethod__", False):
                continue
            wrapt.wrap_function_wrapper(cls, name, wrapper)
            self._patched.add((cls, name))
            self._wrapped.append((cls, name))

    def _uninstrument(self, **kwargs: Any) -> None:
        super()._uninstrument(**kwargs)
        self._patched = set()

    def _rank(self, wrapped: Any, instance: Any, args: Args, kwargs: Kwargs) -> Any:
        return run(RerankCall(self.tracer, _KEY, wrapped, instance, args, kwargs, _prepare, _record))

    async def _rank_async(self, wrapped: Any, instance: Any, args: Args, kwargs: Kwargs) -> Any:
        cls = type(instance)
        if (cls, "rank") not in self._patched and "rank" in cls.__dict__:  # defined after rerankers was patched
            with self._hooks_lock:
                guard("rerankers.patch_class", self._patch_class, cls)
        return await run_async(RerankCall(self.tracer, _KEY, wrapped, instance, args, kwargs, _prepare, _record))
