"""LanceDB (embedded, and remote tables through the same builders): a query builder's execution as a
``retrieve`` stage.

``table.search(vector).where(...).limit(k).to_list()`` (and ``to_pandas``, ``to_arrow``,
``to_pydantic``, ``to_polars``: every one of them runs the builder's ``to_arrow``) on the vector,
full-text and hybrid builders (``LanceVectorQueryBuilder``, ``LanceFtsQueryBuilder``,
``LanceHybridQueryBuilder``) is one stage, opened around ``to_arrow``. A hybrid search runs its own
vector and full-text legs in a thread pool; the legs are not recorded apart (the stage holds the
fused list LanceDB returned). ``to_batches`` called by the application itself is not recorded (its
rows are a stream the application reads, not ours to read first), nor are the async queries.

What is recorded:

* ids: the result column named ``id`` (``LanceDBInstrumentor().instrument(id_column="doc_id")`` or
  ``RAGTRAIL_LANCEDB_ID_COLUMN`` names another); else ``_rowid`` when the query asked for it
  (``with_row_id(True)``); else, with a content column (``text``, ``content``, ``page_content``...),
  the sha256 of the content (the recorder's rule for an item without an id), said in a finding;
  else no candidate, and a finding says the ids are unknown.
* scores, as LanceDB names them in the result: ``_distance`` (vector search; lower is better for
  every distance type: kind ``distance``), ``_score`` (full-text search: ``bm25``),
  ``_relevance_score`` (hybrid: ``rrf`` with the default ``RRFReranker``, ``similarity`` with the
  ``LinearCombinationReranker``, ``rerank`` with any other reranker).
* ``top_k`` from ``limit`` (a hybrid search without one uses LanceDB's default, 10); the ``where``
  clause as ``ragtrail.stage.filter`` (``{"where": <text>}``, ``"postfilter": true`` when asked),
  exported as the query capture mode allows; the query vector as a receipt (dimension and sha256),
  the query text (full-text, hybrid, or a text a vector search embedded) as the stage's query; the
  table's name as the collection. A search with several query vectors is a batch: one stage per
  query (LanceDB's ``query_index`` column says which rows answer which).

The result table is only read (its id, score and content columns), never changed. The corpus size
is unknown (``count_rows`` is a request of ours) unless the user gives it
(``ragtrail.corpus_size("<table>", n)``). A failing query's exception passes through unchanged.

Usage: ``LanceDBInstrumentor().instrument()`` or ``opentelemetry-instrument`` (entry point
``ragtrail_lancedb``).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Collection, Sequence
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import canonical_json, content_id
from ragtrail.hooks import Args, Kwargs, guard
from ragtrail.instrumentation._base import RagtrailInstrumentor
from ragtrail.instrumentation._vectorstore import Outcome, Query, Row, StoreStages, call_through
from ragtrail.recorder.candidates import CONTENT_KEYS, Candidate, normalize_id

_KEY = "ragtrail.lancedb"
ENV_ID_COLUMN = "RAGTRAIL_LANCEDB_ID_COLUMN"
DEFAULT_ID_COLUMN = "id"
ROW_ID = "_rowid"
_BUILDERS = ("LanceVectorQueryBuilder", "LanceFtsQueryBuilder", "LanceHybridQueryBuilder")
_HYBRID_DEFAULT_LIMIT = 10
# a hybrid search's own vector and full-text legs (run in LanceDB's thread pool): not stages of their own
_legs: weakref.WeakSet[Any] = weakref.WeakSet()


class LanceDBInstrumentor(RagtrailInstrumentor):
    """Records LanceDB vector, full-text and hybrid searches as retrieve stages."""

    _instruments: Collection[str] = ("lancedb >= 0.20",)

    def _patch(self, **kwargs: Any) -> None:
        column = kwargs.get("id_column") or os.environ.get(ENV_ID_COLUMN, "").strip() or DEFAULT_ID_COLUMN
        self.id_column = str(column)
        self.when_imported("lancedb.query", self._patch_builders)

    def _patch_builders(self) -> None:
        for name in _BUILDERS:
            self.wrap("lancedb.query", f"{name}.to_arrow", self._to_arrow)
        self.wrap("lancedb.query", "LanceHybridQueryBuilder._create_query_builders", _mark_legs)

    def _to_arrow(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if instance in _legs:
            return wrapped(*args, **kwargs)
        return call_through(
            _KEY,
            lambda: _start(self.tracer, instance),
            wrapped,
            args,
            kwargs,
            lambda stages, result: stages.complete(lambda: _outcome(stages, result, self.id_column)),
        )


def _mark_legs(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """A hybrid builder's legs, once it made them: their ``to_arrow`` runs inside the hybrid's."""
    result = wrapped(*args, **kwargs)
    for leg in (getattr(instance, "_fts_query", None), getattr(instance, "_vector_query", None)):
        if leg is not None:
            guard("lancedb.legs", _legs.add, leg)
    return result


class _LanceStages(StoreStages):
    base: Row
    vectors: list[Any] | None = None
    text: str | None = None


def _vectors(query: Any) -> list[Any] | None:
    """The query vectors as one entry per query (LanceDB takes one vector or a list of them)."""
    ndim = getattr(query, "ndim", None)
    if ndim is not None:
        return [query] if ndim == 1 else list(query)
    if isinstance(query, (list, tuple)) and query:
        return list(query) if hasattr(query[0], "__len__") else [query]
    return None


def _text(query: Any) -> str | None:
    if isinstance(query, str):
        return query
    inner = getattr(query, "query", None)  # a FullTextQuery (MatchQuery, PhraseQuery...) holds its text here
    return inner if isinstance(inner, str) else None


def _kind(builder: Any) -> str:
    from lancedb.query import LanceFtsQueryBuilder, LanceHybridQueryBuilder

    if isinstance(builder, LanceFtsQueryBuilder):
        return sc.SCORE_BM25
    if isinstance(builder, LanceHybridQueryBuilder):
        reranker = getattr(builder, "_reranker", None)
        name = type(reranker).__name__
        if reranker is None or name == "RRFReranker":
            return sc.SCORE_RRF
        return sc.SCORE_SIMILARITY if name == "LinearCombinationReranker" else sc.SCORE_RERANK
    return sc.SCORE_DISTANCE


def _filter(builder: Any) -> str | None:
    where = getattr(builder, "_where", None)
    if where is None:
        return None
    found: dict[str, Any] = {"where": where if isinstance(where, str) else str(where)}
    if getattr(builder, "_postfilter", None):
        found["postfilter"] = True
    return canonical_json(found)


def _start(tracer: Any, builder: Any) -> _LanceStages:
    from lancedb.query import LanceFtsQueryBuilder, LanceHybridQueryBuilder

    table = getattr(builder, "_table", None)
    name = getattr(table, "name", None)
    stages = _LanceStages(tracer, f"lancedb.{type(builder).__qualname__}", collection=name if isinstance(name, str) else None)
    limit = getattr(builder, "_limit", None)
    if isinstance(builder, LanceHybridQueryBuilder):
        stages.text = _text(builder._text if builder._text is not None else builder._query)
        vector = builder._vector
        stages.vectors = _vectors(vector) if not isinstance(vector, str) else None
        limit = limit or _HYBRID_DEFAULT_LIMIT
    elif isinstance(builder, LanceFtsQueryBuilder):
        stages.text = _text(builder._query)
    else:
        stages.text = getattr(builder, "_str_query", None)
        stages.vectors = _vectors(builder._query)
    stages.base = Row(top_k=limit if isinstance(limit, int) else None, filter=_filter(builder), score_kind=_kind(builder))
    return stages.start(_row(stages, 0))


def _row(stages: _LanceStages, index: int) -> Row:
    vector = stages.vectors[index] if stages.vectors is not None and index < len(stages.vectors) else None
    query = Query(text=stages.text, vector=vector) if stages.text is not None or vector is not None else None
    base = stages.base
    return Row(query=query, top_k=base.top_k, filter=base.filter, score_kind=base.score_kind)


def _column(result: Any, names: Sequence[str], name: str | None) -> list[Any] | None:
    return result.column(name).to_pylist() if name is not None and name in names else None


def _outcome(stages: _LanceStages, result: Any, id_column: str) -> Outcome | None:
    names = list(getattr(result, "column_names", None) or ())
    if not names and getattr(result, "num_rows", 0) == 0:
        return Outcome(rows=1, row=lambda _index: _row(stages, 0), corpus_size=lambda: None, store=stages.collection)
    ident = id_column if id_column in names else (ROW_ID if ROW_ID in names else None)
    ids = _column(result, names, ident)
    contents = _column(result, names, next((n for n in names if n in CONTENT_KEYS), None))
    score_name = next((n for n in ("_distance", "_score", "_relevance_score") if n in names), None)
    scores = _column(result, names, score_name)
    queries = _column(result, names, "query_index")
    count = max(queries) + 1 if queries else 1

    def row(index: int) -> Row:
        found = _row(stages, index)
        positions = [i for i, q in enumerate(queries) if q == index] if queries is not None else list(range(result.num_rows))
        kind = found.score_kind if scores is not None else sc.SCORE_NONE
        found.score_kind = kind
        if ids is None and contents is None:
            found.findings.append(
                f"{len(positions)} rows returned, ids unknown: the result has no column named {id_column!r} "
                f"({ENV_ID_COLUMN} names the id column); no candidate recorded"
            )
            return found
        if ids is None:
            found.findings.append(
                f"no column named {id_column!r}: the {len(positions)} rows are identified by the sha256 of their content "
                f"({ENV_ID_COLUMN} names the id column)"
            )
        found.candidates = [
            Candidate(
                id=(normalize_id(ids[i]) or "") if ids is not None else content_id(contents[i] if contents is not None else None),
                content=contents[i] if contents is not None else None,
                score=scores[i] if scores is not None else None,
                score_kind=kind,
            )
            for i in positions
        ]
        return found

    return Outcome(rows=count, row=row, corpus_size=lambda: None, store=stages.collection)


__all__ = ["DEFAULT_ID_COLUMN", "ENV_ID_COLUMN", "LanceDBInstrumentor"]
