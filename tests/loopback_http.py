"""A real HTTP server on 127.0.0.1 answering with recorded, documentation-shaped JSON responses:
the transport for the services that cannot run here (Elasticsearch, OpenSearch, Pinecone). The
client libraries run unpatched against it; every request is kept (method, path, JSON body) so a
test counts the requests with and without ragtrail."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# (method, path, body) -> (status, json body, extra headers)
Responder = Callable[[str, str, Any], tuple[int, Any, dict[str, str]]]


@dataclass
class Loopback:
    url: str
    requests: list[tuple[str, str, Any]] = field(default_factory=list)


@contextmanager
def serve(respond: Responder) -> Iterator[Loopback]:
    box: list[Loopback] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall between them

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            path = self.path.split("?", 1)[0]
            box[0].requests.append((self.command, path, body))
            status, payload, headers = respond(self.command, path, body)
            data = json.dumps(payload).encode() if payload is not None else b""
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    box.append(Loopback(url=f"http://127.0.0.1:{server.server_address[1]}"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield box[0]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
