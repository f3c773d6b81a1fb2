"""Pinecone (the data plane: ``Index.query`` and ``AsyncIndex.query``) as ``retrieve`` stages.

What is recorded:

* ids: each match's ``id``, as Pinecone returns it; a match's ``metadata`` field named like a
  document's text (``text``, ``content``...) is its content (only when the query asked for
  ``include_metadata=True``).
* scores: each match's ``score``. Its kind depends on the index's metric, which the query response
  does not say: ``cosine`` and ``dotproduct`` are similarities (higher is closer), ``euclidean`` a
  distance (lower is closer). ``PineconeInstrumentor().instrument(metric="cosine")`` or
  ``RAGTRAIL_PINECONE_METRIC`` tells it; otherwise the kind is unknown, said in a finding
  (ragtrail asks Pinecone nothing: ``describe_index`` would be a request of ours).
* ``top_k``; ``filter`` as ``ragtrail.stage.filter``, exported as the query capture mode allows;
  the query vector as a receipt (dimension and sha256; a query by a stored vector's ``id`` has no
  receipt, said in a finding); the namespace (the response's, else the request's, ``""`` being Pinecone's
  default namespace ``__default__``) as the collection.

The corpus size is unknown (``describe_index_stats`` is a request of ours) unless the user gives it
(``ragtrail.corpus_size("<namespace>", n)``). A failing query's exception passes through unchanged.
``query_namespaces`` and ``search`` (integrated indexes) are not recorded. pinecone 10 binds
``query`` on each ``Index`` when it is opened: an ``Index`` opened before ``instrument()`` is not
recorded (``opentelemetry-instrument`` instruments first), and one opened while instrumented stops
recording at ``uninstrument()`` (the wrapper it holds passes through).

Usage: ``PineconeInstrumentor().instrument()`` or ``opentelemetry-instrument`` (entry point
``ragtrail_pinecone``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import content_id
from ragtrail.hooks import Args, Kwargs
from ragtrail.instrumentation._base import RagtrailInstrumentor
from ragtrail.instrumentation._vectorstore import Outcome, Query, Row, StoreStages, acall_through, call_through, filter_json, text_of
from ragtrail.recorder.candidates import Candidate, normalize_id

_KEY = "ragtrail.pinecone"
ENV_METRIC = "RAGTRAIL_PINECONE_METRIC"
DEFAULT_NAMESPACE = "__default__"
_KINDS = {"cosine": sc.SCORE_SIMILARITY, "dotproduct": sc.SCORE_SIMILARITY, "euclidean": sc.SCORE_DISTANCE}
UNKNOWN_METRIC = (
    f"score kind unknown: a Pinecone query response does not say the index's metric "
    f"({ENV_METRIC} or instrument(metric=...) tells it; ragtrail asks Pinecone nothing)"
)
BY_ID = "the query vector is the stored vector of id {!r}: not seen by ragtrail, no receipt"


class PineconeInstrumentor(RagtrailInstrumentor):
    """Records Pinecone index queries as retrieve stages."""

    _instruments: Collection[str] = ("pinecone >= 7",)

    def _patch(self, **kwargs: Any) -> None:
        metric = kwargs.get("metric") or os.environ.get(ENV_METRIC, "").strip()
        self.kind = _KINDS.get(str(metric).lower()) if metric else None
        self.when_imported("pinecone.index", lambda: self.wrap("pinecone.index", "Index.query", self._query))
        self.when_imported(
            "pinecone.async_client.async_index", lambda: self.wrap("pinecone.async_client.async_index", "AsyncIndex.query", self._aquery)
        )

    def _query(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if not self.is_instrumented_by_opentelemetry:  # an Index opened while instrumented holds this wrapper
            return wrapped(*args, **kwargs)
        return call_through(_KEY, lambda: _start(self.tracer, self.kind, kwargs), wrapped, args, kwargs, _done)

    async def _aquery(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if not self.is_instrumented_by_opentelemetry:
            return await wrapped(*args, **kwargs)
        return await acall_through(_KEY, lambda: _start(self.tracer, self.kind, kwargs), wrapped, args, kwargs, _done)


class _PineconeStages(StoreStages):
    base: Row


def _start(tracer: Any, kind: str | None, kwargs: Kwargs) -> _PineconeStages:
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
