"""Weaviate (``weaviate-client`` v4): a collection's ``query.near_vector``, ``near_text``, ``hybrid``
and ``bm25`` as a ``retrieve`` stage, sync and async.

The client's query executors (``_NearVectorQueryExecutor``..., shared by the sync and the async
client) are wrapped; the stage covers the gRPC search (on an async connection, the awaited one).

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

The corpus size is unknown (an aggregate would be a request of ours) unless the user gives it
(``ragtrail.corpus_size("<collection>", n)``). A failing query's exception passes through unchanged.

Usage: ``WeaviateInstrumentor().instrument()`` or ``opentelemetry-instrument`` (entry point
``ragtrail_weaviate``).
"""

from __future__ import annotations

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
    "near_vector": ("near_vector", "_NearVectorQuery", "near_vector"),
    "near_text": ("near_text", "_NearTextQuery", "query"),
    "hybrid": ("hybrid", "_HybridQuery", "query"),
    "bm25": ("bm25", "_BM25Query", "query"),
}


class _WeaviateStages(StoreStages):
    base: Row


class WeaviateInstrumentor(RagtrailInstrumentor):
    """Records Weaviate v4 collection queries (near_vector, near_text, hybrid, bm25) as retrieve stages."""

    _instruments: Collection[str] = ("weaviate-client >= 4.10",)

    def _patch(self, **kwargs: Any) -> None:
        for method, (package, stem, _arg) in _METHODS.items():
            module = f"weaviate.collections.queries.{package}.query.executor"
            self.when_imported(module, self._patcher(module, f"{stem}Executor.{method}", method))

    def _patcher(self, module: str, name: str, method: str) -> Callable[[], bool]:
        return lambda: self.wrap(module, name, self._wrapper(method))

    def _wrapper(self, method: str) -> Callable[..., Any]:
        def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
            def start() -> _WeaviateStages:
                return _start(self.tracer, method, instance, args, kwargs)

            if _is_async(instance):
                # the executor returns an awaitable on an async connection: so does this, the stage covers the await
                return acall_through(_KEY, start, wrapped, args, kwargs, _complete)
            return call_through(_KEY, start, wrapped, args, kwargs, _complete)

        return wrapper


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
    if method == "bm25":
        return sc.SCORE_BM25
    if method == "hybrid":
        fusion = kwargs.get("fusion_type")
        return sc.SCORE_RRF if fusion is not None and "ranked" in str(getattr(fusion, "value", fusion)).lower() else sc.SCORE_RELATIVE
    return sc.SCORE_DISTANCE


def _start(tracer: Any, method: str, instance: Any, args: Args, kwargs: Kwargs) -> _WeaviateStages:
    name = getattr(instance, "_name", None)
    stages = _WeaviateStages(tracer, f"weaviate.{method}", collection=name if isinstance(name, str) else None)
    query = args[0] if args else kwargs.get(_METHODS[method][2])
    if method == "near_vector":
        hop = Query(vector=query)
    elif method == "hybrid":
        vector = kwargs.get("vector")
        hop = Query(text=query if isinstance(query, str) else None, vector=vector if isinstance(vector, (list, tuple)) else None)
    else:
        hop = Query(text=query if isinstance(query, str) else " ".join(map(str, query)) if isinstance(query, list) else None)
    limit = kwargs.get("limit")
    filters = kwargs.get("filters")
    row = Row(
        query=hop,
        top_k=limit if isinstance(limit, int) else None,
        filter=canonical_json(_plain_filter(filters)) if filters is not None else None,
        score_kind=_kind(method, kwargs),
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
    row = Row(candidates=candidates, query=base.query, top_k=base.top_k, filter=base.filter, score_kind=kind)
    return Outcome(rows=1, row=lambda _index: row, corpus_size=lambda: None, store=stages.collection)


__all__ = ["WeaviateInstrumentor"]
