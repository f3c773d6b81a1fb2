"""Weaviate v4 collection queries as ragtrail ``retrieve`` stages, against a REAL Weaviate 1.35.2 server
(tests/weaviateutil.py: built from the Go module proxy by ``scripts/build-backends.sh weaviate``,
started once per session on 127.0.0.1, killed and its data deleted at the end; under CI a missing
binary fails, elsewhere the tests skip loudly).

No vectorizer module runs here (``DEFAULT_VECTORIZER_MODULE=none``), so the collection brings its own
vectors (``Configure.Vectors.self_provided()``, cosine distance, Weaviate's default); ``near_text``
and a ``hybrid`` without a vector fail on the server, and those real failures are what the tests
check for them. Exact attributes (every expected attribute popped, nothing left); the host's results
and exceptions are the same with and without ragtrail; the server's own request counters (Prometheus)
show the same requests with and without ragtrail."""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

weaviate = pytest.importorskip("weaviate")

from opentelemetry.instrumentation.utils import suppress_instrumentation  # noqa: E402

import mirrorutil  # noqa: E402
import spanutil  # noqa: E402
import weaviateutil  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.contract.receipts import receipt  # noqa: E402
from ragtrail.instrumentation.weaviate import WeaviateInstrumentor  # noqa: E402
from storeutil import Expected, check_span  # noqa: E402
from weaviateutil import Weaviate  # noqa: E402

COLLECTION = "RagtrailItems"
DOCS = [
    # (uuid, text, category, vector)
    (str(uuid.UUID(int=1)), "cats purr softly", "pets", [1.0, 0.0, 0.0]),
    (str(uuid.UUID(int=2)), "dogs bark loudly at cats", "pets", [0.8, 0.6, 0.0]),
    (str(uuid.UUID(int=3)), "fish swim in the bowl", "pets", [0.0, 0.0, 1.0]),
    (str(uuid.UUID(int=4)), "cars honk in traffic", "vehicles", [0.9, 0.1, 0.1]),
]
TEXT = {d[0]: d[1] for d in DOCS}
QUERY = [1.0, 0.0, 0.0]
PETS_FILTER = '{"op":"FilterValue","operator":"Equal","target":"category","value":"pets"}'


def _cosine_distance(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return 1 - dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


@pytest.fixture(scope="module")
def items_collection(weaviate_server: Weaviate) -> Iterator[str]:
    from weaviate.classes.config import Configure, DataType, Property
    from weaviate.classes.data import DataObject

    with _connect(weaviate_server) as client:
        if client.collections.exists(COLLECTION):
            client.collections.delete(COLLECTION)
        items = client.collections.create(
            COLLECTION,
            properties=[Property(name="text", data_type=DataType.TEXT), Property(name="category", data_type=DataType.TEXT)],
            vector_config=Configure.Vectors.self_provided(),
        )
        objects = [DataObject(properties={"text": t, "category": c}, uuid=i, vector=v) for i, t, c, v in DOCS]
        assert not items.data.insert_many(objects).errors
        yield COLLECTION
        client.collections.delete(COLLECTION)


def _connect(server: Weaviate) -> Any:
    return weaviate.connect_to_local(host="127.0.0.1", port=server.http_port, grpc_port=server.grpc_port)


@pytest.fixture
def client(weaviate_server: Weaviate, items_collection: str) -> Iterator[Any]:
    c = _connect(weaviate_server)
    yield c
    c.close()


@pytest.fixture
def instrumentor(tracer_provider: Any) -> Iterator[WeaviateInstrumentor]:
    inst = WeaviateInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield inst
    inst.uninstrument()


def _seen(result: Any) -> list[tuple[str, Any, Any, dict[str, Any]]]:
    """What the host got: ids, distance, score and properties, in the server's order."""
    return [(str(o.uuid), o.metadata.distance, o.metadata.score, dict(o.properties)) for o in result.objects]


def _expected(method: str, result: Any, kind: str, scores: list[float] | None, **kw: Any) -> Expected:
    ids = [str(o.uuid) for o in result.objects]
    return Expected(component=f"weaviate.{method}", collection=COLLECTION, ids=ids, kind=kind, scores=scores, contents=[TEXT[i] for i in ids], **kw)


def test_server_listens_on_loopback_only(weaviate_server: Weaviate) -> None:
    """The house rule (servers in tests bind 127.0.0.1 only) holds for the real server: every socket
    it listens on, read from /proc, is one of its configured ports on 127.0.0.1. Upstream 1.35.2
    listens on all interfaces (``[::]``) for gRPC, the cluster data port and the metrics; the build's
    scripts/weaviate-loopback.patch is what makes this pass."""
    expected = {("tcp", "127.0.0.1", port) for port in weaviate_server.ports.values()}
    expected.add(("udp", "127.0.0.1", weaviate_server.ports["gossip"]))  # memberlist gossip: TCP and UDP
    assert weaviateutil.listening_sockets(weaviate_server.pid) == expected


def test_near_vector_with_filter_limit_and_distance(client, instrumentor, span_exporter) -> None:
    from weaviate.classes.query import Filter, MetadataQuery

    items = client.collections.get(COLLECTION)
    result = items.query.near_vector(
        QUERY, limit=3, filters=Filter.by_property("category").equal("pets"), return_metadata=MetadataQuery(distance=True)
    )
    # the server's answer: the three pets by cosine distance (the car, nearer than two of them, is filtered out)
    assert [str(o.uuid) for o in result.objects] == [DOCS[0][0], DOCS[1][0], DOCS[2][0]]
    distances = [o.metadata.distance for o in result.objects]
    assert distances == pytest.approx([_cosine_distance(QUERY, d[3]) for d in DOCS[:3]], abs=1e-6)
    [span] = spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE)
    check_span(
        span,
        span_exporter.get_finished_spans(),
        _expected("near_vector", result, sc.SCORE_DISTANCE, distances, top_k=3, vector=QUERY, filter_json=PETS_FILTER),
    )


def test_near_vector_without_metadata_or_limit(client, instrumentor, span_exporter) -> None:
    """No ``return_metadata``: the reply carries no distance, so none is recorded (kind ``none``, never a
    guess); no ``limit``: the server's default applies and k stays unknown."""
    result = client.collections.get(COLLECTION).query.near_vector(QUERY)
    assert [o.metadata.distance for o in result.objects] == [None] * 4
    assert [str(o.uuid) for o in result.objects] == [DOCS[0][0], DOCS[3][0], DOCS[1][0], DOCS[2][0]]
    [span] = spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE)
    check_span(span, span_exporter.get_finished_spans(), _expected("near_vector", result, sc.SCORE_NONE, None, vector=QUERY))


def test_bm25_with_filter_and_score(client, instrumentor, span_exporter) -> None:
    from weaviate.classes.query import Filter, MetadataQuery

    items = client.collections.get(COLLECTION)
    result = items.query.bm25("cats", limit=2, filters=Filter.by_property("category").equal("pets"), return_metadata=MetadataQuery(score=True))
    assert sorted(str(o.uuid) for o in result.objects) == [DOCS[0][0], DOCS[1][0]]  # the two texts with "cats"
    scores = [o.metadata.score for o in result.objects]
    assert all(s > 0 for s in scores) and scores == sorted(scores, reverse=True)
    [span] = spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE)
    check_span(
        span, span_exporter.get_finished_spans(), _expected("bm25", result, sc.SCORE_BM25, scores, top_k=2, text="cats", filter_json=PETS_FILTER)
    )


def test_hybrid_relative_and_ranked_fusion(client, instrumentor, span_exporter) -> None:
    """Fusion runs on the server: the reply holds the fused score only (relativeScoreFusion's
    normalized sum, or RRF's reciprocal-rank sum), never the legs' own ranks or raw scores. Those are
    recorded as the fused score with the fusion's kind; the leg scores are not on the wire (Weaviate
    shows them only in its free-text ``explain_score``)."""
    from weaviate.classes.query import HybridFusion, MetadataQuery

    items = client.collections.get(COLLECTION)
    relative = items.query.hybrid("cats", vector=QUERY, limit=3, return_metadata=MetadataQuery(score=True))
    ranked = items.query.hybrid("cats", vector=QUERY, limit=3, fusion_type=HybridFusion.RANKED, return_metadata=MetadataQuery(score=True))
    # cats purr softly: first in both legs, so first fused; relative fusion's best is 1.0 by construction
    assert str(relative.objects[0].uuid) == DOCS[0][0] and relative.objects[0].metadata.score == pytest.approx(1.0)
    assert str(ranked.objects[0].uuid) == DOCS[0][0] and ranked.objects[0].metadata.score == pytest.approx(1 / 60)
    # Weaviate's RRF: alpha * 1/(60 + rank) + (1 - alpha) * 1/(60 + rank), ranks from 0: first in both legs -> 1/60
    first, second = spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE)
    spans = span_exporter.get_finished_spans()
    rel_scores = [o.metadata.score for o in relative.objects]
    rrf_scores = [o.metadata.score for o in ranked.objects]
    check_span(first, spans, _expected("hybrid", relative, sc.SCORE_RELATIVE, rel_scores, top_k=3, text="cats", vector=QUERY))
    check_span(second, spans, _expected("hybrid", ranked, sc.SCORE_RRF, rrf_scores, top_k=3, text="cats", vector=QUERY))


def test_failing_queries_pass_through(client, tracer_provider, span_exporter) -> None:
    """The server's own errors: ``near_text`` and a vector-less ``hybrid`` with no vectorizer module."""
    items = client.collections.get(COLLECTION)

    def queries() -> list[BaseException]:
        raised = []
        for call in (lambda: items.query.near_text("pets", limit=2), lambda: items.query.hybrid("cats", limit=2)):
            with pytest.raises(weaviate.exceptions.WeaviateQueryError) as info:
                call()
            raised.append(info.value)
        return raised

    bare = queries()
    inst = WeaviateInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    try:
        traced = queries()
    finally:
        inst.uninstrument()
    assert [(type(e), str(e)) for e in traced] == [(type(e), str(e)) for e in bare]
    assert "Make sure a vectorizer module is configured" in str(traced[0])
    near_text, hybrid = spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE)
    spans = span_exporter.get_finished_spans()
    for span, method, text in ((near_text, "near_text", "pets"), (hybrid, "hybrid", "cats")):
        a = spanutil.own(span)
        rec = receipt(text)
        expected = {
            sc.SCHEMA: 5,
            sc.STAGE_KIND: sc.KIND_RETRIEVE,
            sc.STAGE_COMPONENT: f"weaviate.{method}",
            sc.STAGE_STATUS: sc.STATUS_FAILED,
            sc.STAGE_FAILURE_CLASS: "exception:WeaviateQueryError",
            sc.STAGE_COLLECTION: COLLECTION,
            sc.STAGE_TOP_K: 2,
            sc.GEN_AI_RETRIEVAL_TOP_K: 2,
            sc.QUERY_TEXT: text,
            sc.QUERY_HOP: 0,
            sc.QUERY_TRANSFORM: "none",
            sc.QUERY_CHARS: rec.chars,
            sc.QUERY_BYTES: rec.bytes,
            sc.QUERY_SHA256: rec.sha256,
            sc.CANDIDATES_IN: 0,
            sc.CANDIDATES_OUT: 0,
            sc.CANDIDATES_EXCLUDED: 0,
            sc.GEN_AI_OPERATION_NAME: "retrieval",
            sc.GEN_AI_DATA_SOURCE_ID: COLLECTION,
            sc.EVENTS_COUNT: 0,
        }
        for key, value in expected.items():
            assert a.pop(key) == value, key
        spanutil.check_count_and_digest(span, spanutil.stitched(span, spans))
        a.pop(sc.EVENTS_DIGEST)
        mirrorutil.pop_mirrors(a, span, spans)
        assert a == {}, a


def test_same_results_and_server_requests_with_and_without_ragtrail(weaviate_server, client, instrumentor, span_exporter) -> None:
    from weaviate.classes.query import Filter, MetadataQuery

    items = client.collections.get(COLLECTION)

    def run() -> list[Any]:
        pets = Filter.by_property("category").equal("pets")
        return [
            _seen(items.query.near_vector(QUERY, limit=2, filters=pets, return_metadata=MetadataQuery(distance=True))),
            _seen(items.query.bm25("cats", limit=2, return_metadata=MetadataQuery(score=True))),
            _seen(items.query.hybrid("cats", vector=QUERY, limit=2, return_metadata=MetadataQuery(score=True))),
        ]

    before = weaviate_server.requests()
    with suppress_instrumentation():
        bare = run()
    middle = weaviate_server.requests()
    assert span_exporter.get_finished_spans() == ()
    traced = run()
    after = weaviate_server.requests()
    assert traced == bare
    assert len(spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE)) == 3
    bare_requests, traced_requests = middle - before, after - middle
    assert bare_requests == {"grpc Search": 3}  # one gRPC Search per query, nothing else
    assert traced_requests == bare_requests


def test_async_client(weaviate_server, items_collection, instrumentor, span_exporter) -> None:
    from weaviate.classes.query import MetadataQuery

    async def main() -> tuple[Any, Any]:
        async with weaviate.use_async_with_local(host="127.0.0.1", port=weaviate_server.http_port, grpc_port=weaviate_server.grpc_port) as c:
            items = c.collections.get(COLLECTION)
            vector = await items.query.near_vector(QUERY, limit=2, return_metadata=MetadataQuery(distance=True))
            bm25 = await items.query.bm25("cats", limit=2, return_metadata=MetadataQuery(score=True))
            return vector, bm25

    vector, bm25 = asyncio.run(main())
    assert [str(o.uuid) for o in vector.objects] == [DOCS[0][0], DOCS[3][0]]
    first, second = spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE)
    spans = span_exporter.get_finished_spans()
    distances = [o.metadata.distance for o in vector.objects]
    check_span(first, spans, _expected("near_vector", vector, sc.SCORE_DISTANCE, distances, top_k=2, vector=QUERY))
    check_span(second, spans, _expected("bm25", bm25, sc.SCORE_BM25, [o.metadata.score for o in bm25.objects], top_k=2, text="cats"))


def test_hybrid_explain_score_only_when_allow_listed(client, instrumentor, span_exporter, monkeypatch) -> None:
    """``explain_score`` (Weaviate's free text naming each leg's original and normalized score) is the
    only place the hybrid's legs show: it is kept as the candidate's ``explain_score`` metadata, so it
    is exported only when ``RAGTRAIL_CAPTURE_METADATA`` allow-lists it (the default exports none)."""
    from weaviate.classes.query import MetadataQuery

    from ragtrail import settings as config

    items = client.collections.get(COLLECTION)

    def hybrid() -> Any:
        return items.query.hybrid("cats", vector=QUERY, limit=2, return_metadata=MetadataQuery(score=True, explain_score=True))

    default = hybrid()
    assert "original score" in default.objects[0].metadata.explain_score  # the legs' raw scores, as text
    monkeypatch.setenv("RAGTRAIL_CAPTURE_METADATA", "explain_score")
    config.reset()
    allowed = hybrid()
    first, second = spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE)
    spans = span_exporter.get_finished_spans()
    scores = [o.metadata.score for o in default.objects]
    check_span(first, spans, _expected("hybrid", default, sc.SCORE_RELATIVE, scores, top_k=2, text="cats", vector=QUERY))
    recorded = [e for name, e in spanutil.stitched(second, spans) if name == sc.EVENT_CANDIDATE]
    assert [e[sc.CANDIDATE_META_PREFIX + "explain_score"] for e in recorded] == [o.metadata.explain_score for o in allowed.objects]
