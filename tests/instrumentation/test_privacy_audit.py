"""Issue 13, privacy, tested the way an auditor would: every integration whose queries are text
(the decorators, LangChain, LlamaIndex, Haystack, Chroma, Qdrant) runs in ``hash`` and ``off``
query mode with content capture ``off``, with failing stages whose messages quote the query, with
rewrites, HyDE documents and filters built from the query; then every exported byte is searched
for the query, each rewrite and each word the filters took from them (as written, lowercase, and
URL-encoded): the local store's files, and the body of a real OTLP/HTTP protobuf request taken by
a loopback receiver. Zero hits are required, and the run must still have been recorded (the
stages, their statuses and the query receipt where the mode keeps one).
"""

from __future__ import annotations

import contextlib
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

import ragtrail
from otlp_server import otlp_server  # noqa: F401  (fixture)
from ragtrail import settings
from ragtrail.contract import semconv as sc
from ragtrail.export.local_store import LocalStoreSpanExporter

QUERY = "Zanzibar quokka ledger 4417"
REWRITE = "where is the zanzibar quokka ledger kept"
HYDE = "The Zanzibar quokka ledger 4417 is kept in the marmalade archive"
DOC_TEXT = "confidential marmalade archive page about the quokka ledger"
FILTER_WORD = "quokka"
SECRETS = (QUERY, REWRITE, HYDE, DOC_TEXT, FILTER_WORD, "zanzibar", "marmalade")


def unkeyed_digests() -> set[str]:
    """The unkeyed digests of every query text and filter word: the sha256 a query receipt would carry
    (of its bytes) and the one a hashed filter value would (of its canonical JSON). Under a receipt key
    none may be exported. (A document's content id stays an unkeyed content receipt: docs/semconv.md §8.)"""
    from ragtrail.contract.receipts import canonical_json, receipt

    digests: set[str] = set()
    for secret in (QUERY, REWRITE, HYDE, FILTER_WORD):
        for form in (secret, secret.lower()):
            digests.add(receipt(form).sha256)
            digests.add(receipt(canonical_json(form)).sha256)
    return digests


def needles(keyed: bool = False) -> set[bytes]:
    """Every form of every secret an exported byte may carry it in (and, under a receipt key, its unkeyed digests)."""
    forms: set[str] = set(unkeyed_digests()) if keyed else set()
    for secret in SECRETS:
        for form in (
            secret,
            secret.lower(),
            urllib.parse.quote(secret),
            urllib.parse.quote_plus(secret),
            urllib.parse.quote(secret.lower()),
            urllib.parse.quote_plus(secret.lower()),
        ):
            forms.add(form)
    return {f.encode("utf-8") for f in forms}


def audit(spans: Any, tmp_path: Path, server: Any) -> None:
    """Export ``spans`` through both real exporters and grep every byte they wrote or sent (for the
    unkeyed digests too when a receipt key is set)."""
    assert spans, "nothing was recorded: an audit of nothing proves nothing"
    store = LocalStoreSpanExporter(tmp_path / "store")
    store.export(list(spans))
    store.shutdown()
    OTLPSpanExporter(endpoint=server.traces_url).export(list(spans))
    server.wait_for(lambda s: any(r.accepted for r in s.requests))
    blobs = {str(p): p.read_bytes() for p in (tmp_path / "store").rglob("*") if p.is_file()}
    blobs.update({f"otlp request {r.index}": r.body for r in server.requests})
    assert len(blobs) >= 2 and all(blobs.values())
    hits = [
        (where, needle, blob[max(0, blob.lower().find(needle.lower()) - 120) :][:200])
        for where, blob in blobs.items()
        for needle in needles(keyed=settings.receipt_key() is not None)
        if needle.lower() in blob.lower()
    ]
    assert hits == []


def stage_statuses(spans: Any) -> dict[str, list[str]]:
    statuses: dict[str, list[str]] = {}
    for s in spans:
        if sc.STAGE_STATUS in (s.attributes or {}):
            statuses.setdefault(s.name, []).append(s.attributes[sc.STAGE_STATUS])
    return statuses


def all_statuses(spans: Any) -> list[str]:
    return sorted(status for found in stage_statuses(spans).values() for status in found)


def check_query_receipt(spans: Any, mode: str) -> None:
    """The mode's promise holds on the stages that took the query: a receipt in hash mode, nothing in off."""
    queried = [s for s in spans if sc.QUERY_HOP in (s.attributes or {})]
    assert queried
    for s in queried:
        assert (sc.QUERY_SHA256 in s.attributes) is (mode in HASHED), s.name
        assert sc.QUERY_TEXT not in s.attributes
        if mode == KEYED:  # issue 28: the receipt is an HMAC under the key, the algorithm named
            assert s.attributes[sc.QUERY_SHA256].startswith("hmac-sha256:") and len(s.attributes[sc.QUERY_SHA256]) == 76, s.name


KEYED = "hash+key"  # hash mode under a receipt key (RAGTRAIL_RECEIPT_KEY)
HASHED = ("hash", KEYED)


@pytest.fixture(params=["hash", "off", KEYED])
def mode(request, monkeypatch) -> str:
    if request.param == KEYED:
        monkeypatch.setenv(sc.ENV_RECEIPT_KEY, "audit key")
    else:
        monkeypatch.delenv(sc.ENV_RECEIPT_KEY, raising=False)
    settings.set_capture(query="off" if request.param == "off" else "hash", content="off")
    return request.param


# --- the decorators ---------------------------------------------------------------------------------
def run_decorated() -> None:
    @ragtrail.query_transform
    def rewrite(query: str) -> str:
        return REWRITE

    @ragtrail.query_transform(transform=sc.TRANSFORM_HYDE)
    def hyde(query: str) -> str:
        return HYDE

    @ragtrail.retriever
    def search(query: str) -> list[dict]:
        return [{"id": "doc-1", "content": DOC_TEXT, "score": 0.9}, DOC_TEXT]

    @ragtrail.retriever
    def broken(query: str) -> list[dict]:
        raise LookupError(f"no index answers {query!r}")

    @ragtrail.filter
    def drop_text(query: str, candidates: list) -> list:
        ragtrail.current_stage().exclude(DOC_TEXT + " (as the app wrote it)", "custom:not_wanted")
        return candidates[:1]

    @ragtrail.pipeline
    def answer(query: str) -> None:
        hyde(rewrite(query))
        for q in (query, REWRITE, HYDE):
            with contextlib.suppress(LookupError):
                broken(q)
        with ragtrail.stage(sc.KIND_RETRIEVE, "app.store") as s:
            s.query(HYDE)
            s.set_attribute(sc.STAGE_FILTER, {"$contains": FILTER_WORD, "topic": {"$in": [QUERY, REWRITE]}})
            s.outputs([])
        drop_text(query, search(REWRITE))
        raise RuntimeError(f"the answer to {QUERY} failed after {REWRITE}")

    with pytest.raises(RuntimeError):
        answer(QUERY)


def test_decorators_leak_nothing(mode, span_exporter, tmp_path, otlp_server) -> None:  # noqa: F811
    run_decorated()
    spans = span_exporter.get_finished_spans()
    statuses = stage_statuses(spans)
    assert statuses["pipeline answer"] == [sc.STATUS_FAILED] and statuses["retrieve broken"] == [sc.STATUS_FAILED] * 3
    filtered = next(s for s in spans if s.name == "retrieve store")
    value = filtered.attributes[sc.STAGE_FILTER]
    assert '"$contains"' in value and '"$in"' in value and '"topic"' in value  # keys and operators kept
    assert ("sha256:" in value) is (mode in HASHED)
    assert ("hmac-sha256:" in value) is (mode == KEYED)
    check_query_receipt(spans, mode)
    audit(spans, tmp_path, otlp_server)


# --- LangChain ---------------------------------------------------------------------------------------
def test_langchain_leaks_nothing(mode, tracer_provider, span_exporter, tmp_path, otlp_server) -> None:  # noqa: F811
    pytest.importorskip("langchain_core")
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    from ragtrail.instrumentation.langchain import LangChainInstrumentor

    class Store(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
            if query != REWRITE:
                raise ValueError(f"index offline for {query!r}")
            return [Document(page_content=DOC_TEXT, id="lc-1", metadata={"topic": FILTER_WORD})]

    inst = LangChainInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    try:
        retriever = Store()
        with pytest.raises(ValueError):
            retriever.invoke(QUERY)
        assert retriever.invoke(REWRITE)[0].page_content == DOC_TEXT
    finally:
        inst.uninstrument()
    spans = span_exporter.get_finished_spans()
    assert all_statuses(spans) == [sc.STATUS_FAILED, sc.STATUS_OK]
    check_query_receipt(spans, mode)
    audit(spans, tmp_path, otlp_server)


# --- LlamaIndex --------------------------------------------------------------------------------------
def test_llama_index_leaks_nothing(mode, tracer_provider, span_exporter, tmp_path, otlp_server) -> None:  # noqa: F811
    pytest.importorskip("llama_index.core")
    from llama_index.core import VectorStoreIndex
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores import FilterOperator, MetadataFilter, MetadataFilters

    from ragtrail.instrumentation.llama_index import LlamaIndexInstrumentor

    from .test_llama_index_support import WordEmbedding

    nodes = [
        TextNode(text=DOC_TEXT, id_="li-1", metadata={"topic": FILTER_WORD}),
        TextNode(text="an unrelated page", id_="li-2", metadata={"topic": "other"}),
    ]
    index = VectorStoreIndex(nodes, embed_model=WordEmbedding())
    # a filter built from the query, as apps do
    filters = MetadataFilters(filters=[MetadataFilter(key="topic", value=QUERY.split()[1].lower(), operator=FilterOperator.EQ)])
    inst = LlamaIndexInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    try:
        found = index.as_retriever(similarity_top_k=2, filters=filters).retrieve(QUERY)
        assert [n.node.node_id for n in found] == ["li-1"]
        found = index.as_retriever(similarity_top_k=2).retrieve(REWRITE)
        assert found
    finally:
        inst.uninstrument()
    spans = span_exporter.get_finished_spans()
    with_filter = [s for s in spans if sc.STAGE_FILTER in (s.attributes or {})]
    assert with_filter, "the filter was not recorded: nothing to audit"
    assert '"key":"topic"' in with_filter[0].attributes[sc.STAGE_FILTER]
    check_query_receipt(spans, mode)
    audit(spans, tmp_path, otlp_server)


# --- Chroma ------------------------------------------------------------------------------------------
def test_chroma_leaks_nothing(mode, tracer_provider, span_exporter, tmp_path, otlp_server) -> None:  # noqa: F811
    pytest.importorskip("chromadb")
    from ragtrail.instrumentation.chromadb import ChromaInstrumentor

    from .test_chromadb import new_collection

    collection = new_collection({"c-1": (DOC_TEXT, {"topic": FILTER_WORD}), "c-2": ("another page", {"topic": "x"})})
    inst = ChromaInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    try:
        result = collection.query(query_texts=[QUERY, REWRITE], n_results=2, where_document={"$contains": FILTER_WORD}, where={"topic": FILTER_WORD})
        assert result["ids"][0] == ["c-1"]
        with pytest.raises(Exception):  # noqa: B017 - whatever the library raises: the stage must say failed
            collection.query(query_texts=[QUERY], n_results=1, where={"$bogus": QUERY})
    finally:
        inst.uninstrument()
    spans = span_exporter.get_finished_spans()
    assert sc.STATUS_FAILED in all_statuses(spans)
    assert any('"$contains"' in (s.attributes or {}).get(sc.STAGE_FILTER, "") for s in spans)
    check_query_receipt(spans, mode)
    audit(spans, tmp_path, otlp_server)


# --- Qdrant ------------------------------------------------------------------------------------------
def test_qdrant_leaks_nothing(mode, tracer_provider, span_exporter, tmp_path, otlp_server) -> None:  # noqa: F811
    pytest.importorskip("qdrant_client")
    from qdrant_client import QdrantClient, models

    from ragtrail.instrumentation.qdrant import QdrantInstrumentor

    client = QdrantClient(":memory:")
    client.create_collection("docs", vectors_config=models.VectorParams(size=3, distance=models.Distance.COSINE))
    client.upsert("docs", [models.PointStruct(id=1, vector=[1.0, 0.0, 0.0], payload={"text": DOC_TEXT, "topic": FILTER_WORD})])
    query_filter = models.Filter(
        must=[
            models.FieldCondition(key="topic", match=models.MatchValue(value=FILTER_WORD)),
            models.FieldCondition(key="text", match=models.MatchText(text=QUERY)),
        ]
    )
    inst = QdrantInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    try:
        client.query_points("docs", query=[1.0, 0.0, 0.0], query_filter=query_filter, limit=2)
        with pytest.raises(Exception):  # noqa: B017 - whatever the library raises: the stage must say failed
            client.query_points("missing", query=[1.0, 0.0, 0.0], query_filter=query_filter)
    finally:
        inst.uninstrument()
    spans = span_exporter.get_finished_spans()
    assert sc.STATUS_FAILED in all_statuses(spans)
    assert any('"key":"topic"' in (s.attributes or {}).get(sc.STAGE_FILTER, "") for s in spans)
    audit(spans, tmp_path, otlp_server)


# --- Haystack ----------------------------------------------------------------------------------------
def test_haystack_leaks_nothing(mode, tracer_provider, span_exporter, tmp_path, otlp_server) -> None:  # noqa: F811
    pytest.importorskip("haystack")
    from haystack import Document
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    from ragtrail.instrumentation.haystack import HaystackInstrumentor

    store = InMemoryDocumentStore()
    store.write_documents(
        [Document(id="h-1", content=DOC_TEXT, meta={"topic": FILTER_WORD}), Document(id="h-2", content="another page", meta={"topic": "x"})]
    )
    retriever = InMemoryBM25Retriever(store)
    inst = HaystackInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    try:
        out = retriever.run(query=QUERY, filters={"field": "meta.topic", "operator": "==", "value": FILTER_WORD})
        assert [d.id for d in out["documents"]] == ["h-1"]
        retriever.run(query=REWRITE)
        with pytest.raises(Exception):  # noqa: B017 - whatever the library raises: the stage must say failed
            retriever.run(query=QUERY, filters={"field": "meta.topic", "operator": f"bad {QUERY}", "value": 1})
    finally:
        inst.uninstrument()
    spans = span_exporter.get_finished_spans()
    assert sc.STATUS_FAILED in all_statuses(spans)
    check_query_receipt(spans, mode)
    audit(spans, tmp_path, otlp_server)
