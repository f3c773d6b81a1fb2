"""Property-based fuzzing of every reader and the CLI on mutations of real recorded traces (issue 13).

Seeds are the real shapes: the local store's OTLP JSON lines (a trace recorded here by the real recorder
and local-store exporter), Jaeger v3 (OTLP JSON under ``result``) and v1 bodies recorded from a real
Jaeger (tests/fixtures/jaeger_recorded/), and the Tempo v1/v2 bodies derived from them; read from files
(every reader) and served by a real HTTP server on 127.0.0.1 (the Jaeger and Tempo sources). Hypothesis
drops, duplicates, retypes and re-nests fields, writes huge ints, NaN, odd unicode, and truncates the
bytes. Whatever comes out, the only allowed outcomes are a manifest (and its terminal, JSON and HTML
views) or an :class:`~ragtrail.inspect.errors.InspectError` with a documented exit code other than 70;
never another exception, never exit 70, never a traceback.

The default run is deterministic (``derandomize=True``, fixed ``max_examples``) and takes well under a
minute; ``RAGTRAIL_FUZZ_EXAMPLES=3000`` runs a long campaign (benchmarks/README.md has the last one).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from fixtures.backend_server import BackendServer
from fixtures.ragtrail_traces import rag_run, record, store_lines
from ragtrail.cli.app import main
from ragtrail.inspect import render, report
from ragtrail.inspect.errors import EXIT_CODES, EXIT_INTERNAL, InspectError
from ragtrail.inspect.manifest import build, fidelity_only
from ragtrail.inspect.safe import json_text
from ragtrail.inspect.sources import resolve

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLES = int(os.environ.get("RAGTRAIL_FUZZ_EXAMPLES", "0")) or None
DOCUMENTED = {code for code, _ in EXIT_CODES} - {EXIT_INTERNAL}
SEEN_CODES: dict[str, dict[int, int]] = {"readers": {}, "cli": {}}  # reported by the long campaign


@lru_cache(maxsize=1)
def _local_store() -> tuple[str, list[Any]]:
    """A trace recorded by the real recorder into a real local store: (trace id, its JSON lines parsed)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        trace_id = record(Path(tmp), rag_run)
        return trace_id, store_lines(Path(tmp))


def _fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


SEEDS = (
    "local_store",
    "jaeger_recorded/whole_trace.v3.json",
    "jaeger_recorded/whole_trace.v1.json",
    "jaeger_recorded/truncated_by_collector.v3.json",
    "jaeger_recorded/tail_sampled_degraded.v1.json",
    "tempo_v1_trace.json",
    "tempo_v2_partial.json",
)


def _seed(name: str) -> tuple[str, list[Any], bool]:
    """(trace id, documents, one JSON document per line?) of a seed."""
    if name == "local_store":
        trace_id, lines = _local_store()
        return trace_id, lines, True
    doc = _fixture(name)
    trace_id = json.loads((FIXTURES / "jaeger_recorded" / "whole_trace.v1.json").read_text())["data"][0]["traceID"]
    return trace_id, [doc], False


HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from(
        [
            2**63,
            2**64,
            -1,
            10**30,
            "NaN",
            "Infinity",
            "-Infinity",
            "",
            "0" * 40,
            "1e400",
            "ab" * 8,
            "AAAAAAAAAAAAAAAAAAAAAA==",
            "[" * 20,
            "[1,2]",
            {"stringValue": {"x": 1}},
            {"intValue": "x"},
            {"arrayValue": {"values": {"k": 1}}},
            {"kvlistValue": {"values": [{"key": 1}]}},
            [[[]]],
        ]
    ),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.one_of(st.integers(), st.text(max_size=4)), max_size=3),
    st.dictionaries(st.text(max_size=6), st.one_of(st.integers(), st.text(max_size=4)), max_size=3),
)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(_paths(v, (*prefix, i)))
    return out


def _get(node: Any, path: tuple) -> Any:
    for p in path:
        node = node[p]
    return node


def _mutate(doc: Any, data: st.DataObject) -> Any:
    paths = _paths(doc)
    path = paths[data.draw(st.integers(0, len(paths) - 1), label="node")]
    op = data.draw(st.sampled_from(["drop", "duplicate", "retype", "nest", "unwrap", "swap"]), label="op")
    if not path:  # the whole document
        return copy.deepcopy(data.draw(HOSTILE)) if op == "retype" else [doc] if op == "nest" else doc
    parent, key = _get(doc, path[:-1]), path[-1]
    value = parent[key]
    if op == "drop":
        del parent[key]
    elif op == "duplicate":
        if isinstance(parent, list):
            parent.insert(key, copy.deepcopy(value))
        else:
            parent[data.draw(st.sampled_from(["name", "key", "value", "events", "spans", "attributes", "traceId", "spanId", "dup"]))] = copy.deepcopy(
                value
            )
    elif op == "retype":
        parent[key] = copy.deepcopy(data.draw(HOSTILE, label="value"))  # sampled values are shared objects
    elif op == "nest":
        parent[key] = data.draw(st.sampled_from([[value], {"values": [value]}, {"value": value}]))
    elif op == "unwrap" and isinstance(value, (list, dict)) and value:
        parent[key] = value[0] if isinstance(value, list) else next(iter(value.values()))
    elif op == "swap":
        if isinstance(value, str) and value.lstrip("-").isdigit():
            parent[key] = int(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            parent[key] = str(value) if not isinstance(value, float) or math.isfinite(value) else "NaN"
        elif isinstance(value, str):
            parent[key] = value + data.draw(st.sampled_from(["\x00", "\ud800", "\u202e", "\n", "é" * 3, "[/]"]))
    return doc


def _mutated_bytes(data: st.DataObject) -> tuple[str, bytes, str]:
    """(trace id, the bytes of a mutated seed, the file suffix)."""
    name = data.draw(st.sampled_from(SEEDS), label="seed")
    trace_id, docs, per_line = _seed(name)
    docs = copy.deepcopy(docs)
    target = data.draw(st.integers(0, len(docs) - 1), label="document")
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        docs[target] = _mutate(docs[target], data)
    text = (
        "".join(json.dumps(d, ensure_ascii=data.draw(st.booleans())) + "\n" for d in docs)
        if per_line
        else json.dumps(docs[0], indent=data.draw(st.sampled_from([None, 1])))
    )
    raw = text.encode("utf-8", "surrogatepass")
    if data.draw(st.integers(0, 9), label="truncate?") == 0:
        raw = raw[: data.draw(st.integers(0, len(raw)), label="cut at")]
    return trace_id, raw, ".jsonl" if per_line else ".json"


def _outcome(fn) -> int:
    """0 when ``fn`` gave a result, else the documented exit code of the InspectError it raised."""
    try:
        fn()
        return 0
    except InspectError as exc:
        assert exc.exit_code in DOCUMENTED, (exc.exit_code, exc.one_line())
        assert exc.one_line() and "\n" not in exc.message
        return exc.exit_code


def _read_everything(ref: str, source: str | None) -> None:
    trace = resolve(ref, source)
    manifest = build(trace)
    fidelity_only(trace)
    console = Console(file=io.StringIO(), width=120, color_system=None, emoji=False, highlight=False)
    render.show(console, manifest, limit=5)
    render.fidelity(console, manifest.fidelity)
    json.loads(json_text(manifest, default=str))
    report.render(manifest)


FUZZ = settings(
    max_examples=EXAMPLES or 250,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)


@FUZZ
@given(st.data())
def test_readers_never_fail_with_a_bug(tmp_path_factory, data):
    trace_id, raw, suffix = _mutated_bytes(data)
    path = tmp_path_factory.mktemp("fuzz") / f"trace{suffix}"
    path.write_bytes(raw)
    for ref, source in ((str(path), None), (trace_id, str(path)), (trace_id, str(path.parent))):
        code = _outcome(lambda ref=ref, source=source: _read_everything(ref, source))
        SEEN_CODES["readers"][code] = SEEN_CODES["readers"].get(code, 0) + 1


@pytest.fixture(scope="module")
def backend():
    """A real HTTP server on 127.0.0.1 answering like Jaeger or Tempo with whatever a test routes."""
    with BackendServer() as server:
        yield server


@settings(FUZZ, max_examples=EXAMPLES or 60)
@given(st.data())
def test_http_readers_never_fail_with_a_bug(backend, data):
    """The same mutations served by a real HTTP server: Jaeger's v3 then v1 API, Tempo's v2 then v1."""
    trace_id, raw, _ = _mutated_bytes(data)
    body = raw.decode("utf-8", "replace")
    kind = data.draw(st.sampled_from(["jaeger", "tempo"]), label="backend")
    first, fallback = ("/api/v3/traces/", "/api/traces/") if kind == "jaeger" else ("/api/v2/traces/", "/api/traces/")
    backend.routes.clear()
    for prefix in data.draw(st.sampled_from([(first,), (fallback,), (first, fallback)]), label="routes"):
        backend.route(prefix + trace_id, body, status=data.draw(st.sampled_from([200, 200, 200, 404, 500])))
    code = _outcome(lambda: _read_everything(trace_id, f"{kind}+{backend.url}"))
    SEEN_CODES["readers"][code] = SEEN_CODES["readers"].get(code, 0) + 1


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0
    return code, out.getvalue(), err.getvalue()


@settings(FUZZ, max_examples=EXAMPLES or 60)
@given(st.data())
def test_cli_show_and_verify_never_exit_70(tmp_path_factory, data):
    trace_id, raw, suffix = _mutated_bytes(data)
    path = tmp_path_factory.mktemp("fuzz-cli") / f"trace{suffix}"
    path.write_bytes(raw)
    command = data.draw(
        st.sampled_from(
            [
                ("show", str(path)),
                ("show", trace_id, "--source", str(path), "--json"),
                ("verify", str(path)),
                ("verify", trace_id, "--source", str(path), "--strict"),
                ("report", str(path), "-o", str(path.with_suffix(".html"))),
            ]
        )
    )
    code, out, err = _cli(*command)
    SEEN_CODES["cli"][code] = SEEN_CODES["cli"].get(code, 0) + 1
    assert code in DOCUMENTED, (code, err)
    assert "Traceback" not in err and "internal error" not in err, err
    assert err == "" or (len(err.splitlines()) == 1 and err.startswith("ragtrail: error: ")), err
    assert "\x1b" not in out + err and "\u202e" not in out + err


@pytest.fixture(scope="module", autouse=True)
def _report_codes():
    yield
    if EXAMPLES:  # the long campaign says what it saw
        print(f"\nfuzz exit codes: readers {dict(sorted(SEEN_CODES['readers'].items()))}, cli {dict(sorted(SEEN_CODES['cli'].items()))}")
