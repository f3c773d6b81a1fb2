"""Weaviate (``weaviate-client`` v4): a collection's ``query.near_vector``, ``near_text``, ``hybrid``
and ``bm25``, the same searches under ``generate.*``, and ``query.fetch_objects`` /
``generate.fetch_objects``, as ``retrieve`` stages, sync and async.

The client's query executors (``_NearVectorQueryExecutor``, ``_NearVectorGenerateExecutor``...,
shared by the sync and the async client) are wrapped; the stage covers the gRPC search (on an async
connection, the awaited one).

What is recorded:

* ids: each returned object's ``uuid`` (Weaviate's own id), in the order the server returned.
* scores, as the response carries them in each object's ``metadata`` (only when the query asked
  for them with ``return_metadata=MetadataQuery(distance=True)`` / ``score=True``; otherwise the
  response holds none and the score kind is ``none``): ``distance`` for ``near_vector`` and
  ``near_text`` (lower is better; the collection's distance metric is not in the response and is
  not fetched), ``bm25`` for ``bm25``, and for ``hybrid`` the fused score with the kind of its
  fusion: ``relative`` (``relativeScoreFusion``, the server's default) or ``rrf``
  (``HybridFusion.RANKED``). Hybrid fusion runs on the server: the response shows the fused score
  (and ``explain_score`` when asked, recorded as the candidate's metadata), never the legs' own
  ranks or the alpha-weighted parts.
* the query: the text (``near_text``, ``hybrid``, ``bm25``), the query vector as a receipt
  (dimension and sha256) for ``near_vector`` and a ``hybrid`` given a vector; ``top_k`` from
  ``limit`` (unknown when the query left it to the server); the ``filters`` as
  ``ragtrail.stage.filter`` (canonical JSON), exported as the query capture mode allows; the
  collection's name as the collection.

**generate.*** (retrieval-augmented generation on the server: ``single_prompt`` per object,
``grouped_task`` over all of them) is the same search, so its retrieval is the same stage
(component ``weaviate.generate.<method>``). The generation is no ``generate`` stage: the server
builds the prompt from the objects' properties and calls its generative module, and neither the
prompt, nor the model, nor which properties reached it come back (only the generated text), so what
reached the model is not known (ragtrail's generate stage is arithmetic on a prompt it saw). The
stage says so in a finding; the generated text is not recorded (the app records its answer with
``ragtrail.answer()``).

**fetch_objects** is a ``retrieve`` stage without a query and without scores (kind ``none``):
it reads objects from the store (by ``filters``, ``limit``, ``sort``, ``offset``/``after``) and what
it returns is evidence the app may hand to a model, so it counts as retrieved. It is not a
``filter`` stage: a filter stage narrows inputs it was handed (``in = out + excluded``), and the
objects Weaviate's filter passed over are never returned. It ranks nothing: the position of an
object is the order Weaviate listed it in (by ``sort`` when given), not a relevance, and a finding
says so. The pages ``collection.iterator()`` reads (a cursor scan over the whole collection) are
not recorded.

The corpus size is unknown (an aggregate would be a request of ours) unless the user gives it
(``ragtrail.corpus_size("<collection>", n)``). A failing query's exception passes through unchanged.

Usage: ``WeaviateInstrumentor().instrument()`` or ``opentelemetry-instrument`` (entry point
``ragtrail_weaviate``).
"""

from __future__ import annotations

import contextvars
import enum
from collections.abc import Callable, Collection
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import canonical_json
from ragtrail.hooks import Args, Kwargs
from ragtrail.instrumentation._base import RagtrailInstrumentor
from ragtrail.instrumentation._vectorstore import Outcome, Query, Row, StoreStages, acall_through, call_through, text_of
from ragtrail.recorder.candidates import Candidate, normalize_id

_KEY = "ragtrail.weaviate"
# method -> (module under weaviate.collections.queries, class stem, the query argument's name)
_METHODS = {
    "near_vector": ("near_vector", "_NearVector", "near_vector"),
    "near_text": ("near_text", "_NearText", "query"),
    "hybrid": ("hybrid", "_Hybrid", "query"),
    "bm25": ("bm25", "_BM25", "query"),
    "fetch_objects": ("fetch_objects", "_FetchObjects", None),
}
_NAMESPACES = ("query", "generate")  # collection.query.* and collection.generate.*
_ITERATOR = "weaviate.collections.iterator"
GENERATED_ON_SERVER = (
    "Weaviate generated text from these objects on the server ({}): the prompt, the model and which properties "
    "reached it are not returned, so what reached the model is unknown (no generate stage)"
)
UNRANKED = "fetch_objects ranks nothing: the objects are in the order Weaviate listed them{}, not by relevance to a query"
# true while collection.iterator() reads a page: a cursor scan, not a retrieval
_scanning: contextvars.ContextVar[bool] = contextvars.ContextVar("ragtrail_weaviate_scanning", default=False)


class _WeaviateStages(StoreStages):
    base: Row


class WeaviateInstrumentor(RagtrailInstrumentor):
    """Records Weaviate v4 collection queries (near_vector, near_text, hybrid, bm25) as retrieve stages."""

    _instruments: Collection[str] = ("weaviate-client >= 4.10",)

    def _patch(self, **kwargs: Any) -> None:
        for method, (package, stem, _arg) in _METHODS.items():
            for namespace in _NAMESPACES:
                module = f"weaviate.collections.queries.{package}.{namespace}.executor"
                name = f"{stem}{namespace.title()}Executor.{method}"
                self.when_imported(module, self._patcher(module, name, method, namespace))
        self.when_imported(_ITERATOR, self._patch_iterator)

    def _patch_iterator(self) -> None:
        self.wrap(_ITERATOR, "_ObjectIterator.__next__", _scan)
        self.wrap(_ITERATOR, "_ObjectAIterator.__anext__", _ascan)

    def _patcher(self, module: str, name: str, method: str, namespace: str) -> Callable[[], bool]:
        return lambda: self.wrap(module, name, self._wrapper(method, namespace))

    def _wrapper(self, method: str, namespace: str) -> Callable[..., Any]:
        def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
            if _scanning.get():
                return wrapped(*args, **kwargs)

            def start() -> _WeaviateStages:
                return _start(self.tracer, method, namespace, instance, args, kwargs)

            if _is_async(instance):
                # the executor returns an awaitable on an async connection: so does this, the stage covers the await
                return acall_through(_KEY, start, wrapped, args, kwargs, _complete)
            return call_through(_KEY, start, wrapped, args, kwargs, _complete)

        return wrapper


def _scan(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """``collection.iterator()``'s next object: the page it may fetch is a scan, not recorded."""
    token = _scanning.set(True)
    try:
        return wrapped(*args, **kwargs)
    finally:
        _scanning.reset(token)


async def _ascan(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """:func:`_scan` for the async iterator (a real coroutine: the page is fetched in this task)."""
    token = _scanning.set(True)
    try:
        return await wrapped(*args, **kwargs)
    finally:
        _scanning.reset(token)


def _is_async(instance: Any) -> bool:
    from weaviate.connect.v4 import ConnectionAsync

    return isinstance(getattr(instance, "_connection", None), ConnectionAsync)


def _plain_filter(value: Any) -> Any:
    """A v4 filter (``Filter.by_property(...)...``, ``&``/``|`` combinations) as plain data."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_plain_filter(v) for v in value]
    fields = getattr(value, "__dict__", None)
    if isinstance(fields, dict):
        return {"op": type(value).__name__.lstrip("_"), **{k: _plain_filter(v) for k, v in fields.items()}}
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


def _kind(method: str, kwargs: Kwargs) -> str:
    if method == "fetch_objects":
        return sc.SCORE_NONE
    if method == "bm25":
        return sc.SCORE_BM25
    if method == "hybrid":
        fusion = kwargs.get("fusion_type")
        return sc.SCORE_RRF if fusion is not None and "ranked" in str(getattr(fusion, "value", fusion)).lower() else sc.SCORE_RELATIVE
    return sc.SCORE_DISTANCE


def _hop(method: str, args: Args, kwargs: Kwargs) -> Query | None:
    """The query the search answers (``fetch_objects`` has none)."""
    name = _METHODS[method][2]
    if name is None:
        return None
    query = args[0] if args else kwargs.get(name)
    if method == "near_vector":
        return Query(vector=query)
    if method == "hybrid":
        vector = kwargs.get("vector")
        return Query(text=query if isinstance(query, str) else None, vector=vector if isinstance(vector, (list, tuple)) else None)
    return Query(text=query if isinstance(query, str) else " ".join(map(str, query)) if isinstance(query, list) else None)


def _findings(method: str, namespace: str, kwargs: Kwargs) -> list[str]:
    found = []
    if method == "fetch_objects":
        sort = kwargs.get("sort")
        found.append(UNRANKED.format(f" (sort: {canonical_json(_plain_filter(sort))})" if sort is not None else ""))
    if namespace == "generate":
        asked = [name for name in ("single_prompt", "grouped_task") if kwargs.get(name) is not None]
        if asked:
            found.append(GENERATED_ON_SERVER.format(" and ".join(asked)))
    return found


def _start(tracer: Any, method: str, namespace: str, instance: Any, args: Args, kwargs: Kwargs) -> _WeaviateStages:
    name = getattr(instance, "_name", None)
    component = f"weaviate.{method}" if namespace == "query" else f"weaviate.{namespace}.{method}"
    stages = _WeaviateStages(tracer, component, collection=name if isinstance(name, str) else None)
    limit = kwargs.get("limit")
    filters = kwargs.get("filters")
    row = Row(
        query=_hop(method, args, kwargs),
        top_k=limit if isinstance(limit, int) else None,
        filter=canonical_json(_plain_filter(filters)) if filters is not None else None,
        score_kind=_kind(method, kwargs),
        findings=_findings(method, namespace, kwargs),
    )
    stages.base = row
    return stages.start(row)


def _complete(stages: _WeaviateStages, result: Any) -> None:
    stages.complete(lambda: _outcome(stages, result))


def _score(metadata: Any, kind: str) -> Any:
    if metadata is None:
        return None
    return getattr(metadata, "distance", None) if kind == sc.SCORE_DISTANCE else getattr(metadata, "score", None)


def _outcome(stages: _WeaviateStages, result: Any) -> Outcome | None:
    objects = getattr(result, "objects", None)
    if objects is None:  # a group_by reply: not read
        return None
    base = stages.base
    scores = [_score(getattr(o, "metadata", None), base.score_kind or "") for o in objects]
    kind = base.score_kind if any(s is not None for s in scores) else sc.SCORE_NONE
    candidates = []
    for obj, score in zip(objects, scores, strict=True):
        explain = getattr(getattr(obj, "metadata", None), "explain_score", None)
        properties = getattr(obj, "properties", None)
        candidates.append(
            Candidate(
                id=normalize_id(getattr(obj, "uuid", None)) or "",
                content=text_of(properties),
                score=score if kind != sc.SCORE_NONE else None,
                score_kind=kind,
                metadata={"explain_score": explain} if explain else None,
            )
        )
    row = Row(candidates=candidates, query=base.query, top_k=base.top_k, filter=base.filter, score_kind=kind, findings=list(base.findings))
    return Outcome(rows=1, row=lambda _index: row, corpus_size=lambda: None, store=stages.collection)


__all__ = ["GENERATED_ON_SERVER", "UNRANKED", "WeaviateInstrumentor"]
