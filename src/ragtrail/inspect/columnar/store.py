"""When a local store is read through the embedded engine, and where the engine keeps it.

The columnar path is used for ``stats`` over a local store of at least ``RAGTRAIL_COLUMNAR_MIN_BYTES``
bytes of ``*.jsonl`` (default 64 MiB, about 2,700 traces of the benchmark store; ``0`` always,
``off`` never), and ``--engine columnar|python`` decides outright. The engine's files live in
``RAGTRAIL_COLUMNAR_DIR`` (default ``~/.cache/ragtrail/columnar``), one directory per store path, so
reading never writes into the store itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .engine import ChdbEngine, SqlRunner
from .ingest import catch_up, trace_files
from .paired import Paired, compared
from .per_trace import TABLE as RECORDS_TABLE
from .schema import INGEST_TABLE, LINES_TABLE, SCOPE_TABLE, TABLE
from .spans import SPANS_TABLE, names

ENV_MIN_BYTES = "RAGTRAIL_COLUMNAR_MIN_BYTES"
ENV_DIR = "RAGTRAIL_COLUMNAR_DIR"
DEFAULT_MIN_BYTES = 64 * 1024 * 1024


def store_bytes(store: Path) -> int:
    """Bytes of the store's trace files."""
    return sum(p.stat().st_size for p in trace_files(store))


def min_bytes() -> int | None:
    """The size from which the columnar path is the default (``None``: never)."""
    raw = os.environ.get(ENV_MIN_BYTES, "").strip().lower()
    if raw in ("off", "never", "none"):
        return None
    return int(raw) if raw.isdigit() else DEFAULT_MIN_BYTES


def engine_dir(store: Path) -> Path:
    """Where the engine keeps ``store``'s ingested spans."""
    base = Path(os.environ.get(ENV_DIR) or Path.home() / ".cache" / "ragtrail" / "columnar")
    key = hashlib.sha256(str(store.resolve()).encode()).hexdigest()[:16]
    return base / f"{store.resolve().name}-{key}"


def _outdated(engine: SqlRunner) -> bool:
    """The directory was filled by an older ragtrail (other slim columns, no scope policies): start over."""
    tables = {str(r[0]) for r in engine.run_sql("SELECT name FROM system.tables WHERE database = currentDatabase()")}
    if INGEST_TABLE in tables and SCOPE_TABLE not in tables:
        return True
    query = f"SELECT name FROM system.columns WHERE database = currentDatabase() AND table = '{SPANS_TABLE}' ORDER BY position"
    columns = [str(r[0]) for r in engine.run_sql(query)]
    return bool(columns) and columns != names()


def _stale(engine: SqlRunner, store: Path) -> bool:
    """A file ingested before is gone or shorter (rotated away or rewritten), or the directory is
    :func:`_outdated`: start over."""
    if _outdated(engine):
        return True
    try:
        done = engine.run_sql(f"SELECT File, max(Offset) FROM {INGEST_TABLE} GROUP BY File")
    except RuntimeError:
        return False
    for name, offset in done:
        path = store / str(name)
        if not path.exists() or path.stat().st_size < int(offset):
            return True
    return False


def open_store(store: Path) -> ChdbEngine:
    """The engine over ``store``, caught up with every complete line written so far."""
    engine = ChdbEngine(engine_dir(store))
    if _stale(engine, store):
        engine.run_sql(f"DROP TABLE IF EXISTS {TABLE}")
        engine.run_sql(f"DROP TABLE IF EXISTS {INGEST_TABLE}")
        engine.run_sql(f"DROP TABLE IF EXISTS {LINES_TABLE}")
        engine.run_sql(f"DROP TABLE IF EXISTS {SCOPE_TABLE}")
        engine.run_sql(f"DROP VIEW IF EXISTS {SPANS_TABLE}_mv")
        engine.run_sql(f"DROP TABLE IF EXISTS {SPANS_TABLE}")
        engine.run_sql(f"DROP TABLE IF EXISTS {RECORDS_TABLE}")
    catch_up(engine, store)
    return engine


def local_store(source: str | None) -> Path | None:
    """The store directory ``source`` names (as the files source resolves it), else ``None``; a
    directory holding whole-document ``*.json`` files is left to the Python path."""
    from ragtrail.inspect.sources import DEFAULT_STORE, ENV_SOURCE

    path = Path(source or os.environ.get(ENV_SOURCE) or DEFAULT_STORE)
    if not path.is_dir() or any(path.rglob("*.json")):
        return None
    return path


def choose(source: str | None, engine: str, narrowed: bool) -> tuple[Path | None, str | None]:
    """``(store, note)``: the store to read through the engine (``None``: the Python path), and the one
    line to say on stderr when the store is large but the Python path runs anyway. ``narrowed``: some
    filter or ``--limit`` was given (the columnar path reads every trace)."""
    from ragtrail.inspect import errors

    from .engine import available

    store = local_store(source)
    if engine == "python":
        return None, None
    if engine == "columnar":
        if store is None or narrowed:
            raise errors.UsageError("--engine columnar reads a whole local store", "drop the filters and --limit, or use --engine python")
        if not available():
            raise errors.UsageError("--engine columnar needs chdb", "pip install 'ragtrail[columnar]'")
        return store, None
    threshold = min_bytes()
    if store is None or narrowed or threshold is None or store_bytes(store) < threshold:
        return None, None
    if not available():
        return None, f"the store is over {threshold} bytes; pip install 'ragtrail[columnar]' to aggregate it in chdb (reading it in Python)"
    return store, None


def reading_order(store: Path) -> tuple[str, dict[str, Any]]:
    """``(subquery, params)``: trace id -> its place in the order the Python reader reads ``store``
    (files by modification time then name, then line, then place in the line), from where each trace
    was first written."""
    files = sorted(trace_files(store), key=lambda p: (p.stat().st_mtime, str(p)))
    ranks = {str(p.relative_to(store)): n for n, p in enumerate(files)}
    from .pairing import order_key

    query = f"SELECT TraceId, min({order_key(('ranks[File]', 8), ('Line', 16), ('Pos', 8))}) AS OrderKey FROM {LINES_TABLE} GROUP BY TraceId"
    return query.replace("ranks[", "{ranks:Map(String, UInt32)}["), {"ranks": ranks}


def _native(tmp: str, name: str, structure: str = "") -> str:
    """A Native file (lz4) of the scratch directory ``tmp`` as a ClickHouse table function (``structure``:
    its columns, given where the file may hold no rows, which leaves it without a header)."""
    return "file(" + _literal(str(Path(tmp) / f"{name}.native.lz4")) + ", 'Native'" + (f", {_literal(structure)}" if structure else "") + ")"


def _write(engine: SqlRunner, target: str, select: str) -> None:
    """The rows of ``select`` into the file ``target``, lz4 at level 1: the default level compresses
    harder, and writing 1,000,000 kept questions took 10.7 s of CPU at it against 4.2 s (a file a quarter larger)."""
    engine.run_sql(f"INSERT INTO FUNCTION {target} {select} SETTINGS output_format_compression_level = 1")


def _parallel(engine: ChdbEngine) -> ChdbEngine:
    """``engine`` with each ``INSERT ... SELECT`` (scratch tables, the files between engines) written by
    as many threads as its queries run (one stream unless told)."""
    threads = int(engine.run_sql("SELECT toUInt64(getSetting('max_threads'))")[0][0])
    engine.run_sql(f"SET max_insert_threads = {threads}")
    return engine


def _structure(engine: SqlRunner, select: str) -> str:
    """The ``name Type, ...`` of the columns ``select`` returns."""
    return ", ".join(f"`{r[0]}` {r[1]}" for r in engine.run_sql(f"DESCRIBE ({select})"))


@contextlib.contextmanager
def stores_compared(a: Path, b: Path, names: tuple[str, str]) -> Iterator[Paired]:
    """``compare`` of two local stores in SQL (:mod:`.paired`), a Native file (lz4) between engines
    (chdb admits one directory at a time): each side's questions computed by its own engine from its
    per-trace records, joined by a scratch engine; then each side's engine hands over the stages of
    just the traces whose signatures differ, and the scratch engine pairs them."""
    from .pairing import differing_query, heavy_query, joined_query, kept_query, winners_query

    with tempfile.TemporaryDirectory(prefix="ragtrail-compare-") as tmp:
        kept = (_native(tmp, "kept-a"), _native(tmp, "kept-b"))
        for store, target in zip((a, b), kept, strict=True):
            engine = _parallel(open_store(store))
            try:
                order, params = reading_order(store)
                with engine.temporary_table(winners_query(RECORDS_TABLE, order), params, "ENGINE = Memory") as winners:
                    _write(engine, target, kept_query(RECORDS_TABLE, winners))
            finally:
                engine.close()
        scratch, joined = Path(tmp) / "pairing", "joined"
        engine = _parallel(ChdbEngine(scratch))
        try:
            engine.run_sql(f"CREATE TABLE {joined} ENGINE = MergeTree ORDER BY tuple() AS {joined_query(*kept)}")
            for side in "ab":
                _write(engine, _native(tmp, "differing-" + side), differing_query(joined, side))
        finally:
            engine.close()
        heavy = []
        for store, side in zip((a, b), "ab", strict=True):
            engine = _parallel(ChdbEngine(engine_dir(store)))
            try:
                traces = "SELECT * FROM " + _native(tmp, "differing-" + side, f"trace_{side} String")
                structure = _structure(engine, heavy_query(RECORDS_TABLE, "SELECT ''"))
                _write(engine, _native(tmp, "heavy-" + side), heavy_query(RECORDS_TABLE, traces))
                heavy.append("SELECT * FROM " + _native(tmp, "heavy-" + side, structure))
            finally:
                engine.close()
        engine = _parallel(ChdbEngine(scratch))
        try:
            with compared(engine, kept, joined, (heavy[0], heavy[1]), names) as paired:
                yield paired
        finally:
            engine.close()


def _literal(text: str) -> str:
    """``text`` as a ClickHouse string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
