"""A real LangChain app, unmodified, run under ``opentelemetry-instrument``: the ``ragtrail_langchain``
entry point patches it and ragtrail's local store receives the whole manifest."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spanutil import rec_events

pytest.importorskip("langchain_classic")
pytest.importorskip("langchain_community")
pytest.importorskip("rank_bm25")

from ragtrail.contract import semconv as sc  # noqa: E402

from .test_langchain_support import run_under_opentelemetry_instrument  # noqa: E402

APP = """
    import asyncio
    from langchain_core.documents import Document
    from langchain_core.language_models import FakeListLLM
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_classic.retrievers import ContextualCompressionRetriever, EnsembleRetriever, MultiQueryRetriever
    from langchain_classic.retrievers.document_compressors import DocumentCompressorPipeline, EmbeddingsFilter
    from langchain_community.retrievers import BM25Retriever
    from langchain_community.document_transformers import EmbeddingsRedundantFilter
    from test_langchain_support import HashEmbeddings, corpus

    docs = corpus()
    store = InMemoryVectorStore(HashEmbeddings())
    store.add_documents(docs)
    ensemble = EnsembleRetriever(retrievers=[BM25Retriever.from_documents(docs, k=4), store.as_retriever(search_kwargs={"k": 4})])
    multi = MultiQueryRetriever.from_llm(retriever=ensemble, llm=FakeListLLM(responses=["cats purr\\nred mat door"]))
    app = ContextualCompressionRetriever(
        base_retriever=multi,
        base_compressor=DocumentCompressorPipeline(transformers=[
            EmbeddingsRedundantFilter(embeddings=HashEmbeddings()), EmbeddingsFilter(embeddings=HashEmbeddings(), k=2)]))
    result = asyncio.run(app.ainvoke("the cat sat on the mat"))
    print("RESULT", [d.page_content for d in result])
    print("APP-OK")
"""


def test_unmodified_app_under_opentelemetry_instrument(tmp_path):
    spans = run_under_opentelemetry_instrument(APP, tmp_path)
    stages = [s for s in spans if sc.STAGE_KIND in s.attributes]
    names = sorted(s.name for s in stages)
    assert names == sorted(
        [
            "retrieve ContextualCompressionRetriever",
            "fuse MultiQueryRetriever",
            "fuse EnsembleRetriever",
            "fuse EnsembleRetriever",
            "retrieve BM25Retriever",
            "retrieve BM25Retriever",
            "retrieve VectorStoreRetriever",
            "retrieve VectorStoreRetriever",
            "filter EmbeddingsRedundantFilter",
            "filter EmbeddingsFilter",  # (the compressor pipeline is no stage)
        ]
    ), names
    assert len({s.trace_id for s in stages}) == 1
    by_id = {s.span_id: s for s in stages}
    root = [s for s in stages if s.parent_span_id not in by_id]
    assert [s.name for s in root] == ["retrieve ContextualCompressionRetriever"]
    # query hops: the two generated variants reached the sub-retrievers as hops 1 and 2
    multi = next(s for s in stages if s.name == "fuse MultiQueryRetriever")
    hops = {(e.attributes[sc.QUERY_HOP], e.attributes[sc.QUERY_TEXT]) for e in rec_events(multi) if e.name == sc.EVENT_QUERY}
    assert hops == {(1, "cats purr"), (2, "red mat door")}
    fused = [s for s in stages if s.name == "fuse EnsembleRetriever"]
    assert {s.attributes[sc.QUERY_HOP] for s in fused} == {1, 2}
    for fuse in fused:
        children = [s for s in stages if s.parent_span_id == fuse.span_id]
        assert {c.attributes[sc.QUERY_HOP] for c in children} == {fuse.attributes[sc.QUERY_HOP]}
        assert all(e.attributes[sc.CANDIDATE_SCORE_KIND] == "rrf" for e in rec_events(fuse) if e.name == sc.EVENT_CANDIDATE)
    # every candidate has its receipt; every exclusion a reason; counts add up
    for s in stages:
        kinds = [e.name for e in rec_events(s)]
        assert s.attributes[sc.EVENTS_COUNT] == len(kinds)
        for e in rec_events(s):
            if e.name != sc.EVENT_QUERY:
                assert len(e.attributes[sc.CANDIDATE_CONTENT_SHA256]) == 64
            if e.name == sc.EVENT_EXCLUSION:
                assert sc.is_valid_reason(e.attributes[sc.EXCLUSION_REASON])
                assert e.attributes[sc.EXCLUSION_REASON] != "unexplained"
    # the compressor pipeline's steps are children of the compression retriever and chain in -> out
    outer = root[0]
    redundant = next(s for s in stages if s.name == "filter EmbeddingsRedundantFilter")
    efilter = next(s for s in stages if s.name == "filter EmbeddingsFilter")
    assert redundant.parent_span_id == efilter.parent_span_id == outer.span_id
    multi_out = multi.attributes[sc.CANDIDATES_OUT]
    assert redundant.attributes[sc.CANDIDATES_IN] == multi_out
    assert efilter.attributes[sc.CANDIDATES_IN] == redundant.attributes[sc.CANDIDATES_OUT]
    assert efilter.attributes[sc.CANDIDATES_OUT] == outer.attributes[sc.CANDIDATES_OUT] == 2
    for s in (redundant, efilter):
        assert s.attributes[sc.CANDIDATES_IN] == s.attributes[sc.CANDIDATES_OUT] + s.attributes[sc.CANDIDATES_EXCLUDED]


def test_ragtrail_imports_and_instruments_without_langchain():
    """A library that is not installed is skipped silently; ragtrail itself never needs it."""
    code = (
        "import sys\n"
        "for name in ('langchain_core', 'langchain_classic', 'langchain_community'):\n"
        "    sys.modules[name] = None\n"
        "import ragtrail\n"
        "from ragtrail.instrumentation.langchain import LangChainInstrumentor\n"
        "inst = LangChainInstrumentor()\n"
        "inst.instrument(skip_dep_check=True)\n"
        "inst.uninstrument()\n"
        "print('NO-LANGCHAIN-OK')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "NO-LANGCHAIN-OK" in proc.stdout
    assert "Traceback" not in proc.stderr
