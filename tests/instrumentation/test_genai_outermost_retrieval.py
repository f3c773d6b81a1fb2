"""The GenAI mirror claims one retrieval per retrieval the caller made (docs/semconv.md §6): the
outermost retrieve stage carries ``gen_ai.operation.name=retrieval`` and the GenAI retrieval
attributes; a retrieve stage opened inside it (a store's search under a framework's retriever) carries
no ``gen_ai.*`` attribute, so a GenAI reader counting retrieval spans counts one. A store searched
directly is the outermost retrieval itself. Real LangChain, chromadb and LlamaIndex, offline."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("langchain_community")
pytest.importorskip("chromadb")

from langchain_core.documents import Document  # noqa: E402

import ragtrail  # noqa: E402
import spanutil  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402

from .test_langchain_support import TEXTS, HashEmbeddings, one, stage_attributes  # noqa: E402

VSR = "langchain_core.vectorstores.base.VectorStoreRetriever"
IDS = [f"c{i}" for i in range(len(TEXTS))]
QUERY = "dogs chase cats"


def genai_of(span: Any) -> dict[str, Any]:
    return {k: v for k, v in span.attributes.items() if k.startswith("gen_ai.")}


def retrievals(spans: Any) -> list[str]:
    """The spans a GenAI reader counts as retrievals."""
    return [s.name for s in spans if s.attributes.get(sc.GEN_AI_OPERATION_NAME) == "retrieval"]


@pytest.fixture
def chroma_store(tracer_provider):
    from langchain_community.vectorstores import Chroma

    from ragtrail.instrumentation.chromadb import ChromaInstrumentor
    from ragtrail.instrumentation.langchain import LangChainInstrumentor

    chroma_inst, lc_inst = ChromaInstrumentor(), LangChainInstrumentor()
    chroma_inst.instrument(tracer_provider=tracer_provider)
    lc_inst.instrument(tracer_provider=tracer_provider)
    store = Chroma.from_documents([Document(page_content=t) for t in TEXTS], HashEmbeddings(), ids=IDS, collection_name="kbase")
    try:
        yield store
    finally:
        store.delete_collection()
        lc_inst.uninstrument()
        chroma_inst.uninstrument()


def chroma_truth(store: Any, k: int) -> tuple[list[str], list[float]]:
    """The collection's own answer (no instrumentation): ids and distances, nearest first."""
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    with suppress_instrumentation():
        found = store._collection.query(query_embeddings=[HashEmbeddings().embed_query(QUERY)], n_results=k)
    return found["ids"][0], found["distances"][0]


def test_a_retriever_over_chroma_is_one_genai_retrieval(chroma_store, span_exporter) -> None:
    span_exporter.clear()
    docs = chroma_store.as_retriever(search_kwargs={"k": 2}).invoke(QUERY)
    spans = span_exporter.get_finished_spans()
    ids, distances = chroma_truth(chroma_store, 2)
    assert [TEXTS[IDS.index(i)] for i in ids] == [d.page_content for d in docs]
    outer = one(spans, "VectorStoreRetriever")
    [inner] = [s for s in spans if s is not outer]
    assert inner.parent.span_id == outer.context.span_id and inner.attributes[sc.STAGE_KIND] == sc.KIND_RETRIEVE
    assert retrievals(spans) == [outer.name]
    # the framework-level retrieval: exactly these GenAI attributes (the store's ids and the distances
    # read beneath; the query text in the default query mode `text`)
    outer_genai = genai_of(outer)
    assert json.loads(outer_genai.pop(sc.GEN_AI_RETRIEVAL_DOCUMENTS)) == [{"id": i, "score": d} for i, d in zip(ids, distances, strict=True)]
    assert outer_genai == {
        sc.GEN_AI_OPERATION_NAME: "retrieval",
        sc.GEN_AI_DATA_SOURCE_ID: VSR,
        sc.GEN_AI_RETRIEVAL_TOP_K: 2,
        sc.GEN_AI_RETRIEVAL_QUERY_TEXT: QUERY,
    }
    # the store's search inside it: part of that retrieval, no GenAI name at all; the rest unchanged
    assert genai_of(inner) == {}
    a = spanutil.own(inner)
    for key, value in {
        **stage_attributes(sc.KIND_RETRIEVE, "chromadb.Collection", n_in=0, n_out=2, n_excluded=0),
        sc.STAGE_TOP_K: 2,
        sc.STAGE_COLLECTION: "kbase",
        sc.OPENINFERENCE_SPAN_KIND: "RETRIEVER",
    }.items():
        assert a.pop(key) == value, key
    spanutil.check_count_and_digest(inner, spanutil.stitched(inner, spans))
    a.pop(sc.EVENTS_COUNT), a.pop(sc.EVENTS_DIGEST)
    for i, (ident, distance) in enumerate(zip(ids, distances, strict=True)):
        assert a.pop(f"retrieval.documents.{i}.document.id") == ident
        assert a.pop(f"retrieval.documents.{i}.document.score") == pytest.approx(distance)
    vector_keys = [k for k in a if k.startswith("ragtrail.query.vector.")]
    assert sorted(vector_keys) == [sc.QUERY_VECTOR_DIM, sc.QUERY_VECTOR_SHA256] and a.pop(sc.QUERY_VECTOR_DIM) == 64
    a.pop(sc.QUERY_VECTOR_SHA256)
    assert a == {}, a


def test_a_chroma_search_called_directly_is_the_genai_retrieval(chroma_store, span_exporter) -> None:
    """No framework around it: the store's own stage is the outermost retrieval and claims it."""
    span_exporter.clear()
    embedding = HashEmbeddings().embed_query(QUERY)
    found = chroma_store._collection.query(query_embeddings=[embedding], n_results=2)
    [span] = span_exporter.get_finished_spans()
    ids, distances = found["ids"][0], found["distances"][0]
    assert retrievals([span]) == [span.name]
    got = genai_of(span)
    assert json.loads(got.pop(sc.GEN_AI_RETRIEVAL_DOCUMENTS)) == [{"id": i, "score": d} for i, d in zip(ids, distances, strict=True)]
    assert got == {sc.GEN_AI_OPERATION_NAME: "retrieval", sc.GEN_AI_DATA_SOURCE_ID: "kbase", sc.GEN_AI_RETRIEVAL_TOP_K: 2}  # the searched collection


def test_nested_decorated_stages_claim_one_retrieval_at_any_depth(tracer_provider, span_exporter) -> None:
    """A retrieve stage inside a fuse inside a retrieve is still part of the outer retrieval; two
    retrieve stages side by side under a pipeline are two retrievals, each claiming its own."""
    tracer = tracer_provider.get_tracer("t")
    with ragtrail.stage("pipeline", "app", tracer=tracer):
        with ragtrail.stage("retrieve", "app.hybrid", top_k=1, tracer=tracer) as outer:
            outer.query(QUERY)
            with ragtrail.stage("fuse", "app.rrf", tracer=tracer) as fuse:
                with ragtrail.stage("retrieve", "app.bm25", top_k=1, tracer=tracer) as bm25:
                    bm25.outputs([{"id": "a", "score": 2.0}], score_kind="bm25")
                fuse.outputs([{"id": "a"}])
            outer.outputs([{"id": "a", "score": 0.5}], score_kind="similarity")
        with ragtrail.stage("retrieve", "app.second", tracer=tracer) as second:
            second.outputs([{"id": "b"}])
    spans = span_exporter.get_finished_spans()
    assert sorted(retrievals(spans)) == ["retrieve hybrid", "retrieve second"]
    assert genai_of(one(spans, "bm25")) == {} and genai_of(one(spans, "rrf")) == {}
    assert genai_of(one(spans, "hybrid")) == {
        sc.GEN_AI_OPERATION_NAME: "retrieval",
        sc.GEN_AI_DATA_SOURCE_ID: "app.hybrid",
        sc.GEN_AI_RETRIEVAL_TOP_K: 1,
        sc.GEN_AI_RETRIEVAL_QUERY_TEXT: QUERY,
        sc.GEN_AI_RETRIEVAL_DOCUMENTS: '[{"id":"a","score":0.5}]',
    }
    assert genai_of(one(spans, "second")) == {
        sc.GEN_AI_OPERATION_NAME: "retrieval",
        sc.GEN_AI_DATA_SOURCE_ID: "app.second",
        sc.GEN_AI_RETRIEVAL_DOCUMENTS: '[{"id":"b"}]',
    }


def test_a_sampled_out_outer_stage_still_makes_the_inner_one_nested(span_exporter) -> None:
    """Nesting is known from the open stages, recording or not: under a retrieve stage that is not
    recording (sampled out), a recording inner retrieve stage claims no retrieval either."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

    off = TracerProvider(sampler=ALWAYS_OFF).get_tracer("off")
    on = TracerProvider(sampler=ALWAYS_ON)
    on.add_span_processor(SimpleSpanProcessor(span_exporter))
    with ragtrail.stage("retrieve", "app.outer", tracer=off) as outer:
        assert not outer.recording
        with ragtrail.stage("retrieve", "app.inner", tracer=on.get_tracer("t")) as inner:
            inner.outputs([{"id": "a"}])
    [span] = span_exporter.get_finished_spans()
    assert span.attributes[sc.STAGE_COMPONENT] == "app.inner" and genai_of(span) == {}


def test_llama_index_retriever_is_one_genai_retrieval(tracer_provider, span_exporter) -> None:
    """LlamaIndex's VectorIndexRetriever over its in-memory store (no store stage beneath): the
    framework-level retriever is the one retrieval."""
    pytest.importorskip("llama_index.core")
    from llama_index.core import VectorStoreIndex
    from llama_index.core.schema import TextNode

    from ragtrail.instrumentation.llama_index import LlamaIndexInstrumentor

    from .test_llama_index_support import WordEmbedding

    inst = LlamaIndexInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    try:
        index = VectorStoreIndex([TextNode(text=t, id_=IDS[i]) for i, t in enumerate(TEXTS)], embed_model=WordEmbedding())
        span_exporter.clear()
        found = index.as_retriever(similarity_top_k=2).retrieve(QUERY)
    finally:
        inst.uninstrument()
    spans = span_exporter.get_finished_spans()
    outer = one(spans, "VectorIndexRetriever")
    assert retrievals(spans) == [outer.name]
    assert genai_of(outer) == {
        sc.GEN_AI_OPERATION_NAME: "retrieval",
        sc.GEN_AI_DATA_SOURCE_ID: "llama_index.core.indices.vector_store.retrievers.retriever.VectorIndexRetriever",
        sc.GEN_AI_RETRIEVAL_TOP_K: 2,
        sc.GEN_AI_RETRIEVAL_QUERY_TEXT: QUERY,
        sc.GEN_AI_RETRIEVAL_DOCUMENTS: json.dumps([{"id": n.node.node_id, "score": n.score} for n in found], separators=(",", ":")),
    }


# --- gen_ai.client.operation.duration: once per retrieval the GenAI mirror claims ----------------------
def duration_metrics(reader: Any) -> list[Any]:
    """Every metric named ``gen_ai.client.operation.duration`` the reader collected."""
    data = reader.get_metrics_data()
    found = []
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            found += [m for m in scope.metrics if m.name == sc.GEN_AI_CLIENT_OPERATION_DURATION]
    return found


BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)  # as the conventions give them


@pytest.fixture
def reader(install_meter_provider) -> Any:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    made = InMemoryMetricReader()
    install_meter_provider(MeterProvider(metric_readers=[made]))
    return made


def test_a_retriever_over_chroma_records_one_duration(chroma_store, span_exporter, reader) -> None:
    """The real SDK's reader: one histogram point for the one retrieval (not two for the nested
    pair), its value the framework-level span's duration, in seconds, with the specified buckets."""
    span_exporter.clear()
    chroma_store.as_retriever(search_kwargs={"k": 2}).invoke(QUERY)
    outer = one(span_exporter.get_finished_spans(), "VectorStoreRetriever")
    [metric] = duration_metrics(reader)
    assert (metric.unit, metric.description) == ("s", "GenAI operation duration.")
    [point] = metric.data.data_points
    assert dict(point.attributes) == {sc.GEN_AI_OPERATION_NAME: "retrieval"}
    assert tuple(point.explicit_bounds) == BUCKETS
    assert point.count == 1 and point.sum == (outer.end_time - outer.start_time) / 1e9


def test_sampled_out_retrievals_are_counted_and_failures_say_their_error_type(reader) -> None:
    """Sampled in or out, each outermost retrieval is one measurement; the nested one none. A failure
    carries ``error.type``: the exception's class, the failure class given, else ``_OTHER``; a
    cancelled or degraded retrieval none."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    tracer = TracerProvider(sampler=ALWAYS_OFF).get_tracer("off")
    for _ in range(3):
        with ragtrail.stage("retrieve", "app.outer", tracer=tracer), ragtrail.stage("retrieve", "app.inner", tracer=tracer) as inner:
            inner.outputs([{"id": "a"}])
    with pytest.raises(ValueError), ragtrail.stage("retrieve", "app.search", tracer=tracer):
        raise ValueError("boom")
    with ragtrail.stage("retrieve", "app.search", tracer=tracer) as s:
        s.set_status("failed", failure_class="timeout")
    with ragtrail.stage("retrieve", "app.search", tracer=tracer) as s:
        s.set_status("failed")
    with ragtrail.stage("retrieve", "app.search", tracer=tracer) as s:
        s.set_status("degraded", failure_class="timeout", fallback="input_order")
    import asyncio

    with pytest.raises(asyncio.CancelledError), ragtrail.stage("retrieve", "app.search", tracer=tracer):
        raise asyncio.CancelledError
    [metric] = duration_metrics(reader)
    counts = {frozenset(p.attributes.items()): p.count for p in metric.data.data_points}
    retrieval = (sc.GEN_AI_OPERATION_NAME, "retrieval")
    assert counts == {
        frozenset({retrieval}): 3 + 2,  # the three outer ones, the degraded and the cancelled one
        frozenset({retrieval, (sc.ERROR_TYPE, "ValueError")}): 1,
        frozenset({retrieval, (sc.ERROR_TYPE, "timeout")}): 1,
        frozenset({retrieval, (sc.ERROR_TYPE, "_OTHER")}): 1,
    }


def test_no_duration_without_the_genai_mirror(tracer_provider, reader) -> None:
    """The duration belongs to the GenAI mirror: switched off, it is not recorded (no MeterProvider:
    no tally at all, tests/test_metrics.py)."""
    ragtrail.set_capture(mirror_genai=False)
    try:
        with ragtrail.stage("retrieve", "app.search", tracer=tracer_provider.get_tracer("t")) as s:
            s.outputs([{"id": "a"}])
    finally:
        ragtrail.set_capture(mirror_genai=True)
    assert duration_metrics(reader) == []
    with ragtrail.stage("retrieve", "app.search", tracer=tracer_provider.get_tracer("t")) as s:
        s.outputs([{"id": "a"}])
    assert [p.count for m in duration_metrics(reader) for p in m.data.data_points] == [1]
