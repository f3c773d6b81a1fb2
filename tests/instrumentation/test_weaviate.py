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
from ragtrail.instrumentation.weaviate import GENERATED_ON_SERVER, UNRANKED, WeaviateInstrumentor  # noqa: E402
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
            generative_config=Configure.Generative.custom("generative-dummy"),  # for collection.generate.*
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


def _aconnect(server: Weaviate) -> Any:
    return weaviate.use_async_with_local(host="127.0.0.1", port=server.http_port, grpc_port=server.grpc_port)


def test_async_client(weaviate_server, items_collection, instrumentor, span_exporter) -> None:
    from weaviate.classes.query import MetadataQuery

    async def main() -> list[Any]:
        async with _aconnect(weaviate_server) as c:
            items = c.collections.get(COLLECTION)
            return [
                await items.query.near_vector(QUERY, limit=2, return_metadata=MetadataQuery(distance=True)),
                await items.query.bm25("cats", limit=2, return_metadata=MetadataQuery(score=True)),
                await items.generate.near_vector(QUERY, single_prompt="Say {text}", limit=2, return_metadata=MetadataQuery(distance=True)),
                await items.query.fetch_objects(limit=2),
            ]

    vector, bm25, generated, fetched = asyncio.run(main())
    assert [str(o.uuid) for o in vector.objects] == [str(o.uuid) for o in generated.objects] == [DOCS[0][0], DOCS[3][0]]
    stages = spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE)
    spans = span_exporter.get_finished_spans()
    distances = [o.metadata.distance for o in vector.objects]
    single = (GENERATED_ON_SERVER.format("single_prompt"),)
    wanted = [
        _expected("near_vector", vector, sc.SCORE_DISTANCE, distances, top_k=2, vector=QUERY),
        _expected("bm25", bm25, sc.SCORE_BM25, [o.metadata.score for o in bm25.objects], top_k=2, text="cats"),
        _expected("generate.near_vector", generated, sc.SCORE_DISTANCE, distances, top_k=2, vector=QUERY, findings=single),
        _expected("fetch_objects", fetched, sc.SCORE_NONE, None, top_k=2, findings=(UNRANKED.format(""),)),
    ]
    assert len(stages) == len(wanted)
    for span, want in zip(stages, wanted, strict=True):
        check_span(span, spans, want)


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


# --- collection.generate.* and fetch_objects ----------------------------------------------------------
# The server runs Weaviate's own generative-dummy module (tests/weaviateutil.py): generate.* goes end to
# end, the server building the prompt from each object's properties and answering with a fixed text.


def test_generate_near_vector_records_its_search_and_says_the_generation_is_unseen(client, instrumentor, span_exporter) -> None:
    from weaviate.classes.query import Filter, MetadataQuery

    items = client.collections.get(COLLECTION)
    pets = Filter.by_property("category").equal("pets")
    with suppress_instrumentation():
        searched = items.query.near_vector(QUERY, limit=2, filters=pets, return_metadata=MetadataQuery(distance=True))
    result = items.generate.near_vector(QUERY, single_prompt="Describe: {text}", limit=2, filters=pets, return_metadata=MetadataQuery(distance=True))
    # the same search as query.near_vector, each object with the text the server generated from it
    assert _seen(result) == _seen(searched) and [str(o.uuid) for o in result.objects] == [DOCS[0][0], DOCS[1][0]]
    assert [o.generative.text for o in result.objects] == [
        f"You want me to generate something based on the following prompt: Describe: {TEXT[str(o.uuid)]}. With settings: . "
        "I'm sorry, I'm just a dummy and can't generate anything."
        for o in result.objects
    ]
    [span] = spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE)
    assert spanutil.stage_spans(span_exporter, sc.KIND_GENERATE) == []  # the prompt and the model are the server's
    distances = [o.metadata.distance for o in result.objects]
    want = _expected(
        "generate.near_vector",
        result,
        sc.SCORE_DISTANCE,
        distances,
        top_k=2,
        vector=QUERY,
        filter_json=PETS_FILTER,
        findings=(GENERATED_ON_SERVER.format("single_prompt"),),
    )
    check_span(span, span_exporter.get_finished_spans(), want)


def test_generate_bm25_and_hybrid_with_a_grouped_task(client, instrumentor, span_exporter) -> None:
    from weaviate.classes.query import HybridFusion, MetadataQuery

    items = client.collections.get(COLLECTION)
    bm25 = items.generate.bm25("cats", grouped_task="Summarize", limit=2, return_metadata=MetadataQuery(score=True))
    hybrid = items.generate.hybrid(
        "cats",
        vector=QUERY,
        single_prompt="Say {text}",
        grouped_task="Summarize",
        limit=3,
        fusion_type=HybridFusion.RANKED,
        return_metadata=MetadataQuery(score=True),
    )
    assert bm25.generative.text.startswith("You want me to generate something based on the following prompt: Summarize")
    assert hybrid.generative.text.startswith("You want me to generate something") and hybrid.objects[0].generative.text.startswith("You want")
    first, second = spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE)
    spans = span_exporter.get_finished_spans()
    grouped = GENERATED_ON_SERVER.format("grouped_task")
    both = GENERATED_ON_SERVER.format("single_prompt and grouped_task")
    bm25_scores = [o.metadata.score for o in bm25.objects]
    check_span(first, spans, _expected("generate.bm25", bm25, sc.SCORE_BM25, bm25_scores, top_k=2, text="cats", findings=(grouped,)))
    rrf = [o.metadata.score for o in hybrid.objects]
    check_span(second, spans, _expected("generate.hybrid", hybrid, sc.SCORE_RRF, rrf, top_k=3, text="cats", vector=QUERY, findings=(both,)))


def test_generate_near_text_fails_on_the_server_and_passes_through(client, instrumentor, span_exporter) -> None:
    items = client.collections.get(COLLECTION)
    with suppress_instrumentation(), pytest.raises(weaviate.exceptions.WeaviateQueryError) as bare:
        items.generate.near_text("pets", single_prompt="Say {text}", limit=2)
    with pytest.raises(weaviate.exceptions.WeaviateQueryError) as traced:
        items.generate.near_text("pets", single_prompt="Say {text}", limit=2)
    assert (type(traced.value), str(traced.value)) == (type(bare.value), str(bare.value))
    [span] = spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE)
    a = spanutil.own(span)
    assert (a[sc.STAGE_COMPONENT], a[sc.STAGE_STATUS], a[sc.QUERY_TEXT]) == ("weaviate.generate.near_text", sc.STATUS_FAILED, "pets")


def test_fetch_objects_with_filters_and_limit_is_an_unranked_retrieve_stage(client, instrumentor, span_exporter) -> None:
    from weaviate.classes.query import Filter, Sort

    items = client.collections.get(COLLECTION)
    pets = Filter.by_property("category").equal("pets")
    listed = items.query.fetch_objects(filters=pets, limit=2)
    by_text = items.query.fetch_objects(filters=pets, limit=2, sort=Sort.by_property("text", ascending=False))
    # Weaviate lists two of the three pets (its own order); sorted by text descending: fish, dogs
    assert len(listed.objects) == 2 and {str(o.uuid) for o in listed.objects} < {d[0] for d in DOCS[:3]}
    assert [str(o.uuid) for o in by_text.objects] == [DOCS[2][0], DOCS[1][0]]
    assert [o.metadata.score for o in listed.objects] == [None, None]
    first, second = spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE)
    spans = span_exporter.get_finished_spans()
    sort = ' (sort: {"op":"Sorting","sorts":[{"ascending":false,"op":"Sort","prop":"text"}]})'
    for span, result, order in ((first, listed, ""), (second, by_text, sort)):
        want = _expected("fetch_objects", result, sc.SCORE_NONE, None, top_k=2, filter_json=PETS_FILTER, findings=(UNRANKED.format(order),))
        check_span(span, spans, want)


def test_generate_fetch_objects(client, instrumentor, span_exporter) -> None:
    items = client.collections.get(COLLECTION)
    result = items.generate.fetch_objects(limit=1, grouped_task="Summarize")
    assert result.generative.text.startswith("You want me to generate something") and len(result.objects) == 1
    [span] = spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE)
    findings = (UNRANKED.format(""), GENERATED_ON_SERVER.format("grouped_task"))
    check_span(span, span_exporter.get_finished_spans(), _expected("generate.fetch_objects", result, sc.SCORE_NONE, None, top_k=1, findings=findings))


def test_iterating_a_collection_is_a_scan_not_a_retrieval(weaviate_server, client, instrumentor, span_exporter) -> None:
    items = client.collections.get(COLLECTION)
    assert sorted(str(o.uuid) for o in items.iterator()) == sorted(d[0] for d in DOCS)

    async def main() -> list[str]:
        async with _aconnect(weaviate_server) as c:
            return [str(o.uuid) async for o in c.collections.get(COLLECTION).iterator()]

    assert sorted(asyncio.run(main())) == sorted(d[0] for d in DOCS)
    assert spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE) == []
    items.query.fetch_objects(limit=1)  # the same call made by the app itself is recorded
    assert len(spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE)) == 1


def test_generate_and_fetch_send_the_same_requests_with_and_without_ragtrail(weaviate_server, client, instrumentor, span_exporter) -> None:
    from weaviate.classes.query import MetadataQuery

    items = client.collections.get(COLLECTION)

    def run() -> list[Any]:
        generated = items.generate.bm25("cats", single_prompt="Say {text}", limit=2, return_metadata=MetadataQuery(score=True))
        fetched = items.query.fetch_objects(limit=3)
        return [_seen(generated), [o.generative.text for o in generated.objects], _seen(fetched)]

    before = weaviate_server.requests()
    with suppress_instrumentation():
        bare = run()
    middle = weaviate_server.requests()
    traced = run()
    after = weaviate_server.requests()
    assert traced == bare
    assert len(spanutil.stage_spans(span_exporter, sc.KIND_RETRIEVE)) == 2
    assert middle - before == {"grpc Search": 2} and after - middle == middle - before
