"""The SQL runner the aggregates need, and the embedded one (chdb: ClickHouse in process).

:class:`SqlRunner` is all :mod:`.sql` asks of an engine, so a ClickHouse server source runs the
same statements over HTTP by implementing ``run_sql`` (``{name:Type}`` parameters are ClickHouse's
own query parameters; over HTTP they travel as ``param_<name>=value``).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol


class SqlRunner(Protocol):
    """Runs one ClickHouse SQL statement; a SELECT returns its rows as tuples, anything else ``[]``."""

    def run_sql(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]: ...


class Engine(SqlRunner, Protocol):
    """An engine that also keeps the ingested store (the embedded one)."""

    path: Path


class MissingEngine(RuntimeError):
    """chdb is not installed (``pip install 'ragtrail[columnar]'``)."""


def available() -> bool:
    """Whether the embedded engine can be imported (the ``columnar`` extra is installed)."""
    try:
        import chdb  # noqa: F401
    except ImportError:
        return False
    return True


COMPACT = "ENGINE = MergeTree ORDER BY tuple()"
"""A scratch table's engine that keeps its rows compressed on disk (a ClickHouse session's default
for temporary tables is ``Memory``)."""


@contextlib.contextmanager
def scratch_table(runner: SqlRunner, select: str, params: Mapping[str, Any] | None, kind: str, engine: str = "") -> Iterator[str]:
    """The rows of ``select`` in a new table (``CREATE {kind} ... {engine}``, a fresh name, yielded),
    dropped on the way out."""
    name = f"ragtrail_scratch_{uuid.uuid4().hex[:12]}"
    runner.run_sql(f"CREATE {kind} {name} {engine} AS {select}", params)
    try:
        yield name
    finally:
        runner.run_sql(f"DROP {kind} IF EXISTS {name}")


def _held(path: Path) -> bool:
    """Whether another process has the engine directory open: ClickHouse holds an exclusive ``flock``
    on its ``status`` file while it runs (one server per directory)."""
    import fcntl

    try:
        status = (path / "status").open("rb")
    except FileNotFoundError:
        return False
    with status:
        try:
            fcntl.flock(status, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(status, fcntl.LOCK_UN)
    return False


def _busy(path: Path) -> Exception:
    from ragtrail.inspect.errors import EngineBusy

    return EngineBusy(
        f"the embedded engine's directory {path} is in use by another ragtrail process",
        "run again when it ends (the engine admits one process per directory), or use --engine python",
    )


class ChdbEngine:
    """chdb over one directory: the ingested store lives there between runs."""

    def __init__(self, path: Path) -> None:
        try:
            chdb_session: Any = importlib.import_module("chdb.session")  # chdb ships no type hints
        except ImportError as exc:
            raise MissingEngine("chdb is not installed") from exc
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        if _held(path):  # asked first: chdb itself would print its own lines and raise a generic error
            raise _busy(path)
        try:
            self._session: Any = chdb_session.Session(str(path))
        except RuntimeError:
            if _held(path):  # taken between the question and the opening
                raise _busy(path) from None
            raise

    def run_sql(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        result = self._session.query(sql, "JSONCompact", params=dict(params or {}))
        raw = result.bytes()
        if not raw:
            return []
        return [tuple(row) for row in json.loads(raw)["data"]]

    def stream_sql(self, sql: str, params: Mapping[str, Any] | None = None) -> Iterator[tuple[Any, ...]]:
        """The rows of a SELECT, a block at a time (a large answer is never whole in memory)."""
        for block in self._session.send_query(sql, "JSONCompactEachRow", params=dict(params or {})):
            for line in block.bytes().splitlines():
                if line:
                    yield tuple(json.loads(line))

    def stream_tuples(self, sql: str, params: Mapping[str, Any] | None = None) -> Iterator[tuple[Any, ...]]:
        """:meth:`stream_sql` under the name a ClickHouse server source gives it."""
        return self.stream_sql(sql, params)

    def temporary_table(self, select: str, params: Mapping[str, Any] | None = None, engine: str = COMPACT) -> contextlib.AbstractContextManager[str]:
        """The rows of ``select`` kept in a table for the statements that follow; dropped on the way out."""
        return scratch_table(self, select, params, "TABLE", engine)

    def close(self) -> None:
        self._session.close()
