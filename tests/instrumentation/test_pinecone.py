"""Pinecone's data plane (a paid remote API: cannot run here) at the transport: the pinecone client
runs unpatched against a real HTTP server on 127.0.0.1 answering ``POST /query`` with the documented
response shape (``matches[{id, score, values, metadata}]``, ``namespace``, ``usage``). Exact
attributes; the matches the app gets and the requests the client sends are the same with and
without ragtrail; a failing query passes through untouched."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pinecone = pytest.importorskip("pinecone")

from opentelemetry.instrumentation.utils import suppress_instrumentation  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

import spanutil  # noqa: E402
from loopback_http import Loopback, serve  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.pinecone import BY_ID, UNKNOWN_METRIC, PineconeInstrumentor  # noqa: E402
from service_responses import pinecone_error, pinecone_index_model, pinecone_query, pinecone_stats  # noqa: E402
from storeutil import Expected, check_span  # noqa: E402

QUERY = [0.3, 0.5, 0.2]
MATCHES = [
    {"id": "vec3", "score": 0.99, "values": [], "metadata": {"genre": "documentary", "text": "whales sing"}},
    {"id": "vec1", "score": 0.87, "values": [], "metadata": {"genre": "documentary", "text": "bees dance"}},
]


# the control plane's indexes (name -> metric) this server describes, each served at this same host
METRICS = {"films": "euclidean", "songs": "dotproduct", "books": "cosine"}
HOST = [""]


def respond(method: str, path: str, body: Any) -> tuple[int, Any, dict[str, str]]:
    if method == "POST" and path == "/indexes":
        [dense] = body["schema"]["fields"].values()  # the field create_index's dimension and metric became
        return 201, pinecone_index_model(body["name"], HOST[0], dimension=3, metric=dense["metric"]), {}
    if path.startswith("/indexes/") and path.removeprefix("/indexes/") in METRICS:
        name = path.removeprefix("/indexes/")
        return 200, pinecone_index_model(name, HOST[0], dimension=3, metric=METRICS[name]), {}
    if path == "/describe_index_stats":
        return pinecone_stats({"ns1": 2}, dimension=3)
    if path != "/query":
        return pinecone_error(404, 5, "Not Found")
    if body.get("namespace") == "missing":
        return pinecone_error(400, 3, "Namespace not found")
    return pinecone_query(MATCHES, body)


@pytest.fixture(scope="module")
def server() -> Iterator[Loopback]:
    with serve(respond) as s:
        HOST[0] = s.url
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


# --- the metric, learned from the answers of the application's own calls -------------------------
@pytest.fixture
def unconfigured(instrumentor: PineconeInstrumentor) -> Iterator[PineconeInstrumentor]:
    """No metric configured, nothing learned yet (``uninstrument()`` forgets): the kind is known only
    from what the app's own calls received."""
    instrumentor.uninstrument()
    instrumentor.instrument(tracer_provider=instrumentor.provider)
    yield instrumentor
    instrumentor.uninstrument()
    instrumentor.instrument(tracer_provider=instrumentor.provider, metric="cosine")


def control(server: Loopback) -> Any:
    return pinecone.Pinecone(api_key="k", host=server.url)


def query_after(server: Loopback, steps: Callable[[], Any]) -> tuple[Any, list[Any], list[Any]]:
    """Run the app's ``steps`` (returning the query's result) plain and instrumented: the result, and the
    requests each run sent (the same: no request of ragtrail's)."""
    before = len(server.requests)
    with suppress_instrumentation():
        steps()
    bare = server.requests[before:]
    before = len(server.requests)
    return steps(), bare, server.requests[before:]


def described(server: Loopback) -> Any:
    with control(server) as pc, pc.Index(host=pc.describe_index("films").host) as idx:
        return idx.query(vector=QUERY, top_k=1, namespace="ns1")


def opened_by_name(server: Loopback) -> Any:
    with control(server) as pc, pc.Index("songs") as idx:  # the client describes "songs" for its host
        return idx.query(vector=QUERY, top_k=1, namespace="ns1")


def created(server: Loopback) -> Any:
    with control(server) as pc:
        # timeout=-1: no wait for readiness (the wait polls describe_index, which would tell the metric itself)
        spec = pinecone.ServerlessSpec(cloud="aws", region="us-east-1")
        index = pc.create_index(name="fresh", dimension=3, metric="euclidean", spec=spec, timeout=-1)
        with pc.Index(host=index.host) as idx:
            return idx.query(vector=QUERY, top_k=1, namespace="ns1")


def stats_read(server: Loopback) -> Any:
    with pinecone.Pinecone(api_key="k").Index(host=server.url) as idx:
        idx.describe_index_stats()  # its answer says "metric": "cosine"
        return idx.query(vector=QUERY, top_k=1, namespace="ns1")


@pytest.mark.parametrize(
    ("steps", "paths", "kind"),
    [
        (described, ["/indexes/films", "/query"], sc.SCORE_DISTANCE),
        (opened_by_name, ["/indexes/songs", "/query"], sc.SCORE_SIMILARITY),
        (created, ["/indexes", "/query"], sc.SCORE_DISTANCE),
        (stats_read, ["/describe_index_stats", "/query"], sc.SCORE_SIMILARITY),
    ],
    ids=["describe_index", "Index(name)", "create_index", "describe_index_stats"],
)
def test_the_metric_the_apps_own_calls_received_gives_the_kind(server, exporter, unconfigured, steps, paths, kind) -> None:
    result, bare, traced = query_after(server, lambda: steps(server))
    assert traced == bare and [r[1] for r in traced] == paths  # the app's own requests only
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)  # the instrumented run's (the plain run recorded nothing)
    check_span(span, exporter.get_finished_spans(), expect(result.matches, collection="ns1", kind=kind, top_k=1, vector=QUERY))


def test_a_learned_metric_replaces_the_configured_one_for_its_index(server, exporter, unconfigured) -> None:
    unconfigured.kind = sc.SCORE_SIMILARITY  # RAGTRAIL_PINECONE_METRIC=cosine, but the service says euclidean for this index
    with control(server) as pc, pc.Index(host=pc.describe_index("films").host) as idx:
        result = idx.query(vector=QUERY, top_k=1, namespace="ns1")
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    check_span(span, exporter.get_finished_spans(), expect(result.matches, collection="ns1", kind=sc.SCORE_DISTANCE, top_k=1, vector=QUERY))


def test_another_index_described_tells_nothing_of_this_one(server, exporter, unconfigured) -> None:
    with control(server) as pc:
        pc.describe_index("films")  # an index served at `server`...
    with serve(respond) as other, pinecone.Pinecone(api_key="k").Index(host=other.url) as idx:  # ...not at `other`
        result = idx.query(vector=QUERY, top_k=1, namespace="ns1")
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    want = expect(result.matches, collection="ns1", kind=sc.SCORE_NONE, top_k=1, vector=QUERY, findings=(UNKNOWN_METRIC,))
    check_span(span, exporter.get_finished_spans(), want)


def test_the_async_clients_answers_give_the_kind(server, exporter, unconfigured) -> None:
    async def main() -> Any:
        async with pinecone.PineconeAsyncio(api_key="k", host=server.url) as pc:
            description = await pc.describe_index("films")
            async with pc.IndexAsyncio(host=description.host) as idx:
                return await idx.query(vector=QUERY, top_k=2, namespace="ns1")

    result = asyncio.run(main())
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    check_span(span, exporter.get_finished_spans(), expect(result.matches, collection="ns1", kind=sc.SCORE_DISTANCE, top_k=2, vector=QUERY))
    unconfigured.uninstrument()  # forget "films"
    unconfigured.instrument(tracer_provider=unconfigured.provider)

    async def stats() -> Any:
        async with pinecone.PineconeAsyncio(api_key="k") as pc, pc.IndexAsyncio(host=server.url) as idx:
            await idx.describe_index_stats()
            return await idx.query(vector=QUERY, top_k=1, namespace="ns1")

    exporter.clear()
    result = asyncio.run(stats())
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    check_span(span, exporter.get_finished_spans(), expect(result.matches, collection="ns1", top_k=1, vector=QUERY))


def test_a_failing_describe_passes_through_and_teaches_nothing(server, exporter, unconfigured) -> None:
    with control(server) as pc:
        with suppress_instrumentation(), pytest.raises(Exception) as bare:
            pc.describe_index("missing")
        with pytest.raises(Exception) as traced:
            pc.describe_index("missing")
        assert type(traced.value) is type(bare.value) and str(traced.value) == str(bare.value)
        with pc.Index(host=server.url) as idx:
            result = idx.query(vector=QUERY, top_k=1, namespace="ns1")
    [span] = spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)
    want = expect(result.matches, collection="ns1", kind=sc.SCORE_NONE, top_k=1, vector=QUERY, findings=(UNKNOWN_METRIC,))
    check_span(span, exporter.get_finished_spans(), want)
