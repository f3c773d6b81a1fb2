"""LangGraph documentation apps (tests/apps/langgraph_*.py), run plain and under
``opentelemetry-instrument`` and read back with the real ``ragtrail`` CLI.

Issue 24, principle 4: an agent run is one trace. Before, the agentic-RAG tutorial gave two
unrelated root traces (one per retrieval), the rewritten question was a fresh hop 0, the grader's
rejection of the first documents was nowhere and there was no generate stage."""

from __future__ import annotations

import hashlib

import pytest
from tests.apps.runner import APPS, assert_host_untouched, run_app
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


REACT_QUESTION = "What is Task Decomposition?"
REACT_DOCS = {
    "task-decomposition": "Task decomposition splits a complicated task into smaller and simpler steps.",
    "chain-of-thought": "Chain of thought prompting asks the model to think step by step.",
    "video-diffusion": "Diffusion models for video generate frames that stay consistent over time.",
}
REACT_ANSWER = "Task decomposition splits a complicated task into smaller, simpler steps."


def words(text: str) -> list[float]:
    """The app's bag-of-words embedding, to compute the expected cosine scores independently."""
    v = [0.0] * 64
    for w in text.lower().replace(".", " ").replace("?", " ").replace(",", " ").split():
        v[sum(map(ord, w)) % 64] += 1.0
    return v


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / ((sum(x * x for x in a) ** 0.5) * (sum(y * y for y in b) ** 0.5))


def one_root(run, *, stages: int):
    """The trace's one root span, ragtrail's pipeline for the graph run, with ``stages`` ragtrail
    spans in all (other instrumentations' spans, e.g. OpenTelemetry's own LangChain one when it is
    installed, may sit between them)."""
    [root] = [s for s in run.spans if s.parent_span_id is None]
    assert root.attributes["ragtrail.stage.component"] == "langgraph.graph.state.CompiledStateGraph"
    assert {s.trace_id for s in run.spans} == {root.trace_id}
    assert len([s for s in run.spans if "ragtrail.stage.kind" in s.attributes]) == stages
    return root


def ancestors(run, span_id: str) -> list[str]:
    by_id = {s.span_id: s for s in run.spans}
    chain, parent = [], by_id[span_id].parent_span_id
    while parent is not None:
        chain.append(parent)
        parent = by_id[parent].parent_span_id
    return chain


def test_prebuilt_react_agent_with_a_retriever_tool_is_one_trace(tmp_path):
    run = run_app("langgraph_react_agent.py", tmp_path)
    # create_react_agent's own LangGraphDeprecatedSinceV10 warning, the same in both runs
    assert_host_untouched(run, stderr_empty=False)
    assert run.stderr.count("LangGraphDeprecatedSinceV10") == 1
    assert run.stdout.rstrip().endswith(REACT_ANSWER)
    [m] = manifests(run)  # one trace, verified with no alarm
    assert m["pipeline"]["component"] == "langgraph.graph.state.CompiledStateGraph"
    assert stages_of(m) == [
        ("query_transform", "call_model", 0, 0, 0),
        ("retrieve", "VectorStoreRetriever", 0, 2, 0),
        ("generate", "ScriptedChatModel", 2, 2, 0),
    ]
    # every stage under the agent's root: the graph run is the one root span of the trace
    root = one_root(run, stages=4)
    for stage in m["stages"]:
        assert root.span_id in ancestors(run, stage["span_id"]), stage["component"]
    # the tool's query is a hop of the question (the model wrote it), and it is what hit the index
    hops = [(h["hop"], h["parent_hop"], h["transform"], h["text"], h["hit_index"]) for h in m["query_hops"]]
    assert hops == [(0, None, "none", REACT_QUESTION, False), (1, 0, "rewrite", "task decomposition steps", True)]
    retrieve, generate = m["stages"][1], m["stages"][2]
    ranked = sorted(REACT_DOCS, key=lambda i: -cosine(words("task decomposition steps"), words(REACT_DOCS[i])))[:2]
    assert ranked == ["task-decomposition", "video-diffusion"]
    assert [(c["id"], c["rank"], c["score_kind"], c["hop"], c["sha256"]) for c in retrieve["candidates"]] == [
        (i, rank, "similarity", 1, sha(REACT_DOCS[i])) for rank, i in enumerate(ranked)
    ]
    assert [c["score"] for c in retrieve["candidates"]] == pytest.approx(
        [cosine(words("task decomposition steps"), words(REACT_DOCS[i])) for i in ranked]
    )
    assert retrieve["knobs"] == {"top_k": 2}
    # the model's second call got the tool's message (both documents' text) and answered
    assert [c["id"] for c in generate["candidates"]] == ranked and generate["excluded"] == []
    assert m["answer"]["sha256"] == sha(REACT_ANSWER)
    assert sorted(m["in_context"]) == sorted(ranked)
    coverage = m["coverage"]
    assert (coverage["corpus_size"], coverage["retrieved"], coverage["in_context"]) == (3, 2, 2)
    assert coverage["statement"] == "2 of 3 read: an absence claim is not supported"
    assert m["findings"] == []
    for doc_id in ranked:
        assert "reached the context" in run.ragtrail("show", "last", "--doc", doc_id).stdout


def test_prebuilt_react_agent_with_parallel_tool_calls_is_one_trace(tmp_path):
    """The same app, the model calling the tool twice in one message: ToolNode runs the calls in
    its executor's threads; both retrievals stay under the graph's root, each query its own hop."""
    one = '{"name": "retrieve_blog_posts", "args": {"query": "task decomposition steps"}, "id": "call_1"}'
    two = '{"name": "retrieve_blog_posts", "args": {"query": "chain of thought"}, "id": "call_2"}'
    source = (APPS / "langgraph_react_agent.py").read_text()
    assert source.count(one) == 1
    app = tmp_path / "langgraph_react_agent_parallel.py"
    app.write_text(source.replace(one, f"{one}, {two}"))
    run = run_app(app, tmp_path / "run")
    assert_host_untouched(run, stderr_empty=False)
    [m] = manifests(run)
    assert stages_of(m) == [
        ("query_transform", "call_model", 0, 0, 0),
        ("retrieve", "VectorStoreRetriever", 0, 2, 0),
        ("retrieve", "VectorStoreRetriever", 0, 2, 0),
        ("generate", "ScriptedChatModel", 3, 3, 0),
    ]
    root = one_root(run, stages=5)
    assert all(root.span_id in ancestors(run, stage["span_id"]) for stage in m["stages"])
    hops = [(h["hop"], h["parent_hop"], h["transform"], h["text"], h["hit_index"]) for h in m["query_hops"]]
    assert hops == [
        (0, None, "none", REACT_QUESTION, False),
        (1, 0, "rewrite", "task decomposition steps", True),
        (2, 0, "rewrite", "chain of thought", True),
    ]
    first, second = m["stages"][1], m["stages"][2]
    assert [c["id"] for c in first["candidates"]] == ["task-decomposition", "video-diffusion"]
    assert [c["id"] for c in second["candidates"]] == ["chain-of-thought", "video-diffusion"]
    assert [c["id"] for c in m["stages"][3]["candidates"]] == ["task-decomposition", "video-diffusion", "chain-of-thought"]
    assert m["coverage"]["statement"] == "all 3 of 3 read: absence, universal, latest and count claims are supported"
    assert m["findings"] == []
