"""DSPy documentation apps (tests/apps/dspy_*.py), run plain and under ``opentelemetry-instrument``
and read back with the real ``ragtrail`` CLI.

The RAG tutorial's ``RAG`` module (sync, and in the async guide's form) is the pipeline root; its ``dspy.retrievers.Embeddings`` search runs
in DSPy's own worker thread, the stage is recorded in the caller's thread, with the corpus positions
DSPy returns as ids and the scores its search computed. ``ChainOfThought`` is handed the very list
of passages the search returned: its model call is the generate stage, and the passages whose text
is in the messages the model received are what reached the context."""

from __future__ import annotations

import hashlib

import pytest
from tests.apps.runner import assert_host_untouched, run_app
from tests.apps.test_langchain_haystack_apps import manifests, stages_of
from tests.apps.test_langgraph_apps import cosine, words  # the same bag-of-words embedder as the DSPy app

pytest.importorskip("dspy")

QUESTION = "What does cosine similarity measure between embedding vectors?"
CORPUS = [
    "BM25 ranks documents by term frequency and inverse document frequency.",
    "Cosine similarity measures the angle between two embedding vectors.",
    "A vector database stores embeddings and searches them by similarity.",
    "Reranking reorders retrieved passages with a stronger model.",
    "Chunking splits long documents into passages before embedding them.",
]
OFFLINE = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("app", ["dspy_rag.py", "dspy_async_rag.py"])
def test_rag_tutorial_is_one_trace_with_its_search_and_generation(tmp_path, app):
    # the async guide's form of the tutorial (``await rag.acall``, ``aforward`` awaiting ``acall``) records the same
    run = run_app(app, tmp_path, enabled=["ragtrail_dspy"], extra_env=OFFLINE)
    assert_host_untouched(run)
    assert "response='Cosine similarity measures the angle between two embedding vectors.'" in run.stdout
    [m] = manifests(run)  # one trace, verified with no alarm
    # the RAG module is the pipeline root: its forward names the module-level retriever `search`
    assert m["pipeline"]["component"] == "__main__.RAG" and m["pipeline"]["status"] == "ok"
    [root] = [s for s in run.spans if s.parent_span_id is None]
    assert len(run.spans) == 3 and [s.parent_span_id for s in run.spans if s is not root] == [root.span_id] * 2
    assert stages_of(m) == [("retrieve", "Embeddings", 0, 2, 0), ("generate", "DummyLM", 2, 2, 0)]
    stage, generate = m["stages"]
    assert stage["component"] == "dspy.Embeddings" and stage["knobs"] == {"top_k": 2} and stage["findings"] == []
    scores = sorted(((cosine(words(QUESTION), words(t)), i) for i, t in enumerate(CORPUS)), reverse=True)[:2]
    assert [(c["id"], c["rank"], c["score_kind"], c["hop"], c["sha256"]) for c in stage["candidates"]] == [
        (str(i), rank, "similarity", 0, sha(CORPUS[i])) for rank, (_score, i) in enumerate(scores)
    ]
    assert [c["score"] for c in stage["candidates"]] == pytest.approx([s for s, _i in scores], rel=1e-6)
    assert [c["id"] for c in stage["candidates"]] == ["1", "3"]
    hops = [(h["hop"], h["parent_hop"], h["transform"], h["text"], h["hit_index"]) for h in m["query_hops"]]
    assert hops == [(0, None, "none", QUESTION, True)]
    # both passages are in the messages DummyLM received; the model's id is DSPy's
    assert [(c["id"], c["sha256"]) for c in generate["candidates"]] == [(c["id"], c["sha256"]) for c in stage["candidates"]]
    assert generate["model"] == "dummy" and generate["excluded"] == []
    assert sorted(m["in_context"]) == ["1", "3"] and m["answer"] is None and m["findings"] == []
    coverage = m["coverage"]
    assert (coverage["corpus_size"], coverage["retrieved"], coverage["in_context"]) == (5, 2, 2)
    assert coverage["statement"] == "2 of 5 read: an absence claim is not supported"
    # each document's fate, through the real CLI
    for rank, doc_id in enumerate(("1", "3")):
        text = run.ragtrail("show", "last", "--doc", doc_id).stdout
        assert f"0 retrieve dspy.Embeddings  kept, output rank {rank} of 2" in text
        assert f"1 generate dspy.utils.dummies.DummyLM  kept, output rank {rank} of 2" in text
        assert "fate: reached the context, not cited" in text
