"""The gate on a real decorated pipeline (tests/gate/gate_pipeline.py): the real SDK, ragtrail's recorder,
the whole-trace processor, the wire's OTLP JSON read back by the inspector. Verdicts, checks and problem
kinds are asserted exactly (issue 16's Done-when)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ragtrail.gate import baseline as baseline_mod
from ragtrail.gate import evalset as evalset_mod
from ragtrail.gate import runner
from ragtrail.gate.evaluate import evaluate
from ragtrail.gate.metrics import rbo
from ragtrail.gate.model import ALL_SLICE, EXIT_CODES, GateReport

from . import gate_pipeline as gp

RECALL, RERANK, BUDGET = "recall@retrieve", "survival@rerank gate.overlap_reranker", "survival@budget gate.context_budget"
METRICS = [RECALL, RERANK, BUDGET, "in_context", "cited", "refusal_rate", "rbo"]
SLICES = [ALL_SLICE, "faq", "long", "policy", "table"]


def _set() -> evalset_mod.EvalSet:
    return evalset_mod.parse("".join(json.dumps(r) + "\n" for r in gp.eval_lines()), "eval.jsonl")


@pytest.fixture(scope="module")
def evalset() -> evalset_mod.EvalSet:
    return _set()


@pytest.fixture(scope="module")
def frozen(evalset: evalset_mod.EvalSet) -> dict[str, Any]:
    runs = [runner.run_in_process(gp.build("base"), evalset.cases) for _ in range(3)]
    # through the committed form, as a CI job reads it
    return json.loads(baseline_mod.dumps(baseline_mod.freeze(evalset, runs, pipeline="tests.gate.gate_pipeline:answer")))


def _run(evalset: evalset_mod.EvalSet, frozen: dict[str, Any], mode: str) -> GateReport:
    return evaluate(evalset, runner.run_in_process(gp.build(mode), evalset.cases), frozen)


def _failed(report: GateReport) -> set[tuple[str, str]]:
    return {(c.slice, c.metric) for c in report.failed_checks()}


# --- the eval set ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "line, message",
    [
        ('{"query": "q", "relevant": ["a"], "slices": "x"}', "eval.jsonl line 2: unknown key 'slices' (keys: claim, id, query, relevant, slice)"),
        ('{"query": "", "relevant": ["a"]}', 'eval.jsonl line 2: "query" must be a non-empty string'),
        ('{"query": "q", "relevant": "a"}', 'eval.jsonl line 2: "relevant" must be a list of non-empty document id strings'),
        ('{"query": "q", "relevant": ["a", "a"]}', 'eval.jsonl line 2: "relevant" names the same id twice'),
        ('{"id": "one", "query": "q", "relevant": []}', "eval.jsonl line 2: id 'one' already used on line 1"),
        ('{"query": "q", "relevant": [], "claim": "maybe"}', 'eval.jsonl line 2: "claim" must be one of presence, absence, none'),
        ('{"query": "q", "relevant": [], "slice": "(all)"}', 'eval.jsonl line 2: "slice" must be a non-empty string not starting with "("'),
        ('{"query": "q", "relevant": [', "eval.jsonl line 2: not valid JSON (Expecting value)"),
        ('["q"]', "eval.jsonl line 2: a JSON object is expected, got list"),
    ],
)
def test_eval_set_errors_name_the_line(line: str, message: str) -> None:
    from ragtrail.inspect.errors import MalformedInput

    with pytest.raises(MalformedInput) as caught:
        evalset_mod.parse('{"id": "one", "query": "first", "relevant": ["a"]}\n' + line + "\n", "eval.jsonl")
    assert caught.value.message == message


def test_eval_set_parse_and_digest() -> None:
    text = '{"query": "q1", "relevant": ["a", "b"], "slice": "long", "claim": "presence"}\n\n{"id": "x", "query": "q2", "relevant": []}\n'
    parsed = evalset_mod.parse(text)
    assert [(c.id, c.query, c.relevant, c.slice, c.claim) for c in parsed.cases] == [
        ("line-1", "q1", ("a", "b"), "long", "presence"),
        ("x", "q2", (), None, None),
    ]
    assert parsed.slices() == ["long"]
    assert parsed.digest == evalset_mod.parse(text).digest
    assert parsed.digest != evalset_mod.parse(text.replace('"b"', '"c"')).digest
    assert len(parsed.digest) == 64


def test_rbo() -> None:
    assert rbo(["a", "b", "c"], ["a", "b", "c"]) == 1.0
    assert rbo(["a", "b", "c"], ["x", "y", "z"]) == 0.0
    assert rbo([], []) == 1.0 and rbo(["a"], []) == 0.0
    # a context that lost two of its three documents moved: never 1.0 (the extrapolated form said 1.0)
    assert round(rbo(["a"], ["a", "b", "c"]), 4) == round(0.1 / 0.9 * (0.9 + 0.81 / 2 + 0.729 / 3) + 0.729 / 3, 4)
    tail = rbo(["a", "b", "c", "d", "e"], ["a", "b", "c", "e", "d"])
    head = rbo(["a", "b", "c", "d", "e"], ["b", "a", "c", "d", "e"])
    assert 0.95 < tail < 1.0 and head < tail  # top-weighted: the tail costs less


# --- the baseline ----------------------------------------------------------------------------------
def test_baseline_document(frozen: dict[str, Any], evalset: evalset_mod.EvalSet) -> None:
    assert frozen["format"] == "ragtrail-gate-baseline" and frozen["version"] == 1 and frozen["runs"] == 3
    assert frozen["set"] == {"digest": evalset.digest, "path": None, "cases": 80, "slices": {"faq": 20, "long": 20, "policy": 20, "table": 20}}
    assert frozen["stages"] == ["retrieve gate.vector", "rerank gate.overlap_reranker", "budget gate.context_budget"]
    assert sorted(frozen["thresholds"]) == SLICES
    for slice_ in SLICES:
        assert sorted(frozen["thresholds"][slice_]) == sorted(METRICS)
    table = frozen["thresholds"]["table"]
    # deterministic pipeline: every run the same; one case in three misses its second relevant id
    assert table[RECALL]["runs"] == [0.825, 0.825, 0.825] and table[RECALL]["worst"] == 0.825
    assert table[RECALL]["threshold"] == table[RECALL]["bootstrap"] < 0.825  # the bootstrap's honest margin
    assert table["refusal_rate"] == {
        "runs": [0.0, 0.0, 0.0],
        "mean": 0.0,
        "worst": 0.0,
        "bootstrap": 0.0,
        "threshold": 0.0,
        "n": 20,
        "direction": "ceiling",
        "stage": None,
        "warning": None,
    }
    assert table["rbo"]["mean"] == 1.0 and table["rbo"]["threshold"] == 0.85
    assert table[BUDGET]["stage"] == "budget gate.context_budget"
    case = frozen["cases"]["table-00"]
    assert case["top"] == ["table-00", "generic-00", "generic-01"]
    obs = case["observation"]
    assert obs["trace_id"] == "" and obs["corpus_size"] == len(gp.CORPUS) and obs["index"] == ["gate.vector"]
    assert list(obs["content"]) == ["table-00"] and len(obs["content"]["table-00"]) == 64
    # re-freezing an unchanged pipeline changes nothing but the time it was made
    again = baseline_mod.freeze(
        evalset, [runner.run_in_process(gp.build("base"), evalset.cases) for _ in range(3)], pipeline="tests.gate.gate_pipeline:answer"
    )
    assert {**json.loads(baseline_mod.dumps(again)), "created_at": None} == {**frozen, "created_at": None}


def test_small_slices_are_flagged(frozen: dict[str, Any]) -> None:
    cases = [c for c in _set().cases if c.slice == "faq"][:5] + [c for c in _set().cases if c.slice == "long"]
    small = evalset_mod.EvalSet(cases=cases, digest=evalset_mod.digest(cases))
    document = baseline_mod.freeze(small, [runner.run_in_process(gp.build("base"), cases)])
    assert document["thresholds"]["faq"][RECALL]["warning"] == "slice too small to be statistically boring (n=5 < 20)"
    assert document["thresholds"]["long"][RECALL]["warning"] is None
    report = evaluate(small, runner.run_in_process(gp.build("base"), cases), document)
    assert report.verdict == "PASS"
    assert report.warnings == ["faq: slice too small to be statistically boring (n=5 < 20)"]


def test_baseline_refuses_untrusted_runs(evalset: evalset_mod.EvalSet) -> None:
    with pytest.raises(baseline_mod.BaselineRefused) as caught:
        baseline_mod.freeze(evalset, [runner.run_in_process(gp.build("raise_on"), evalset.cases)])
    assert [(p.kind, p.case_id) for p in caught.value.problems] == [("pipeline_error", "policy-03")]


# --- verdicts ----------------------------------------------------------------------------------------
def test_unchanged_pipeline_run_20_times_never_fails(evalset: evalset_mod.EvalSet, frozen: dict[str, Any]) -> None:
    for _ in range(20):
        report = _run(evalset, frozen, "base")
        assert (report.verdict, _failed(report), report.problems, report.warnings) == ("PASS", set(), [], [])
        assert report.exit_code == 0
        assert len(report.checks) == len(SLICES) * len(METRICS)
        assert all(c.diff_text is None and c.movement is not None and c.movement.rbo == 1.0 for c in report.cases)


def test_index_rebuild_fails_the_slice_while_the_aggregate_passes(evalset: evalset_mod.EvalSet, frozen: dict[str, Any]) -> None:
    report = _run(evalset, frozen, "rebuild_table")
    assert report.verdict == "REGRESSION" and report.exit_code == 1 and report.problems == []
    assert _failed(report) == {("table", RECALL), ("table", RERANK), ("table", BUDGET), ("table", "in_context"), ("table", "cited")}
    aggregate = [c for c in report.checks if c.slice == ALL_SLICE]
    assert len(aggregate) == len(METRICS) and all(c.passed for c in aggregate)
    recall = next(c for c in report.failed_checks() if c.metric == RECALL)
    assert (recall.value, recall.baseline_mean, recall.n) == (0.675, 0.825, 20)
    assert recall.message == (
        "recall@retrieve fell to 0.675 (floor 0.725, baseline 0.825); relevant ids retrieved in "
        "the baseline and not now in 3 cases (table-01, table-02, table-05)"
    )
    assert next(c for c in report.failed_checks() if c.metric == BUDGET).message.endswith("; lost upstream at retrieval")
    lost = next(c for c in report.cases if c.case.id == "table-01")
    assert lost.movement is not None and lost.movement.entered == ("table-01-x",)
    assert lost.movement.left == (("table-01", None, None),)  # never retrieved: no stage removed it
    assert lost.diff_text is not None and "retrieve (gate.vector)" in lost.diff_text


def test_harmless_tail_reorder_passes(evalset: evalset_mod.EvalSet, frozen: dict[str, Any]) -> None:
    report = _run(evalset, frozen, "tail_reorder")
    assert (report.verdict, _failed(report), report.problems) == ("PASS", set(), [])
    moved = [c for c in report.checks if c.metric == "rbo"]
    assert all(c.value is not None and c.threshold is not None and c.threshold <= c.value < 1.0 for c in moved)
    case = report.cases[0]
    assert case.movement is not None and case.movement.entered == () and case.movement.left == ()
    assert case.diff_text is not None  # reordered evidence gets its diff for a human, the gate stays green


def test_reranker_fallback_that_kills_evidence_after_the_budget(evalset: evalset_mod.EvalSet, frozen: dict[str, Any]) -> None:
    report = _run(evalset, frozen, "bigger_k_fallback")
    assert report.verdict == "REGRESSION" and report.problems == []
    assert _failed(report) == {(s, m) for s in SLICES for m in (BUDGET, "in_context", "cited", "refusal_rate", "rbo")}
    for slice_ in SLICES:
        checks = {c.metric: c for c in report.checks if c.slice == slice_}
        assert checks[RECALL].passed and checks[RECALL].value == 1.0 > checks[RECALL].baseline_mean  # recall rose
        assert checks[RERANK].passed
        assert checks[BUDGET].stage == "budget gate.context_budget" and checks[BUDGET].value == 0.0
        assert checks["refusal_rate"].value == 1.0
    table = next(c for c in report.failed_checks() if c.slice == "table" and c.metric == BUDGET)
    assert table.message == (
        "survival@budget gate.context_budget fell to 0.000 (floor 0.725, baseline 0.825); relevant ids lost at "
        "budget gate.context_budget: 20 (budget_exceeded ×20); recall@retrieve rose to 1.000 (baseline 0.825); "
        "upstream: rerank gate.overlap_reranker degraded (timeout, fallback input_order) in 20 cases"
    )
    in_context = next(c for c in report.failed_checks() if c.slice == "table" and c.metric == "in_context")
    assert in_context.message.endswith("; lost at budget gate.context_budget")
    case = next(c for c in report.cases if c.case.id == "table-03")
    stages = {s.kind: s for s in case.stages}
    assert stages["retrieve"].relevant_kept == ("table-03", "table-03-x")
    assert stages["rerank"].relevant_kept == ("table-03",) and stages["rerank"].relevant_lost == (("table-03-x", "below_rank_cutoff"),)
    assert stages["rerank"].status == "degraded (timeout, fallback input_order)"
    assert stages["budget"].relevant_kept == () and stages["budget"].relevant_lost == (("table-03", "budget_exceeded"),)
    assert [s.key for s in case.stages] == ["retrieve gate.vector", "rerank gate.overlap_reranker", "budget gate.context_budget"]
    assert case.refused is True and case.in_context == ("generic-00", "generic-01", "generic-02")
    assert case.movement is not None and ("table-03", "budget gate.context_budget", "budget_exceeded") in case.movement.left


def test_pipeline_error_is_inconclusive(evalset: evalset_mod.EvalSet, frozen: dict[str, Any]) -> None:
    report = _run(evalset, frozen, "raise_on")
    assert report.verdict == "INCONCLUSIVE" and report.exit_code == EXIT_CODES["INCONCLUSIVE"] == 3
    assert [(p.kind, p.case_id, p.detail) for p in report.problems] == [("pipeline_error", "policy-03", "RuntimeError: the model endpoint said 503")]
    assert _failed(report) == set()  # the other 79 cases are as good as ever: the problem alone decides


def test_baseline_of_another_set_is_inconclusive(evalset: evalset_mod.EvalSet, frozen: dict[str, Any]) -> None:
    other = dict(frozen, set=dict(frozen["set"], digest="0" * 64))
    report = evaluate(evalset, runner.run_in_process(gp.build("base"), evalset.cases), other)
    assert report.verdict == "INCONCLUSIVE"
    assert [(p.kind, p.case_id) for p in report.problems] == [("baseline_mismatch", None)]


def test_changed_corpus_is_inconclusive(evalset: evalset_mod.EvalSet, frozen: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(gp.CORPUS, "long-04", "kw-long-04 the answer, rewritten")
    report = _run(evalset, frozen, "base")
    assert report.verdict == "INCONCLUSIVE"
    assert [(p.kind, p.case_id) for p in report.problems] == [("corpus_changed", "long-04")]
    assert report.problems[0].detail.startswith("content of long-04 changed (sha256 ")
    monkeypatch.setitem(gp.CORPUS, "new-doc", "a new document")
    report = _run(evalset, frozen, "base")
    assert [(p.kind, p.case_id) for p in report.problems] == [("corpus_changed", None), ("corpus_changed", "long-04")]
    assert report.problems[0].detail == (
        f"corpus size {len(gp.CORPUS) - 1} → {len(gp.CORPUS)} in 80 cases (policy-00, policy-01, policy-02 and 77 more)"
    )


# --- recorded traces (--traces): a real local store ---------------------------------------------------
def _record(store: Path, queries: list[str], mode: str = "base", **configure: Any) -> None:
    from ragtrail.export.configurator import configure as configure_sdk
    from ragtrail.export.local_store import LocalStoreSpanExporter

    provider = configure_sdk(
        exporter=LocalStoreSpanExporter(store),
        set_global=False,
        service_name="gate-test",
        processor_options={"schedule_delay_millis": 20, "grace_millis": 20},
        **{"sampling_probability": 1.0, **configure},
    )
    pipeline = gp.build(mode, tracer=provider.get_tracer("gate-test"))
    for query in queries:
        pipeline(query)
    provider.force_flush()
    provider.shutdown()


def test_traces_from_a_local_store_pair_by_query_receipt(tmp_path: Path, evalset: evalset_mod.EvalSet, frozen: dict[str, Any]) -> None:
    store = tmp_path / ".ragtrail"
    queries = [c.query for c in evalset.cases if c.id != "faq-07"]
    _record(store, list(reversed(queries)))  # recorded in another order: pairing is by receipt, not position
    runs = runner.from_traces(str(store), evalset.cases)
    assert [(r.case.id, [p.kind for p in r.problems]) for r in runs if r.problems] == [("faq-07", ["missing_query"])]
    report = evaluate(evalset, runs, frozen)
    assert report.verdict == "INCONCLUSIVE" and [p.kind for p in report.problems] == ["missing_query"]
    assert _failed(report) == set()
    _record(store, [next(c.query for c in evalset.cases if c.id == "faq-07")])
    report = evaluate(evalset, runner.from_traces(str(store), evalset.cases), frozen)
    assert (report.verdict, report.problems, _failed(report)) == ("PASS", [], set())
    assert len({c.trace_id for c in report.cases}) == 80


def test_truncated_trace_is_inconclusive(tmp_path: Path, evalset: evalset_mod.EvalSet, frozen: dict[str, Any]) -> None:
    store = tmp_path / ".ragtrail"
    _record(store, [c.query for c in evalset.cases])
    target = next(c for c in evalset.cases if c.id == "long-11")
    from ragtrail.contract.receipts import receipt

    wanted = receipt(target.query).sha256
    files = sorted(store.rglob("*.jsonl"))
    cut = 0
    for path in files:
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines):
            if wanted not in line:
                continue
            doc = json.loads(line)
            trace_id = next(s["traceId"] for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"] if wanted in json.dumps(s))
            for rs in doc["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    before = len(ss["spans"])
                    # a collector that lost this trace's budget span on the way
                    ss["spans"] = [
                        s
                        for s in ss["spans"]
                        if s["traceId"] != trace_id
                        or not any(a["key"] == "ragtrail.stage.kind" and a["value"].get("stringValue") == "budget" for a in s.get("attributes", []))
                    ]
                    cut += before - len(ss["spans"])
            lines[n] = json.dumps(doc)
        path.write_text("\n".join(lines) + "\n")
    assert cut == 1
    report = evaluate(evalset, runner.from_traces(str(store), evalset.cases), frozen)
    assert report.verdict == "INCONCLUSIVE"
    assert [(p.kind, p.case_id) for p in report.problems] == [("truncated", "long-11")]
    assert report.problems[0].detail == "1 completeness alarm(s): missing spans at pipeline (4 received, 5 stamped)"


def test_sampled_traces_are_inconclusive(tmp_path: Path, evalset: evalset_mod.EvalSet, frozen: dict[str, Any]) -> None:
    store = tmp_path / ".ragtrail"
    _record(store, [c.query for c in evalset.cases], sampling_probability=0.5)
    report = evaluate(evalset, runner.from_traces(str(store), evalset.cases), frozen)
    assert report.verdict == "INCONCLUSIVE"
    kinds = {p.kind for p in report.problems}
    assert kinds == {"sampled_out", "missing_query"}  # kept traces stand for 2 requests; the others are gone
    assert all(p.detail.startswith("sampled at p=0.5: this trace stands for 2 requests") for p in report.problems if p.kind == "sampled_out")
    assert len(report.problems) == 80


def test_failed_stage_is_inconclusive(evalset: evalset_mod.EvalSet, frozen: dict[str, Any]) -> None:
    report = _run(evalset, frozen, "store_down")
    assert report.verdict == "INCONCLUSIVE"
    assert {(p.kind, p.detail) for p in report.problems} == {("failed_trace", "stage retrieve gate.vector failed")}
    assert sorted(p.case_id for p in report.problems) == [f"faq-{i:02d}" for i in range(20)]
    # the faq cases are left out of the numbers: the other slices are judged on their own evidence, and
    # faq's checks say why they have no value (never "passed" on evidence nobody could read)
    assert _failed(report) == {("faq", metric) for metric in METRICS}
    recall = next(c for c in report.checks if c.slice == "faq" and c.metric == RECALL)
    assert (recall.value, recall.n, recall.message) == (None, 0, "not measured: every case of the slice has a problem (failed_trace)")


def _tamper(store: Path, query: str, change: Any) -> int:
    """Apply ``change(span)`` to every span of the trace whose hop-0 query is ``query``; spans changed."""
    from ragtrail.contract.receipts import receipt

    wanted = receipt(query).sha256
    changed = 0
    for path in sorted(store.rglob("*.jsonl")):
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines):
            if wanted not in line:
                continue
            doc = json.loads(line)
            spans = [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
            trace_id = next(s["traceId"] for s in spans if wanted in json.dumps(s))
            changed += sum(1 for s in spans if s["traceId"] == trace_id and change(s))
            lines[n] = json.dumps(doc)
        path.write_text("\n".join(lines) + "\n")
    return changed


def test_receipt_alarm_is_inconclusive(tmp_path: Path, evalset: evalset_mod.EvalSet, frozen: dict[str, Any]) -> None:
    store = tmp_path / ".ragtrail"
    _record(store, [c.query for c in evalset.cases])

    def lower_top_k(span: dict[str, Any]) -> bool:
        # someone downstream "fixed" the rerank stage's top_k after the producer stamped it
        for a in span.get("attributes", []):
            if a["key"] == "ragtrail.stage.top_k":
                a["value"] = {"intValue": "4"}
                return True
        return False

    assert _tamper(store, next(c.query for c in evalset.cases if c.id == "policy-09"), lower_top_k) == 1
    report = evaluate(evalset, runner.from_traces(str(store), evalset.cases), frozen)
    assert report.verdict == "INCONCLUSIVE"
    assert [(p.kind, p.case_id) for p in report.problems] == [("receipt_alarm", "policy-09")]
    assert report.problems[0].detail.startswith("1 receipt alarm(s): changed_uncited at rerank gate.overlap_reranker")


def test_changed_component_version_is_inconclusive(tmp_path: Path, evalset: evalset_mod.EvalSet) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    queries = [c.query for c in evalset.cases]
    _record(old, queries, resource_attributes={"service.version": "1.4.0", "index.version": "2026-11"})
    _record(new, queries, resource_attributes={"service.version": "1.4.0", "index.version": "2026-12"})
    document = json.loads(baseline_mod.dumps(baseline_mod.freeze(evalset, [runner.from_traces(str(old), evalset.cases)])))
    assert document["cases"]["faq-00"]["observation"]["versions"] == {"index.version": "2026-11", "service.version": "1.4.0"}
    assert evaluate(evalset, runner.from_traces(str(old), evalset.cases), document).verdict == "PASS"
    report = evaluate(evalset, runner.from_traces(str(new), evalset.cases), document)
    assert report.verdict == "INCONCLUSIVE"
    assert [(p.kind, p.case_id, p.detail) for p in report.problems] == [
        ("version_changed", None, "index.version 2026-11 → 2026-12 in 80 cases (policy-00, policy-01, policy-02 and 77 more)")
    ]


def test_relevant_ids_no_stage_ever_saw_in_a_corpus_of_unknown_size() -> None:
    lines = [r for r in gp.eval_lines() if r["slice"] == "long"] + [
        {"id": "ghost", "query": "what does kw-long-99 say?", "relevant": ["long-99"], "slice": "long"}
    ]
    evalset = evalset_mod.parse("".join(json.dumps(r) + "\n" for r in lines))
    for mode, expected in (("no_corpus_size", [("unknown_relevance", "ghost")]), ("base", [])):
        frozen = baseline_mod.freeze(evalset, [runner.run_in_process(gp.build(mode), evalset.cases)])
        report = evaluate(evalset, runner.run_in_process(gp.build(mode), evalset.cases), frozen)
        # with the corpus size known, an id nobody retrieved is an honest miss (recall 0), not an unknown
        assert [(p.kind, p.case_id) for p in report.problems] == expected
    assert report.verdict == "PASS"


def test_keyed_receipts_are_checked_with_the_key(
    tmp_path: Path, evalset: evalset_mod.EvalSet, frozen: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / ".ragtrail"
    monkeypatch.setenv("RAGTRAIL_RECEIPT_KEY", "ci-secret")
    _record(store, [c.query for c in evalset.cases])
    monkeypatch.delenv("RAGTRAIL_RECEIPT_KEY")
    keyed = evaluate(evalset, runner.from_traces(str(store), evalset.cases, key=b"ci-secret"), frozen)
    assert (keyed.verdict, keyed.problems) == ("PASS", [])
    wrong = evaluate(evalset, runner.from_traces(str(store), evalset.cases, key=b"another"), frozen)
    assert wrong.verdict == "INCONCLUSIVE" and {p.kind for p in wrong.problems} == {"receipt_alarm"}
    assert len(wrong.problems) == 80


def test_instrumentations_of_libraries_not_installed_are_skipped_quietly(monkeypatch, caplog) -> None:
    """The gate switches on every installed ragtrail instrumentation; one whose library is absent is
    skipped without the SDK's error line (a newcomer's `gate run` printed ten of them per run)."""
    import importlib.metadata
    import logging

    from ragtrail.instrumentation._base import RagtrailInstrumentor

    class Absent(RagtrailInstrumentor):
        _instruments = ("no-such-library-for-ragtrail >= 1",)

        def _patch(self, **kwargs: Any) -> None:  # pragma: no cover - never reached
            raise AssertionError("instrumented a library that is not installed")

    class _EntryPoint:
        name = "ragtrail_absent"

        def load(self) -> type:
            return Absent

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: [_EntryPoint()])
    with caplog.at_level(logging.DEBUG):
        assert runner._instrument() == []
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert not Absent().is_instrumented_by_opentelemetry
