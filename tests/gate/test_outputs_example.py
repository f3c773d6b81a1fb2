"""examples/gate end to end, as docs/gate.md tells a user to run it: the installed ``ragtrail`` console
script in a real process, in the example's directory, ``gate baseline`` then ``gate run`` with every
output written; then the chunking change of seed 000 fails the ``tables`` slice on its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ragtrail.gate import artifacts

from .test_outputs_annotations import parse

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gate"
RAGTRAIL = str(Path(sys.executable).parent / "ragtrail")
TABLES = ["seat-price", "api-calls", "residency", "uptime", "support-hours"]


def _gate(cwd: Path, *args: str, chunker: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RAGTRAIL_", "RAG_EXAMPLE_"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", COLUMNS="200", RAG_EXAMPLE_CHUNKER=chunker)
    return subprocess.run([RAGTRAIL, "gate", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("gate-example")
    for name in ("rag.py", "eval.jsonl"):
        shutil.copy(EXAMPLE / name, d / name)
    proc = _gate(d, "baseline", "--pipeline", "rag:answer", "--set", "eval.jsonl", "--runs", "3", "-o", "gate-baseline.json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith("ragtrail gate baseline: wrote gate-baseline.json (10 cases, 3 runs, set digest ")
    return d


def _run(d: Path, out: str, chunker: str = "") -> subprocess.CompletedProcess[str]:
    return _gate(
        d,
        "run",
        "--pipeline",
        "rag:answer",
        "--set",
        "eval.jsonl",
        "--baseline",
        "gate-baseline.json",
        "--junit",
        f"{out}.xml",
        "--markdown",
        f"{out}.md",
        "--annotations",
        "--artifacts",
        out,
        chunker=chunker,
    )


def _junit(path: Path) -> dict[tuple[str, str], str]:
    root = ET.parse(path).getroot()
    out = {}
    for case in root.iter("testcase"):
        bad = [e.tag for e in case if e.tag in ("failure", "error")]
        out[(case.get("classname") or "", case.get("name") or "")] = bad[0] if bad else "pass"
    return out


METRICS = [
    "recall@retrieve",
    "survival@filter example.freshness",
    "survival@rerank example.reranker",
    "survival@budget example.context_budget",
    "in_context",
    "cited",
    "refusal_rate",
    "rbo",
]


def test_the_unchanged_example_passes_with_every_output_written(example: Path):
    proc = _run(example, "same")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:3] == [
        "::warning title=ragtrail gate warning::(all): slice too small to be statistically boring (n=10 < 20)",
        "::warning title=ragtrail gate warning::policy: slice too small to be statistically boring (n=5 < 20)",
        "::warning title=ragtrail gate warning::tables: slice too small to be statistically boring (n=5 < 20)",
    ]
    assert lines[3] == "::notice title=ragtrail gate%3A PASS::ragtrail gate: PASS (exit 0): 24 checks, 0 failed, 0 problems, 10 cases"
    assert lines[4] == "ragtrail gate: PASS (exit 0): 24 checks, 0 failed, 0 problems, 10 cases"
    expected = {(s, m): "pass" for s in ("(all)", "policy", "tables") for m in METRICS}
    assert _junit(example / "same.xml") == {**expected, ("(evidence)", "evidence"): "pass"}
    body = (example / "same.md").read_text("utf-8").splitlines()
    assert body[0] == "## ✅ ragtrail gate: **PASS**"
    assert [x for x in body if x.startswith("### ")] == [
        "### Slice `(all)`: all checks pass",
        "### Slice `policy`: all checks pass",
        "### Slice `tables`: all checks pass",
    ]
    assert not [x for x in body if "<details>" in x]  # nothing moved: no per-case section
    report = json.loads((example / "same" / "report.json").read_text("utf-8"))
    assert report["verdict"] == "PASS" and report["exit_code"] == 0 and len(report["cases"]) == 10
    index = json.loads((example / "same" / "cases" / "index.json").read_text("utf-8"))
    assert sorted(index.values()) == sorted(c["case"]["id"] for c in report["cases"])


def test_the_chunking_change_fails_the_tables_slice_and_says_where(example: Path):
    proc = _run(example, "flat", chunker="flatten-tables")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    results = _junit(example / "flat.xml")
    assert {m: results[("policy", m)] for m in METRICS} == {m: "pass" for m in METRICS}
    assert {m: results[("tables", m)] for m in METRICS} == {m: "failure" for m in METRICS}
    assert results[("(evidence)", "evidence")] == "pass"
    root = ET.parse(example / "flat.xml").getroot()
    recall = root.find(".//testcase[@classname='tables'][@name='recall@retrieve']/failure")
    assert recall is not None and recall.get("message") == (
        "recall@retrieve fell to 0.000 (floor 1.000, baseline 1.000); relevant ids retrieved in the baseline and not now "
        "in 5 cases (api-calls, residency, seat-price and 2 more)"
    )
    commands = [parse(x) for x in proc.stdout.splitlines() if x.startswith("::")]
    errors = [c for c in commands if c is not None and c[0] == "error"]
    assert len(errors) == 10  # GitHub's per-step limit, the last says how many more
    assert errors[0][1]["title"] == "ragtrail gate FAIL: tables recall@retrieve"  # the slice before the aggregate
    assert errors[-1][2].startswith("7 more errors not annotated here")
    body = (example / "flat.md").read_text("utf-8").splitlines()
    assert body[0] == "## ❌ ragtrail gate: **REGRESSION**"
    assert "### Slice `policy`: all checks pass" in body and "### Slice `tables`: 8 checks failed" in body
    # the five table cases; the policy questions share no word with a table, so no table rode along in their context
    assert "<summary>Per-case movement (5 cases moved or in doubt; 5 unchanged)</summary>" in body
    assert "| `residency` | `tables` | `Where is eu data residency?` | `rbo 0.000; left: table-regions (in no stage now)` |  |" in body
    files = {name: case for name, case in json.loads((example / "flat" / "cases" / "index.json").read_text("utf-8")).items()}
    moved = {case: (example / "flat" / "cases" / name).read_text("utf-8") for name, case in files.items()}
    for case in TABLES:
        text = moved[case]
        assert f"case: {case}" in text.splitlines()
        assert "manifest diff against the baseline:" in text.splitlines()
        assert artifacts.file_name(case) in files
    assert "manifest diff against the baseline:" not in moved["refund-window"].splitlines()
