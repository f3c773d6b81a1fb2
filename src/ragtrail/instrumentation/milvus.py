"""Milvus (Milvus Lite's local ``.db`` file, or a server) through pymilvus' ``MilvusClient``:
``search`` (sync, and ``AsyncMilvusClient.search``) as ``retrieve`` stages.

One stage per query vector (or query text, for a BM25 full-text collection): ``data`` with ``n``
entries answers ``n`` ranked lists (see :mod:`ragtrail.instrumentation._vectorstore`).

What is recorded:

* ids: each hit's primary key, as Milvus returns it (always, whatever ``output_fields`` asks);
  a hit's ``entity`` field named like a document's text (``text``, ``content``...) is its content.
* scores: each hit's ``distance``, with the kind of the metric that produced it: ``COSINE`` and
  ``IP`` are similarities (higher is better, as Milvus orders them), ``L2``, ``HAMMING``,
  ``JACCARD`` and the other binary metrics distances, ``BM25`` bm25. The metric comes from
  ``search_params["metric_type"]`` when the search names it, else from what the application's own
  calls revealed of the collection: ``create_collection(metric_type=...)`` (``COSINE`` by default on
  the quick-setup path), ``create_index(index_params)``, ``describe_index``. ragtrail asks Milvus
  nothing: an unknown metric leaves the kind unknown, said in a finding.
* ``top_k`` from ``limit``; ``filter`` (with its ``filter_params``) and ``partition_names`` as
  ``ragtrail.stage.filter``, exported as the query capture mode allows; the query vector as a
  receipt (dimension and sha256), a query text as the stage's query; the collection's name as
  the collection.

The result is only read. The corpus size is unknown (``get_collection_stats`` is a request of
ours) unless the user gives it (``ragtrail.corpus_size("<collection>", n)``). A failing search's
exception passes through unchanged. ``hybrid_search``, ``query`` and the search iterators are not
recorded.

Usage: ``MilvusInstrumentor().instrument()`` or ``opentelemetry-instrument`` (entry point
``ragtrail_milvus``).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Collection, Mapping
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import canonical_json, content_id
from ragtrail.hooks import Args, Kwargs, bind, guard
from ragtrail.instrumentation._base import RagtrailInstrumentor
from ragtrail.instrumentation._vectorstore import Outcome, Query, Row, StoreStages, acall_through, call_through, plain, text_of
from ragtrail.recorder.candidates import Candidate, normalize_id

_KEY = "ragtrail.milvus"
_SIMILARITY = frozenset({"COSINE", "IP", "MAX_SIM", "MAX_SIM_COSINE", "MAX_SIM_IP"})
_BM25 = "BM25"
_DEFAULT_METRIC = "COSINE"  # MilvusClient.create_collection's quick-setup default
# client -> collection -> vector field ("" when not named) -> metric, as the application's own calls revealed
_metrics: weakref.WeakKeyDictionary[Any, dict[str, dict[str, str]]] = weakref.WeakKeyDictionary()
_metrics_lock = threading.Lock()
UNKNOWN_METRIC = (
    "score kind unknown: the collection's metric was not seen (search_params['metric_type'], or the application's own "
    "create_collection/create_index/describe_index, tell it; ragtrail asks Milvus nothing)"
)


class MilvusInstrumentor(RagtrailInstrumentor):
    """Records pymilvus MilvusClient searches as retrieve stages."""

    _instruments: Collection[str] = ("pymilvus >= 2.4",)

    def _patch(self, **kwargs: Any) -> None:
        self.when_imported("pymilvus.milvus_client.milvus_client", self._patch_client)
        self.when_imported("pymilvus.milvus_client.async_milvus_client", self._patch_async_client)

    def _patch_client(self) -> None:
        module = "pymilvus.milvus_client.milvus_client"
        self.wrap(module, "MilvusClient.search", self._search)
        self.wrap(module, "MilvusClient.create_collection", _observe_create)
        self.wrap(module, "MilvusClient.create_index", _observe_index)
        self.wrap(module, "MilvusClient.describe_index", _observe_describe)

    def _patch_async_client(self) -> None:
        module = "pymilvus.milvus_client.async_milvus_client"
        self.wrap(module, "AsyncMilvusClient.search", self._asearch)

    def _uninstrument(self, **kwargs: Any) -> None:
        super()._uninstrument(**kwargs)
        with _metrics_lock:
            _metrics.clear()

    def _search(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        return call_through(
            _KEY,
            lambda: _start(self.tracer, wrapped, instance, args, kwargs),
            wrapped,
            args,
            kwargs,
            lambda stages, result: stages.complete(lambda: _outcome(stages, result)),
        )

    async def _asearch(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        return await acall_through(
            _KEY,
            lambda: _start(self.tracer, wrapped, instance, args, kwargs),
            wrapped,
            args,
            kwargs,
            lambda stages, result: stages.complete(lambda: _outcome(stages, result)),
        )


# --- the metric, from what the application's own calls revealed ---------------------------------
def _remember(client: Any, collection: Any, field: Any, metric: Any) -> None:
    if not isinstance(collection, str) or not isinstance(metric, str) or not metric:
        return
    with _metrics_lock:
        per_client = _metrics.setdefault(client, {})
        per_client.setdefault(collection, {})[field if isinstance(field, str) else ""] = metric.upper()


def _known_metric(client: Any, collection: str | None, field: str) -> str | None:
    with _metrics_lock:
        fields = dict(_metrics.get(client, {}).get(collection or "", {}))
    if field and field in fields:
        return fields[field]
    values = set(fields.values())
    return values.pop() if len(values) == 1 else None


def _remember_index(client: Any, collection: Any, index_params: Any) -> None:
    for param in index_params or ():
        _remember(client, collection, getattr(param, "field_name", None), getattr(param, "metric_type", None))


def _observe_create(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """The application's own ``create_collection``: the metric it set (the quick-setup default too)."""
    result = wrapped(*args, **kwargs)
    guard("milvus.observe", _created, wrapped, instance, args, kwargs)
    return result


def _created(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> None:
    arguments = bind(wrapped, args, kwargs)
    collection = arguments.get("collection_name")
    if arguments.get("schema") is None:
        _remember(instance, collection, arguments.get("vector_field_name") or "vector", arguments.get("metric_type") or _DEFAULT_METRIC)
    else:
        _remember_index(instance, collection, arguments.get("index_params"))


def _observe_index(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    result = wrapped(*args, **kwargs)
    arguments = guard("milvus.observe", bind, wrapped, args, kwargs) or {}
    guard("milvus.observe", _remember_index, instance, arguments.get("collection_name"), arguments.get("index_params"))
    return result


def _observe_describe(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """The application's own ``describe_index``: its answer names the field and the metric."""
    result = wrapped(*args, **kwargs)
    if isinstance(result, Mapping):
        arguments = guard("milvus.observe", bind, wrapped, args, kwargs) or {}
        guard("milvus.observe", _remember, instance, arguments.get("collection_name"), result.get("field_name"), result.get("metric_type"))
    return result


def _kind(metric: str | None) -> str | None:
    if metric is None:
        return None
    if metric in _SIMILARITY:
        return sc.SCORE_SIMILARITY
    return sc.SCORE_BM25 if metric == _BM25 else sc.SCORE_DISTANCE


# --- a search -------------------------------------------------------------------------------------
class _MilvusStages(StoreStages):
    queries: list[Any] | None = None
    base: Row


def _queries(data: Any) -> list[Any] | None:
    """One entry per query: Milvus takes a list of vectors (or texts), or one vector."""
    ndim = getattr(data, "ndim", None)
    if ndim is not None:
        return [data] if ndim == 1 else list(data)
    if isinstance(data, (list, tuple)) and data:
        first = data[0]
        return list(data) if isinstance(first, str) or hasattr(first, "__len__") else [data]
    return None


def _filter(arguments: Mapping[str, Any]) -> str | None:
    found: dict[str, Any] = {}
    expression = arguments.get("filter")
    if isinstance(expression, str) and expression:
        found["filter"] = expression
        params = (arguments.get("kwargs") or {}).get("filter_params")
        if params:
            found["params"] = params
    partitions = arguments.get("partition_names")
    if partitions:
        found["partition_names"] = list(partitions)
    return canonical_json(found) if found else None


def _start(tracer: Any, wrapped: Callable[..., Any], client: Any, args: Args, kwargs: Kwargs) -> _MilvusStages:
    arguments = bind(wrapped, args, kwargs)
    collection = arguments.get("collection_name")
    stages = _MilvusStages(tracer, f"pymilvus.{type(client).__qualname__}.search", collection=collection if isinstance(collection, str) else None)
    stages.queries = _queries(arguments.get("data"))
    params = arguments.get("search_params") or {}
    metric = params.get("metric_type") if isinstance(params, Mapping) else None
    if not isinstance(metric, str) or not metric:
        metric = _known_metric(client, stages.collection, arguments.get("anns_field") or "")
    limit = arguments.get("limit")
    stages.base = Row(
        top_k=limit if isinstance(limit, int) and not isinstance(limit, bool) else None,
        filter=_filter(arguments),
        score_kind=_kind(metric.upper() if isinstance(metric, str) else None),
    )
    return stages.start(_row(stages, 0))


def _row(stages: _MilvusStages, index: int) -> Row:
    query = None
    if stages.queries is not None and index < len(stages.queries):
        item = stages.queries[index]
        query = Query(text=item) if isinstance(item, str) else Query(vector=item)
    base = stages.base
    return Row(query=query, top_k=base.top_k, filter=base.filter, score_kind=base.score_kind)


def _candidate(hit: Any, kind: str | None) -> Candidate:
    get = hit.get if isinstance(hit, Mapping) else (lambda key, default=None: getattr(hit, key, default))
    entity = get("entity", None)
    content = text_of(entity)
    ident = normalize_id(get("id", None)) or content_id(content)
    return Candidate(id=ident, content=content, score=plain(get("distance", None)), score_kind=kind)


def _outcome(stages: _MilvusStages, result: Any) -> Outcome | None:
    if not isinstance(result, (list, tuple)):
        return None

    def row(index: int) -> Row:
        found = _row(stages, index)
        hits = result[index] if index < len(result) else ()
        found.candidates = [_candidate(hit, found.score_kind) for hit in hits]
        if found.score_kind is None and found.candidates:
            found.findings.append(UNKNOWN_METRIC)
        return found

    return Outcome(rows=len(result), row=row, corpus_size=lambda: None, store=stages.collection)


__all__ = ["UNKNOWN_METRIC", "MilvusInstrumentor"]
