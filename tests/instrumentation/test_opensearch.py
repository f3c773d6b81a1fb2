"""OpenSearch (no server can run here) at the transport: opensearch-py runs unpatched against a real
HTTP server on 127.0.0.1 answering ``_search`` with the documented k-NN response shape. Exact
attributes for k-NN, ``match`` and hybrid searches; the requests are the same with and without
ragtrail; a failing search passes through untouched."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

opensearchpy = pytest.importorskip("opensearchpy")

from opentelemetry.instrumentation.utils import suppress_instrumentation  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

import spanutil  # noqa: E402
from loopback_http import Loopback, serve  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.opensearch import FUSED, OpenSearchInstrumentor  # noqa: E402
from service_responses import es_index_not_found, es_search  # noqa: E402
from storeutil import Expected, check_span  # noqa: E402

VECTOR = [5.0, 4.0]
HITS = [
    {"_index": "hotels-index", "_id": "8", "_score": 0.8333334, "_source": {"location": [5.0, 4.0], "text": "harbour view"}},
    {"_index": "hotels-index", "_id": "6", "_score": 0.5, "_source": {"location": [6.0, 4.0], "text": "old town"}},
]


def respond(method: str, path: str, body: Any) -> tuple[int, Any, dict[str, str]]:
    if path == "/missing/_search":
        return es_index_not_found("missing", headers={})
    return es_search(HITS[: body.get("size", 10)], total=2, took=3, headers={})


@pytest.fixture(scope="module")
def server() -> Iterator[Loopback]:
    with serve(respond) as s:
        yield s


@pytest.fixture(scope="module")
def instrumentor() -> Iterator[OpenSearchInstrumentor]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    inst = OpenSearchInstrumentor()
    inst.instrument(tracer_provider=provider)
    inst.exporter = exporter
    yield inst
    inst.uninstrument()


@pytest.fixture
def exporter(instrumentor: OpenSearchInstrumentor) -> Iterator[Any]:
    instrumentor.exporter.clear()
    yield instrumentor.exporter


@pytest.fixture
def client(server: Loopback, instrumentor: OpenSearchInstrumentor) -> Iterator[Any]:
    c = opensearchpy.OpenSearch(hosts=[server.url])
    yield c
    c.close()


def expect(resp: Any, **kw: Any) -> Expected:
    hits = resp["hits"]["hits"]
    kw.setdefault("component", "opensearchpy.OpenSearch.search")
    kw.setdefault("collection", "hotels-index")
    return Expected(ids=[h["_id"] for h in hits], scores=[h["_score"] for h in hits], contents=[h["_source"]["text"] for h in hits], **kw)


def test_knn_query_exact_span_and_no_request_of_ours(client, server, exporter) -> None:
    body = {"size": 2, "query": {"knn": {"location": {"vector": VECTOR, "k": 2, "filter": {"term": {"city": "x"}}}}}}
    before = len(server.requests)
    with suppress_instrumentation():
        bare = client.search(index="hotels-index", body=body)
    bare_requests = server.requests[before:]
    before = len(server.requests)
    resp = client.search(index="hotels-index", body=body)
    assert server.requests[before:] == bare_requests
    assert resp == bare
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    want_filter = '{"query":{"knn":{"location":{"filter":{"term":{"city":"x"}},"k":2}}}}'
    check_span(span, exporter.get_finished_spans(), expect(resp, kind=sc.SCORE_SIMILARITY, top_k=2, vector=VECTOR, filter_json=want_filter))


def test_match_query_is_bm25(client, exporter) -> None:
    resp = client.search(index="hotels-index", body={"size": 1, "query": {"match": {"text": "harbour"}}})
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    want = expect(resp, kind=sc.SCORE_BM25, top_k=1, text="harbour", filter_json='{"query":{"match":{"text":"harbour"}}}')
    check_span(span, exporter.get_finished_spans(), want)


def test_hybrid_query_is_a_fused_score(client, exporter) -> None:
    query = {"hybrid": {"queries": [{"match": {"text": "harbour"}}, {"knn": {"location": {"vector": VECTOR, "k": 2}}}]}}
    resp = client.search(index="hotels-index", body={"size": 2, "query": query}, params={"search_pipeline": "nlp-search-pipeline"})
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    want_filter = '{"query":{"hybrid":{"queries":[{"match":{"text":"harbour"}},{"knn":{"location":{"k":2}}}]}}}'
    want = expect(resp, kind=sc.SCORE_NONE, top_k=2, text="harbour", vector=VECTOR, filter_json=want_filter, findings=(FUSED,))
    check_span(span, exporter.get_finished_spans(), want)


def test_failing_search_passes_through_untouched(client, exporter) -> None:
    with suppress_instrumentation(), pytest.raises(opensearchpy.NotFoundError) as bare:
        client.search(index="missing", body={"query": {"match_all": {}}})
    with pytest.raises(opensearchpy.NotFoundError) as traced:
        client.search(index="missing", body={"query": {"match_all": {}}})
    assert str(traced.value) == str(bare.value)
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    assert span.status.status_code is StatusCode.ERROR


def test_async_knn_query_is_the_same_stage(server, exporter) -> None:
    body = {"size": 2, "query": {"knn": {"location": {"vector": VECTOR, "k": 2}}}}

    async def main() -> Any:
        client = opensearchpy.AsyncOpenSearch(hosts=[server.url])
        try:
            return await client.search(index="hotels-index", body=body)
        finally:
            await client.close()

    resp = asyncio.run(main())
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    want_filter = '{"query":{"knn":{"location":{"k":2}}}}'
    want = expect(resp, component="opensearchpy.AsyncOpenSearch.search", kind=sc.SCORE_SIMILARITY, top_k=2, vector=VECTOR, filter_json=want_filter)
    check_span(span, exporter.get_finished_spans(), want)


def test_async_failing_search_passes_through_untouched(server, exporter) -> None:
    async def main() -> None:
        client = opensearchpy.AsyncOpenSearch(hosts=[server.url])
        try:
            await client.search(index="missing", body={"query": {"match_all": {}}})
        finally:
            await client.close()

    with suppress_instrumentation(), pytest.raises(opensearchpy.NotFoundError) as bare:
        asyncio.run(main())
    with pytest.raises(opensearchpy.NotFoundError) as traced:
        asyncio.run(main())
    assert str(traced.value) == str(bare.value)
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    assert span.status.status_code is StatusCode.ERROR


def test_boolean_post_filter_scores_by_the_knn(client, exporter) -> None:
    # the k-NN guide's boolean filter: a bool whose one must is the knn, the filter outside it
    query = {"bool": {"filter": {"bool": {"must": [{"term": {"city": "x"}}]}}, "must": {"knn": {"location": {"vector": VECTOR, "k": 5}}}}}
    resp = client.search(index="hotels-index", body={"query": query})
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    want_filter = '{"query":{"bool":{"filter":{"bool":{"must":[{"term":{"city":"x"}}]}},"must":{"knn":{"location":{"k":5}}}}}}'
    check_span(span, exporter.get_finished_spans(), expect(resp, kind=sc.SCORE_SIMILARITY, top_k=5, vector=VECTOR, filter_json=want_filter))


def test_bool_with_a_scoring_should_is_no_single_kind(client, exporter) -> None:
    knn = {"knn": {"location": {"vector": VECTOR, "k": 5}}}
    resp = client.search(index="hotels-index", body={"size": 2, "query": {"bool": {"must": knn, "should": [{"match": {"text": "harbour"}}]}}})
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    want_filter = '{"query":{"bool":{"must":{"knn":{"location":{"k":5}}},"should":[{"match":{"text":"harbour"}}]}}}'
    check_span(span, exporter.get_finished_spans(), expect(resp, kind=sc.SCORE_NONE, top_k=2, filter_json=want_filter))
