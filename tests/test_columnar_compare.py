"""``compare --engine columnar`` pairs in SQL (inspect.columnar.pairing) and prints exactly what the
Python path prints (inspect.compare, the reference) on the same stores: the JSON, the terminal text and
the Markdown, both ways round, on stores where questions differ in evidence, in status alone and in
answer alone, are missing on one side, repeat (the latest start wins; on a tie the trace read first),
lose their query receipt, fall back, and where a stage is only on one side. And two processes over
one store's embedded engine: the second says so in one line and exits 10."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from test_cli_errors import ragtrail
from test_inspect_many import experiment

pytest.importorskip("chdb")

_SHA = re.compile(rb'("key":"ragtrail\.answer\.sha256","value":\{"stringValue":")[0-9a-f]{64}')
_STATUS_OK = b'{"key":"ragtrail.stage.status","value":{"stringValue":"ok"}}'


def _lines(store: Path) -> list[bytes]:
    """The store's traces in reading order, one OTLP JSON line each (the exporter batches several a line)."""
    files = sorted(store.glob("*.jsonl"), key=lambda p: (p.stat().st_mtime, str(p)))
    traces: dict[str, list[dict[str, Any]]] = {}
    for line in (line for path in files for line in path.read_bytes().splitlines() if line.strip()):
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    traces.setdefault(span["traceId"], []).append({**rs, "scopeSpans": [{**ss, "spans": [span]}]})
    return [json.dumps({"resourceSpans": parts}, separators=(",", ":")).encode() for parts in traces.values()]


def _trace_id(line: bytes) -> bytes:
    found = re.search(rb'"traceId":"([0-9a-f]{32})"', line)
    assert found is not None
    return found.group(1)


def _copy(line: bytes, n: int) -> bytes:
    """The same trace under another trace id (same start: a tie)."""
    return line.replace(_trace_id(line), f"{n:032x}".encode())


def _stores(tmp_path: Path) -> tuple[Path, Path]:
    """A: 30 questions, then questions 0-9 asked again by the new reranker (later: they win), and
    question 12 copied under another id (a tie: the first read wins). B: 34 questions by the new
    reranker (falls back on every 5th); question 3 without its query receipt, question 21 with
    another answer, question 22's budget under another component, question 23's first stage with
    another status only."""
    raw_a, raw_b = tmp_path / "raw-a", tmp_path / "raw-b"
    experiment(raw_a, new_reranker=False, questions=30)
    experiment(raw_b, new_reranker=True, questions=34)
    a_lines = _lines(raw_a)
    experiment(raw_a, new_reranker=True, questions=10)
    again = _lines(raw_a)[len(a_lines) :]
    assert len(a_lines) == 30 and len(again) == 10
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "traces-0001.jsonl").write_bytes(b"\n".join([*a_lines, _copy(a_lines[12], 1), *again]) + b"\n")
    lines = _lines(raw_b)
    lines[3] = lines[3].replace(b'"ragtrail.query.sha256"', b'"ragtrail.query.sha256_not"')
    lines[21] = _SHA.sub(lambda m: m.group(1) + b"f" * 64, lines[21])
    lines[22] = lines[22].replace(b'"exp.budget"', b'"exp.budget2"')
    assert _STATUS_OK in lines[23]
    lines[23] = lines[23].replace(_STATUS_OK, _STATUS_OK.replace(b'"ok"', b'"empty"'), 1)
    (b / "traces-0001.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return a, b


def _outputs(a: Path, b: Path, engine: str, cache: Path) -> list[str]:
    env = {"RAGTRAIL_COLUMNAR_DIR": str(cache), "COLUMNS": "200"}
    out = []
    for form in (("--json",), (), ("--markdown",), ("--show", "3"), ("--markdown", "--show", "2")):
        result = ragtrail("compare", str(a), str(b), "--engine", engine, *form, env=env)
        assert result.returncode == 0, result.stderr
        out.append(result.stdout)
    return out


def test_compare_paired_in_sql_prints_what_the_python_path_prints(tmp_path: Path) -> None:
    a, b = _stores(tmp_path)
    python = _outputs(a, b, "python", tmp_path / "cache")
    result = json.loads(python[0])
    assert (result["a"]["repeats"], result["b"]["no_query_receipt"]) == (11, 1)
    assert result["only_in_b"] and set(result["verdicts"]) == {
        "different evidence",
        "same evidence, same answer",
        "same evidence, different answer",
    }
    chains = {p["query_sha256"]: p for p in result["questions"]}
    assert any(c.get("only_in") for p in chains.values() for c in p["chain"])
    assert any(p["chain"] and p["verdict"] == "same evidence, same answer" for p in chains.values())  # status alone
    assert result["a"]["survival"] and result["newly_refused_first_difference"]
    twin = [line for line in _lines(a) if _trace_id(line) == f"{1:032x}".encode()]
    assert twin and all(p["a"] != f"{1:032x}" for p in result["questions"])  # the tie: the first read is kept
    assert _outputs(a, b, "columnar", tmp_path / "cache") == python
    assert _outputs(b, a, "columnar", tmp_path / "cache") == _outputs(b, a, "python", tmp_path / "cache")


_HOLD = """
import sys
from pathlib import Path
from typing import Any
from ragtrail.inspect.columnar.store import open_store
engine = open_store(Path(sys.argv[1]))
print("open", flush=True)
sys.stdin.read()
engine.close()
"""


def test_a_second_process_on_one_store_says_so_and_exits_10(tmp_path: Path) -> None:
    """Two ragtrail processes on one store's embedded engine: the first holds it, the second is told."""
    store, cache = tmp_path / "store", tmp_path / "cache"
    experiment(store, new_reranker=False, questions=3)
    env = {"RAGTRAIL_COLUMNAR_DIR": str(cache)}
    import os

    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(store)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        for args in (("stats", "--source", str(store)), ("compare", str(store), str(store))):
            result = ragtrail(*args, "--engine", "columnar", env=env)
            assert result.returncode == 10, result.stderr
            assert result.stderr.count("\n") == 1 and "in use by another ragtrail process" in result.stderr, result.stderr
            assert result.stdout == ""
    finally:
        holder.communicate("")
    assert holder.returncode == 0
    after = ragtrail("stats", "--source", str(store), "--engine", "columnar", env=env)
    assert after.returncode == 0, after.stderr
