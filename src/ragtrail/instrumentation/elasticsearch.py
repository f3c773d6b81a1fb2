"""Elasticsearch (elasticsearch-py 8/9): ``Elasticsearch.search`` and ``AsyncElasticsearch.search``
as ``retrieve`` stages, for kNN, query (BM25), hybrid and RRF searches.

What is recorded:

* ids: each hit's ``_id``; a hit's ``_source`` field named like a document's text (``text``,
  ``content``...) is its content.
* scores: each hit's ``_score``, with the kind of the search that produced it: a kNN-only search's
  score is the vector similarity (``similarity``, higher is closer); a ``match``/``multi_match``/
  ``query_string`` query alone is BM25 relevance (``bm25``, the index's default similarity); an RRF
  search (``rank: {rrf: ...}`` or ``retriever: {rrf: ...}``) returns the fused RRF score (``rrf``,
  with a finding that each retriever's own ranks and scores are hidden).
  A hybrid ``query`` + ``knn`` without RRF sums the two on the server, and a ``linear`` retriever
  weighs its retrievers' normalised scores: the score is a fused number of no single kind (``none``,
  said in a finding), and so is any other query.
* ``top_k`` from ``size``, else the (first) kNN's ``k``; the search's ``query``, ``retriever``,
  ``rank`` and kNN clauses (``k``, ``num_candidates``, ``filter``, ``field``; the vector itself
  left out) as ``ragtrail.stage.filter`` (canonical JSON), exported as the query capture mode
  allows; the ``match`` query's text as the stage's query; the first kNN's ``query_vector`` as a
  receipt; the index name(s) as the collection.

Server-side fusion is opaque: the response reveals the fused order and the fused score only; it
hides each leg's own rank and score (the BM25 and kNN lists RRF fused). ``hits.total`` counts the
matches, not the corpus: the corpus size is unknown. A failing search's exception passes through
unchanged.

Usage: ``ElasticsearchInstrumentor().instrument()`` or ``opentelemetry-instrument`` (entry point
``ragtrail_elasticsearch``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import canonical_json, content_id
from ragtrail.hooks import Args, Kwargs
from ragtrail.instrumentation._base import RagtrailInstrumentor
from ragtrail.instrumentation._vectorstore import Outcome, Query, Row, StoreStages, acall_through, call_through, text_of
from ragtrail.recorder.candidates import Candidate, normalize_id

_KEY = "ragtrail.elasticsearch"
_TEXT_QUERIES = ("match", "multi_match", "query_string", "match_phrase")
FUSED = "fused score: Elasticsearch combined the query's and the kNN's scores on the server; each leg's own score is not in the response"
RRF_HIDDEN = "fused by reciprocal rank fusion on the server: each retriever's own ranks and scores are not in the response"
LINEAR_HIDDEN = (
    "fused score: a linear retriever combined its retrievers' weighted, normalised scores on the server; their own are not in the response"
)


class ElasticsearchInstrumentor(RagtrailInstrumentor):
    """Records Elasticsearch searches as retrieve stages."""

    _instruments: Collection[str] = ("elasticsearch >= 8",)

    def _patch(self, **kwargs: Any) -> None:
        self.when_imported("elasticsearch._sync.client", lambda: self.wrap("elasticsearch._sync.client", "Elasticsearch.search", self._search))
        self.when_imported(
            "elasticsearch._async.client", lambda: self.wrap("elasticsearch._async.client", "AsyncElasticsearch.search", self._asearch)
        )

    def _search(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        return call_through(_KEY, lambda: start(self.tracer, "elasticsearch.Elasticsearch.search", kwargs), wrapped, args, kwargs, done)

    async def _asearch(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        return await acall_through(_KEY, lambda: start(self.tracer, "elasticsearch.AsyncElasticsearch.search", kwargs), wrapped, args, kwargs, done)


class SearchStages(StoreStages):
    base: Row


def _knns(knn: Any) -> list[Mapping[str, Any]]:
    if isinstance(knn, Mapping):
        return [knn]
    return [k for k in knn if isinstance(k, Mapping)] if isinstance(knn, (list, tuple)) else []


def query_text(query: Any) -> str | None:
    """The text of a ``match``-like query (``{"match": {"field": "text"}}`` or ``{"field": {"query": ...}}``)."""
    if not isinstance(query, Mapping):
        return None
    for name in _TEXT_QUERIES:
        inner = query.get(name)
        if isinstance(inner, Mapping):
            if isinstance(inner.get("query"), str):
                return str(inner["query"])
            for value in inner.values():
                if isinstance(value, str):
                    return value
                if isinstance(value, Mapping) and isinstance(value.get("query"), str):
                    return str(value["query"])
    return None


def _retriever_legs(node: Any) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """The ``standard`` and ``knn`` retrievers inside a retriever tree (``rrf``, ``linear``, a reranker's
    inner ``retriever``), in request order."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key in ("standard", "knn") and isinstance(value, Mapping):
                yield key, value
            else:
                yield from _retriever_legs(value)
    elif isinstance(node, (list, tuple)):
        for item in node:
            yield from _retriever_legs(item)


def _leg_query(retriever: Any) -> tuple[str | None, Any]:
    """A retriever tree's query: the first ``standard`` leg's match text, the first ``knn`` leg's vector."""
    legs = list(_retriever_legs(retriever))
    texts = [query_text(leg.get("query")) for kind, leg in legs if kind == "standard"]
    vectors = [leg.get("query_vector") for kind, leg in legs if kind == "knn"]
    return next((t for t in texts if t is not None), None), next((v for v in vectors if v is not None), None)


def _without_vectors(value: Any) -> Any:
    """``value`` with every ``query_vector`` list left out (the vector is a receipt, never filter text)."""
    if isinstance(value, Mapping):
        return {k: _without_vectors(v) for k, v in value.items() if k != "query_vector" or not isinstance(v, (list, tuple))}
    if isinstance(value, (list, tuple)):
        return [_without_vectors(v) for v in value]
    return value


def _kind(query: Any, knns: list[Mapping[str, Any]], rrf: bool) -> tuple[str, str | None]:
    if rrf:
        return sc.SCORE_RRF, RRF_HIDDEN
    if knns and query is None:
        return sc.SCORE_SIMILARITY, None
    if not knns and isinstance(query, Mapping) and len(query) == 1 and next(iter(query)) in _TEXT_QUERIES:
        return sc.SCORE_BM25, None
    return sc.SCORE_NONE, FUSED if knns else None


def start(tracer: Any, component: str, kwargs: Kwargs) -> SearchStages:
    index = kwargs.get("index")
    name = index if isinstance(index, str) else ",".join(index) if isinstance(index, (list, tuple)) else None
    given = kwargs.get("body")
    body: Mapping[str, Any] = given if isinstance(given, Mapping) else {}

    def get(key: str) -> Any:
        return kwargs.get(key, body.get(key))

    query, knns, retriever, rank = get("query"), _knns(get("knn")), get("retriever"), get("rank")
    rrf = (isinstance(rank, Mapping) and "rrf" in rank) or (isinstance(retriever, Mapping) and "rrf" in retriever)
    kind, finding = _kind(query, knns, rrf)
    if isinstance(retriever, Mapping) and "linear" in retriever:
        kind, finding = sc.SCORE_NONE, LINEAR_HIDDEN
    size = get("size")
    k = knns[0].get("k") if knns else None
    top_k = size if isinstance(size, int) else k if isinstance(k, int) else None
    found: dict[str, Any] = {}
    for key, value in (("query", query), ("retriever", retriever), ("rank", rank)):
        if value is not None:
            found[key] = _without_vectors(value) if key == "retriever" else value
    if knns:
        found["knn"] = [{key: v for key, v in knn.items() if key != "query_vector"} for knn in knns]
    text, vector = _leg_query(retriever) if query is None and not knns else (query_text(query), knns[0].get("query_vector") if knns else None)
    stages = SearchStages(tracer, component, collection=name)
    stages.base = Row(
        query=Query(text=text, vector=vector) if text is not None or vector is not None else None,
        top_k=top_k,
        filter=canonical_json(found) if found else None,
        score_kind=kind,
        findings=[finding] if finding else [],
    )
    return stages.start(stages.base)


def _candidate(hit: Any, kind: str | None) -> Candidate:
    source = hit.get("_source") if isinstance(hit, Mapping) else None
    content = text_of(source)
    ident = normalize_id(hit.get("_id")) if isinstance(hit, Mapping) else None
    return Candidate(id=ident or content_id(content), content=content, score=hit.get("_score") if isinstance(hit, Mapping) else None, score_kind=kind)


def done(stages: SearchStages, result: Any) -> None:
    stages.complete(lambda: _outcome(stages, result))


def _outcome(stages: SearchStages, result: Any) -> Outcome | None:
    body = getattr(result, "body", result)
    hits = body.get("hits", {}).get("hits") if isinstance(body, Mapping) else None
    if not isinstance(hits, list):
        return None
    base = stages.base

    def row(_index: int) -> Row:
        found = Row(query=base.query, top_k=base.top_k, filter=base.filter, score_kind=base.score_kind, findings=list(base.findings))
        found.candidates = [_candidate(h, base.score_kind) for h in hits]
        return found

    return Outcome(rows=1, row=row, corpus_size=lambda: None, store=stages.collection)


__all__ = ["FUSED", "LINEAR_HIDDEN", "RRF_HIDDEN", "ElasticsearchInstrumentor", "SearchStages", "done", "query_text", "start"]
