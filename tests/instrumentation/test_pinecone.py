"""Pinecone's data plane (a paid remote API: cannot run here) at the transport: the pinecone client
runs unpatched against a real HTTP server on 127.0.0.1 answering ``POST /query`` with the documented
response shape (``matches[{id, score, values, metadata}]``, ``namespace``, ``usage``). Exact
attributes; the matches the app gets and the requests the client sends are the same with and
without ragtrail; a failing query passes through untouched."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

pinecone = pytest.importorskip("pinecone")

from opentelemetry.instrumentation.utils import suppress_instrumentation  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

import spanutil  # noqa: E402
from loopback_http import Loopback, serve  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.pinecone import BY_ID, UNKNOWN_METRIC, PineconeInstrumentor  # noqa: E402
from service_responses import pinecone_error, pinecone_query  # noqa: E402
from storeutil import Expected, check_span  # noqa: E402

QUERY = [0.3, 0.5, 0.2]
MATCHES = [
    {"id": "vec3", "score": 0.99, "values": [], "metadata": {"genre": "documentary", "text": "whales sing"}},
    {"id": "vec1", "score": 0.87, "values": [], "metadata": {"genre": "documentary", "text": "bees dance"}},
]


def respond(method: str, path: str, body: Any) -> tuple[int, Any, dict[str, str]]:
    if path != "/query":
        return pinecone_error(404, 5, "Not Found")
    if body.get("namespace") == "missing":
        return pinecone_error(400, 3, "Namespace not found")
    return pinecone_query(MATCHES, body)


@pytest.fixture(scope="module")
def server() -> Iterator[Loopback]:
    with serve(respond) as s:
        yield s


@pytest.fixture(scope="module")
def instrumentor() -> Iterator[PineconeInstrumentor]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    inst = PineconeInstrumentor()
    inst.instrument(tracer_provider=provider, metric="cosine")
    inst.exporter = exporter
    inst.provider = provider
    yield inst
    inst.uninstrument()


@pytest.fixture
def exporter(instrumentor: PineconeInstrumentor) -> Iterator[Any]:
    instrumentor.exporter.clear()
    yield instrumentor.exporter


@pytest.fixture
def index(server: Loopback, instrumentor: PineconeInstrumentor) -> Iterator[Any]:
    with pinecone.Pinecone(api_key="test-key").Index(host=server.url) as idx:
        yield idx


def expect(matches: list[Any], **kw: Any) -> Expected:
    kw.setdefault("component", "pinecone.Index.query")
    kw.setdefault("kind", sc.SCORE_SIMILARITY)
    return Expected(ids=[m.id for m in matches], scores=[m.score for m in matches], **kw)


def test_query_with_filter_namespace_and_metadata_exact_span(index, server, exporter) -> None:
    def query() -> Any:
        return index.query(vector=QUERY, top_k=2, namespace="example-namespace", filter={"genre": {"$eq": "documentary"}}, include_metadata=True)

    before = len(server.requests)
    with suppress_instrumentation():
        bare = query()
    bare_requests = server.requests[before:]
    before = len(server.requests)
    result = query()
    assert server.requests[before:] == bare_requests  # no request of ours
    assert [(m.id, m.score) for m in result.matches] == [(m.id, m.score) for m in bare.matches] == [("vec3", 0.99), ("vec1", 0.87)]
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    assert span.name == "retrieve query"
    check_span(
        span,
        exporter.get_finished_spans(),
        expect(
            result.matches,
            collection="example-namespace",
            contents=["whales sing", "bees dance"],
            top_k=2,
            vector=QUERY,
            filter_json='{"genre":{"$eq":"documentary"}}',
        ),
    )


def test_default_namespace_without_metadata(index, exporter) -> None:
    result = index.query(vector=QUERY, top_k=1)
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    check_span(span, exporter.get_finished_spans(), expect(result.matches, collection="__default__", top_k=1, vector=QUERY))


def test_query_by_id_has_no_vector_receipt(index, exporter) -> None:
    result = index.query(id="vec1", top_k=2, namespace="ns1")
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    check_span(span, exporter.get_finished_spans(), expect(result.matches, collection="ns1", top_k=2, findings=(BY_ID.format("vec1"),)))


def test_unknown_metric_leaves_the_kind_unknown(server, exporter, instrumentor) -> None:
    instrumentor.kind = None
    try:
        with pinecone.Pinecone(api_key="k").Index(host=server.url) as idx:
            result = idx.query(vector=QUERY, top_k=1, namespace="ns1")
    finally:
        instrumentor.kind = sc.SCORE_SIMILARITY
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    assert result.matches[0].id == "vec3"
    want = expect(result.matches, collection="ns1", kind=sc.SCORE_NONE, top_k=1, vector=QUERY, findings=(UNKNOWN_METRIC,))
    check_span(span, exporter.get_finished_spans(), want)


def test_failing_query_passes_through_untouched(index, exporter) -> None:
    with suppress_instrumentation(), pytest.raises(Exception) as bare:
        index.query(vector=QUERY, top_k=2, namespace="missing")
    with pytest.raises(Exception) as traced:
        index.query(vector=QUERY, top_k=2, namespace="missing")
    assert type(traced.value) is type(bare.value)
    assert str(traced.value) == str(bare.value)
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    assert span.status.status_code is StatusCode.ERROR


def test_async_query_is_a_stage(server, exporter) -> None:
    async def main() -> Any:
        async with pinecone.PineconeAsyncio(api_key="k") as pc, pc.IndexAsyncio(host=server.url) as idx:
            return await idx.query(vector=QUERY, top_k=2, namespace="example-namespace")

    result = asyncio.run(main())
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    check_span(span, exporter.get_finished_spans(), expect(result.matches, collection="example-namespace", top_k=2, vector=QUERY))


def test_an_index_opened_while_instrumented_stops_recording_at_uninstrument(server, exporter, instrumentor) -> None:
    # pinecone 10 binds ``query`` on the Index when it is opened: the instance keeps the wrapper
    with pinecone.Pinecone(api_key="k").Index(host=server.url) as idx:
        idx.query(vector=QUERY, top_k=1, namespace="ns1")
        assert len(spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)) == 1
        instrumentor.uninstrument()
        try:
            result = idx.query(vector=QUERY, top_k=1, namespace="ns1")
        finally:
            instrumentor.instrument(tracer_provider=instrumentor.provider, metric="cosine")
    assert [m.id for m in result.matches] == ["vec3"]
    assert len(spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)) == 1  # nothing recorded after uninstrument()
