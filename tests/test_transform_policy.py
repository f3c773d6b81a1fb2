"""Issue 28, item 3: a transform policy. A versioned file grants each component (a glob) the transform
rules it may cite; its version and digest travel on the pipeline span; ``ragtrail verify --policy``
alarms on a citation the policy does not grant to the citing stage, and on a trace recorded under
another policy. Without a policy nothing is written (the wire snapshot pins that)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

import ragtrail
from fixtures.ragtrail_traces import record, trace_id_now
from ragtrail import settings
from ragtrail.contract import semconv as sc
from ragtrail.contract.policy import PolicyError, load_policy, parse_policy
from ragtrail.contract.receipts import receipt
from ragtrail.inspect.stream import TraceStream
from ragtrail.recorder.candidates import Candidate
from test_cli_errors import ragtrail as cli

GRANTS_TRIM = {"version": 3, "grants": [{"component": "tests.tr*", "rules": ["budget_trim@1"]}, {"component": "*", "rules": ["preview@1"]}]}
DENIES_TRIM = {"version": 3, "grants": [{"component": "tests.trim", "rules": ["truncate@1"]}, {"component": "*", "rules": ["preview@1"]}]}


def budget_run(tracer: Any) -> str:
    """retrieve → budget, the budget stage trimming one document under ``budget_trim@1``."""
    with ragtrail.stage("pipeline", "tests.budget_pipe", tracer=tracer):
        doc = {"id": "long", "content": "word " * 50}
        with ragtrail.stage("retrieve", "tests.r", tracer=tracer) as s:
            s.query("q")
            s.outputs([doc])
        with ragtrail.stage("budget", "tests.trim", budget_limit=10, budget_unit="words", tracer=tracer) as s:
            s.inputs([doc])
            trimmed = Candidate(id="long", content="word " * 10, transform_rule="budget_trim@1", derived_from=receipt(doc["content"]).sha256)
            s.outputs([trimmed])
        return trace_id_now()


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc, indent=2))
    return path


def recorded(store: Path, monkeypatch: pytest.MonkeyPatch, policy: Path | None) -> str:
    if policy is None:
        monkeypatch.delenv(sc.ENV_TRANSFORM_POLICY, raising=False)
    else:
        monkeypatch.setenv(sc.ENV_TRANSFORM_POLICY, str(policy))
    trace_id: str = record(store, budget_run)
    monkeypatch.delenv(sc.ENV_TRANSFORM_POLICY, raising=False)
    return trace_id


def pipeline_attributes(store: Path) -> dict[str, Any]:
    (trace,) = list(TraceStream(str(store)))
    return next(s.attributes for s in trace.spans if s.attributes.get(sc.STAGE_KIND) == sc.KIND_PIPELINE)


def test_the_policy_travels_on_the_pipeline_span(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    grants = write(tmp_path / "grants.json", GRANTS_TRIM)
    recorded(tmp_path / "with", monkeypatch, grants)
    attributes = pipeline_attributes(tmp_path / "with")
    assert attributes[sc.POLICY_VERSION] == 3 and attributes[sc.POLICY_SHA256] == load_policy(grants).sha256
    # the digest is of the policy, not of its layout
    assert load_policy(grants).sha256 == parse_policy(json.dumps(GRANTS_TRIM)).sha256 != parse_policy(json.dumps(DENIES_TRIM)).sha256
    recorded(tmp_path / "without", monkeypatch, None)
    assert not {sc.POLICY_VERSION, sc.POLICY_SHA256} & set(pipeline_attributes(tmp_path / "without"))


def test_a_budget_trim_passes_with_a_policy_that_grants_it_and_alarms_with_one_that_does_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    grants, denies = write(tmp_path / "grants.json", GRANTS_TRIM), write(tmp_path / "denies.json", DENIES_TRIM)
    recorded(tmp_path / "granted", monkeypatch, grants)
    ok = cli("verify", "--search", "--source", str(tmp_path / "granted"), "--policy", str(grants))
    assert ok.returncode == 0 and ok.stdout.startswith("ok trace="), ok.stdout + ok.stderr
    assert "changed_cited 1" in ok.stdout

    trace_id = recorded(tmp_path / "denied", monkeypatch, denies)
    (trace,) = list(TraceStream(str(tmp_path / "denied")))
    budget = next(s for s in trace.spans if s.attributes.get(sc.STAGE_KIND) == sc.KIND_BUDGET)
    alarm = cli("verify", "--search", "--source", str(tmp_path / "denied"), "--policy", str(denies))
    assert alarm.returncode == 1
    assert alarm.stdout.splitlines() == [
        f"ALARM trace={trace_id} span={budget.span_id} stage=budget tests.trim candidate=long field=ragtrail.candidate.transform.rule: "
        "cited, but not allowed by policy v3 (budget_trim@1 is not granted to tests.trim)"
    ]
    as_json = json.loads(cli("verify", "--search", "--source", str(tmp_path / "denied"), "--policy", str(denies), "--json").stdout)
    assert [a["problem"] for a in as_json[0]["fidelity"]["alarms"]] == ["cited, but not allowed by policy v3"]


def test_a_trace_recorded_under_another_policy_is_said_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    grants = write(tmp_path / "grants.json", GRANTS_TRIM)
    newer = write(tmp_path / "v4.json", {**GRANTS_TRIM, "version": 4})
    trace_id = recorded(tmp_path / "store", monkeypatch, grants)
    result = cli("verify", "--search", "--source", str(tmp_path / "store"), "--policy", str(newer))
    assert result.returncode == 1
    (line,) = result.stdout.splitlines()
    assert line.startswith(f"ALARM trace={trace_id} ") and " stage=pipeline tests.budget_pipe candidate=- field=ragtrail.policy.sha256: " in line
    assert "recorded under another policy (v3), not policy v4 (sha256 " in line
    # a trace recorded under no policy is checked all the same (a note, no alarm)
    recorded(tmp_path / "none", monkeypatch, None)
    plain = json.loads(cli("verify", "--search", "--source", str(tmp_path / "none"), "--policy", str(grants), "--json").stdout)
    assert plain[0]["fidelity"]["alarms"] == []
    assert "recorded under no transform policy: its citations are checked against policy v3" in plain[0]["fidelity"]["notes"]
    bad = cli("verify", "--search", "--source", str(tmp_path / "none"), "--policy", str(write(tmp_path / "bad.json", {"grants": []})))
    assert bad.returncode == 2 and "version must be a whole number >= 1" in bad.stderr


def test_grants_match_a_component_glob_and_a_rule_family() -> None:
    policy = parse_policy(json.dumps({"version": 1, "grants": [{"component": "llama_index.*", "rules": ["metadata_header@1", "truncate@1:40"]}]}))
    assert policy.allows("llama_index.synthesizer", "metadata_header@1:112")
    assert policy.allows("llama_index.synthesizer", "truncate@1:40") and not policy.allows("llama_index.synthesizer", "truncate@1:41")
    assert not policy.allows("langchain.compressor", "metadata_header@1:112")
    assert not policy.allows("llama_index.synthesizer", "metadata_header@10")
    with pytest.raises(PolicyError):
        parse_policy("[1, 2]")
    with pytest.raises(PolicyError):
        parse_policy(json.dumps({"version": 1, "grants": [{"component": "x", "rules": "budget_trim@1"}]}))


def test_an_invalid_policy_is_logged_and_records_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    monkeypatch.setenv(sc.ENV_TRANSFORM_POLICY, str(broken))
    with caplog.at_level(logging.WARNING, logger="ragtrail"):
        assert settings.transform_policy_attributes() == {}
        assert settings.transform_policy_attributes() == {}
    assert sum("is not a transform policy" in r.getMessage() for r in caplog.records) == 1
