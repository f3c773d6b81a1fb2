"""The SQL runner the aggregates need, and the embedded one (chdb: ClickHouse in process).

:class:`SqlRunner` is all :mod:`.sql` asks of an engine, so a ClickHouse server source runs the
same statements over HTTP by implementing ``run_sql`` (``{name:Type}`` parameters are ClickHouse's
own query parameters; over HTTP they travel as ``param_<name>=value``).
"""

from __future__ import annotations

import importlib
import json
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


class ChdbEngine:
    """chdb over one directory: the ingested store lives there between runs."""

    def __init__(self, path: Path) -> None:
        try:
            chdb_session: Any = importlib.import_module("chdb.session")  # chdb ships no type hints
        except ImportError as exc:
            raise MissingEngine("chdb is not installed") from exc
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self._session: Any = chdb_session.Session(str(path))

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

    def close(self) -> None:
        self._session.close()
