"""ClickHouse's HTTP interface in front of an embedded ClickHouse engine (chdb), for the tests.

Why: the ``clickhouse-server`` Debian ships (bookworm: 18.16, from 2018) predates every type the
Collector's ClickHouse exporter creates (``Map``, ``DateTime64``) and ClickHouse's query parameters,
so it cannot hold ``otel_traces``. chdb is the same ClickHouse engine, current (26.x), in process;
this module answers the slice of the HTTP interface that the exporter (clickhouse-go over
``http://``) and ragtrail's ``clickhouse+http://`` source use: ``GET /ping``, ``POST /`` with the
statement in the body or in ``query=`` (then the body is the data of an ``INSERT ... FORMAT X``),
``database=``, ``default_format=``, ``param_NAME=`` query parameters, and errors as ClickHouse
sends them (``Code: N. DB::Exception: ...`` with ``X-ClickHouse-Exception-Code``).

Run as a server: ``python tests/chfront.py --port 8123 --path DIR`` (the tests start and stop it,
:class:`tests.e2e.clickhouse_backend.ClickHouse`); or in process as an ``httpx`` transport
(:class:`ChdbTransport`), with no port at all.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx

_INSERT = re.compile(r"(?is)^\s*(INSERT\s+INTO\s+.+?)\s+FORMAT\s+(\w+)\s*;?\s*$")
_CODE = re.compile(r"Code:\s*(\d+)")
_NOT_FOUND_CODES = {"60", "81"}  # UNKNOWN_TABLE, UNKNOWN_DATABASE: the real server answers 404
_FIXED = {"UInt8": 1, "Int8": 1, "UInt16": 2, "Int16": 2, "UInt32": 4, "Int32": 4, "Float32": 4, "DateTime": 4, "UInt64": 8, "Int64": 8, "Float64": 8}
_CUSTOM_SERIALIZATION_REVISION = 54454
_BLOCK_INFO = b"\x01\x00\x02\xff\xff\xff\xff\x00"  # field 1 is_overflows=0, field 2 bucket_num=-1, end


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _string(data: bytes, pos: int) -> tuple[bytes, int]:
    n, pos = _varint(data, pos)
    return data[pos : pos + n], pos + n


def with_serialization_flags(native: bytes) -> bytes:
    """Native blocks as a client of protocol revision >= 54454 reads them over HTTP: each block
    opens with its BlockInfo (not overflows, bucket -1) and a "no custom serialization" byte follows
    each column's type. The embedded engine writes revision 0
    Native; the exporter only reads small answers (server hello, DESCRIBE TABLE) of String and
    fixed-width columns, so only those are rewritten (anything else raises)."""
    out = bytearray()
    pos = 0
    while pos < len(native):
        start = pos
        columns, pos = _varint(native, pos)
        rows, pos = _varint(native, pos)
        out += _BLOCK_INFO + native[start:pos]
        for _ in range(columns):
            head = pos
            _, pos = _string(native, pos)
            kind, pos = _string(native, pos)
            out += native[head:pos] + b"\x00"
            body = pos
            name = kind.decode()
            if name == "String":
                for _ in range(rows):
                    _, pos = _string(native, pos)
            elif name in _FIXED:
                pos += _FIXED[name] * rows
            else:
                raise ValueError(f"chfront cannot re-encode a Native {name} column")
            out += native[body:pos]
    return bytes(out)


@dataclass
class Answer:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


class Engine:
    """One chdb session on a data directory; statements run one at a time (chdb is not re-entrant)."""

    def __init__(self, path: str) -> None:
        from chdb import session

        self.path = path
        self.session = session.Session(path)
        self.lock = threading.Lock()

    def answer(self, params: Mapping[str, str], body: bytes) -> Answer:
        query = params.get("query")
        sql, data = (query, body) if query is not None else (body.decode("utf-8", "replace"), b"")
        fmt = params.get("default_format") or "TabSeparated"
        bound = {k[len("param_") :]: v for k, v in params.items() if k.startswith("param_")}
        with self.lock:
            try:
                database = params.get("database")
                if database:
                    with contextlib.suppress(Exception):  # a database not yet created (the exporter creates it)
                        self.session.query(f"USE `{database.replace('`', '')}`")
                insert = _INSERT.match(sql)
                if insert and data:
                    return self._insert(insert.group(1), insert.group(2), data)
                result = self.session.query(sql, fmt, params=bound or None)
                data = result.bytes() if result is not None else b""
                if (
                    fmt == "Native"
                    and int(params.get("client_protocol_version") or 0) >= _CUSTOM_SERIALIZATION_REVISION
                    and "FORMAT" not in sql.upper()
                ):
                    data = with_serialization_flags(data)
                return Answer(200, data)
            except Exception as exc:  # noqa: BLE001 - every engine error goes back as ClickHouse sends it
                text = str(exc).strip()
                code = _CODE.search(text)
                number = code.group(1) if code else "1001"
                status = 404 if number in _NOT_FOUND_CODES else 500
                return Answer(status, (text + "\n").encode(), {"X-ClickHouse-Exception-Code": number})

    def _insert(self, target: str, fmt: str, data: bytes) -> Answer:
        with tempfile.NamedTemporaryFile(dir=self.path, suffix=".insert", delete=False) as fh:
            fh.write(data)
            name = fh.name
        try:
            self.session.query(f"{target} SELECT * FROM file('{name}', '{fmt}')")
        finally:
            os.unlink(name)
        return Answer(200, b"")

    def close(self) -> None:
        self.session.close()


class ChdbTransport(httpx.BaseTransport):
    """An ``httpx`` transport answering as ClickHouse's HTTP interface, from an in-process :class:`Engine`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/ping":
            return httpx.Response(200, content=b"Ok.\n")
        params = dict(parse_qsl(request.url.query.decode(), keep_blank_values=True))
        got = self.engine.answer(params, request.read())
        return httpx.Response(got.status, content=got.body, headers=got.headers)


def _handler(engine: Engine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class names it so
            return

        def _reply(self, got: Answer) -> None:
            self.send_response(got.status)
            for key, value in got.headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(got.body)))
            self.end_headers()
            self.wfile.write(got.body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            parts = urlsplit(self.path)
            if parts.path in ("/ping", "/"):
                params = dict(parse_qsl(parts.query, keep_blank_values=True))
                if "query" in params:
                    self._reply(engine.answer(params, b""))
                else:
                    self._reply(Answer(200, b"Ok.\n"))
                return
            self._reply(Answer(404, b"not found\n"))

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            chunked = self.headers.get("Transfer-Encoding", "").lower() == "chunked"
            body = self._chunked() if chunked else self.rfile.read(length)
            self._reply(engine.answer(dict(parse_qsl(parts.query, keep_blank_values=True)), body))

        def _chunked(self) -> bytes:
            out = bytearray()
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0] or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", required=True)
    args = parser.parse_args()
    engine = Engine(args.path)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), _handler(engine))  # the exporter keeps connections open
    try:
        server.serve_forever()
    finally:
        engine.close()


if __name__ == "__main__":
    main()
