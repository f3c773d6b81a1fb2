"""Issue 12 / seed 002 on LlamaIndex: a reranking postprocessor that silently falls back to its
input (its model's answer did not parse) hands on the retriever's similarities; they are recorded
as similarities, with the ``rerank_is_identity`` finding, never as rerank scores. A real rerank
keeps its own kind. Real llama-index-core objects, offline."""

from __future__ import annotations

import pytest

from .test_llama_index_support import (  # noqa: F401 - fixtures
    build_index,
    events,
    instrumented,
    instrumentor,
    one,
)

pytest.importorskip("llama_index.core")

from llama_index.core.postprocessor.types import BaseNodePostprocessor  # noqa: E402
from llama_index.core.schema import NodeWithScore, QueryBundle  # noqa: E402

import ragtrail  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402

QUERY = "why do cats sleep so much"


class FallbackRerank(BaseNodePostprocessor):
    """An app's LLM reranker: when the LLM's answer does not parse it keeps the input order."""

    top_n: int = 2
    reply: str = "I think the first ones are best!"

    def _postprocess_nodes(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        try:
            order = [int(x) for x in self.reply.split(",")]
        except ValueError:
            return nodes[: self.top_n]
        return [NodeWithScore(node=nodes[i].node, score=10.0 - rank) for rank, i in enumerate(order)][: self.top_n]


def _run(reranker: FallbackRerank) -> list[NodeWithScore]:
    """Retrieve then rerank in one app pipeline (stages of one run share what they know of a
    candidate: the retriever said its scores are similarities)."""
    retriever = build_index().as_retriever(similarity_top_k=4)
    with ragtrail.stage(sc.KIND_PIPELINE, "app"):
        nodes = retriever.retrieve(QUERY)
        return reranker.postprocess_nodes(nodes, query_bundle=QueryBundle(QUERY))


def test_fallback_rerank_keeps_similarity_and_is_a_finding(instrumented):
    out = _run(FallbackRerank())
    span = one(instrumented.get_finished_spans(), "rerank FallbackRerank")
    retrieved = [e for e in events(one(instrumented.get_finished_spans(), "retrieve VectorIndexRetriever"), sc.EVENT_CANDIDATE)]
    assert [(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_SCORE], e[sc.CANDIDATE_SCORE_KIND]) for e in events(span, sc.EVENT_CANDIDATE)] == [
        (n.node.node_id, n.score, "similarity") for n in out
    ]
    assert [e[sc.CANDIDATE_ID] for e in retrieved][:2] == [n.node.node_id for n in out]
    assert span.attributes[sc.STAGE_FINDINGS] == (
        "rerank_is_identity: the stage handed on 2 of its 4 inputs in their input order with their input scores: "
        "nothing was reranked (a silent fallback?); the scores keep their upstream kind (similarity)",
    )
    assert [(e[sc.EXCLUSION_REASON], e[sc.EXCLUSION_DETAIL]) for e in events(span, sc.EVENT_EXCLUSION)] == [("below_rank_cutoff", "top_k=2")] * 2


def test_a_real_rerank_keeps_its_own_kind(instrumented):
    out = _run(FallbackRerank(reply="3,1"))
    span = one(instrumented.get_finished_spans(), "rerank FallbackRerank")
    assert [(e[sc.CANDIDATE_SCORE], e[sc.CANDIDATE_SCORE_KIND]) for e in events(span, sc.EVENT_CANDIDATE)] == [(10.0, "rerank"), (9.0, "rerank")]
    assert [n.score for n in out] == [10.0, 9.0]
    assert sc.STAGE_FINDINGS not in span.attributes
