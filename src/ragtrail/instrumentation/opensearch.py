"""OpenSearch (opensearch-py): ``OpenSearch.search`` and ``AsyncOpenSearch.search`` as
``retrieve`` stages, for k-NN, ``match`` (BM25) and hybrid searches.

What is recorded (see :mod:`ragtrail.instrumentation.elasticsearch` for the shared reading of the
request and the hits): ids are the hits' ``_id``, scores their ``_score``; a ``knn`` query alone
scores by vector similarity (``similarity``, higher is closer); a ``match``-like query alone BM25
(``bm25``); a ``hybrid`` query is normalised and combined by the search pipeline on the server: a
fused score of no single kind (``none``, said in a finding), as is any other query. A ``bool`` whose
only ``must`` is a ``knn`` and whose other clauses are ``filter``/``must_not`` (the k-NN guide's
boolean post-filter) scores by the k-NN alone: ``similarity``, its vector receipted. ``top_k`` is
``size``, else the k-NN's ``k``; the query (the vector left out) is the filter JSON; the k-NN's
vector is receipted, a ``match`` text is the stage's query; the index name(s) are the collection.

Server-side fusion is opaque: the response holds the fused order and scores only, never each
sub-query's own. ``hits.total`` counts matches, not the corpus: corpus size unknown. A failing
search's exception passes through unchanged.

Usage: ``OpenSearchInstrumentor().instrument()`` or ``opentelemetry-instrument`` (entry point
``ragtrail_opensearch``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import canonical_json
from ragtrail.hooks import Args, Kwargs, bind
from ragtrail.instrumentation._base import RagtrailInstrumentor
from ragtrail.instrumentation._vectorstore import Query, Row, acall_through, call_through
from ragtrail.instrumentation.elasticsearch import SearchStages, done, query_text

_KEY = "ragtrail.opensearch"
FUSED = (
    "fused score: the search pipeline normalised and combined the hybrid's sub-query scores on the server; their own scores are not in the response"
)


class OpenSearchInstrumentor(RagtrailInstrumentor):
    """Records OpenSearch searches as retrieve stages."""

    _instruments: Collection[str] = ("opensearch-py >= 2",)

    def _patch(self, **kwargs: Any) -> None:
        self.when_imported("opensearchpy.client", lambda: self.wrap("opensearchpy.client", "OpenSearch.search", self._search))
        self.when_imported("opensearchpy._async.client", lambda: self.wrap("opensearchpy._async.client", "AsyncOpenSearch.search", self._asearch))

    def _search(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        start = lambda: _start(self.tracer, "opensearchpy.OpenSearch.search", bind(wrapped, args, kwargs))  # noqa: E731
        return call_through(_KEY, start, wrapped, args, kwargs, done)

    async def _asearch(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        start = lambda: _start(self.tracer, "opensearchpy.AsyncOpenSearch.search", bind(wrapped, args, kwargs))  # noqa: E731
        return await acall_through(_KEY, start, wrapped, args, kwargs, done)


def _knn(query: Any) -> tuple[Mapping[str, Any] | None, Any]:
    """The k-NN clause ``{"knn": {field: {"vector": [...], "k": n, ...}}}`` and its vector."""
    inner = query.get("knn") if isinstance(query, Mapping) else None
    if isinstance(inner, Mapping) and len(inner) == 1:
        clause = next(iter(inner.values()))
        if isinstance(clause, Mapping):
            return clause, clause.get("vector")
    return None, None


def _scoring_knn(query: Any) -> tuple[Mapping[str, Any] | None, Any]:
    """The k-NN clause deciding the score: the query's own, or the one ``must`` of a ``bool`` whose
    other clauses only filter (``filter``, ``must_not`` add nothing to the score: the k-NN guide's
    boolean post-filter)."""
    clause, vector = _knn(query)
    inner = query.get("bool") if clause is None and isinstance(query, Mapping) else None
    if not isinstance(inner, Mapping) or set(inner) - {"must", "filter", "must_not"}:
        return clause, vector
    must = inner.get("must")
    musts = [must] if isinstance(must, Mapping) else list(must) if isinstance(must, list) else []
    return _knn(musts[0]) if len(musts) == 1 else (None, None)


def _without_vector(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_vector(v) for k, v in value.items() if k != "vector" or not isinstance(v, (list, tuple))}
    if isinstance(value, list):
        return [_without_vector(v) for v in value]
    return value


def _start(tracer: Any, component: str, arguments: Mapping[str, Any]) -> SearchStages:
    index = arguments.get("index")
    name = index if isinstance(index, str) else ",".join(index) if isinstance(index, (list, tuple)) else None
    body = arguments.get("body")
    body = body if isinstance(body, Mapping) else {}
    query = body.get("query")
    clause, vector = _scoring_knn(query)
    if clause is not None:
        kind, finding = sc.SCORE_SIMILARITY, None
    elif isinstance(query, Mapping) and "hybrid" in query:
        kind, finding = sc.SCORE_NONE, FUSED
        clause, vector = next((_knn(q) for q in query["hybrid"].get("queries", ()) if _knn(q)[0] is not None), (None, None))
    elif query_text(query) is not None and isinstance(query, Mapping) and len(query) == 1:
        kind, finding = sc.SCORE_BM25, None
    else:
        kind, finding = sc.SCORE_NONE, None
    text = query_text(query) if clause is None or "hybrid" in (query or {}) else None
    if isinstance(query, Mapping) and "hybrid" in query:
        text = next((t for t in (query_text(q) for q in query["hybrid"].get("queries", ())) if t is not None), None)
    size, k = body.get("size"), clause.get("k") if clause is not None else None
    stages = SearchStages(tracer, component, collection=name)
    stages.base = Row(
        query=Query(text=text, vector=vector) if text is not None or vector is not None else None,
        top_k=size if isinstance(size, int) else k if isinstance(k, int) else None,
        filter=canonical_json({"query": _without_vector(query)}) if query is not None else None,
        score_kind=kind,
        findings=[finding] if finding else [],
    )
    return stages.start(stages.base)


__all__ = ["FUSED", "OpenSearchInstrumentor"]
