"""LangGraph documentation apps (tests/apps/langgraph_*.py), run plain and under
``opentelemetry-instrument`` and read back with the real ``ragtrail`` CLI.

Issue 24, principle 4: an agent run is one trace. Before, the agentic-RAG tutorial gave two
unrelated root traces (one per retrieval), the rewritten question was a fresh hop 0, the grader's
rejection of the first documents was nowhere and there was no generate stage."""

from __future__ import annotations

import hashlib

from tests.apps.runner import assert_host_untouched, run_app
from tests.apps.test_langchain_haystack_apps import manifests, stages_of

QUESTION = "What does Lilian Weng say about types of reward hacking?"
REWRITTEN = "What are the types of reward hacking described by Lilian Weng?"
FIRST = [
    "Diffusion models for video generate frames that stay consistent over time.",
    "Hallucination is when a model makes up content not grounded in its inputs.",
]
SECOND = [
    "Types of reward hacking: environment or goal misspecification, and reward tampering.",
    "Reward hacking occurs when an agent exploits flaws in the reward function.",
]
ANSWER = "Lilian Weng names environment or goal misspecification and reward tampering."


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_agentic_rag_is_one_trace_with_its_grades_rewrite_and_generation(tmp_path):
    run = run_app("langgraph_agentic_rag.py", tmp_path)
    assert_host_untouched(run)
    assert "Update from node generate_answer" in run.stdout and ANSWER in run.stdout
    [m] = manifests(run)  # one trace, verified with no alarm
    assert m["pipeline"]["component"] == "langgraph.graph.state.CompiledStateGraph"
    assert stages_of(m) == [
        ("query_transform", "generate_query_or_respond", 0, 0, 0),
        ("retrieve", "VectorStoreRetriever", 0, 2, 0),
        ("filter", "grade_documents", 2, 0, 2),
        ("query_transform", "rewrite_question", 0, 0, 0),
        ("query_transform", "generate_query_or_respond", 0, 0, 0),
        ("retrieve", "VectorStoreRetriever", 0, 2, 0),
        ("filter", "grade_documents", 2, 2, 0),
        ("generate", "ScriptedChatModel", 2, 2, 0),
    ]
    # the hops: the question, the agent's search, the rewritten question (a rewrite of the first,
    # not a fresh hop 0), the agent's second search
    hops = [(h["hop"], h["parent_hop"], h["transform"], h["text"], h["hit_index"]) for h in m["query_hops"]]
    assert hops == [
        (0, None, "none", QUESTION, False),
        (1, 0, "rewrite", "video frames", True),
        (2, 0, "rewrite", REWRITTEN, False),
        (3, 2, "rewrite", "types of reward hacking", True),
    ]
    first, grade1, second, grade2, generate = (m["stages"][i] for i in (1, 2, 5, 6, 7))
    assert [c["sha256"] for c in first["candidates"]] == [sha(t) for t in FIRST]
    assert [c["sha256"] for c in second["candidates"]] == [sha(t) for t in SECOND]
    first_ids = [c["id"] for c in first["candidates"]]
    second_ids = [c["id"] for c in second["candidates"]]
    # the grader's rejection of the first documents, each with its reason
    assert [(e["id"], e["reason"], e["detail"]) for e in grade1["excluded"]] == [
        (i, "custom:graded_irrelevant", "grade_documents routed to rewrite_question, which leads back to retrieve") for i in first_ids
    ]
    assert [c["id"] for c in grade2["candidates"]] == second_ids and grade2["excluded"] == []
    # the generation got the accepted documents, all in its prompt, and gave the answer
    assert [c["id"] for c in generate["candidates"]] == second_ids
    assert m["answer"]["sha256"] == sha(ANSWER)
    assert sorted(m["in_context"]) == sorted(second_ids)
    coverage = m["coverage"]
    assert (coverage["corpus_size"], coverage["retrieved"], coverage["in_context"]) == (4, 4, 2)
    assert coverage["statement"] == "2 of 4 read: an absence claim is not supported"
    assert m["findings"] == []
    # each document's fate, through the real CLI
    for doc_id in first_ids:
        text = run.ragtrail("show", "last", "--doc", doc_id).stdout
        assert "custom:graded_irrelevant" in text and "grade_documents" in text
    for doc_id in second_ids:
        assert "reached the context" in run.ragtrail("show", "last", "--doc", doc_id).stdout
