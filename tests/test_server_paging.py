"""Server reads that never silently stop (issue 26): Tempo's search, which has no cursor, is paged by
time windows against a loopback server answering Tempo's documented ``/api/search`` bodies (limit,
start/end in seconds, most recent first, HTTP 400 above its ``max_result_limit``); a backend that
caps its answer gives one plain "incomplete read" line on stderr and a ``server_read`` field in
``--json``, with exact counts. The same against the real Jaeger is tests/e2e/test_server_paging.py."""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fixtures.backend_server import BackendServer
from ragtrail.inspect.sources import PhoenixSource, TempoSource
from ragtrail.inspect.sources.paging import Hit, page_windows
from test_cli_errors import ragtrail

FIXTURES = Path(__file__).parent / "fixtures"
TEMPLATE = (FIXTURES / "tempo_v1_trace.json").read_text()
TEMPLATE_ID = "e+iqDt90yglf8vCbYS8nlg=="


class FakeTempo:
    """Tempo's search over ``starts`` (trace id -> start, unix seconds), and its v1 trace endpoint."""

    def __init__(self, starts: dict[str, int], max_limit: int) -> None:
        self.starts, self.max_limit, self.requests = starts, max_limit, []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                fake.requests.append(self.path)
                status, body = fake.answer(self.path)
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def answer(self, raw: str) -> tuple[int, str]:
        url = urlsplit(raw)
        params = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/api/search":
            limit = int(params.get("limit", 20))
            if limit > self.max_limit:
                return 400, f"invalid limit: {limit} exceeds max limit {self.max_limit}"
            lo, hi = int(params.get("start", 0)), int(params.get("end", 2**40))
            inside = sorted((t for t, s in self.starts.items() if lo <= s <= hi), key=lambda t: -self.starts[t])
            traces = [
                {
                    "traceID": t,
                    "rootServiceName": "rag",
                    "rootTraceName": "pipeline pipeline",
                    "startTimeUnixNano": str(self.starts[t] * 10**9),
                    "durationMs": 2,
                }
                for t in inside[:limit]
            ]
            return 200, json.dumps({"traces": traces, "metrics": {"inspectedBytes": "1024"}})
        if url.path.startswith("/api/traces/"):
            trace_id = url.path.rsplit("/", 1)[1]
            return 200, TEMPLATE.replace(TEMPLATE_ID, base64.b64encode(bytes.fromhex(trace_id)).decode())
        return 404, json.dumps({"error": {"code": 404, "message": "No traces found"}})

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _spread(n: int, seconds: int) -> dict[str, int]:
    now = int(time.time())
    return {f"{i + 1:032x}": now - 5 - (i * seconds) // n for i in range(n)}


def test_tempo_search_pages_through_windows_below_its_max_limit() -> None:
    tempo = FakeTempo(_spread(250, 1800), max_limit=100)
    try:
        source = TempoSource(tempo.url)
        found = source.search_all(None, None, "1h")
        assert sorted(found.trace_ids) == sorted(tempo.starts) and not found.capped
        assert found.trace_ids[0] == "1".rjust(32, "0")  # most recent first
        searches = [parse_qs(urlsplit(r).query) for r in tempo.requests if r.startswith("/api/search")]
        refused = [s for s in searches if int(s["limit"][0]) > 100]
        assert len(refused) == 3  # 500, 250, 125 refused with HTTP 400; 62 per page from then on
        assert all(int(s["end"][0]) - int(s["start"][0]) <= 3600 for s in searches)
        assert len(source.search_all(120, None, "1h").trace_ids) == 120
        assert source.search(5, None, "1h") == [f"{i:032x}" for i in range(1, 6)]
        source.close()
    finally:
        tempo.close()


def test_ls_and_stats_read_every_tempo_trace_and_limit_reads_exactly() -> None:
    tempo = FakeTempo(_spread(250, 1800), max_limit=100)
    try:
        listed = ragtrail("ls", "--source", f"tempo+{tempo.url}")
        assert listed.returncode == 0, listed.stderr
        assert len(listed.stdout.splitlines()) == 250 and "incomplete" not in listed.stderr.lower()
        assert f"ragtrail: 250 traces read from Tempo at {tempo.url} (every trace in the range)" in listed.stderr
        human = ragtrail("stats", "--source", f"tempo+{tempo.url}")
        assert human.stdout.splitlines()[0] == f"250 traces read from Tempo at {tempo.url} (every trace in the range)"
        limited = ragtrail("ls", "--source", f"tempo+{tempo.url}", "--limit", "120", "--json")
        assert len(json.loads(limited.stdout)) == 120
        stats = json.loads(ragtrail("stats", "--source", f"tempo+{tempo.url}", "--json").stdout)
        assert stats["traces"] == 250 and stats["sampling"].startswith("250 traces")
        assert stats["server_read"] == {"traces_read": 250, "complete": True, "note": None}
    finally:
        tempo.close()


def test_a_capped_backend_is_said_never_passed_off_as_the_whole_range() -> None:
    now = int(time.time()) - 5
    tempo = FakeTempo({f"{i + 1:032x}": now for i in range(30)}, max_limit=20)  # 30 traces in one second
    try:
        found = TempoSource(tempo.url).search_all(None, None, "1h")
        assert len(found.trace_ids) == 15 and found.capped  # pages of 15 (500 halved below 20): no window splits a second
        listed = ragtrail("ls", "--source", f"tempo+{tempo.url}")
        assert listed.returncode == 0, listed.stderr
        assert len(listed.stdout.splitlines()) == 15
        (line,) = [x for x in listed.stderr.splitlines() if "incomplete read" in x]
        assert "15 traces were read" in line and "Tempo at" in line
        assert f"ragtrail: 15 traces read from Tempo at {tempo.url} (INCOMPLETE: the server capped its search answer)" in listed.stderr.splitlines()
        stats = json.loads(ragtrail("stats", "--source", f"tempo+{tempo.url}", "--json").stdout)
        assert stats["traces"] == 15
        assert stats["server_read"]["traces_read"] == 15 and stats["server_read"]["complete"] is False
        assert "15 traces were read" in stats["server_read"]["note"]
        compared = ragtrail("compare", f"tempo+{tempo.url}", f"tempo+{tempo.url}", "--json")
        assert compared.returncode == 0, compared.stderr
        sides = json.loads(compared.stdout)
        assert [sides[k]["server_read"]["traces_read"] for k in "ab"] == [15, 15]
        assert [sides[k]["server_read"]["complete"] for k in "ab"] == [False, False]
        assert sum("incomplete read" in x for x in compared.stderr.splitlines()) == 2
    finally:
        tempo.close()


def test_a_server_that_ignores_the_window_is_capped_after_a_few_halvings() -> None:
    everything = [Hit(f"{i:032x}", i) for i in range(1, 200)]
    found, capped, requests = page_windows(lambda lo, hi, want: everything[:want], 0, 3_600_000_000, limit=None, page=100)
    # its answers lie outside the halves: after 4 identical answers the read stops, capped
    assert capped and len(found) == 100 and requests == 6


def test_phoenix_search_follows_the_cursor_past_the_first_page() -> None:
    recorded = Path(__file__).parent / "fixtures" / "phoenix_recorded"
    first = json.loads((recorded / "spans.json").read_text())["data"]
    trace_id = (recorded / "trace_id").read_text().strip()
    other = "ab" * 16
    second = [dict(span, context=dict(span["context"], trace_id=other)) for span in first]
    path = "/v1/projects/source/spans?limit=1000&sort=start_time&order=desc"
    with BackendServer() as server:
        server.route(path, {"data": first, "next_cursor": "page-2"})
        server.route(path + "&cursor=page-2", {"data": second, "next_cursor": None})
        source = PhoenixSource(f"{server.url}/projects/source")
        found = source.search_all(None, None, "")
        assert sorted(found.trace_ids) == sorted([trace_id, other]) and not found.capped
        assert source.search_all(1, None, "").trace_ids == [trace_id]  # the newest, from the first page alone
        assert sum(1 for r in server.requests if "cursor=page-2" in r) == 1
        source.close()
