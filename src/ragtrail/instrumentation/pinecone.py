"""Pinecone (the data plane: ``Index.query`` and ``AsyncIndex.query``) as ``retrieve`` stages.

What is recorded:

* ids: each match's ``id``, as Pinecone returns it; a match's ``metadata`` field named like a
  document's text (``text``, ``content``...) is its content (only when the query asked for
  ``include_metadata=True``).
* scores: each match's ``score``. Its kind depends on the index's metric, which the query response
  does not say: ``cosine`` and ``dotproduct`` are similarities (higher is closer), ``euclidean`` a
  distance (lower is closer). The metric is learned, by the index's host, from what the
  application's own calls already received: the control plane's ``IndexModel`` answers to
  ``create_index`` / ``describe_index`` / ``configure_index`` / ``create_index_for_model`` (and
  their ``pc.indexes.*`` and async forms; ``pc.Index(name)`` describes the index itself), and the
  data plane's ``describe_index_stats`` answer (its ``metric``), read from the response, never
  from the request. For an index none of those told, ``PineconeInstrumentor().instrument(metric=...)``
  or ``RAGTRAIL_PINECONE_METRIC`` names it; otherwise the kind is unknown, said in a finding
  (ragtrail asks Pinecone nothing: ``describe_index`` would be a request of ours). A metric learned
  for an index replaces the configured one for that index (the service's answer is the index's own).
* ``top_k``; ``filter`` as ``ragtrail.stage.filter``, exported as the query capture mode allows;
  the query vector as a receipt (dimension and sha256; a query by a stored vector's ``id`` has no
  receipt, said in a finding); the namespace (the response's, else the request's, ``""`` being Pinecone's
  default namespace ``__default__``) as the collection.

The corpus size is unknown (``describe_index_stats`` is a request of ours) unless the user gives it
(``ragtrail.corpus_size("<namespace>", n)``). A failing query's exception passes through unchanged.
``query_namespaces`` and ``search`` (integrated indexes) are not recorded, nor is ``list_indexes``
read for metrics (its paginator is the application's to iterate). pinecone 10 binds
``query`` on each ``Index`` when it is opened: an ``Index`` opened before ``instrument()`` is not
recorded (``opentelemetry-instrument`` instruments first), and one opened while instrumented stops
recording at ``uninstrument()`` (the wrapper it holds passes through).

Usage: ``PineconeInstrumentor().instrument()`` or ``opentelemetry-instrument`` (entry point
``ragtrail_pinecone``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Collection, Mapping
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import content_id
from ragtrail.hooks import Args, Kwargs, guard
from ragtrail.instrumentation._base import RagtrailInstrumentor
from ragtrail.instrumentation._vectorstore import Outcome, Query, Row, StoreStages, acall_through, call_through, filter_json, text_of
from ragtrail.recorder.candidates import Candidate, normalize_id

_KEY = "ragtrail.pinecone"
ENV_METRIC = "RAGTRAIL_PINECONE_METRIC"
DEFAULT_NAMESPACE = "__default__"
_KINDS = {"cosine": sc.SCORE_SIMILARITY, "dotproduct": sc.SCORE_SIMILARITY, "euclidean": sc.SCORE_DISTANCE}
UNKNOWN_METRIC = (
    f"score kind unknown: a Pinecone query response does not say the index's metric (the application's own "
    f"create_index/describe_index/describe_index_stats answers for this index, {ENV_METRIC} or instrument(metric=...) "
    f"tell it; ragtrail asks Pinecone nothing)"
)
_CONTROL = ("pinecone.client.indexes", "Indexes")
_ACONTROL = ("pinecone.async_client.indexes", "AsyncIndexes")
_MODEL_METHODS = ("create", "create_for_model", "describe", "configure")  # each answers with the index's IndexModel
# the index's host (scheme and trailing slash cut) -> its metric, as the application's own calls' answers said
_metrics: dict[str, str] = {}
_metrics_lock = threading.Lock()
BY_ID = "the query vector is the stored vector of id {!r}: not seen by ragtrail, no receipt"


class PineconeInstrumentor(RagtrailInstrumentor):
    """Records Pinecone index queries as retrieve stages."""

    _instruments: Collection[str] = ("pinecone >= 7",)

    def _patch(self, **kwargs: Any) -> None:
        metric = kwargs.get("metric") or os.environ.get(ENV_METRIC, "").strip()
        self.kind = _KINDS.get(str(metric).lower()) if metric else None
        self.when_imported("pinecone.index", self._patch_index)
        self.when_imported("pinecone.async_client.async_index", self._patch_async_index)
        self.when_imported(_CONTROL[0], lambda: [self.wrap(_CONTROL[0], f"{_CONTROL[1]}.{m}", _observer(_learn_model)) for m in _MODEL_METHODS])
        self.when_imported(_ACONTROL[0], lambda: [self.wrap(_ACONTROL[0], f"{_ACONTROL[1]}.{m}", _aobserver(_learn_model)) for m in _MODEL_METHODS])

    def _patch_index(self) -> None:
        self.wrap("pinecone.index", "Index.query", self._query)
        self.wrap("pinecone.index", "Index.describe_index_stats", _observer(_learn_stats))

    def _patch_async_index(self) -> None:
        self.wrap("pinecone.async_client.async_index", "AsyncIndex.query", self._aquery)
        self.wrap("pinecone.async_client.async_index", "AsyncIndex.describe_index_stats", _aobserver(_learn_stats))

    def _uninstrument(self, **kwargs: Any) -> None:
        super()._uninstrument(**kwargs)
        with _metrics_lock:
            _metrics.clear()

    def _query(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if not self.is_instrumented_by_opentelemetry:  # an Index opened while instrumented holds this wrapper
            return wrapped(*args, **kwargs)
        return call_through(_KEY, lambda: _start(self.tracer, self.kind, instance, kwargs), wrapped, args, kwargs, _done)

    async def _aquery(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if not self.is_instrumented_by_opentelemetry:
            return await wrapped(*args, **kwargs)
        return await acall_through(_KEY, lambda: _start(self.tracer, self.kind, instance, kwargs), wrapped, args, kwargs, _done)


# --- the metric, from the answers the application's own calls received ----------------------------
def _host_key(host: Any) -> str | None:
    """A host as Pinecone's client writes it, with or without its scheme: one key."""
    if not isinstance(host, str) or not host:
        return None
    for scheme in ("https://", "http://"):
        if host.startswith(scheme):
            host = host[len(scheme) :]
    return host.rstrip("/").lower() or None


def _remember(host: Any, metric: Any) -> None:
    key = _host_key(host)
    if key is not None and isinstance(metric, str) and metric.lower() in _KINDS:
        with _metrics_lock:
            _metrics[key] = metric.lower()


def _known_kind(index: Any) -> str | None:
    key = _host_key(getattr(index, "host", None))
    with _metrics_lock:
        metric = _metrics.get(key) if key is not None else None
    return _KINDS[metric] if metric is not None else None


def _learn_model(_client: Any, model: Any) -> None:
    """An ``IndexModel``: its host and its (sole dense or sparse field's) metric; an ambiguous
    schema's ``metric`` raises ``AttributeError``, and then nothing is learned."""
    _remember(getattr(model, "host", None), getattr(model, "metric", None))


def _learn_stats(index: Any, stats: Any) -> None:
    """The application's own ``describe_index_stats``: its answer names the index's metric."""
    _remember(getattr(index, "host", None), getattr(stats, "metric", None))


Learn = Callable[[Any, Any], None]


def _observer(learn: Learn) -> Callable[..., Any]:
    """A wrapper that hands the call's answer to ``learn`` (after the call; its result untouched)."""

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        result = wrapped(*args, **kwargs)
        guard("pinecone.observe", learn, instance, result)
        return result

    return wrapper


def _aobserver(learn: Learn) -> Callable[..., Any]:
    """:func:`_observer` for a coroutine method: a real coroutine, learning from the awaited answer."""

    async def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        result = await wrapped(*args, **kwargs)
        guard("pinecone.observe", learn, instance, result)
        return result

    return wrapper


class _PineconeStages(StoreStages):
    base: Row


def _start(tracer: Any, configured: str | None, index: Any, kwargs: Kwargs) -> _PineconeStages:
    kind = _known_kind(index) or configured
    namespace = kwargs.get("namespace") or DEFAULT_NAMESPACE
    stages = _PineconeStages(tracer, "pinecone.Index.query", collection=namespace if isinstance(namespace, str) else None)
    top_k = kwargs.get("top_k")
    vector = kwargs.get("vector")
    stages.base = Row(
        query=Query(vector=vector) if vector is not None else None,
        top_k=top_k if isinstance(top_k, int) and not isinstance(top_k, bool) else None,
        filter=filter_json(kwargs.get("filter")),
        score_kind=kind,
    )
    ident = kwargs.get("id")
    if isinstance(ident, str):
        stages.base.findings.append(BY_ID.format(ident))
    return stages.start(stages.base)


def _candidate(match: Any, kind: str | None) -> Candidate:
    metadata = getattr(match, "metadata", None)
    content = text_of(metadata) if isinstance(metadata, Mapping) else None
    ident = normalize_id(getattr(match, "id", None)) or content_id(content)
    return Candidate(id=ident, content=content, score=getattr(match, "score", None), score_kind=kind)


def _done(stages: _PineconeStages, result: Any) -> None:
    stages.complete(lambda: _outcome(stages, result))


def _outcome(stages: _PineconeStages, result: Any) -> Outcome | None:
    matches = getattr(result, "matches", None)
    if matches is None:
        return None
    namespace = getattr(result, "namespace", None)
    if isinstance(namespace, str) and namespace:
        stages.collection = namespace
    base = stages.base

    def row(_index: int) -> Row:
        found = Row(top_k=base.top_k, filter=base.filter, score_kind=base.score_kind, findings=list(base.findings))
        found.candidates = [_candidate(m, base.score_kind) for m in matches]
        if base.score_kind is None and found.candidates:
            found.findings.append(UNKNOWN_METRIC)
        return found

    return Outcome(rows=1, row=row, corpus_size=lambda: None, store=stages.collection)


__all__ = ["BY_ID", "DEFAULT_NAMESPACE", "ENV_METRIC", "UNKNOWN_METRIC", "PineconeInstrumentor"]
