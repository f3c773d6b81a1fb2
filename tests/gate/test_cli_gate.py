"""``ragtrail gate baseline`` and ``ragtrail gate run`` as CI calls them: the installed console script in a
real process, the pipeline imported from the working directory, exit codes PASS 0 / REGRESSION 1 /
INCONCLUSIVE 3 (usage 2, malformed set 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from . import gate_pipeline as gp
from .test_gate import _record

ROOT = Path(__file__).resolve().parents[2]
RAGTRAIL = str(Path(sys.executable).parent / "ragtrail")
PIPELINE = "tests.gate.gate_pipeline:answer"


def _gate(*args: str, mode: str = "base", cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RAGTRAIL_"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", RAGTRAIL_TEST_GATE_MODE=mode, COLUMNS="200")
    return subprocess.run([RAGTRAIL, "gate", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("gate-cli")
    eval_set = d / "eval.jsonl"
    eval_set.write_text("".join(json.dumps(r) + "\n" for r in gp.eval_lines()))
    base = d / "baseline.json"
    proc = _gate("baseline", "--pipeline", PIPELINE, "--set", str(eval_set), "--runs", "2", "-o", str(base))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith(f"ragtrail gate baseline: wrote {base} (80 cases, 2 runs, set digest ")
    return {"set": eval_set, "baseline": base, "dir": d}


def _json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def test_baseline_file_is_committable(files: dict[str, Path]) -> None:
    text = files["baseline"].read_text()
    data = json.loads(text)
    assert text == json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    assert data["runs"] == 2 and data["pipeline"] == PIPELINE and data["set"]["path"] == str(files["set"])


def test_exit_codes(files: dict[str, Path]) -> None:
    args = ("run", "--pipeline", PIPELINE, "--set", str(files["set"]), "--baseline", str(files["baseline"]))
    passed = _gate(*args)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert passed.stdout.splitlines()[0] == "ragtrail gate: PASS (exit 0): 35 checks, 0 failed, 0 problems, 80 cases"
    regression = _gate(*args, "--json", mode="bigger_k_fallback")
    assert regression.returncode == 1
    report = _json(regression)
    assert (report["verdict"], report["exit_code"], report["problems"]) == ("REGRESSION", 1, [])
    assert {(c["slice"], c["metric"]) for c in report["checks"] if not c["passed"]} >= {
        ("table", "survival@budget gate.context_budget"),
        ("(all)", "refusal_rate"),
    }
    inconclusive = _gate(*args, "--json", mode="raise_on")
    assert inconclusive.returncode == 3
    assert [(p["kind"], p["case_id"]) for p in _json(inconclusive)["problems"]] == [("pipeline_error", "policy-03")]


def test_usage_and_input_errors(files: dict[str, Path]) -> None:
    both = _gate("run", "--pipeline", PIPELINE, "--traces", str(files["dir"]), "--set", str(files["set"]), "--baseline", str(files["baseline"]))
    assert both.returncode == 2
    assert both.stderr.startswith("ragtrail: error: pass exactly one of --pipeline and --traces")
    bad = files["dir"] / "bad.jsonl"
    bad.write_text('{"query": "q", "relevant": ["a"]}\n{"query": "q2", "relevant": "a"}\n')
    malformed = _gate("run", "--pipeline", PIPELINE, "--set", str(bad), "--baseline", str(files["baseline"]))
    assert malformed.returncode == 4
    assert malformed.stderr.startswith(f'ragtrail: error: {bad} line 2: "relevant" must be a list of non-empty')
    missing = _gate("run", "--pipeline", "no_such_module:answer", "--set", str(files["set"]), "--baseline", str(files["baseline"]))
    assert missing.returncode == 2
    assert missing.stderr.startswith("ragtrail: error: cannot import 'no_such_module'")
    other = files["dir"] / "other.jsonl"
    other.write_text(files["set"].read_text().replace("what does", "what did", 1))
    mismatch = _gate("run", "--pipeline", PIPELINE, "--set", str(other), "--baseline", str(files["baseline"]), "--json")
    assert mismatch.returncode == 3
    kinds = [p["kind"] for p in _json(mismatch)["problems"]]
    assert kinds == ["baseline_mismatch"]


def test_traces_from_a_local_store(files: dict[str, Path], tmp_path: Path) -> None:
    store = tmp_path / ".ragtrail"
    _record(store, [r["query"] for r in gp.eval_lines()])
    proc = _gate("run", "--traces", str(store), "--set", str(files["set"]), "--baseline", str(files["baseline"]), "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    report = _json(proc)
    assert (report["verdict"], report["pipeline"], len(report["cases"])) == ("PASS", None, 80)
    short = _gate("baseline", "--traces", str(store), "--set", str(files["set"]), "--runs", "2", "-o", str(tmp_path / "b.json"))
    assert short.returncode == 3 and not (tmp_path / "b.json").exists()  # one recorded run is not two
    assert short.stdout.splitlines()[1].startswith("  missing_query case policy-00: no trace in ")
    assert short.stdout.splitlines()[1].endswith(" at hop 0 for run 1 of 2")
    _record(store, [r["query"] for r in gp.eval_lines()])
    frozen = _gate("baseline", "--traces", str(store), "--set", str(files["set"]), "--runs", "2", "-o", str(tmp_path / "b.json"))
    assert frozen.returncode == 0, frozen.stdout
    assert json.loads((tmp_path / "b.json").read_text())["runs"] == 2


def test_ci_outputs_are_written(files: dict[str, Path], tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    junit, markdown, artifacts = tmp_path / "gate.xml", tmp_path / "gate.md", tmp_path / "artifacts"
    proc = _gate(
        "run",
        "--pipeline",
        PIPELINE,
        "--set",
        str(files["set"]),
        "--baseline",
        str(files["baseline"]),
        "--junit",
        str(junit),
        "--markdown",
        str(markdown),
        "--artifacts",
        str(artifacts),
        "--annotations",
        mode="rebuild_table",
    )
    assert proc.returncode == 1, proc.stderr
    failures = {(tc.get("classname"), tc.get("name")) for tc in ET.parse(junit).getroot().iter("testcase") if tc.find("failure") is not None}
    assert failures == {
        ("table", m)
        for m in ("recall@retrieve", "survival@rerank gate.overlap_reranker", "survival@budget gate.context_budget", "in_context", "cited")
    }
    assert "REGRESSION" in markdown.read_text().splitlines()[0]
    annotations = [line for line in proc.stdout.splitlines() if line.startswith("::error ")]
    assert len(annotations) == 5
    report = json.loads((artifacts / "report.json").read_text())
    assert report["verdict"] == "REGRESSION"
    diff = next(p for p in (artifacts / "cases").iterdir() if p.name.startswith("table-01-"))
    assert "retrieve (gate.vector)" in diff.read_text()  # the manifest diff against the baseline, for a human


def test_what_the_pipeline_prints_stays_out_of_the_report(tmp_path: Path) -> None:
    (tmp_path / "chatty.py").write_text(
        "import ragtrail\n"
        "print('loading the index...')\n"
        "@ragtrail.retriever(component='chatty.search')\n"
        "def search(query):\n"
        "    print('searching', query)\n"
        "    return [{'id': 'doc-1', 'content': 'one', 'score': 1.0}]\n"
        "@ragtrail.pipeline(component='chatty.answer')\n"
        "def answer(query):\n"
        "    return search(query)\n"
    )
    (tmp_path / "eval.jsonl").write_text('{"id": "q", "query": "anything?", "relevant": ["doc-1"]}\n')
    frozen = _gate("baseline", "--pipeline", "chatty:answer", "--set", "eval.jsonl", "-o", "b.json", "--json", cwd=tmp_path)
    assert frozen.returncode == 0, frozen.stderr
    assert json.loads(frozen.stdout)["thresholds"]["(all)"]["recall@retrieve"]["mean"] == 1.0
    assert frozen.stderr.splitlines()[:4] == ["loading the index..."] + ["searching anything?"] * 3  # --runs 3
    run = _gate("run", "--pipeline", "chatty:answer", "--set", "eval.jsonl", "--baseline", "b.json", "--json", cwd=tmp_path)
    assert run.returncode == 0 and _json(run)["verdict"] == "PASS"
    assert run.stderr.splitlines()[:2] == ["loading the index...", "searching anything?"]
