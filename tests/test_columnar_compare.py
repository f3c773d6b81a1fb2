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


def _records(engine_dir: Path) -> list[tuple[Any, ...]]:
    from ragtrail.inspect.columnar import per_trace
    from ragtrail.inspect.columnar.engine import ChdbEngine

    engine = ChdbEngine(engine_dir)
    try:
        return engine.run_sql(f"SELECT {per_trace.COLUMNS} FROM {per_trace.TABLE} ORDER BY TraceId")
    finally:
        engine.close()


def _halves(line: bytes) -> tuple[bytes, bytes]:
    """One trace's line (one span a part, :func:`_lines`) as two lines: its first spans, then the rest."""
    parts = json.loads(line)["resourceSpans"]
    cut = len(parts) // 2
    assert 0 < cut < len(parts)
    return tuple(json.dumps({"resourceSpans": p}, separators=(",", ":")).encode() + b"\n" for p in (parts[:cut], parts[cut:]))  # type: ignore[return-value]


def test_a_trace_split_over_two_lines_folds_into_one_compare_record(tmp_path: Path) -> None:
    """The ingest keeps one record per trace (inspect.columnar.per_trace): a trace whose spans arrive in
    two lines, the second read by a later catch-up, ends with the record of the trace read whole."""
    from ragtrail.inspect.columnar.engine import ChdbEngine
    from ragtrail.inspect.columnar.ingest import catch_up

    raw = tmp_path / "raw"
    experiment(raw, new_reranker=True, questions=6)
    lines = _lines(raw)
    whole, split = tmp_path / "whole", tmp_path / "split"
    whole.mkdir()
    split.mkdir()
    (whole / "traces-0001.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    halves = [_halves(line) for line in lines]
    path = split / "traces-0001.jsonl"
    path.write_bytes(b"".join(h[0] for h in halves))
    for store in (whole, split):
        engine = ChdbEngine(tmp_path / f"engine-{store.name}")
        try:
            assert catch_up(engine, store).lines == len(lines)
        finally:
            engine.close()
    first_halves = _records(tmp_path / "engine-split")
    with path.open("ab") as fh:
        fh.write(b"".join(h[1] for h in halves))
    engine = ChdbEngine(tmp_path / "engine-split")
    try:
        assert catch_up(engine, split).lines == len(lines)
    finally:
        engine.close()
    expected = _records(tmp_path / "engine-whole")
    assert len(expected) == len(lines) == len({r[0] for r in expected})
    assert first_halves != expected  # the first lines alone make other records: the second line changed them
    assert _records(tmp_path / "engine-split") == expected
    env = {"RAGTRAIL_COLUMNAR_DIR": str(tmp_path / "cache")}
    outputs = [ragtrail("compare", str(split), str(whole), "--json", "--engine", e, env=env) for e in ("python", "columnar")]
    assert outputs[0].returncode == 0 and json.loads(outputs[0].stdout)["paired"] == 6
    assert outputs[1].stdout == outputs[0].stdout, outputs[1].stderr


def test_an_engine_directory_from_before_the_compare_records_builds_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store ingested by a ragtrail without the per-trace records (the table missing) is compared
    right: the records are built from the spans already ingested, the lines not read again."""
    from ragtrail.inspect.columnar import per_trace
    from ragtrail.inspect.columnar.store import engine_dir, open_store

    a, b = _stores(tmp_path)
    cache = tmp_path / "cache"
    monkeypatch.setenv("RAGTRAIL_COLUMNAR_DIR", str(cache))
    built, spans = [], []
    for store in (a, b):
        open_store(store).close()
        built.append(_records(engine_dir(store)))
        engine = open_store(store)
        engine.run_sql(f"DROP TABLE {per_trace.TABLE}")
        spans.append(engine.run_sql("SELECT count() FROM otel_traces"))
        engine.close()
    assert _outputs(a, b, "columnar", cache) == _outputs(a, b, "python", cache)
    assert [_records(engine_dir(s)) for s in (a, b)] == built and all(built)
    for store, before in zip((a, b), spans, strict=True):
        engine = open_store(store)
        try:
            assert engine.run_sql("SELECT count() FROM otel_traces") == before  # not ingested again
        finally:
            engine.close()
