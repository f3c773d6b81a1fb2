"""LangChain and Haystack documentation apps (tests/apps/langchain_*.py, haystack_*.py), each run
plain and under ``opentelemetry-instrument`` and read back with the real ``ragtrail`` CLI: the app's
output is untouched (its own DeprecationWarning included), ``verify`` raises no alarm, and the
manifest has the stages, hops and reasons the app's pipeline really has."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from tests.apps.runner import AppRun, assert_host_untouched, manifests, run_app

COMMUNITY_WARNING = "DeprecationWarning: `langchain-community` is being sunset"
NO_BARS = {"TQDM_DISABLE": "1"}


def assert_untouched_but_bars(run: AppRun) -> None:
    """sentence-transformers' progress bars carry timings (never equal twice): compare the rest."""

    def strip(text: str) -> list[str]:
        return [line for line in text.replace("\r", "\n").splitlines() if "it/s]" not in line and "s/it]" not in line and line.strip()]

    assert run.stdout == run.plain_stdout
    assert strip(run.stderr) == strip(run.plain_stderr)


def stages_of(manifest: dict[str, Any]) -> list[tuple[str, str, int, int, int]]:
    return [(s["kind"], s["component"].rsplit(".", 1)[-1], s["in"], s["out"], s["excluded_count"]) for s in manifest["stages"]]


def hits(manifest: dict[str, Any]) -> dict[int, bool]:
    return {h["hop"]: h["hit_index"] for h in manifest["query_hops"]}


def test_rag_tutorial(tmp_path):
    run = run_app("langchain_rag_tutorial.py", tmp_path)
    assert_host_untouched(run)
    assert run.stdout == "Task decomposition splits a task into smaller steps.\n"
    [m] = manifests(run)
    # the chain is the pipeline; the chat model called under it is the generation
    assert m["pipeline"]["component"] == "langchain_core.runnables.base.RunnableSequence"
    assert stages_of(m) == [("retrieve", "VectorStoreRetriever", 0, 2, 0), ("generate", "FakeListChatModel", 2, 2, 0)]
    retrieve, generate = m["stages"]
    # both documents format_docs put in the prompt reached it, under the ids the retriever gave them
    assert [c["id"] for c in generate["candidates"]] == [c["id"] for c in retrieve["candidates"]]
    assert [c["sha256"] for c in generate["candidates"]] == [c["sha256"] for c in retrieve["candidates"]]
    assert m["answer"] == {
        "sha256": hashlib.sha256(b"Task decomposition splits a task into smaller steps.").hexdigest(),
        "chars": 52,
        "refused": None,
        "claim": None,
        "preview": None,
    }
    assert m["cited"] == []  # the chain does not say which documents the answer used
    assert hits(m) == {0: True}
    # InMemoryVectorStore.similarity_search goes through similarity_search_with_score: cosine similarity
    assert [c["score_kind"] for c in m["stages"][0]["candidates"]] == ["similarity", "similarity"]
    assert all(isinstance(c["score"], float) and 0 < c["score"] <= 1 for c in m["stages"][0]["candidates"])
    assert m["stages"][0]["knobs"] == {"top_k": 2}
    coverage = m["coverage"]
    assert (coverage["corpus_size"], coverage["retrieved"], coverage["in_context"]) == (3, 2, 2)


def test_multi_query_is_a_fuse_over_the_variants(tmp_path):
    run = run_app("langchain_multi_query.py", tmp_path)
    assert_host_untouched(run, stderr_empty=False)
    assert "Generated queries:" in run.stderr
    [m] = manifests(run)
    assert stages_of(m) == [("fuse", "MultiQueryRetriever", 12, 5, 7)] + [("retrieve", "VectorStoreRetriever", 0, 4, 0)] * 3
    fuse = m["stages"][0]
    assert {e["reason"] for e in fuse["excluded"]} == {"deduplicated"}
    # the raw question never reached the index; each variant did
    assert hits(m) == {0: False, 1: True, 2: True, 3: True}
    assert [s["query"]["hop"] for s in m["stages"]] == [0, 1, 2, 3]


def test_compression_pipeline(tmp_path):
    run = run_app("langchain_compression_pipeline.py", tmp_path)
    assert_host_untouched(run, stderr_empty=False)
    assert COMMUNITY_WARNING in run.stderr  # the app's own import warning is not swallowed
    [m] = manifests(run)
    assert stages_of(m) == [
        ("retrieve", "ContextualCompressionRetriever", 0, 1, 0),
        ("retrieve", "VectorStoreRetriever", 4, 4, 0),
        ("retrieve", "IndexFlatL2", 0, 4, 0),
        ("split", "CharacterTextSplitter", 4, 9, 0),
        ("filter", "EmbeddingsRedundantFilter", 9, 9, 0),
        ("filter", "EmbeddingsFilter", 9, 1, 8),
    ]
    retrieve, faiss, split = m["stages"][1:4]
    # one document, one id: the nested faiss stage records LangChain's docstore ids, not row positions
    parents = [c["id"] for c in retrieve["candidates"]]
    assert [c["id"] for c in faiss["candidates"]] == parents
    # each of the 4 documents gets its chunks (the first under its own id), each derived_from it
    sha_of = {c["id"]: c["sha256"] for c in retrieve["candidates"]}
    chunks = [(c["id"].split("#")[0], c["transform_rule"], c["derived_from"]) for c in split["candidates"]]
    assert [p for p, *_ in chunks] == sorted((p for p, *_ in chunks), key=parents.index)
    assert {p for p, *_ in chunks} == set(parents) and split["excluded"] == []
    assert all(rule == "split@1" and derived == sha_of[p] for p, rule, derived in chunks)
    # the context is one chunk; the corpus is the 4 documents, counted once though two stages read it
    coverage = m["coverage"]
    assert (coverage["corpus_size"], coverage["retrieved"], coverage["in_context"]) == (4, 4, 1)
    assert m["stages"][0]["candidates"][0]["id"] == m["stages"][-1]["candidates"][0]["id"]
    last = m["stages"][-1]
    assert {e["reason"] for e in last["excluded"]} == {"below_score_threshold"}
    assert all(c["score"] > 0.3 for c in last["candidates"])
    assert all(e["score"] is None or e["score"] <= 0.3 for e in last["excluded"])


def test_chain_extractor(tmp_path):
    run = run_app("langchain_chain_extractor.py", tmp_path)
    assert_host_untouched(run, stderr_empty=False)
    assert COMMUNITY_WARNING in run.stderr
    [m] = manifests(run)
    outer, *inner = m["stages"]
    assert (outer["kind"], outer["out"]) == ("retrieve", 1)
    extractor = [s for s in inner if s["component"].endswith("LLMChainExtractor")]
    assert len(extractor) == 1 and extractor[0]["out"] == 1 and extractor[0]["excluded_count"] == 3
    # the extract keeps one id in its stage and in the outer stage (the document's docstore id)
    assert outer["candidates"][0]["id"] == extractor[0]["candidates"][0]["id"]
    assert not outer["candidates"][0]["id"].startswith("sha256:")
    assert outer["candidates"][0]["sha256"] == extractor[0]["candidates"][0]["sha256"]
    assert extractor[0]["candidates"][0]["transform_rule"] == "llm_extract@1"
    coverage = m["coverage"]
    assert (coverage["corpus_size"], coverage["retrieved"], coverage["in_context"]) == (4, 4, 1)


def test_ensemble_bm25_faiss(tmp_path):
    run = run_app("langchain_ensemble.py", tmp_path)
    assert_host_untouched(run, stderr_empty=False)
    assert COMMUNITY_WARNING in run.stderr
    [m] = manifests(run)
    kinds = [(k, c) for k, c, *_ in stages_of(m)]
    assert kinds[0] == ("fuse", "EnsembleRetriever")
    assert ("retrieve", "BM25Retriever") in kinds and ("retrieve", "VectorStoreRetriever") in kinds
    assert [c["score_kind"] for c in m["stages"][0]["candidates"]] == ["rrf"] * 4


def test_haystack_first_rag(tmp_path):
    run = run_app("haystack_first_rag.py", tmp_path)
    assert_host_untouched(run)
    assert run.stdout == "Jean lives in Paris.\n"
    [m] = manifests(run)
    assert stages_of(m) == [("retrieve", "InMemoryBM25Retriever", 0, 3, 0), ("generate", "FakeChatGenerator", 3, 3, 0)]
    assert hits(m) == {0: True}
    retrieve, generate = m["stages"]
    assert [c["score_kind"] for c in retrieve["candidates"]] == ["bm25"] * 3
    # the three documents the ChatPromptBuilder was given are all in the prompt the generator got
    assert [c["id"] for c in generate["candidates"]] == [c["id"] for c in retrieve["candidates"]]
    assert m["answer"]["sha256"] == hashlib.sha256(b"Jean lives in Paris.").hexdigest()
    assert m["answer"]["chars"] == 20 and m["cited"] == []


def test_haystack_indexing_pipeline_leaves_no_empty_trace(tmp_path):
    run = run_app("haystack_indexing.py", tmp_path)
    assert_host_untouched(run)
    # the indexing pipeline reads nothing: only the query pipeline is a trace `show last` lands on
    [m] = manifests(run)
    assert stages_of(m)[0] == ("retrieve", "InMemoryBM25Retriever", 0, 3, 0)


@pytest.mark.torch
def test_haystack_embedding_rag(tmp_path):
    run = run_app("haystack_embedding_rag.py", tmp_path, extra_env=NO_BARS)
    assert_untouched_but_bars(run)
    [m] = manifests(run)
    assert stages_of(m)[0] == ("retrieve", "InMemoryEmbeddingRetriever", 0, 2, 0)
    assert hits(m) == {0: True}
    assert m["stages"][0]["query"]["hop"] == 0


@pytest.mark.torch
def test_haystack_hybrid(tmp_path):
    run = run_app("haystack_hybrid.py", tmp_path, extra_env=NO_BARS)
    assert_untouched_but_bars(run)
    [m] = manifests(run)
    kinds = sorted((k, c) for k, c, *_ in stages_of(m))
    assert kinds == [("fuse", "DocumentJoiner"), ("retrieve", "InMemoryBM25Retriever"), ("retrieve", "InMemoryEmbeddingRetriever")]
    assert hits(m) == {0: True}


def test_qa_sources_retrieval_chain(tmp_path):
    """create_retrieval_chain + create_stuff_documents_chain: the chain is the pipeline, its chat
    model the generation; both retrieved documents are in the stuffed prompt; the answer's receipt."""
    run = run_app("langchain_qa_sources.py", tmp_path)
    assert_host_untouched(run)
    answer = "Task decomposition splits a hard task into smaller, simpler steps."
    assert run.stdout == f"{answer}\nagent-post#planning\nagent-post#tools\n"
    [m] = manifests(run)
    assert m["pipeline"]["component"] == "langchain_core.runnables.base.RunnableSequence"
    assert stages_of(m) == [("retrieve", "VectorStoreRetriever", 0, 2, 0), ("generate", "FakeListChatModel", 2, 2, 0)]
    retrieve, generate = m["stages"]
    assert [c["id"] for c in generate["candidates"]] == [c["id"] for c in retrieve["candidates"]]
    assert [c["score_kind"] for c in retrieve["candidates"]] == ["similarity", "similarity"]
    assert m["answer"]["sha256"] == hashlib.sha256(answer.encode()).hexdigest() and m["answer"]["chars"] == len(answer)
    assert m["cited"] == [] and m["findings"] == []
    coverage = m["coverage"]
    assert (coverage["corpus_size"], coverage["retrieved"], coverage["in_context"]) == (3, 2, 2)
    assert hits(m) == {0: True}


def test_haystack_prompt_builder_and_generator(tmp_path):
    """The tutorial's PromptBuilder + generator: a generate stage with the documents the prompt
    builder was given (the one BM25 hit), all in the prompt, and the reply as the answer."""
    run = run_app("haystack_prompt_builder_rag.py", tmp_path)
    assert_host_untouched(run)
    answer = "It was a 33 metre bronze statue of the sun-god Helios."
    assert run.stdout == answer + "\n"
    [m] = manifests(run)
    assert m["pipeline"]["component"] == "haystack.core.pipeline.pipeline.Pipeline"
    assert stages_of(m) == [("retrieve", "InMemoryBM25Retriever", 0, 1, 0), ("generate", "FakeGenerator", 1, 1, 0)]
    retrieve, generate = m["stages"]
    assert [c["id"] for c in generate["candidates"]] == [c["id"] for c in retrieve["candidates"]]
    assert m["answer"]["sha256"] == hashlib.sha256(answer.encode()).hexdigest() and m["answer"]["chars"] == len(answer)
    assert m["cited"] == [] and m["findings"] == []
    coverage = m["coverage"]
    assert (coverage["corpus_size"], coverage["retrieved"], coverage["in_context"]) == (4, 1, 1)
    assert hits(m) == {0: True}
