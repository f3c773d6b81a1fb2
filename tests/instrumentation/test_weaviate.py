"""Weaviate v4 collection queries as ragtrail ``retrieve`` stages.

No Weaviate server runs here yet (its Go build is the open step, see the README support table): the
client talks gRPC to a real in-process ``grpc`` server on 127.0.0.1 implementing Weaviate's
``weaviate.v1.Weaviate/Search`` with the protobuf classes shipped inside weaviate-client. The replies
are written by this test in the server's SearchReply shape (not recorded from a server). The client
library is not patched. Exact attributes; the requests the server receives are the same with and
without ragtrail."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import pytest

weaviate = pytest.importorskip("weaviate")
grpc = pytest.importorskip("grpc")

from opentelemetry.instrumentation.utils import suppress_instrumentation  # noqa: E402

import spanutil  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.weaviate import WeaviateInstrumentor  # noqa: E402
from storeutil import Expected, check_span  # noqa: E402

IDS = [str(uuid.UUID(int=i)) for i in (11, 22, 33)]
TEXTS = ["cats purr", "dogs bark", "fish swim"]
DISTANCES = [0.125, 0.25, 0.5]
SCORES = [0.9, 0.5, 0.25]
QUERY = [0.9, 0.1, 0.1]


class _Servicer:
    """Weaviate's Search, answering every request with the three objects (distance and score set
    when the request's metadata asked for them), and counting the requests it received."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.fail = False

    def Search(self, request: Any, context: Any) -> Any:  # noqa: N802 - the gRPC method name
        from weaviate.proto.v1 import base_pb2, properties_pb2, search_get_pb2

        self.requests.append(request)
        if self.fail:
            context.abort(grpc.StatusCode.UNKNOWN, "explorer: get class: vector search: object vector search at index items: shard not found")
        limit = request.limit or len(IDS)
        results = []
        for i in range(min(limit, len(IDS))):
            meta = search_get_pb2.MetadataResult(id=IDS[i])
            if request.metadata.distance:
                meta.distance, meta.distance_present = DISTANCES[i], True
            if request.metadata.score:
                meta.score, meta.score_present = SCORES[i], True
            props = properties_pb2.Properties(fields={"text": properties_pb2.Value(text_value=TEXTS[i])})
            results.append(
                search_get_pb2.SearchResult(metadata=meta, properties=search_get_pb2.PropertiesResult(non_ref_props=props, target_collection="Items"))
            )
        del base_pb2
        return search_get_pb2.SearchReply(took=0.5, results=results)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[_Servicer, int]]:
    from weaviate.proto.v1 import weaviate_pb2_grpc

    servicer = _Servicer()
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = weaviate_pb2_grpc.WeaviateServicer()
    handler.Search = servicer.Search  # type: ignore[method-assign]
    weaviate_pb2_grpc.add_WeaviateServicer_to_server(handler, srv)
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    yield servicer, port
    srv.stop(0)


def _params(port: int) -> Any:
    from weaviate.connect import ConnectionParams

    return ConnectionParams.from_params(
        http_host="127.0.0.1", http_port=1, http_secure=False, grpc_host="127.0.0.1", grpc_port=port, grpc_secure=False
    )


@pytest.fixture
def client(server: tuple[_Servicer, int]) -> Iterator[Any]:
    server[0].requests.clear()
    server[0].fail = False
    c = weaviate.WeaviateClient(connection_params=_params(server[1]), skip_init_checks=True)
    c.connect()
    yield c
    c.close()


@pytest.fixture
def instrumentor(tracer_provider: Any) -> Iterator[WeaviateInstrumentor]:
    inst = WeaviateInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield inst
    inst.uninstrument()


def _expected(method: str, kind: str, scores: list[float] | None, **kw: Any) -> Expected:
    return Expected(component=f"weaviate.{method}", collection="Items", ids=IDS[: len(scores or IDS)], kind=kind, scores=scores, contents=TEXTS, **kw)


def test_near_vector_with_filter_limit_and_distance(server, client, instrumentor, span_exporter) -> None:
    from weaviate.classes.query import Filter, MetadataQuery

    items = client.collections.get("Items")
    result = items.query.near_vector(QUERY, limit=3, filters=Filter.by_property("category").equal("pets"), return_metadata=MetadataQuery(distance=True))
    assert [str(o.uuid) for o in result.objects] == IDS
    [span] = spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE)
    check_span(
        span,
        span_exporter.get_finished_spans(),
        _expected(
            "near_vector",
            sc.SCORE_DISTANCE,
            DISTANCES,
            top_k=3,
            vector=QUERY,
            filter_json='{"op":"FilterValue","operator":"Equal","target":"category","value":"pets"}',
        ),
    )


def test_bm25_and_hybrid_scores(server, client, instrumentor, span_exporter) -> None:
    from weaviate.classes.query import HybridFusion, MetadataQuery

    items = client.collections.get("Items")
    items.query.bm25("cats", limit=3, return_metadata=MetadataQuery(score=True))
    items.query.hybrid("cats", limit=3, return_metadata=MetadataQuery(score=True))
    items.query.hybrid("cats", limit=3, fusion_type=HybridFusion.RANKED, return_metadata=MetadataQuery(score=True))
    bm25, relative, ranked = spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE)
    spans = span_exporter.get_finished_spans()
    check_span(bm25, spans, _expected("bm25", sc.SCORE_BM25, SCORES, top_k=3, text="cats"))
    check_span(relative, spans, _expected("hybrid", sc.SCORE_RELATIVE, SCORES, top_k=3, text="cats"))
    check_span(ranked, spans, _expected("hybrid", sc.SCORE_RRF, SCORES, top_k=3, text="cats"))


def test_near_text_without_metadata_has_no_scores(server, client, instrumentor, span_exporter) -> None:
    client.collections.get("Items").query.near_text("pets", limit=2)
    [span] = spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE)
    want = _expected("near_text", sc.SCORE_NONE, None, top_k=2, text="pets")
    want.ids, want.contents = IDS[:2], TEXTS[:2]
    check_span(span, span_exporter.get_finished_spans(), want)


def test_same_requests_with_and_without_ragtrail(server, client, instrumentor) -> None:
    from weaviate.classes.query import MetadataQuery

    items = client.collections.get("Items")

    def run() -> Any:
        return items.query.near_vector(QUERY, limit=2, return_metadata=MetadataQuery(distance=True))

    with suppress_instrumentation():
        bare = run()
    bare_requests = list(server[0].requests)
    server[0].requests.clear()
    traced = run()
    assert [o.uuid for o in traced.objects] == [o.uuid for o in bare.objects]
    assert server[0].requests == bare_requests and len(bare_requests) == 1


def test_failing_query_passes_through(server, client, tracer_provider, span_exporter) -> None:
    items = client.collections.get("Items")
    server[0].fail = True
    with pytest.raises(Exception) as bare:
        items.query.bm25("cats", limit=1)
    inst = WeaviateInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    try:
        with pytest.raises(Exception) as traced:
            items.query.bm25("cats", limit=1)
    finally:
        inst.uninstrument()
    assert type(traced.value) is type(bare.value) and str(traced.value) == str(bare.value)
    [span] = spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE)
    assert span.attributes[sc.STAGE_STATUS] == sc.STATUS_FAILED


def test_async_client_is_awaited(server, instrumentor, span_exporter) -> None:
    from weaviate.classes.query import MetadataQuery

    async def main() -> Any:
        c = weaviate.WeaviateAsyncClient(connection_params=_params(server[1]), skip_init_checks=True)
        await c.connect()
        try:
            return await c.collections.get("Items").query.bm25("cats", limit=3, return_metadata=MetadataQuery(score=True))
        finally:
            await c.close()

    result = asyncio.run(main())
    assert [str(o.uuid) for o in result.objects] == IDS
    [span] = spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE)
    check_span(span, span_exporter.get_finished_spans(), _expected("bm25", sc.SCORE_BM25, SCORES, top_k=3, text="cats"))
