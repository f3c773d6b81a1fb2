"""pgvector through asyncpg: the same nearest-neighbour SELECTs as :mod:`ragtrail.instrumentation.psycopg`
(the same parser and the same stage: ids, distances with the operator's kind, k, the WHERE filter under
the query capture mode, a receipt of the query vector, the table as the collection), run by asyncpg.

Which calls: ``Connection.fetch``/``fetchrow`` (a ``Pool``'s and a pool connection's run on them) and
``PreparedStatement.fetch``/``fetchrow``, the path SQLAlchemy's ``postgresql+asyncpg`` dialect takes
(``connection.prepare(statement)`` once per text, then ``fetch(*params)``): LlamaIndex's
``PGVectorStore`` ``aquery``/``aretrieve`` and any async SQLAlchemy session over pgvector's
comparators. The statement's placeholders are asyncpg's ``$1``, ``$2``... (the parser maps ``$n`` to
the n-th bound argument), so the query vector is the argument its ``$n`` names: a numpy array or a
pgvector ``Vector`` (``pgvector.asyncpg.register_vector``), or the text ``'[1,2,3]'`` SQLAlchemy's
``VECTOR`` type binds. ``fetchrow`` hands back one row (asyncpg asks the server for one): the stage
records that row and, when there was one, says in a finding that the LIMIT allowed more. Not recorded:
``execute`` (returns a status, no rows), ``fetchval``, ``fetchmany`` (several argument sets),
``cursor()`` (server-side: the rows are not in hand when the call returns), ``copy_*``.

How the rows are read: the ``Record`` list the call returns, by position (never changed, never
re-fetched); column names from the prepared statement's attributes, or from the first record for
``Connection.fetch`` (no row, nothing to name). asyncpg has decoded every cell already. The corpus
size is unknown (a ``count(*)`` would be a query of ours) unless the user gives it
(``ragtrail.corpus_size("<table>", n)``). A failing statement's exception passes through unchanged
(the stage ends ``failed``). Everything runs in the awaiting task: no thread, no blocking call.

Usage: ``AsyncpgInstrumentor().instrument()`` (``id_column=`` as for psycopg 3, or
``RAGTRAIL_PGVECTOR_ID_COLUMN``) or ``opentelemetry-instrument`` (entry point ``ragtrail_asyncpg``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from ragtrail.hooks import Args, Kwargs, guard
from ragtrail.instrumentation._base import RagtrailInstrumentor
from ragtrail.instrumentation._vectorstore import Outcome, acall_through
from ragtrail.instrumentation.psycopg import PgStages, id_column_setting, rows_outcome, search_of, start_search

_KEY = "ragtrail.asyncpg"


class AsyncpgInstrumentor(RagtrailInstrumentor):
    """Records pgvector nearest-neighbour SELECTs run through asyncpg as retrieve stages."""

    _instruments: Collection[str] = ("asyncpg >= 0.27",)

    def _patch(self, **kwargs: Any) -> None:
        self.id_column = id_column_setting(kwargs)
        self.when_imported("asyncpg", self._patch_methods)

    def _patch_methods(self) -> None:
        for name in ("fetch", "fetchrow"):
            self.wrap("asyncpg.connection", f"Connection.{name}", self._connection_fetch)
            self.wrap("asyncpg.prepared_stmt", f"PreparedStatement.{name}", self._prepared_fetch)

    async def _connection_fetch(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        """``Connection.fetch(query, *args)`` / ``fetchrow``: the statement is the first argument."""
        query = args[0] if args else kwargs.get("query")
        return await self._run("asyncpg.Connection", query, tuple(args[1:]), None, wrapped, args, kwargs)

    async def _prepared_fetch(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        """``PreparedStatement.fetch(*args)`` / ``fetchrow``: the statement is the one prepared."""
        query = guard("asyncpg.statement", instance.get_query)
        return await self._run("asyncpg.PreparedStatement", query, tuple(args), instance, wrapped, args, kwargs)

    async def _run(
        self, component: str, query: Any, params: tuple[Any, ...], prepared: Any, wrapped: Callable[..., Any], args: Args, kwargs: Kwargs
    ) -> Any:
        search = search_of(query, None) if isinstance(query, str) else None
        if search is None:
            return await wrapped(*args, **kwargs)
        one_row = getattr(wrapped, "__name__", "") == "fetchrow"
        return await acall_through(
            _KEY,
            lambda: start_search(self.tracer, component, search, params),
            wrapped,
            args,
            kwargs,
            lambda stages, result: stages.complete(lambda: _outcome(stages, result, prepared, one_row, self.id_column)),
        )


def _names(result: Sequence[Any], prepared: Any) -> list[str]:
    """The result's column names: the prepared statement's attributes (known before any row), or
    the first record's keys."""
    if prepared is not None:
        return [attribute.name for attribute in prepared.get_attributes()]
    return list(result[0].keys()) if result else []


def _outcome(stages: PgStages, result: Any, prepared: Any, one_row: bool, id_column: str) -> Outcome:
    """The stage's candidates from the records the call returned (``fetchrow``: one or ``None``)."""
    rows: Sequence[Any] = ([] if result is None else [result]) if one_row else result
    names = _names(rows, prepared)

    def cells(position: int | None) -> list[Any] | None:
        return None if position is None else [row[position] for row in rows]

    outcome = rows_outcome(stages, names, len(rows), cells, id_column)
    if one_row:
        build = outcome.row

        def row(index: int) -> Any:
            found = build(index)
            if rows and (found.top_k is None or found.top_k > 1):
                found.findings.append("fetchrow: the first row only (asyncpg asks the server for one); the LIMIT allowed more")
            return found

        outcome.row = row
    return outcome


__all__ = ["AsyncpgInstrumentor"]
