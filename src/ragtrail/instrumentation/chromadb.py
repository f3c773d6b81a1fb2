"""Chroma: ``Collection.query`` and ``AsyncCollection.query`` as ``retrieve`` stages.

Chroma answers a batch of queries column-major (``ids[i][j]`` is the j-th hit of query i); each query
becomes its own stage (see :mod:`ragtrail.instrumentation._vectorstore`). Scores are Chroma's
distances (cosine, l2 and ip spaces all: lower is better), so ``score_kind`` is ``distance``; when
the caller leaves ``distances`` out of ``include`` there is no score and the kind is ``none``.
``n_results`` is the stage's ``top_k``; ``where``, ``where_document`` and an ``ids`` restriction are
recorded as ``ragtrail.stage.filter`` (canonical JSON).

Corpus size: ragtrail asks the database nothing (a count is a query of its own, load the user did not
ask for, and watching every ``add``/``upsert``/``delete`` to keep one fresh is intrusion). The size
recorded is the last ``count()`` the application itself made on that collection, observed as it
returns, and marked approximate (writes since are not watched); or the user's own figure,
``ragtrail.corpus_size(collection_name, n)``. Otherwise the corpus size is unknown.

Usage: ``ChromaInstrumentor().instrument()`` or ``opentelemetry-instrument`` (entry point
``ragtrail_chromadb``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import content_id
from ragtrail.hooks import Args, Kwargs, bind, guard
from ragtrail.instrumentation._base import RagtrailInstrumentor
from ragtrail.instrumentation._vectorstore import Outcome, Query, Row, StoreStages, acall_through, call_through, filter_json, plain
from ragtrail.recorder.candidates import Candidate, normalize_id

_KEY = "ragtrail.chromadb"
_COUNT_CACHE_MAX = 4096
_counts: dict[Any, int] = {}  # collection id -> the last count() the application made
_counts_lock = threading.Lock()


class ChromaInstrumentor(RagtrailInstrumentor):
    """Records Chroma collection queries (sync and async) as retrieve stages."""

    _instruments: Collection[str] = ("chromadb >= 1.0",)

    def _patch(self, **kwargs: Any) -> None:
        # patched when the application imports them: chromadb takes ~0.8 s to import
        self.when_imported("chromadb.api.models.Collection", self._patch_collection)
        self.when_imported("chromadb.api.models.AsyncCollection", self._patch_async_collection)

    def _patch_async_collection(self) -> None:
        self.wrap("chromadb.api.models.AsyncCollection", "AsyncCollection.query", self._aquery)
        self.wrap("chromadb.api.models.AsyncCollection", "AsyncCollection.count", _aobserve_count)

    def _patch_collection(self) -> None:
        self.wrap("chromadb.api.models.Collection", "Collection.query", self._query)
        self.wrap("chromadb.api.models.Collection", "Collection.count", _observe_count)

    def _uninstrument(self, **kwargs: Any) -> None:
        super()._uninstrument(**kwargs)
        with _counts_lock:
            _counts.clear()

    def _query(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        return call_through(
            _KEY,
            lambda: _start(self.tracer, wrapped, instance, args, kwargs),
            wrapped,
            args,
            kwargs,
            lambda stages, result: stages.complete(lambda: _outcome(stages, instance, result)),
        )

    async def _aquery(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        return await acall_through(
            _KEY,
            lambda: _start(self.tracer, wrapped, instance, args, kwargs),
            wrapped,
            args,
            kwargs,
            lambda stages, result: stages.complete(lambda: _outcome(stages, instance, result)),
        )


class _ChromaStages(StoreStages):
    texts: list[Any] | None = None
    vectors: list[Any] | None = None
    base: Row


def _as_list(value: Any) -> list[Any] | None:
    """One or many as a list; anything but a list/tuple (an iterator the library still has to read)
    is left alone and not recorded."""
    if isinstance(value, (str, bytes)):
        return [value]
    if isinstance(value, (list, tuple)):
        return list(value)
    return None


def _vectors(embeddings: Any) -> list[Any] | None:
    """Query embeddings as one entry per query (Chroma takes one vector or many, lists or arrays)."""
    ndim = getattr(embeddings, "ndim", None)
    if ndim is not None:
        return [embeddings] if ndim == 1 else list(embeddings)
    if not isinstance(embeddings, (list, tuple)):
        return None
    items = list(embeddings)
    if items and not hasattr(items[0], "__len__"):
        return [items]  # one vector given as a flat list of numbers
    return items


def _start(tracer: Any, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> _ChromaStages:
    arguments = bind(wrapped, args, kwargs)
    stages = _ChromaStages(tracer, f"chromadb.{type(instance).__qualname__}", collection=getattr(instance, "name", None))
    stages.texts = _as_list(arguments.get("query_texts"))
    stages.vectors = None if stages.texts is not None else _vectors(arguments.get("query_embeddings"))
    include = arguments.get("include")
    distances = include is None or "distances" in include
    conditions = {key: arguments.get(key) for key in ("where", "where_document", "ids")}
    if conditions["ids"] is not None:
        conditions["ids"] = _as_list(conditions["ids"])
    stages.base = Row(
        top_k=arguments.get("n_results"),
        filter=filter_json({k: v for k, v in conditions.items() if v is not None}),
        score_kind=sc.SCORE_DISTANCE if distances else None,
    )
    return stages.start(_row(stages, 0, ()))


def _row(stages: _ChromaStages, index: int, candidates: Any) -> Row:
    query = None
    if stages.texts is not None and index < len(stages.texts):
        query = Query(text=stages.texts[index])
    elif stages.vectors is not None and index < len(stages.vectors):
        query = Query(vector=stages.vectors[index])
    base = stages.base
    return Row(candidates=candidates, query=query, top_k=base.top_k, filter=base.filter, score_kind=base.score_kind)


def _column(result: Mapping[str, Any], key: str, index: int) -> list[Any] | None:
    rows = result.get(key)
    if rows is None or index >= len(rows) or rows[index] is None:
        return None
    row: list[Any] = rows[index]
    return row


def _outcome(stages: _ChromaStages, instance: Any, result: Any) -> Outcome | None:
    if not isinstance(result, Mapping) or result.get("ids") is None:
        return None

    def row(index: int) -> Row:
        ids = result["ids"][index]
        documents = _column(result, "documents", index)
        metadatas = _column(result, "metadatas", index)
        distances = _column(result, "distances", index)
        kind = sc.SCORE_DISTANCE if distances is not None else None
        candidates = []
        for position, ident in enumerate(ids):
            content = documents[position] if documents is not None else None
            metadata = metadatas[position] if metadatas is not None else None
            candidates.append(
                Candidate(
                    id=normalize_id(ident) or content_id(content),
                    content=content,
                    score=plain(distances[position]) if distances is not None else None,
                    score_kind=kind,
                    metadata=metadata if isinstance(metadata, Mapping) else None,
                )
            )
        found = _row(stages, index, candidates)
        found.score_kind = kind
        return found

    return Outcome(rows=len(result["ids"]), row=row, corpus_size=lambda: _observed_count(instance), store=stages.collection, approximate=True)


def _observed_count(instance: Any) -> int | None:
    with _counts_lock:
        return _counts.get(instance.id)


def _remember_count(instance: Any, result: Any) -> None:
    if isinstance(result, int) and not isinstance(result, bool):
        with _counts_lock:
            if len(_counts) >= _COUNT_CACHE_MAX:
                _counts.clear()
            _counts[instance.id] = result


def _observe_count(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """The application's own ``count()``: its answer is kept for the queries that follow."""
    result = wrapped(*args, **kwargs)
    guard("chromadb.observe_count", _remember_count, instance, result)
    return result


async def _aobserve_count(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    result = await wrapped(*args, **kwargs)
    guard("chromadb.observe_count", _remember_count, instance, result)
    return result
