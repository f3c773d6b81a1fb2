"""Library hooks hand a sampled-out stage its outcome when it is cheap (issue 26, docs/semconv.md §9):
a LangChain retriever's result list is its whole outcome, so sampled out it counts ``ok`` or ``empty``
by the number of documents it returned, as a recorded one does, instead of ``unknown``."""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402

import ragtrail  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.langchain import LangChainInstrumentor  # noqa: E402
from ragtrail.recorder import metrics as rm  # noqa: E402
from ragtrail.sampling import RagtrailSampler  # noqa: E402

from .test_langchain_support import HashEmbeddings  # noqa: E402


@pytest.fixture
def reader(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    monkeypatch.setattr(importlib.import_module("opentelemetry.metrics._internal"), "_METER_PROVIDER", MeterProvider(metric_readers=[reader]))
    rm.refresh()
    yield reader


def _runs(reader: InMemoryMetricReader) -> Counter[tuple[Any, ...]]:
    data = reader.get_metrics_data()
    assert data is not None
    points = [p for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics if m.name == rm.STAGE_RUNS for p in m.data.data_points]
    return Counter({tuple((p.attributes or {}).get(k) for k in (sc.STAGE_KIND, sc.STAGE_COMPONENT, sc.STAGE_STATUS)): int(p.value) for p in points})


@pytest.mark.parametrize("sampled", [False, True])
def test_a_langchain_retriever_counts_ok_and_empty_sampled_in_and_out(reader: InMemoryMetricReader, sampled: bool) -> None:
    provider = TracerProvider(sampler=RagtrailSampler(1.0 if sampled else 0.0))
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        store = InMemoryVectorStore(HashEmbeddings())
        empty = InMemoryVectorStore(HashEmbeddings()).as_retriever()
        store.add_documents([Document(page_content=t, id=f"d{i}") for i, t in enumerate(["cats purr", "dogs bark"])])
        full = store.as_retriever(search_kwargs={"k": 2})
        with ragtrail.stage(sc.KIND_PIPELINE, "app.Pipeline", tracer=provider.get_tracer("test")):
            assert len(full.invoke("cats")) == 2
            assert empty.invoke("cats") == []
    finally:
        instrumentor.uninstrument()
    component = "langchain_core.vectorstores.base.VectorStoreRetriever"
    assert _runs(reader) == {
        (sc.KIND_PIPELINE, "app.Pipeline", sc.STATUS_OK): 1,
        (sc.KIND_RETRIEVE, component, sc.STATUS_OK): 1,
        (sc.KIND_RETRIEVE, component, sc.STATUS_EMPTY): 1,
    }


@pytest.mark.parametrize("sampled", [False, True])
def test_a_haystack_retriever_counts_ok_and_empty_sampled_in_and_out(reader: InMemoryMetricReader, sampled: bool) -> None:
    pytest.importorskip("haystack")
    from haystack import Document as HaystackDocument
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    from ragtrail.instrumentation.haystack import HaystackInstrumentor

    provider = TracerProvider(sampler=RagtrailSampler(1.0 if sampled else 0.0))
    instrumentor = HaystackInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        store = InMemoryDocumentStore()
        store.write_documents([HaystackDocument(id="d1", content="cats purr"), HaystackDocument(id="d2", content="dogs bark")])
        retriever = InMemoryBM25Retriever(store, top_k=2)
        with ragtrail.stage(sc.KIND_PIPELINE, "app.Pipeline", tracer=provider.get_tracer("test")):
            assert len(retriever.run(query="cats")["documents"]) >= 1
            assert retriever.run(query="cats", top_k=0)["documents"] == []
    finally:
        instrumentor.uninstrument()
    component = "haystack.components.retrievers.in_memory.bm25_retriever.InMemoryBM25Retriever"
    assert _runs(reader) == {
        (sc.KIND_PIPELINE, "app.Pipeline", sc.STATUS_OK): 1,
        (sc.KIND_RETRIEVE, component, sc.STATUS_OK): 1,
        (sc.KIND_RETRIEVE, component, sc.STATUS_EMPTY): 1,
    }
