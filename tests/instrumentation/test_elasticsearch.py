"""Elasticsearch (no server can run here: no Docker, no Java download) at the transport: the
elasticsearch client runs unpatched against a real HTTP server on 127.0.0.1 answering ``_search``
with the documented response shape (``hits.hits[]._id/_score/_source``, ``hits.total``). Exact
attributes for kNN, BM25 ``match``, hybrid and RRF searches; the requests are the same with and
without ragtrail; a failing search passes through untouched."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

elasticsearch = pytest.importorskip("elasticsearch")

from opentelemetry.instrumentation.utils import suppress_instrumentation  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

import spanutil  # noqa: E402
from loopback_http import Loopback, serve  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.elasticsearch import FUSED, LINEAR_HIDDEN, RRF_HIDDEN, ElasticsearchInstrumentor  # noqa: E402
from service_responses import es_index_not_found, es_search  # noqa: E402
from storeutil import Expected, check_span  # noqa: E402

VECTOR = [0.3, 0.1, 1.2]
HITS = [
    {"_index": "image-index", "_id": "3", "_score": 0.9183, "_source": {"title": "Sunset", "text": "a red sunset"}},
    {"_index": "image-index", "_id": "7", "_score": 0.8551, "_source": {"title": "Beach", "text": "a quiet beach"}},
]


def respond(method: str, path: str, body: Any) -> tuple[int, Any, dict[str, str]]:
    if path == "/missing/_search":
        return es_index_not_found("missing")
    size = body.get("size") or (body.get("knn") or {}).get("k") or 10
    return es_search(HITS[:size], total=40)


@pytest.fixture(scope="module")
def server() -> Iterator[Loopback]:
    with serve(respond) as s:
        yield s


@pytest.fixture(scope="module")
def instrumentor() -> Iterator[ElasticsearchInstrumentor]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    inst = ElasticsearchInstrumentor()
    inst.instrument(tracer_provider=provider)
    inst.exporter = exporter
    yield inst
    inst.uninstrument()


@pytest.fixture
def exporter(instrumentor: ElasticsearchInstrumentor) -> Iterator[Any]:
    instrumentor.exporter.clear()
    yield instrumentor.exporter


@pytest.fixture
def client(server: Loopback, instrumentor: ElasticsearchInstrumentor) -> Iterator[Any]:
    with elasticsearch.Elasticsearch(server.url) as es:
        yield es


def expect(resp: Any, **kw: Any) -> Expected:
    hits = resp["hits"]["hits"]
    kw.setdefault("component", "elasticsearch.Elasticsearch.search")
    kw.setdefault("collection", "image-index")
    return Expected(ids=[h["_id"] for h in hits], scores=[h["_score"] for h in hits], contents=[h["_source"]["text"] for h in hits], **kw)


def test_knn_search_exact_span_and_no_request_of_ours(client, server, exporter) -> None:
    knn = {"field": "image-vector", "query_vector": VECTOR, "k": 2, "num_candidates": 100, "filter": {"term": {"file-type": "png"}}}

    def search() -> Any:
        return client.search(index="image-index", knn=knn, source=["title", "text"])

    before = len(server.requests)
    with suppress_instrumentation():
        bare = search()
    bare_requests = server.requests[before:]
    before = len(server.requests)
    resp = search()
    assert server.requests[before:] == bare_requests
    assert resp.body == bare.body
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    want_filter = '{"knn":[{"field":"image-vector","filter":{"term":{"file-type":"png"}},"k":2,"num_candidates":100}]}'
    check_span(span, exporter.get_finished_spans(), expect(resp, kind=sc.SCORE_SIMILARITY, top_k=2, vector=VECTOR, filter_json=want_filter))


def test_match_query_is_bm25_with_the_query_text(client, exporter) -> None:
    resp = client.search(index="image-index", query={"match": {"text": {"query": "sunset"}}}, size=1)
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    want = expect(resp, kind=sc.SCORE_BM25, top_k=1, text="sunset", filter_json='{"query":{"match":{"text":{"query":"sunset"}}}}')
    check_span(span, exporter.get_finished_spans(), want)


def test_hybrid_without_rrf_is_a_fused_score_of_no_kind(client, exporter) -> None:
    query = {"match": {"text": "sunset"}}
    knn = {"field": "image-vector", "query_vector": VECTOR, "k": 2, "num_candidates": 10}
    resp = client.search(index="image-index", query=query, knn=knn, size=2)
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    want_filter = '{"knn":[{"field":"image-vector","k":2,"num_candidates":10}],"query":{"match":{"text":"sunset"}}}'
    want = expect(resp, kind=sc.SCORE_NONE, top_k=2, text="sunset", vector=VECTOR, filter_json=want_filter, findings=(FUSED,))
    check_span(span, exporter.get_finished_spans(), want)


def test_rrf_retriever_is_rrf(client, exporter) -> None:
    retriever = {
        "rrf": {
            "retrievers": [
                {"standard": {"query": {"match": {"text": "sunset"}}}},
                {"knn": {"field": "image-vector", "query_vector": VECTOR, "k": 2, "num_candidates": 10}},
            ],
            "rank_window_size": 10,
            "rank_constant": 60,
        }
    }
    resp = client.search(index="image-index", retriever=retriever, size=2)
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    from ragtrail.contract.receipts import canonical_json

    # the legs' query: the standard retriever's match text, the kNN retriever's vector (left out of the filter)
    stripped = {
        "rrf": {
            **retriever["rrf"],
            "retrievers": [retriever["rrf"]["retrievers"][0], {"knn": {"field": "image-vector", "k": 2, "num_candidates": 10}}],
        }
    }
    want = expect(
        resp, kind=sc.SCORE_RRF, top_k=2, text="sunset", vector=VECTOR, filter_json=canonical_json({"retriever": stripped}), findings=(RRF_HIDDEN,)
    )
    check_span(span, exporter.get_finished_spans(), want)


def test_failing_search_passes_through_untouched(client, exporter) -> None:
    with suppress_instrumentation(), pytest.raises(elasticsearch.NotFoundError) as bare:
        client.search(index="missing", query={"match_all": {}})
    with pytest.raises(elasticsearch.NotFoundError) as traced:
        client.search(index="missing", query={"match_all": {}})
    assert str(traced.value) == str(bare.value)
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    assert span.status.status_code is StatusCode.ERROR


def test_async_knn_search_is_the_same_stage(server, exporter) -> None:
    knn = {"field": "image-vector", "query_vector": VECTOR, "k": 2, "num_candidates": 100}

    async def main() -> Any:
        async with elasticsearch.AsyncElasticsearch(server.url) as es:
            return await es.search(index="image-index", knn=knn)

    resp = asyncio.run(main())
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    want_filter = '{"knn":[{"field":"image-vector","k":2,"num_candidates":100}]}'
    want = expect(
        resp, component="elasticsearch.AsyncElasticsearch.search", kind=sc.SCORE_SIMILARITY, top_k=2, vector=VECTOR, filter_json=want_filter
    )
    check_span(span, exporter.get_finished_spans(), want)


def test_async_failing_search_passes_through_untouched(server, exporter) -> None:
    async def main() -> None:
        async with elasticsearch.AsyncElasticsearch(server.url) as es:
            await es.search(index="missing", query={"match_all": {}})

    with suppress_instrumentation(), pytest.raises(elasticsearch.NotFoundError) as bare:
        asyncio.run(main())
    with pytest.raises(elasticsearch.NotFoundError) as traced:
        asyncio.run(main())
    assert str(traced.value) == str(bare.value)
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    assert span.status.status_code is StatusCode.ERROR


def test_rank_rrf_of_a_query_and_a_knn_is_rrf_with_both_legs_as_the_query(client, exporter) -> None:
    # the 8.8-8.13 form: the query and the kNN side by side, fused by ``rank: {rrf: ...}``
    knn = {"field": "image-vector", "query_vector": VECTOR, "k": 2, "num_candidates": 10}
    rank = {"rrf": {"rank_window_size": 50, "rank_constant": 20}}
    resp = client.search(index="image-index", query={"match": {"text": "sunset"}}, knn=knn, rank=rank, size=2)
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    want_filter = (
        '{"knn":[{"field":"image-vector","k":2,"num_candidates":10}],"query":{"match":{"text":"sunset"}},'
        '"rank":{"rrf":{"rank_constant":20,"rank_window_size":50}}}'
    )
    want = expect(resp, kind=sc.SCORE_RRF, top_k=2, text="sunset", vector=VECTOR, filter_json=want_filter, findings=(RRF_HIDDEN,))
    check_span(span, exporter.get_finished_spans(), want)


def test_linear_retriever_is_a_fused_score_of_no_kind(client, exporter) -> None:
    retriever = {
        "linear": {
            "retrievers": [
                {"retriever": {"standard": {"query": {"match": {"text": "sunset"}}}}, "weight": 2, "normalizer": "minmax"},
                {"retriever": {"knn": {"field": "image-vector", "query_vector": VECTOR, "k": 2, "num_candidates": 10}}, "weight": 1.5},
            ]
        }
    }
    resp = client.search(index="image-index", retriever=retriever, size=2)
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    want_filter = (
        '{"retriever":{"linear":{"retrievers":[{"normalizer":"minmax","retriever":{"standard":{"query":{"match":{"text":"sunset"}}}},"weight":2},'
        '{"retriever":{"knn":{"field":"image-vector","k":2,"num_candidates":10}},"weight":1.5}]}}}'
    )
    want = expect(resp, kind=sc.SCORE_NONE, top_k=2, text="sunset", vector=VECTOR, filter_json=want_filter, findings=(LINEAR_HIDDEN,))
    check_span(span, exporter.get_finished_spans(), want)
