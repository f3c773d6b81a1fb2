"""DSPy documentation apps (tests/apps/dspy_*.py), run plain and under ``opentelemetry-instrument``
and read back with the real ``ragtrail`` CLI.

The RAG tutorial's ``RAG`` module (sync, and in the async guide's form) is the pipeline root; its ``dspy.retrievers.Embeddings`` search runs
in DSPy's own worker thread, the stage is recorded in the caller's thread, with the corpus positions
DSPy returns as ids and the scores its search computed. ``ChainOfThought`` is handed the very list
of passages the search returned: its model call is the generate stage, and the passages whose text
is in the messages the model received are what reached the context."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest
from tests.apps.runner import assert_host_untouched, run_app
from tests.apps.test_langchain_haystack_apps import manifests, stages_of
from tests.apps.test_langgraph_apps import cosine, words  # the same bag-of-words embedder as the DSPy app

pytest.importorskip("dspy")

OFFLINE = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def dspy_vectors(texts: Sequence[str]) -> list[list[float]]:
    """DSPy's own offline n-gram vectorizer, as the async app embeds with it."""
    from dspy.utils import DummyVectorizer

    return [[float(x) for x in row] for row in DummyVectorizer()(list(texts))]


@dataclass(frozen=True)
class App:
    """A DSPy app: its file, what it asks of which corpus, how it embeds, and what it answers."""

    file: str
    question: str
    corpus: tuple[str, ...]
    vectors: Callable[[Sequence[str]], list[list[float]]]
    response: str
    top: tuple[str, str]  # the two passages the search returns, worked out by hand from the scores below

    def ranking(self) -> list[tuple[float, int]]:
        """The top-2 (cosine, corpus position), computed here independently of DSPy."""
        q, *docs = self.vectors([self.question, *self.corpus])
        return sorted(((cosine(q, d), i) for i, d in enumerate(docs)), reverse=True)[:2]


RAG_TUTORIAL = App(
    "dspy_rag.py",
    "What does cosine similarity measure between embedding vectors?",
    (
        "BM25 ranks documents by term frequency and inverse document frequency.",
        "Cosine similarity measures the angle between two embedding vectors.",
        "A vector database stores embeddings and searches them by similarity.",
        "Reranking reorders retrieved passages with a stronger model.",
        "Chunking splits long documents into passages before embedding them.",
    ),
    lambda texts: [words(t) for t in texts],
    "Cosine similarity measures the angle between two embedding vectors.",
    ("1", "3"),
)
ASYNC_RAG = App(
    "dspy_async_rag.py",  # the async guide's form: ``await rag.acall``, ``aforward`` awaiting ``acall``
    "How do I run a DSPy program asynchronously?",
    (
        "Call await program.acall(...) to run a DSPy program asynchronously.",
        "dspy.asyncify wraps a synchronous program so it runs in a worker thread.",
        "Optimizers such as MIPROv2 tune the prompts of a program.",
        "dspy.Evaluate scores a program on a development set.",
        "Signatures declare the input and output fields of a module.",
    ),
    dspy_vectors,
    "Call await program.acall(...) to run a DSPy program asynchronously.",
    ("0", "1"),
)


@pytest.mark.parametrize("app", [RAG_TUTORIAL, ASYNC_RAG], ids=lambda a: a.file)
def test_rag_tutorial_is_one_trace_with_its_search_and_generation(tmp_path, app):
    run = run_app(app.file, tmp_path, enabled=["ragtrail_dspy"], extra_env=OFFLINE)
    assert_host_untouched(run)
    assert f"response={app.response!r}" in run.stdout
    [m] = manifests(run)  # one trace, verified with no alarm
    # the RAG module is the pipeline root: its forward (aforward) names the module-level retriever `search`
    assert m["pipeline"]["component"] == "__main__.RAG" and m["pipeline"]["status"] == "ok"
    [root] = [s for s in run.spans if s.parent_span_id is None]
    assert len(run.spans) == 3 and [s.parent_span_id for s in run.spans if s is not root] == [root.span_id] * 2
    assert stages_of(m) == [("retrieve", "Embeddings", 0, 2, 0), ("generate", "DummyLM", 2, 2, 0)]
    stage, generate = m["stages"]
    assert stage["component"] == "dspy.Embeddings" and stage["knobs"] == {"top_k": 2} and stage["findings"] == []
    scores = app.ranking()
    assert [(c["id"], c["rank"], c["score_kind"], c["hop"], c["sha256"]) for c in stage["candidates"]] == [
        (str(i), rank, "similarity", 0, sha(app.corpus[i])) for rank, (_score, i) in enumerate(scores)
    ]
    assert [c["score"] for c in stage["candidates"]] == pytest.approx([s for s, _i in scores], rel=1e-5)
    assert tuple(c["id"] for c in stage["candidates"]) == app.top
    hops = [(h["hop"], h["parent_hop"], h["transform"], h["text"], h["hit_index"]) for h in m["query_hops"]]
    assert hops == [(0, None, "none", app.question, True)]
    # both passages are in the messages DummyLM received; the model's id is DSPy's
    assert [(c["id"], c["sha256"]) for c in generate["candidates"]] == [(c["id"], c["sha256"]) for c in stage["candidates"]]
    assert generate["model"] == "dummy" and generate["excluded"] == []
    assert sorted(m["in_context"]) == sorted(app.top) and m["answer"] is None and m["findings"] == []
    coverage = m["coverage"]
    assert (coverage["corpus_size"], coverage["retrieved"], coverage["in_context"]) == (5, 2, 2)
    assert coverage["statement"] == "2 of 5 read: an absence claim is not supported"
    # each document's fate, through the real CLI
    for rank, doc_id in enumerate(app.top):
        text = run.ragtrail("show", "last", "--doc", doc_id).stdout
        assert f"0 retrieve dspy.Embeddings  kept, output rank {rank} of 2" in text
        assert f"1 generate dspy.utils.dummies.DummyLM  kept, output rank {rank} of 2" in text
        assert "fate: reached the context, not cited" in text
