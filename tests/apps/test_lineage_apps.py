"""Lineage follows the run (issue 24, principle 2): documentation apps whose stages branch inside one
pipeline, run unchanged (offline stand-ins only) under ``opentelemetry-instrument`` and read back with
the real ``ragtrail`` CLI (tests/apps/runner.py). A candidate's content is checked against its own
upstream on its own branch, never against what another branch handed on last."""

from __future__ import annotations

import pytest

from apps.runner import assert_host_untouched, run_app

pytest.importorskip("llama_index.core")

ENABLED = ["ragtrail_llama_index"]
RETRIEVE = ("retrieve", "VectorIndexRetriever")
GENERATE = ("generate", "CompactAndRefine")
BUDGET = ("budget", "PromptHelper")


def stages(trace: dict) -> list[tuple[str, str, int, int, int]]:
    return [(s["kind"], s["component"].rsplit(".", 1)[-1], s["in"], s["out"], s["excluded_count"]) for s in trace["stages"]]


def test_two_queries_in_one_pipeline_verify_clean(tmp_path):
    run = run_app("llama_two_questions.py", tmp_path, enabled=ENABLED)
    assert_host_untouched(run)
    [trace] = run.traces()
    assert stages(trace) == [(*RETRIEVE, 0, 2, 0), (*GENERATE, 2, 2, 0), (*BUDGET, 2, 2, 0)] * 2
    proc = run.ragtrail("verify", trace["trace_id"], ok_codes=(0, 1))
    assert proc.returncode == 0, proc.stdout
    assert "ALARM" not in proc.stdout
    fidelity = run.verify(trace["trace_id"])["fidelity"]
    assert fidelity["alarms"] == []
    assert fidelity["changed_uncited"] == 0 and fidelity["unverifiable"] == 0
    # each question's prompt budget adds the metadata header, cited; the two nodes are first seen once
    assert (fidelity["changed_cited"], fidelity["not_captured"]) == (4, 2)


def test_sub_question_query_engine_verifies_clean(tmp_path):
    """Each sub-question runs its own retrieve -> generate -> budget branch over the same chunks; the
    budget of one branch (a metadata header, cited) is not the upstream of the next branch."""
    run = run_app("llama_sub_question.py", tmp_path, enabled=ENABLED)
    assert_host_untouched(run)
    [trace] = run.traces()
    branch = [(*RETRIEVE, 0, 1, 0), (*GENERATE, 1, 1, 0), (*BUDGET, 1, 1, 0), (*BUDGET, 1, 1, 0)]
    # the question generator (its sub-questions are decompose hops, tests/apps/test_derived_apps.py);
    # the final synthesis: the three sub-answers plus each answer's source node; three chunks packed
    question_gen = ("query_transform", "LLMQuestionGenerator", 0, 0, 0)
    assert stages(trace) == [question_gen] + branch * 3 + [(*GENERATE, 6, 6, 0), (*BUDGET, 3, 3, 0)]
    proc = run.ragtrail("verify", trace["trace_id"], ok_codes=(0, 1))
    assert proc.returncode == 0, proc.stdout
    fidelity = run.verify(trace["trace_id"])["fidelity"]
    assert fidelity["alarms"] == []
    assert fidelity["changed_uncited"] == 0 and fidelity["unverifiable"] == 0
    # one cited header per branch (the repacking budget hands on the same bytes); first seen: the two
    # chunks and the three sub-answer nodes of the final synthesis
    assert (fidelity["changed_cited"], fidelity["not_captured"]) == (3, 5)
