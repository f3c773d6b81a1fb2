"""Issue 24, principles 2 and 3, on documentation apps run unchanged (offline stand-ins only) under
``opentelemetry-instrument`` and read back with the real ``ragtrail`` CLI (tests/apps/runner.py).

- Replacements are transforms: a child chunk replaced by its parent (LangChain ParentDocumentRetriever)
  and leaves replaced by the node they merge into (LlamaIndex AutoMergingRetriever) are inputs of the
  replacing stage, each an exclusion ``custom:merged`` ("into X"), and the replacement an output under
  rule ``merge@1`` whose ``derived_from`` names them. A leaf's fate reads "merged into X, which reached
  the context"; the parent carries the store's own id; verify raises no alarm.
- Queries an LLM made are hops of the question: SubQuestionQueryEngine's sub-questions are ``decompose``
  hops of hop 0 (not ``untracked`` with a finding each), and the question itself, searched by nobody,
  is not "→ index".
"""

from __future__ import annotations

import json
import re

import pytest

from apps.runner import assert_host_untouched, run_app

CONTEXT_UNKNOWN = "what reached the model is unknown: no budget, context or generate stage recorded it"


def stages(trace: dict) -> list[tuple[str, str, int, int, int]]:
    return [(s["kind"], s["component"].rsplit(".", 1)[-1], s["in"], s["out"], s["excluded_count"]) for s in trace["stages"]]


def fate(run, trace_id: str, doc: str) -> dict:
    return json.loads(run.ragtrail("show", trace_id, "--doc", doc, "--json").stdout)


def assert_verifies_clean(run, trace_id: str) -> dict:
    proc = run.ragtrail("verify", trace_id, ok_codes=(0, 1))
    assert proc.returncode == 0, proc.stdout
    fidelity = run.verify(trace_id)["fidelity"]
    assert fidelity["alarms"] == []
    assert fidelity["changed_uncited"] == 0 and fidelity["unverifiable"] == 0
    return fidelity


def hops(manifest: dict) -> list[tuple]:
    return [(h["hop"], h["parent_hop"], h["transform"], h["text"], h["hit_index"]) for h in manifest["query_hops"]]


# --- principle 2: replacements ---------------------------------------------------------------------
UNION, ESSAY = "data/state_of_the_union.txt", "data/paul_graham_essay.txt"
# the four child chunks Chroma found for "justice breyer": their content receipts, distances, sizes and
# source file. Their ids are Chroma's own (random uuids, so known by rank): langchain-community's Chroma
# hands back Documents without the collection's ids, and the nested chromadb stage recorded them
CHUNKS = [
    ("e5333f5f41238c8f6a6a5e2a84d154ef547cdf9f2de0e1fe8e58b5788ecad92f", 55.0, 250, UNION),
    ("22d233c092f6178bf2b63897a4e36b6ac1e63ab4ad568f0a58f9763e8af53d3b", 66.0, 276, UNION),
    ("3d9cb653a34e4d72d7005931968b33f9cfb390272152f84ebc83a37a3e997743", 83.0, 198, UNION),
    ("979898395646dab870c9b77a8454ac9c54b7409b6e94c41f70d008e6159b3ca3", 127.0, 300, ESSAY),
]
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def test_parent_document_retriever_hands_on_parents_that_replace_their_chunks(tmp_path):
    pytest.importorskip("langchain_classic")
    pytest.importorskip("chromadb")
    run = run_app(
        "langchain_parent_document.py",
        tmp_path,
        enabled=["ragtrail_langchain", "ragtrail_chromadb"],
        data="parent_docs",
        extra_env={"RAGTRAIL_CAPTURE_METADATA": "doc_id,source"},
    )
    # the app's own DeprecationWarnings (langchain-community, its Chroma class), the same in both runs
    assert_host_untouched(run, stderr_empty=False)
    assert run.stdout.splitlines()[0] == "2" and run.stdout.splitlines()[-1] == "729"
    search, retrieval = run.traces()
    # the direct similarity_search: LangChain's Chroma over chromadb, one id per chunk (Chroma's uuid)
    assert stages(search) == [("retrieve", "Chroma", 4, 4, 0), ("retrieve", "Collection", 0, 4, 0)]
    chroma, collection = run.show(search["trace_id"])["stages"]
    assert [c["id"] for c in chroma["candidates"]] == [c["id"] for c in collection["candidates"]]
    assert [(c["sha256"], c["score"], c["chars"]) for c in chroma["candidates"]] == [c[:3] for c in CHUNKS]
    assert stages(retrieval) == [("retrieve", "ParentDocumentRetriever", 4, 2, 4), ("retrieve", "Collection", 0, 4, 0)]
    manifest = run.show(retrieval["trace_id"])
    pdr = manifest["stages"][0]
    chunk_ids = [c["id"] for c in manifest["stages"][1]["candidates"]]
    assert all(UUID.match(i) for i in chunk_ids) and [c["sha256"] for c in manifest["stages"][1]["candidates"]] == [c[0] for c in CHUNKS]
    excluded = pdr["excluded"]
    assert [(e["id"], e["sha256"], e["score"], e["chars"], e["meta"]["source"]) for e in excluded] == [
        (i, *c) for i, c in zip(chunk_ids, CHUNKS, strict=True)
    ]
    assert {e["score_kind"] for e in excluded} == {"distance"}
    # each parent carries the docstore's own key, the one its chunks keep in metadata["doc_id"]
    union_key, essay_key = (e["meta"]["doc_id"] for e in (excluded[0], excluded[3]))
    assert [e["meta"]["doc_id"] for e in excluded] == [union_key] * 3 + [essay_key]
    assert len(union_key) == 36 and union_key.count("-") == 4 and not union_key.startswith("sha256:")
    assert [(e["reason"], e["detail"], e["rank"]) for e in excluded] == [
        ("custom:merged", f"into {union_key}", 0),
        ("custom:merged", f"into {union_key}", 1),
        ("custom:merged", f"into {union_key}", 2),
        ("custom:merged", f"into {essay_key}", 3),
    ]
    parents = [(c["id"], c["rank"], c["chars"], c["transform_rule"], json.loads(c["derived_from"]), c["meta"]) for c in pdr["candidates"]]
    assert parents == [
        (union_key, 0, 729, "merge@1", chunk_ids[:3], {"source": UNION}),
        (essay_key, 1, 641, "merge@1", [chunk_ids[3]], {"source": ESSAY}),
    ]
    assert hops(manifest) == [(0, None, "none", "justice breyer", True)]
    assert manifest["in_context"] is None and manifest["findings"] == []
    assert manifest["coverage"]["statement"] == f"{CONTEXT_UNKNOWN} (2 retrieved of a corpus of unknown size): an absence claim is not supported"
    # each chunk follows its parent; the parent's own fate is the ordinary one
    trace_id = retrieval["trace_id"]
    for chunk_id in chunk_ids:
        parent = union_key if chunk_id != chunk_ids[3] else essay_key
        chain = fate(run, trace_id, chunk_id)
        assert chain["merged_into"] == parent
        assert chain["verdict"] == f"merged into {parent}, which was handed on; {CONTEXT_UNKNOWN}"
    label = "retrieve langchain_classic.retrievers.parent_document_retriever.ParentDocumentRetriever"
    assert fate(run, trace_id, union_key)["verdict"] == f"last handed on by {label}; {CONTEXT_UNKNOWN}"
    fidelity = assert_verifies_clean(run, trace_id)
    assert (fidelity["intact"], fidelity["changed_cited"], fidelity["not_captured"]) == (1, 0, 10)


QUESTION = "What could be the potential outcomes of adjusting the amount of safety data used in the RLHF stage?"
# the six leaves the vector retriever found (random node ids: known by rank), their sizes and similarities
LEAVES = [(496, 0.9566), (437, 0.9509), (220, 0.9488), (527, 0.9264), (478, 0.9181), (404, 0.9066)]


def test_auto_merging_retriever_leaves_follow_the_node_they_merged_into(tmp_path):
    pytest.importorskip("llama_index.core")
    run = run_app("llama_auto_merging.py", tmp_path, enabled=["ragtrail_llama_index"], data="llama2_paper")
    assert_host_untouched(run)
    # 10 nodes (1 root, 2 of 512 tokens, 7 leaves); 1 node after merging, 6 without
    assert run.stdout.splitlines()[:4] == ["10", "7", "1", "6"]
    merging, base, engine = run.traces()
    merging_stages = [("retrieve", "AutoMergingRetriever", 6, 1, 6), ("retrieve", "VectorIndexRetriever", 0, 6, 0)]
    assert stages(merging) == merging_stages
    assert stages(base) == [("retrieve", "VectorIndexRetriever", 0, 6, 0)]
    assert stages(engine) == [
        *merging_stages,
        ("generate", "CompactAndRefine", 1, 1, 0),
        ("budget", "PromptHelper", 1, 1, 0),
        ("budget", "PromptHelper", 1, 1, 0),
    ]
    manifest = run.show(engine["trace_id"])
    auto, inner = manifest["stages"][0], manifest["stages"][1]
    leaves = [c["id"] for c in inner["candidates"]]
    assert [(c["chars"], round(c["score"], 4)) for c in inner["candidates"]] == LEAVES
    [merged] = auto["candidates"]
    node = merged["id"]
    # the root node (the whole 2,537-character text) replaced all six leaves (two 512-token nodes first,
    # then the root: the leaves are named, not the intermediate nodes); its score is their mean
    assert (merged["chars"], merged["transform_rule"], json.loads(merged["derived_from"])) == (2537, "merge@1", leaves)
    assert round(merged["score"], 4) == 0.9403 and node not in leaves
    assert [(e["id"], e["rank"], e["reason"], e["detail"]) for e in auto["excluded"]] == [
        (leaf, i, "custom:merged", f"into {node}") for i, leaf in enumerate(leaves)
    ]
    assert manifest["in_context"] == [node] and manifest["findings"] == []
    # the merged node holds the six leaves it replaced: 6 of the 7 leaves indexed were read
    assert (manifest["coverage"]["corpus_size"], manifest["coverage"]["in_context"]) == (7, 6)
    assert manifest["coverage"]["statement"] == "6 of 7 read: an absence claim is not supported"
    assert hops(manifest) == [(0, None, "none", QUESTION, True)]
    for leaf in leaves:
        chain = fate(run, engine["trace_id"], leaf)
        assert (chain["merged_into"], chain["in_context"]) == (node, False)
        assert chain["verdict"] == f"merged into {node}, which reached the context"
    assert fate(run, engine["trace_id"], node)["verdict"] == "reached the context, not cited"
    # the bare retrieval: no context stage, so the leaves' fate says what is known
    bare = run.show(merging["trace_id"])
    assert bare["in_context"] is None
    assert fate(run, merging["trace_id"], leaves[0])["verdict"] == f"merged into {node}, which was handed on; {CONTEXT_UNKNOWN}"
    for trace in (merging, base, engine):
        assert_verifies_clean(run, trace["trace_id"])
    fidelity = run.verify(engine["trace_id"])["fidelity"]
    # the budget's metadata header is cited; the merged node is first seen where it replaced the leaves
    assert (fidelity["intact"], fidelity["changed_cited"], fidelity["not_captured"]) == (6, 1, 13)


# --- principle 3: queries an LLM made are hops of the question ----------------------------------------
def test_sub_questions_are_decompose_hops_of_the_question(tmp_path):
    pytest.importorskip("llama_index.core")
    run = run_app("llama_sub_question.py", tmp_path, enabled=["ragtrail_llama_index"])
    assert_host_untouched(run)
    [trace] = run.traces()
    manifest = run.show(trace["trace_id"])
    question_gen = manifest["stages"][0]
    assert (question_gen["kind"], question_gen["component"]) == (
        "query_transform",
        "llama_index.core.question_gen.llm_generators.LLMQuestionGenerator",
    )
    # the question itself was searched by no retriever (only the sub-questions were): no "→ index"
    assert hops(manifest) == [
        (0, None, "none", "How do refunds and support compare?", False),
        (1, 0, "decompose", "What is the refund window?", True),
        (2, 0, "decompose", "How fast does support answer?", True),
        (3, 0, "decompose", "What changed in the refund policy?", True),
    ]
    assert [h["produced_by"] for h in manifest["query_hops"]] == [None] + [f"query_transform {question_gen['component']}"] * 3
    # each sub-question's retrieval runs on its own hop; no hop is untracked, so no hop finding. The one
    # finding names the three sub-answers of the final synthesis: no recorded stage read them (the
    # trace cannot tell text the run made from a unit an unrecorded component fetched)
    assert [s["query"]["hop"] for s in manifest["stages"] if s["kind"] == "retrieve"] == [1, 2, 3]
    read = {c["id"] for s in manifest["stages"] if s["kind"] == "retrieve" for c in s["candidates"]}
    made = [i for i in manifest["in_context"] if i not in read]
    assert len(made) == 3 and manifest["coverage"]["unknown_origin"] == 3
    assert manifest["findings"] == [
        f"3 in the context of unknown origin ({', '.join(made)}): no recorded stage read them "
        "(text made in the run, or a component ragtrail does not record read them); coverage counts them apart"
    ]
    assert "untracked" not in run.show_text(trace["trace_id"])
    assert_verifies_clean(run, trace["trace_id"])


def test_auto_retriever_query_is_a_rewrite_hop_of_the_question(tmp_path):
    """LlamaIndex's auto-retrieval page (an app nobody on the team had written): the LLM writes the
    query ("celebrities") and the filter (country == "United States") the index is searched with. The
    question read "→ index" though no store saw it, and the written query was hop 1 ``untracked`` with
    the finding "changed by no instrumented transform", while the instrumented auto-retriever made it."""
    pytest.importorskip("llama_index.core")
    run = run_app("llama_auto_retriever.py", tmp_path, enabled=["ragtrail_llama_index"])
    assert_host_untouched(run)
    assert [line.split(" is ")[0] for line in run.stdout.splitlines()] == ["Michael Jordan", "Elon Musk"]
    [trace] = run.traces()
    manifest = run.show(trace["trace_id"])
    assert stages(manifest) == [("retrieve", "VectorIndexAutoRetriever", 2, 2, 0), ("retrieve", "VectorIndexRetriever", 0, 2, 0)]
    auto, inner = manifest["stages"]
    assert hops(manifest) == [
        (0, None, "none", "Tell me about two celebrities from United States", False),
        (1, 0, "rewrite", "celebrities", True),
    ]
    assert [h["produced_by"] for h in manifest["query_hops"]] == [None, f"retrieve {auto['component']}"]
    assert (auto["query"]["hop"], inner["query"]["hop"]) == (0, 1)
    where = '{"condition":"and","filters":[{"key":"country","operator":"==","value":"United States"}]}'
    assert auto["filter"] == inner["filter"] == where
    assert [c["id"] for c in auto["candidates"]] == [c["id"] for c in inner["candidates"]]
    assert manifest["findings"] == []
    assert manifest["coverage"]["statement"] == f"{CONTEXT_UNKNOWN} (2 retrieved of 5): an absence claim is not supported"
    text = run.show_text(trace["trace_id"])
    assert "untracked" not in text
    assert [line.strip() for line in text.splitlines() if "→ index" in line] == ['hop 1  rewrite of hop 0  "celebrities" → index']
    assert_verifies_clean(run, trace["trace_id"])
