"""The ``ragtrail`` console script on bad input: one line saying what to do, a distinct exit code, no traceback.

Runs the installed entry point in a subprocess, the way a user (or CI) does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.backend_server import BackendServer
from fixtures.ragtrail_traces import rag_run, record

FIXTURES = Path(__file__).parent / "fixtures"
# the trace recorded from a real Jaeger (tests/e2e); the Tempo fixtures are derived from it
TRACE_ID = json.loads((FIXTURES / "jaeger_recorded" / "whole_trace.v1.json").read_text())["data"][0]["traceID"]
RAGTRAIL = str(Path(sys.executable).with_name("ragtrail"))


def ragtrail(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGTRAIL_", "OTEL_"))}
    full_env.update(env or {})
    return subprocess.run([RAGTRAIL, *args], capture_output=True, text=True, cwd=cwd, env=full_env, timeout=60)


def assert_one_line_error(result: subprocess.CompletedProcess, code: int, *phrases: str) -> None:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ragtrail: error: ")
    for phrase in phrases:
        assert phrase in lines[0], lines[0]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("store")
    record(path, rag_run)
    return path


def test_unknown_trace_id(store):
    assert_one_line_error(ragtrail("show", "ab" * 16, "--source", str(store)), 3, "not found", "check the id")


def test_no_local_store(tmp_path):
    assert_one_line_error(ragtrail("show", "last", cwd=tmp_path), 3, "no local store", "ragtrail demo")


def test_malformed_json(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("<html>502 Bad Gateway</html>\n")
    assert_one_line_error(ragtrail("show", str(bad)), 4, "not valid JSON")
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"hello": "world"}))
    assert_one_line_error(ragtrail("verify", str(wrong)), 4, "no resourceSpans")


def test_truncated_file(tmp_path):
    cut = tmp_path / "cut.json"
    text = (FIXTURES / "tempo_v1_trace.json").read_text()
    cut.write_text(text[: len(text) // 3])
    assert_one_line_error(ragtrail("show", str(cut)), 8, "ends in the middle", "re-export")


def test_trace_without_ragtrail_spans(tmp_path):
    def run(tracer):
        with tracer.start_as_current_span("GET /health"):
            pass

    record(tmp_path, run)
    assert_one_line_error(ragtrail("show", "last", "--source", str(tmp_path)), 7, "none from ragtrail", "instrument")


def test_unreachable_server():
    with BackendServer() as server:
        port = server.port
    assert_one_line_error(ragtrail("show", TRACE_ID, "--source", f"jaeger+http://127.0.0.1:{port}"), 5, "cannot reach Jaeger", "start the server")


def test_server_timing_out():
    with BackendServer() as server:
        server.route(f"/api/v2/traces/{TRACE_ID}", "{}", delay=3.0)
        assert_one_line_error(ragtrail("verify", TRACE_ID, "--source", f"tempo+{server.url}", "--timeout", "0.5"), 5, "timed out", "--timeout")


@pytest.mark.parametrize("status", [400, 500, 503])
def test_http_errors(status):
    with BackendServer() as server:
        server.route(f"/api/v3/traces/{TRACE_ID}", "backend says no", status=status)
        assert_one_line_error(ragtrail("show", TRACE_ID, "--source", f"jaeger+{server.url}"), 6, f"HTTP {status}", "backend says no")


def test_usage_errors(store):
    assert_one_line_error(ragtrail("show"), 2, "Missing argument", "ragtrail show --help")
    assert_one_line_error(ragtrail("show", "last", "--bogus"), 2, "No such option")
    assert_one_line_error(ragtrail("verify", "--source", str(store)), 2, "nothing to verify", "--search")
    assert_one_line_error(ragtrail("show", "not-an-id", "--source", str(store)), 2, "neither a trace id")
    assert_one_line_error(ragtrail("show", "last", "--source", "http://127.0.0.1:1"), 2, "jaeger+http")


def test_help_documents_exit_codes():
    result = ragtrail("--help")
    assert result.returncode == 0
    for code, words in (
        (1, "alarms found"),
        (3, "trace not found"),
        (4, "malformed input"),
        (5, "unreachable"),
        (6, "HTTP error"),
        (7, "no ragtrail spans"),
        (8, "truncated file"),
    ):
        assert any(line.strip().startswith(f"{code} ") and words in line for line in result.stdout.splitlines()), code
