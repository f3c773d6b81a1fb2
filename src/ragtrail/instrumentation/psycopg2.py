"""pgvector through psycopg2: the same nearest-neighbour SELECTs as :mod:`ragtrail.instrumentation.psycopg`
(the same parser, the same stage: ids, distances with the operator's kind, k, the WHERE filter under
the query capture mode, a receipt of the query vector, the table as the collection), run by a psycopg2
cursor's ``execute``.

How: psycopg2's cursor is a C type whose methods cannot be patched, so ``psycopg2.connect`` is
wrapped and the connection's default cursor factory becomes a subclass of the one it had
(``cursor_factory=`` given to ``connect``, e.g. ``RealDictCursor``, or psycopg2's own cursor) whose
``execute`` is recorded; OpenTelemetry's own psycopg2 instrumentation does the same. What this
means: cursors of connections opened before ``instrument()``, and a ``cursor_factory`` passed to
``connection.cursor()`` itself, are not recorded; ``type(cursor)`` is ragtrail's subclass (an
``isinstance`` check against the factory still holds). After ``uninstrument()`` new connections are
untouched and the cursors already made pass every call straight through.

How the rows are read: a client-side cursor holds the whole result once ``execute`` returned; the
stage reads it with the cursor's own ``fetchall`` and puts the cursor back where it was
(``scroll(0, "absolute")``, client-side: no round trip), so the application's fetches get exactly
what they would have. Server-side (named) cursors, ``executemany`` and ``callproc`` are not recorded.
The corpus size is unknown (a ``count(*)`` would be a query of ours) unless the user gives it
(``ragtrail.corpus_size("<table>", n)``). A failing statement's exception passes through unchanged.

Usage: ``Psycopg2Instrumentor().instrument()`` (``id_column=`` as for psycopg 3, or
``RAGTRAIL_PGVECTOR_ID_COLUMN``) or ``opentelemetry-instrument`` (entry point ``ragtrail_psycopg2``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from ragtrail.hooks import Args, Kwargs, guard
from ragtrail.instrumentation._base import RagtrailInstrumentor
from ragtrail.instrumentation._vectorstore import Outcome, call_through
from ragtrail.instrumentation.psycopg import DEFAULT_ID_COLUMN, PgStages, id_column_setting, rows_outcome, search_of, start_search, unread_outcome

_KEY = "ragtrail.psycopg2"
_traced: dict[type, type] = {}  # a cursor factory -> ragtrail's subclass of it
_traced_lock = threading.Lock()


class _State:
    """What the traced cursors consult on every ``execute``: whether ragtrail records, and how."""

    tracer: Any = None
    id_column = DEFAULT_ID_COLUMN


_state = _State()


class Psycopg2Instrumentor(RagtrailInstrumentor):
    """Records pgvector nearest-neighbour SELECTs run through psycopg2 cursors as retrieve stages."""

    _instruments: Collection[str] = ("psycopg2-binary >= 2.9",)
    # the same ``psycopg2`` module ships in two distributions: either will do
    _instruments_any: Collection[str] = ("psycopg2 >= 2.9", "psycopg2-binary >= 2.9")

    def _check_dependency_conflicts(self) -> Any:
        from opentelemetry.instrumentation.dependencies import get_dependency_conflicts

        return get_dependency_conflicts((), self._instruments_any)

    def _patch(self, **kwargs: Any) -> None:
        _state.id_column = id_column_setting(kwargs)
        _state.tracer = self.tracer
        self.when_imported("psycopg2", lambda: self.wrap("psycopg2", "connect", _connect))

    def _uninstrument(self, **kwargs: Any) -> None:
        super()._uninstrument(**kwargs)
        _state.tracer = None


def _connect(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """``psycopg2.connect``: the connection as made, its default cursor factory traced."""
    conn = wrapped(*args, **kwargs)
    guard("psycopg2.connect", _trace_factory, conn)
    return conn


def _trace_factory(conn: Any) -> None:
    import psycopg2.extensions

    factory = getattr(conn, "cursor_factory", None) or psycopg2.extensions.cursor
    if isinstance(factory, type) and issubclass(factory, psycopg2.extensions.cursor):
        conn.cursor_factory = traced_cursor(factory)


def traced_cursor(factory: type) -> type:
    """ragtrail's subclass of a psycopg2 cursor class (made once per class) whose ``execute`` is
    recorded when it is a pgvector search."""
    if getattr(factory, "_ragtrail_traced", False):
        return factory
    with _traced_lock:
        found = _traced.get(factory)
        if found is None:
            found = type(factory.__name__, (factory,), {"execute": _execute, "_ragtrail_traced": True, "__module__": factory.__module__})
            _traced[factory] = found
        return found


def _execute(self: Any, query: Any, vars: Any = None) -> Any:  # noqa: A002 - psycopg2's own parameter name
    base_execute = _base_execute(type(self))
    tracer = _state.tracer
    search = search_of(query, self) if tracer is not None and getattr(self, "name", None) is None else None
    if search is None:
        return base_execute(self, query, vars)
    return call_through(
        _KEY,
        lambda: start_search(tracer, f"psycopg2.{_base_name(type(self))}", search, vars),
        lambda q, v: base_execute(self, q, v),
        (query, vars),
        {},
        lambda stages, result: stages.complete(lambda: _outcome(stages, self)),
    )


def _base_execute(cls: type) -> Callable[..., Any]:
    """The ``execute`` of the class ragtrail's subclass derives from (psycopg2's, or a subclass's own)."""
    for klass in cls.__mro__[1:]:
        if "execute" in vars(klass) and not getattr(klass, "_ragtrail_traced", False):
            execute: Callable[..., Any] = vars(klass)["execute"]
            return execute
    raise AttributeError("execute")  # pragma: no cover - every cursor class has one


def _base_name(cls: type) -> str:
    return next((k.__qualname__ for k in cls.__mro__[1:] if not getattr(k, "_ragtrail_traced", False)), cls.__qualname__)


def _cell(row: Any, position: int, name: str) -> Any:
    if isinstance(row, Mapping):  # RealDictCursor's rows are keyed by column name
        return row.get(name)
    return row[position]


def _outcome(stages: PgStages, cursor: Any) -> Outcome | None:
    """The rows read with the cursor's own fetch, the cursor put back at the first row."""
    if cursor.description is None:
        return unread_outcome(stages)
    names = [column.name for column in cursor.description]
    rows: Sequence[Any] = cursor.fetchall()
    if rows:
        cursor.scroll(0, "absolute")

    def cells(position: int | None) -> list[Any] | None:
        if position is None:
            return None
        return [_cell(row, position, names[position]) for row in rows]

    return rows_outcome(stages, names, len(rows), cells, _state.id_column)


__all__ = ["Psycopg2Instrumentor", "traced_cursor"]
