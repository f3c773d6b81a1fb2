"""pgvector through psycopg 3: a cursor's ``execute`` (sync ``Cursor`` and ``AsyncCursor``, their
client-side and raw subclasses, and ``Connection.execute``, which runs on a cursor) of a
nearest-neighbour SELECT becomes a ``retrieve`` stage.

Which statements: a plain top-level ``SELECT ... ORDER BY <column> <op> <vector> [ASC] LIMIT <k>``
with one of pgvector's distance operators (``<->`` L2, ``<=>`` cosine distance, ``<#>`` negative inner
product, ``<+>`` L1, and the bit operators ``<~>`` Hamming, ``<%>`` Jaccard); the ORDER BY may also
name a selected alias or position that is such a distance. Every other statement runs untouched after
one substring test (no operator in the text: nothing else is done); a statement with an operator is
parsed once per text (cached). Server-side (named) cursors, ``executemany``, ``stream`` and
pipeline mode are not recorded (their rows are not in hand when ``execute`` returns). SQLAlchemy
on the psycopg 3 driver (``postgresql+psycopg://``) runs on these cursors, so its pgvector
comparators are recorded the same way.

What is recorded:

* ids: the result column named ``id`` (``PsycopgInstrumentor().instrument(id_column="doc_id")`` or
  ``RAGTRAIL_PGVECTOR_ID_COLUMN`` names another), found by name in the result's description (so
  ``SELECT *`` works). Without such a column, rows with a content column are identified by the
  sha256 of their content (the recorder's rule for any item without an id), said in a finding;
  without either, the ids are unknown: the stage says so in a finding and records no candidates.
* scores: a selected column whose expression is the ordering distance itself (kind ``distance``:
  every pgvector operator is lower-is-better, ``<#>`` too, being the *negative* inner product), or
  ``1 - (distance)`` / the negated inner product (kind ``similarity``). When no column carries it
  (``SELECT * ... ORDER BY embedding <-> %s``), the order is known but no score: kind ``none``.
* content: a column named like a document's text (``content``, ``text``, ``page_content``...) is
  the candidate's content (its receipt; exported only as content capture allows).
* ``top_k`` from ``LIMIT`` (a literal or a bound parameter); the ``WHERE`` clause as
  ``ragtrail.stage.filter`` (``{"where": <text>, "params": [<its bound values>]}``, exported as the
  query capture mode allows: whole, hashed, or shape only); the query vector as a receipt (dimension
  and sha256 of its float32 bytes), never exported; the FROM table as the collection.

How the rows are read: once ``execute`` has returned, a client-side cursor holds the whole result
(``cursor.pgresult``). The id, score and content cells of each row are decoded from it with the
cursor's own loaders (``cursor.adapters``), without moving the cursor, calling its row factory, or
asking the server anything: the app's ``fetchone``/``fetchmany``/``fetchall``/iteration get exactly
what they get without ragtrail. The corpus size is unknown (a ``count(*)`` would be a query of ours)
unless the user gives it (``ragtrail.corpus_size("<table>", n)``). A failing statement's exception
passes through unchanged (the stage ends ``failed``).

Usage: ``PsycopgInstrumentor().instrument()`` or ``opentelemetry-instrument`` (entry point
``ragtrail_psycopg``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import canonical_json, content_id
from ragtrail.hooks import guard
from ragtrail.instrumentation._base import RagtrailInstrumentor
from ragtrail.instrumentation._pgvector_sql import OPERATORS, Param, Search, maybe_search, parse, statement_text
from ragtrail.instrumentation._vectorstore import Outcome, Query, Row, StoreStages, acall_through, call_through
from ragtrail.recorder.candidates import CONTENT_KEYS, Candidate, normalize_id

_KEY = "ragtrail.psycopg"
ENV_ID_COLUMN = "RAGTRAIL_PGVECTOR_ID_COLUMN"
DEFAULT_ID_COLUMN = "id"


class PsycopgInstrumentor(RagtrailInstrumentor):
    """Records pgvector nearest-neighbour SELECTs run through psycopg 3 cursors as retrieve stages."""

    _instruments: Collection[str] = ("psycopg >= 3.1",)

    def _patch(self, **kwargs: Any) -> None:
        self.id_column = id_column_setting(kwargs)
        self.when_imported("psycopg", self._patch_cursors)

    def _patch_cursors(self) -> None:
        self.wrap("psycopg.cursor", "Cursor.execute", self._execute)
        self.wrap("psycopg.cursor_async", "AsyncCursor.execute", self._aexecute)

    def _execute(self, wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        search = _search(instance, args, kwargs)
        if search is None:
            return wrapped(*args, **kwargs)
        return call_through(
            _KEY,
            lambda: start_search(self.tracer, f"psycopg.{type(instance).__qualname__}", search, _params_arg(args, kwargs)),
            wrapped,
            args,
            kwargs,
            lambda stages, result: stages.complete(lambda: _outcome(stages, instance, self.id_column)),
        )

    async def _aexecute(self, wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        search = _search(instance, args, kwargs)
        if search is None:
            return await wrapped(*args, **kwargs)
        return await acall_through(
            _KEY,
            lambda: start_search(self.tracer, f"psycopg.{type(instance).__qualname__}", search, _params_arg(args, kwargs)),
            wrapped,
            args,
            kwargs,
            lambda stages, result: stages.complete(lambda: _outcome(stages, instance, self.id_column)),
        )


def id_column_setting(kwargs: Mapping[str, Any]) -> str:
    """The result column holding a search's ids: ``instrument(id_column=...)``, else
    ``RAGTRAIL_PGVECTOR_ID_COLUMN``, else ``id`` (every pgvector driver's instrumentor reads it so)."""
    return str(kwargs.get("id_column") or os.environ.get(ENV_ID_COLUMN, "").strip() or DEFAULT_ID_COLUMN)


def _query_arg(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    return args[0] if args else kwargs.get("query")


def _params_arg(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    return args[1] if len(args) > 1 else kwargs.get("params")


def _search(cursor: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Search | None:
    return search_of(_query_arg(args, kwargs), cursor)


def search_of(query: Any, context: Any) -> Search | None:
    """The search this statement is, or ``None`` (the cheap test first; never raises). ``context``
    renders a composed statement (a cursor or connection of the driver)."""
    if isinstance(query, str):
        if "<" not in query:
            return None
        text: str | None = query
    else:
        text = guard("psycopg.statement", statement_text, query, context)
    if text is None or not maybe_search(text):
        return None
    found = guard("psycopg.parse", parse, text)
    return found if isinstance(found, Search) else None


class PgStages(StoreStages):
    """The stage of one pgvector search (its parsed statement and bound parameters)."""

    search: Search
    params: Any = None


def _value(ref: Param | int | str | None, params: Any) -> Any:
    return ref.value(params) if isinstance(ref, Param) else ref


def _vector(value: Any) -> Any:
    """A query vector as numbers: a list/array as is, a pgvector ``Vector`` (``to_list``), or its
    text form ``'[1,2,3]'``."""
    to_list = getattr(value, "to_list", None)
    if callable(to_list):
        return to_list()
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _plain_param(value: Any) -> Any:
    """A bound WHERE value as JSON can hold it (other types by their text)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain_param(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _plain_param(item) for key, item in value.items()}
    if type(value).__name__ in ("Json", "Jsonb") and hasattr(value, "obj"):
        return _plain_param(value.obj)  # psycopg's JSON wrappers (SQLAlchemy binds JSONB through them)
    return str(value)


def start_search(tracer: Any, component: str, search: Search, params: Any) -> PgStages:
    """Open the stage of a pgvector search with what the statement says (shared by psycopg2)."""
    stages = PgStages(tracer, component, collection=search.table)
    stages.search = search
    stages.params = params
    limit = _value(search.limit, params)
    where: str | None = None
    if search.where is not None:
        found: dict[str, Any] = {"where": search.where}
        if search.where_params:
            found["params"] = [_plain_param(p.value(params)) for p in search.where_params]
        where = canonical_json(found)
    vector = _value(search.vector, params)
    return stages.start(
        Row(
            query=Query(vector=_vector(vector)) if vector is not None else None,
            top_k=limit if isinstance(limit, int) and not isinstance(limit, bool) else None,
            filter=where,
            score_kind=search.score_kind,
            attributes={},
        )
    )


@dataclass
class _Columns:
    """Where the id, score and content are in the result (column positions), and their loaders."""

    ident: int | None
    score: int | None
    content: int | None


def _columns(names: Sequence[str], search: Search, id_column: str) -> _Columns:
    ident = names.index(id_column) if id_column in names else _referenced(search, id_column, len(names))
    score = search.score_item
    if score is not None and search.star_before_score:
        score = names.index(search.score_alias) if search.score_alias in names else None
    content = next((i for i, name in enumerate(names) if name in CONTENT_KEYS), None)
    if content is None:
        content = next((i for i, name in enumerate(search.columns) if name in CONTENT_KEYS and i < len(names)), None)
    return _Columns(ident, score if score is not None and score < len(names) else None, content)


def _referenced(search: Search, id_column: str, width: int) -> int | None:
    """The position of the select item that is the id column under another name (``t.id AS t_id``,
    as SQLAlchemy labels every column), or ``None``."""
    position = search.columns.index(id_column) if id_column in search.columns else None
    return position if position is not None and position < width else None


def _loader(cursor: Any, result: Any, column: int) -> Callable[[Any], Any]:
    """The cursor's own loader for a result column (its type and format), as the app's fetch uses."""
    oid = result.ftype(column)
    loader_cls = cursor.adapters.get_loader(oid, result.fformat(column))
    if loader_cls is None:
        return lambda data: bytes(data).decode("utf-8", "replace")
    load: Callable[[Any], Any] = loader_cls(oid, cursor).load
    return load


def _cells(cursor: Any, result: Any, column: int | None) -> list[Any] | None:
    if column is None:
        return None
    load = _loader(cursor, result, column)
    cells = []
    for row in range(result.ntuples):
        data = result.get_value(row, column)
        cells.append(None if data is None else load(data))
    return cells


def _candidates(base: Row, search: Search, ids: list[str], scores: list[Any] | None, contents: list[Any] | None) -> Row:
    """The rows as candidates, in the server's order, with the score kind of the ordering operator."""
    kind = search.score_kind if scores is not None else sc.SCORE_NONE
    base.score_kind = kind
    base.candidates = [
        Candidate(
            id=ident,
            content=contents[i] if contents is not None else None,
            score=scores[i] if scores is not None else None,
            score_kind=kind,
        )
        for i, ident in enumerate(ids)
    ]
    return base


def _outcome(stages: PgStages, cursor: Any, id_column: str) -> Outcome | None:
    """The result rows read from ``cursor.pgresult`` in place (the cursor does not move)."""
    from psycopg import pq

    result = cursor.pgresult
    if result is None or result.status != pq.ExecStatus.TUPLES_OK:
        return unread_outcome(stages)
    names = [column.name for column in (cursor.description or ())]
    return rows_outcome(stages, names, result.ntuples, lambda column: _cells(cursor, result, column), id_column)


def unread_outcome(stages: PgStages) -> Outcome:
    """A search whose rows are not in hand once ``execute`` returned: k and kind, and a finding."""
    search = stages.search
    limit = _value(search.limit, stages.params)
    base = Row(top_k=limit if isinstance(limit, int) and not isinstance(limit, bool) else None, score_kind=search.score_kind)
    base.findings.append("rows not read: the statement's result is not in hand after execute (pipeline mode?)")
    return Outcome(rows=1, row=lambda _index: base, corpus_size=lambda: None, store=search.table)


def rows_outcome(stages: PgStages, names: Sequence[str], ntuples: int, cells: Callable[[int | None], list[Any] | None], id_column: str) -> Outcome:
    """The stage's candidates from a result's columns (``cells(position)`` reads one column's values
    in row order, ``None`` for no column): shared by psycopg 3 and psycopg2."""
    search = stages.search
    limit = _value(search.limit, stages.params)
    base = Row(top_k=limit if isinstance(limit, int) and not isinstance(limit, bool) else None, score_kind=search.score_kind)
    columns = _columns(names, search, id_column)
    ids = cells(columns.ident)
    scores = cells(columns.score)
    contents = cells(columns.content)

    def row(_index: int) -> Row:
        if ntuples == 0:
            return base  # no row: nothing to identify (and a driver may not know the columns then)
        if ids is None and contents is not None:
            # the recorder's rule for an item without an id: the sha256 of its content (docs/semconv.md)
            base.findings.append(
                f"no column named {id_column!r}: the {ntuples} rows are identified by the sha256 of their content "
                f"({ENV_ID_COLUMN} names the id column)"
            )
            return _candidates(base, search, [content_id(c) for c in contents], scores, contents)
        if ids is None:
            base.findings.append(
                f"{ntuples} rows returned, ids unknown: the result has no column named {id_column!r} "
                f"({ENV_ID_COLUMN} names the id column); no candidate recorded"
            )
            return base
        return _candidates(base, search, [normalize_id(ident) or "" for ident in ids], scores, contents)

    return Outcome(rows=1, row=row, corpus_size=lambda: None, store=search.table)


__all__ = [
    "DEFAULT_ID_COLUMN",
    "ENV_ID_COLUMN",
    "OPERATORS",
    "PgStages",
    "PsycopgInstrumentor",
    "id_column_setting",
    "rows_outcome",
    "search_of",
    "start_search",
    "unread_outcome",
]
