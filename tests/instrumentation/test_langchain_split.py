"""LangChain app-level truth on the real libraries, offline: a text splitter inside a compression
pipeline is a ``split`` stage (chunks ``derived_from`` their document, the documents each with an
output), LLMChainExtractor's extract keeps one id in its stage and the outer stage, and a FAISS store
is one store under one id space in the LangChain stage and the nested faiss stage."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("langchain_classic")
pytest.importorskip("langchain_text_splitters")

from langchain_classic.retrievers import ContextualCompressionRetriever  # noqa: E402
from langchain_classic.retrievers.document_compressors import DocumentCompressorPipeline, EmbeddingsFilter  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore  # noqa: E402
from langchain_text_splitters import CharacterTextSplitter  # noqa: E402

from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.langchain import LangChainInstrumentor  # noqa: E402
from spanutil import rec_events  # noqa: E402

from .test_langchain_support import HashEmbeddings, assert_events, candidate_event, docs_equal, one, pop_stage, sha, stage_attributes  # noqa: E402

SPLITTER = "langchain_text_splitters.character.CharacterTextSplitter"
PARENTS = ["cats purr softly. dogs bark loudly", "markets fell today", "tea is hot. coffee is hotter"]


@pytest.fixture
def instrumentor(tracer_provider, span_exporter):
    inst = LangChainInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield inst
    inst.uninstrument()


def split_retriever(store: InMemoryVectorStore) -> ContextualCompressionRetriever:
    splitter = CharacterTextSplitter(chunk_size=20, chunk_overlap=0, separator=". ")
    pipeline = DocumentCompressorPipeline(transformers=[splitter, EmbeddingsFilter(embeddings=HashEmbeddings(), k=2)])
    return ContextualCompressionRetriever(base_compressor=pipeline, base_retriever=store.as_retriever(search_kwargs={"k": 3}))


def parents_store() -> InMemoryVectorStore:
    store = InMemoryVectorStore(HashEmbeddings())
    store.add_documents([Document(page_content=t, id=f"p{i}") for i, t in enumerate(PARENTS)])
    return store


def test_a_splitter_inside_a_compression_pipeline_is_a_split_stage(instrumentor, tracer_provider, span_exporter):
    retriever = split_retriever(parents_store())
    instrumentor.uninstrument()
    plain = retriever.invoke("cats purr")
    instrumentor.instrument(tracer_provider=tracer_provider)
    traced = retriever.invoke("cats purr")
    assert docs_equal(plain, traced)
    spans = span_exporter.get_finished_spans()
    assert [s.name for s in spans] == [
        "retrieve VectorStoreRetriever",
        "split CharacterTextSplitter",
        "filter EmbeddingsFilter",
        "retrieve ContextualCompressionRetriever",
    ]
    retrieve, split, efilter, outer = spans
    assert split.parent.span_id == outer.context.span_id
    given = [e.attributes[sc.CANDIDATE_ID] for e in rec_events(retrieve) if e.name == sc.EVENT_CANDIDATE]
    assert sorted(given) == ["p0", "p1", "p2"]
    # the chunks the real splitter makes, in the order of the documents it was given
    chunks_of = {"p0": ["cats purr softly", "dogs bark loudly"], "p1": ["markets fell today"], "p2": ["tea is hot", "coffee is hotter"]}
    expected = []
    for parent in given:
        for n, text in enumerate(chunks_of[parent]):
            event = candidate_event(parent if n == 0 else f"{parent}#{n}", len(expected), text, hop=0)
            if text != PARENTS[int(parent[1:])]:
                event[sc.CANDIDATE_TRANSFORM_RULE] = sc.RULE_SPLIT
                event[sc.CANDIDATE_TRANSFORM_DERIVED_FROM] = sha(PARENTS[int(parent[1:])])
            expected.append((sc.EVENT_CANDIDATE, event))
    assert_events(split, expected)
    left = pop_stage(split, stage_attributes("split", SPLITTER, n_in=3, n_out=5, n_excluded=0))
    assert left == {}
    # the filter judged chunks under the chunk ids; the outer stage hands on the same ids
    kept = [e.attributes[sc.CANDIDATE_ID] for e in rec_events(efilter) if e.name == sc.EVENT_CANDIDATE]
    dropped = [e.attributes[sc.CANDIDATE_ID] for e in rec_events(efilter) if e.name == sc.EVENT_EXCLUSION]
    assert sorted(kept + dropped) == sorted(e[1][sc.CANDIDATE_ID] for e in expected)
    assert [e.attributes[sc.CANDIDATE_ID] for e in rec_events(outer) if e.name == sc.EVENT_CANDIDATE] == kept
    assert not any(i.startswith("sha256:") for i in kept + dropped)


def test_a_split_at_indexing_time_records_nothing(instrumentor, span_exporter):
    splitter = CharacterTextSplitter(chunk_size=20, chunk_overlap=0, separator=". ")
    chunks = splitter.split_documents([Document(page_content=PARENTS[0])])
    assert [c.page_content for c in chunks] == ["cats purr softly", "dogs bark loudly"]
    assert span_exporter.get_finished_spans() == ()


def test_the_split_stage_reaches_the_manifest_verified(tmp_path):
    from opentelemetry.sdk.trace import TracerProvider

    from ragtrail.export.local_store import LocalStoreSpanExporter
    from ragtrail.export.whole_trace import WholeTraceSpanProcessor
    from ragtrail.inspect.manifest import build
    from ragtrail.inspect.sources import resolve

    provider = TracerProvider()
    provider.add_span_processor(WholeTraceSpanProcessor(LocalStoreSpanExporter(tmp_path)))
    inst = LangChainInstrumentor()
    inst.instrument(tracer_provider=provider)
    try:
        split_retriever(parents_store()).invoke("cats purr")
    finally:
        inst.uninstrument()
    provider.shutdown()
    manifest = build(resolve(str(tmp_path), None)).as_dict()
    assert manifest["fidelity"]["alarms"] == [] and manifest["fidelity"]["changed_uncited"] == 0
    # p0 and p2 were cut in two (their first chunk under their own id, split@1), p1 is one chunk
    assert manifest["fidelity"]["changed_cited"] == 2
    [split] = [s for s in manifest["stages"] if s["kind"] == "split"]
    assert (split["in"], split["out"], split["excluded_count"]) == (3, 5, 0)
    assert {c["id"]: c.get("derived_from") for c in split["candidates"]} == {
        "p0": sha(PARENTS[0]),
        "p0#1": sha(PARENTS[0]),
        "p1": None,
        "p2": sha(PARENTS[2]),
        "p2#1": sha(PARENTS[2]),
    }
    coverage = manifest["coverage"]
    # three documents in the store, all three read from it, the two kept chunks in the context
    assert (coverage["corpus_size"], coverage["retrieved"], coverage["in_context"]) == (3, 3, 2)


class ScriptedExtractor:
    """LLMChainExtractor's LLM: the extract for documents about Ketanji, else NO_OUTPUT."""

    @staticmethod
    def llm():
        from langchain_core.language_models import FakeListChatModel

        return FakeListChatModel(responses=["Ketanji Brown Jackson", "NO_OUTPUT"])


def test_an_extract_keeps_its_id_in_the_outer_stage(instrumentor, span_exporter):
    from langchain_classic.retrievers.document_compressors import LLMChainExtractor

    store = InMemoryVectorStore(HashEmbeddings())
    store.add_documents(
        [Document(page_content="I nominated Judge Ketanji Brown Jackson", id="k"), Document(page_content="We will secure the border", id="b")]
    )
    retriever = ContextualCompressionRetriever(
        base_compressor=LLMChainExtractor.from_llm(ScriptedExtractor.llm()), base_retriever=store.as_retriever(search_kwargs={"k": 2})
    )
    docs = retriever.invoke("Ketanji Jackson")
    assert [d.page_content for d in docs] == ["Ketanji Brown Jackson"]
    spans = span_exporter.get_finished_spans()
    extractor = one(spans, "LLMChainExtractor")
    outer = one(spans, "ContextualCompressionRetriever")
    kept = [e.attributes for e in rec_events(extractor) if e.name == sc.EVENT_CANDIDATE]
    handed = [e.attributes for e in rec_events(outer) if e.name == sc.EVENT_CANDIDATE]
    assert [a[sc.CANDIDATE_ID] for a in kept] == [a[sc.CANDIDATE_ID] for a in handed] == ["k"]
    assert handed[0][sc.CANDIDATE_CONTENT_SHA256] == kept[0][sc.CANDIDATE_CONTENT_SHA256] == sha("Ketanji Brown Jackson")


def test_faiss_under_langchain_is_one_store_under_the_docstore_ids(tmp_path):
    pytest.importorskip("faiss")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from langchain_community.vectorstores import FAISS
    from opentelemetry.sdk.trace import TracerProvider

    from ragtrail.export.local_store import LocalStoreSpanExporter
    from ragtrail.export.whole_trace import WholeTraceSpanProcessor
    from ragtrail.inspect.manifest import build
    from ragtrail.inspect.sources import resolve
    from ragtrail.instrumentation.faiss import FaissInstrumentor

    provider = TracerProvider()
    provider.add_span_processor(WholeTraceSpanProcessor(LocalStoreSpanExporter(tmp_path)))
    store = FAISS.from_documents([Document(page_content=t, id=f"f{i}") for i, t in enumerate(PARENTS)], HashEmbeddings())
    lc, fi = LangChainInstrumentor(), FaissInstrumentor()
    lc.instrument(tracer_provider=provider)
    fi.instrument(tracer_provider=provider)
    try:
        docs = store.as_retriever(search_kwargs={"k": 2}).invoke("cats purr")
    finally:
        fi.uninstrument()
        lc.uninstrument()
    provider.shutdown()
    manifest = build(resolve(str(tmp_path), None)).as_dict()
    assert manifest["fidelity"]["alarms"] == []
    langchain_stage, faiss_stage = manifest["stages"]
    assert faiss_stage["component"].startswith("faiss.")
    ids = [d.id for d in docs]
    assert [c["id"] for c in langchain_stage["candidates"]] == [c["id"] for c in faiss_stage["candidates"]] == ids
    coverage = manifest["coverage"]
    # no budget, context or generate stage defined what reached a model: unknown, not "every retrieved id" (issue 24)
    assert (coverage["corpus_size"], coverage["retrieved"], coverage["in_context"]) == (3, 2, None)
