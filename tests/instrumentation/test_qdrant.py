"""Qdrant ``query_points`` / ``query_batch_points`` / ``query_points_groups`` (sync and async clients)
as ragtrail ``retrieve`` stages, on real ``:memory:`` clients.

The remote path (no request of ragtrail's: facts only from the app's own get_collection, counted at the
transport) runs the real ``QdrantClient`` over HTTP against a loopback stand-in for the Qdrant server (no Qdrant binary here) that answers from a real
local Qdrant collection.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import mirrorutil
import spanutil
from spanutil import rec_events

qdrant_client = pytest.importorskip("qdrant_client")

from opentelemetry import trace  # noqa: E402
from opentelemetry.instrumentation.utils import suppress_instrumentation  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402
from qdrant_client import AsyncQdrantClient, QdrantClient, models  # noqa: E402
from qdrant_client.local.async_qdrant_local import AsyncQdrantLocal  # noqa: E402
from qdrant_client.local.qdrant_local import QdrantLocal  # noqa: E402

import ragtrail  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.contract.receipts import receipt  # noqa: E402
from ragtrail.instrumentation._vectorstore import vector_receipt  # noqa: E402
from ragtrail.instrumentation.qdrant import QdrantInstrumentor  # noqa: E402

UUID5 = str(uuid.UUID(int=5))
POINTS = [
    (1, [1.0, 0.0, 0.0], {"text": "one", "g": "a"}),
    (UUID5, [0.0, 1.0, 0.0], {"page_content": "two", "g": "b"}),
    (3, [0.0, 0.0, 1.0], {"g": "a"}),
    (4, [0.7, 0.7, 0.0], {"text": "four", "g": "b"}),
]


def make_client(distance: Any = models.Distance.COSINE, name: str = "docs") -> QdrantClient:
    client = QdrantClient(location=":memory:")
    client.create_collection(name, vectors_config=models.VectorParams(size=3, distance=distance))
    client.upsert(name, points=[models.PointStruct(id=i, vector=v, payload=p) for i, v, p in POINTS])
    return client


async def make_async_client(distance: Any = models.Distance.COSINE, name: str = "docs") -> AsyncQdrantClient:
    client = AsyncQdrantClient(":memory:")
    await client.create_collection(name, vectors_config=models.VectorParams(size=3, distance=distance))
    await client.upsert(name, points=[models.PointStruct(id=i, vector=v, payload=p) for i, v, p in POINTS])
    return client


@pytest.fixture
def instrumentor(tracer_provider):
    inst = QdrantInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield inst
    inst.uninstrument()


def retrieve_spans(exporter: Any) -> list[Any]:
    return spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)


stitched = spanutil.stitched
check_count_and_digest = spanutil.check_count_and_digest


def content_of(point: Any) -> str | None:
    payload = point.payload or {}
    return payload.get("text") or payload.get("page_content")


def check_span(
    span: Any,
    spans: Any,
    points: list[Any],
    *,
    component: str,
    kind: str,
    top_k: int,
    vector: Any = None,
    text: str | None = None,
    threshold: float | None = None,
    filter_json: str | None = None,
    corpus: int | None = 4,
    batch: tuple[int, int] | None = None,
    extra: dict[str, Any] | None = None,
    collection: str = "docs",
) -> None:
    """Pop every expected attribute, then nothing may be left; events exactly the points, in order."""
    a = spanutil.own(span)
    expected: dict[str, Any] = {
        sc.SCHEMA: 5,
        sc.STAGE_KIND: sc.KIND_RETRIEVE,
        sc.STAGE_COMPONENT: component,
        sc.STAGE_STATUS: sc.STATUS_OK if points else sc.STATUS_EMPTY,
        sc.STAGE_TOP_K: top_k,
        sc.STAGE_COLLECTION: collection,
        sc.CANDIDATES_IN: 0,
        sc.CANDIDATES_OUT: len(points),
        sc.CANDIDATES_EXCLUDED: 0,
        sc.GEN_AI_OPERATION_NAME: "retrieval",
        sc.GEN_AI_DATA_SOURCE_ID: collection,
        sc.GEN_AI_RETRIEVAL_TOP_K: top_k,
        sc.OPENINFERENCE_SPAN_KIND: "RETRIEVER",
    }
    if vector is not None:
        expected[sc.QUERY_VECTOR_DIM], expected[sc.QUERY_VECTOR_SHA256] = vector_receipt(vector)
    if text is not None:
        rec = receipt(text)
        expected.update(
            {
                sc.QUERY_TEXT: text,
                sc.QUERY_HOP: 0,
                sc.QUERY_TRANSFORM: "none",
                sc.QUERY_CHARS: rec.chars,
                sc.QUERY_BYTES: rec.bytes,
                sc.QUERY_SHA256: rec.sha256,
                sc.OI_INPUT_VALUE: text,
            }
        )
    if threshold is not None:
        expected[sc.STAGE_THRESHOLD] = threshold
    if filter_json is not None:
        expected[sc.STAGE_FILTER] = filter_json
    if corpus is not None:
        expected[sc.COVERAGE_CORPUS_SIZE] = corpus
    if batch is not None:
        expected[sc.STAGE_BATCH_INDEX], expected[sc.STAGE_BATCH_SIZE] = batch
    expected.update(extra or {})
    for key, value in expected.items():
        assert key in a, key
        assert a.pop(key) == value, key
    evs = stitched(span, spans)
    check_count_and_digest(span, evs)
    a.pop(sc.EVENTS_COUNT), a.pop(sc.EVENTS_DIGEST)
    for i, point in enumerate(points):
        if f"retrieval.documents.{i}.document.id" in a:
            assert a.pop(f"retrieval.documents.{i}.document.id") == str(point.id)
            assert a.pop(f"retrieval.documents.{i}.document.score") == point.score
    mirrorutil.pop_mirrors(a, span, spans)
    assert a == {}, f"unexpected attributes {a}"
    assert [name for name, _ in evs] == [sc.EVENT_CANDIDATE] * len(points)
    for rank, (point, (_, ev)) in enumerate(zip(points, evs, strict=False)):
        spanutil.pop_pointer(ev, {})  # schema 4: a search repeating an earlier one's hits points to it
        assert ev.pop(sc.CANDIDATE_ID) == str(point.id)
        assert ev.pop(sc.CANDIDATE_RANK) == rank
        assert ev.pop(sc.CANDIDATE_SCORE) == point.score
        assert ev.pop(sc.CANDIDATE_SCORE_KIND) == kind
        if text is not None:
            assert ev.pop(sc.CANDIDATE_HOP) == 0
        content = content_of(point)
        if content is not None:
            rec = receipt(content)
            assert ev.pop(sc.CANDIDATE_CONTENT_CHARS) == rec.chars
            assert ev.pop(sc.CANDIDATE_CONTENT_BYTES) == rec.bytes
            assert ev.pop(sc.CANDIDATE_CONTENT_SHA256) == rec.sha256
        assert ev == {}, ev


Spy = spanutil.CallSpy


def test_query_points_exact_span(instrumentor, span_exporter, monkeypatch) -> None:
    client = make_client()
    spy = Spy(monkeypatch, QdrantLocal, "query_points")
    flt = models.Filter(must_not=[models.FieldCondition(key="g", match=models.MatchValue(value="zzz"))])
    result = client.query_points("docs", query=[0.9, 0.2, 0.0], limit=3, query_filter=flt, score_threshold=0.1)
    assert result is spy.returned[0] and result == spy.snapshots[0]  # the same object, unmodified
    assert [p.id for p in result.points] == [1, 4, UUID5]
    spans = span_exporter.get_finished_spans()
    [span] = retrieve_spans(span_exporter)
    assert span.name == "retrieve query_points" and span.kind == trace.SpanKind.CLIENT
    assert spy.current[0].get_span_context().span_id == span.context.span_id  # current during the call
    check_span(
        span,
        spans,
        result.points,
        component="qdrant_client.QdrantClient.query_points",
        kind=sc.SCORE_SIMILARITY,
        top_k=3,
        vector=[0.9, 0.2, 0.0],
        threshold=0.1,
        filter_json='{"must_not":[{"key":"g","match":{"value":"zzz"}}]}',
    )


@pytest.mark.parametrize(
    "distance, kind",
    [
        (models.Distance.EUCLID, sc.SCORE_DISTANCE),
        (models.Distance.MANHATTAN, sc.SCORE_DISTANCE),
        (models.Distance.DOT, sc.SCORE_SIMILARITY),
    ],
)
def test_score_kind_follows_the_collection_distance(instrumentor, span_exporter, distance, kind) -> None:
    client = make_client(distance)
    result = client.query_points("docs", query=[0.9, 0.2, 0.0], limit=4)
    scores = [p.score for p in result.points]
    assert scores == (sorted(scores) if kind == sc.SCORE_DISTANCE else sorted(scores, reverse=True))
    spans = span_exporter.get_finished_spans()
    [span] = retrieve_spans(span_exporter)
    check_span(span, spans, result.points, component="qdrant_client.QdrantClient.query_points", kind=kind, top_k=4, vector=[0.9, 0.2, 0.0])


def test_named_sparse_and_fusion_queries(instrumentor, span_exporter) -> None:
    client = QdrantClient(location=":memory:")
    client.create_collection(
        "hybrid",
        vectors_config={"dense": models.VectorParams(size=3, distance=models.Distance.EUCLID)},
        sparse_vectors_config={"sparse": models.SparseVectorParams()},
    )
    client.upsert(
        "hybrid",
        points=[
            models.PointStruct(id=i, vector={"dense": v, "sparse": models.SparseVector(indices=[0, 1], values=[v[0], v[1] + 0.1])}, payload=p)
            for i, v, p in POINTS
        ],
    )
    dense = client.query_points("hybrid", query=[1.0, 0.0, 0.0], using="dense", limit=2)
    sparse = client.query_points("hybrid", query=models.SparseVector(indices=[0], values=[1.0]), using="sparse", limit=2)
    fused = client.query_points(
        "hybrid",
        prefetch=[
            models.Prefetch(query=[1.0, 0.0, 0.0], using="dense", limit=3),
            models.Prefetch(query=models.SparseVector(indices=[1], values=[1.0]), using="sparse", limit=3),
        ],
        query=models.FusionQuery(fusion=models.Fusion.RRF),
        limit=3,
    )
    kinds = [s.attributes for s in retrieve_spans(span_exporter)]
    events = [stitched(s, span_exporter.get_finished_spans()) for s in retrieve_spans(span_exporter)]
    assert [{a[sc.CANDIDATE_SCORE_KIND] for _, a in e} for e in events] == [{sc.SCORE_DISTANCE}, {sc.SCORE_SIMILARITY}, {sc.SCORE_RRF}]
    assert [len(e) for e in events] == [len(dense.points), len(sparse.points), len(fused.points)]
    assert sc.QUERY_VECTOR_SHA256 not in kinds[1] and sc.QUERY_VECTOR_SHA256 not in kinds[2]


def test_query_batch_points_one_stage_per_request(instrumentor, span_exporter, tracer_provider) -> None:
    client = make_client()
    flt = models.Filter(must=[models.FieldCondition(key="g", match=models.MatchValue(value="a"))])
    requests = [
        models.QueryRequest(query=[1.0, 0.0, 0.0], limit=2, with_payload=True),
        models.QueryRequest(query=[0.0, 1.0, 0.0], limit=3, filter=flt, score_threshold=0.0, with_payload=True),
    ]
    with tracer_provider.get_tracer("test").start_as_current_span("app") as parent:
        responses = client.query_batch_points("docs", requests=requests)
    spans = span_exporter.get_finished_spans()
    rows = sorted(retrieve_spans(span_exporter), key=lambda s: s.attributes[sc.STAGE_BATCH_INDEX])
    assert len(rows) == 2
    component = "qdrant_client.QdrantClient.query_batch_points"
    check_span(rows[0], spans, responses[0].points, component=component, kind=sc.SCORE_SIMILARITY, top_k=2, vector=[1.0, 0.0, 0.0], batch=(0, 2))
    check_span(
        rows[1],
        spans,
        responses[1].points,
        component=component,
        kind=sc.SCORE_SIMILARITY,
        top_k=3,
        vector=[0.0, 1.0, 0.0],
        batch=(1, 2),
        threshold=0.0,
        filter_json='{"must":[{"key":"g","match":{"value":"a"}}]}',
    )
    assert {r.parent.span_id for r in rows} == {parent.get_span_context().span_id}
    assert rows[1].start_time == rows[0].start_time and rows[1].end_time >= rows[0].end_time


def test_query_points_groups_flattened_in_group_order(instrumentor, span_exporter) -> None:
    client = make_client(models.Distance.EUCLID)
    result = client.query_points_groups("docs", group_by="g", query=[0.9, 0.1, 0.0], limit=2, group_size=2)
    hits = [hit for group in result.groups for hit in group.hits]
    spans = span_exporter.get_finished_spans()
    [span] = retrieve_spans(span_exporter)
    assert span.name == "retrieve query_points_groups"
    check_span(
        span,
        spans,
        hits,
        component="qdrant_client.QdrantClient.query_points_groups",
        kind=sc.SCORE_DISTANCE,
        top_k=2,
        vector=[0.9, 0.1, 0.0],
        extra={sc.STAGE_GROUP_BY: "g", sc.STAGE_GROUP_SIZE: 2},
    )


def test_empty_collection_and_zero_hits_are_empty_not_failed(instrumentor, span_exporter) -> None:
    client = make_client()
    client.create_collection("void", vectors_config=models.VectorParams(size=3, distance=models.Distance.COSINE))
    nothing = client.query_points("void", query=[1.0, 0.0, 0.0])
    flt = models.Filter(must=[models.FieldCondition(key="g", match=models.MatchValue(value="none-such"))])
    filtered = client.query_points("docs", query=[1.0, 0.0, 0.0], query_filter=flt, limit=5)
    assert nothing.points == [] and filtered.points == []
    spans = span_exporter.get_finished_spans()
    first, second = retrieve_spans(span_exporter)
    check_span(
        first,
        spans,
        [],
        component="qdrant_client.QdrantClient.query_points",
        kind=sc.SCORE_SIMILARITY,
        top_k=10,
        vector=[1.0, 0.0, 0.0],
        corpus=0,
        collection="void",
    )
    check_span(
        second,
        spans,
        [],
        component="qdrant_client.QdrantClient.query_points",
        kind=sc.SCORE_SIMILARITY,
        top_k=5,
        vector=[1.0, 0.0, 0.0],
        filter_json='{"must":[{"key":"g","match":{"value":"none-such"}}]}',
    )


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda c: c.query_points("missing", query=[1.0, 0.0, 0.0]), "Collection missing not found"),
        (lambda c: c.query_points("docs", query=[float("nan"), 0.0, 0.0]), "Query vector must not contain NaN"),
    ],
    ids=["missing-collection", "nan-query"],
)
def test_raising_client_is_failed_and_reraised_unchanged(instrumentor, span_exporter, monkeypatch, call, error) -> None:
    client = make_client()
    with suppress_instrumentation(), pytest.raises(ValueError) as plain:
        call(client)
    raised: list[BaseException] = []
    original = QdrantLocal.query_points

    def keeping(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(self, *args, **kwargs)
        except BaseException as exc:
            raised.append(exc)
            raise

    monkeypatch.setattr(QdrantLocal, "query_points", keeping)
    with pytest.raises(ValueError) as traced:
        call(client)
    assert traced.value is raised[0]  # the library's own exception object, not a copy or a wrapper
    assert str(traced.value) == str(plain.value) == error
    [span] = retrieve_spans(span_exporter)
    assert span.attributes[sc.STAGE_STATUS] == sc.STATUS_FAILED
    assert span.attributes[sc.STAGE_FAILURE_CLASS] == "exception:ValueError"
    assert span.status.status_code == StatusCode.ERROR
    assert sc.COVERAGE_CORPUS_SIZE not in span.attributes  # no extra read after a failure
    assert [e.name for e in span.events] == ["exception"]


def test_document_query_records_the_text_even_when_inference_fails(instrumentor, span_exporter) -> None:
    pytest.importorskip("numpy")
    try:
        import fastembed  # noqa: F401

        pytest.skip("fastembed installed: the inference would download a model")
    except ImportError:
        pass
    client = make_client()
    with pytest.raises(ImportError):
        client.query_points("docs", query=models.Document(text="where is one?", model="any/model"))
    [span] = retrieve_spans(span_exporter)
    assert span.attributes[sc.QUERY_TEXT] == "where is one?"
    assert span.attributes[sc.QUERY_HOP] == 0
    assert span.attributes[sc.STAGE_FAILURE_CLASS] == "exception:ImportError"


def test_uninstrument_restores_the_clients(tracer_provider, span_exporter) -> None:
    originals = {
        (cls, m): vars(cls)[m] for cls in (QdrantClient, AsyncQdrantClient) for m in ("query_points", "query_batch_points", "query_points_groups")
    }
    inst = QdrantInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    assert all(type(vars(cls)[m]).__name__ == "FunctionWrapper" for cls, m in originals)
    inst.uninstrument()
    assert all(vars(cls)[m] is fn for (cls, m), fn in originals.items())
    make_client().query_points("docs", query=[1.0, 0.0, 0.0])
    assert retrieve_spans(span_exporter) == []


def test_one_span_per_call_and_suppression(instrumentor, span_exporter) -> None:
    client = make_client()
    client.query_points("docs", query=[1.0, 0.0, 0.0])
    client.query_points_groups("docs", group_by="g", query=[1.0, 0.0, 0.0])
    assert len(span_exporter.get_finished_spans()) == 2
    with suppress_instrumentation():
        client.query_points("docs", query=[1.0, 0.0, 0.0])
    assert len(span_exporter.get_finished_spans()) == 2


def test_thousand_candidates_arrive_intact(instrumentor, span_exporter, tracer_provider) -> None:
    assert tracer_provider._span_limits.max_events == 128
    client = QdrantClient(location=":memory:")
    client.create_collection("big", vectors_config=models.VectorParams(size=4, distance=models.Distance.DOT))
    client.upsert(
        "big",
        points=[
            models.PointStruct(id=str(uuid.UUID(int=i)) if i % 2 else i, vector=[i / 1200, 1.0, (i % 7) / 7, 0.5], payload={"text": f"passage {i}"})
            for i in range(1200)
        ],
    )
    result = client.query_points("big", query=[1.0, 0.1, 0.2, 0.0], limit=1000)
    assert len(result.points) == 1000
    spans = span_exporter.get_finished_spans()
    [span] = retrieve_spans(span_exporter)
    evs = stitched(span, spans)
    assert [a[sc.CANDIDATE_ID] for _, a in evs] == [str(p.id) for p in result.points]
    assert [a[sc.CANDIDATE_RANK] for _, a in evs] == list(range(1000))
    assert [a[sc.CANDIDATE_CONTENT_SHA256] for _, a in evs] == [receipt(p.payload["text"]).sha256 for p in result.points]
    assert all(s.dropped_events == 0 for s in spans)
    check_count_and_digest(span, evs)
    assert span.attributes[sc.COVERAGE_CORPUS_SIZE] == 1200


# --- async client -----------------------------------------------------------------------------------


async def test_async_span_covers_the_awaited_query(instrumentor, span_exporter, monkeypatch) -> None:
    client = await make_async_client(models.Distance.EUCLID)
    spy = Spy(monkeypatch, AsyncQdrantLocal, "query_points", delay=0.05)
    result = await client.query_points("docs", query=[0.9, 0.2, 0.0], limit=2)
    assert result is spy.returned[0] and result == spy.snapshots[0]
    spans = span_exporter.get_finished_spans()
    [span] = retrieve_spans(span_exporter)
    start, end = spy.window[0]
    assert span.start_time <= start and span.end_time >= end  # the span covers the awaited work
    assert span.end_time - span.start_time >= 50_000_000
    assert spy.current[0].get_span_context().span_id == span.context.span_id
    check_span(
        span, spans, result.points, component="qdrant_client.AsyncQdrantClient.query_points", kind=sc.SCORE_DISTANCE, top_k=2, vector=[0.9, 0.2, 0.0]
    )


async def test_async_batch_and_groups(instrumentor, span_exporter) -> None:
    client = await make_async_client()
    responses = await client.query_batch_points(
        "docs",
        requests=[
            models.QueryRequest(query=[1.0, 0.0, 0.0], limit=1, with_payload=True),
            models.QueryRequest(query=[0.0, 0.0, 1.0], limit=2, with_payload=True),
        ],
    )
    groups = await client.query_points_groups("docs", group_by="g", query=[1.0, 0.0, 0.0], limit=1, group_size=2)
    spans = span_exporter.get_finished_spans()
    batch = sorted(
        (s for s in retrieve_spans(span_exporter) if s.name == "retrieve query_batch_points"), key=lambda s: s.attributes[sc.STAGE_BATCH_INDEX]
    )
    component = "qdrant_client.AsyncQdrantClient.query_batch_points"
    check_span(batch[0], spans, responses[0].points, component=component, kind=sc.SCORE_SIMILARITY, top_k=1, vector=[1.0, 0.0, 0.0], batch=(0, 2))
    check_span(batch[1], spans, responses[1].points, component=component, kind=sc.SCORE_SIMILARITY, top_k=2, vector=[0.0, 0.0, 1.0], batch=(1, 2))
    [grouped] = [s for s in retrieve_spans(span_exporter) if s.name == "retrieve query_points_groups"]
    check_span(
        grouped,
        spans,
        [h for g in groups.groups for h in g.hits],
        component="qdrant_client.AsyncQdrantClient.query_points_groups",
        kind=sc.SCORE_SIMILARITY,
        top_k=1,
        vector=[1.0, 0.0, 0.0],
        extra={sc.STAGE_GROUP_BY: "g", sc.STAGE_GROUP_SIZE: 2},
    )


async def test_async_failure_and_cancellation(instrumentor, span_exporter, monkeypatch) -> None:
    client = await make_async_client()
    with pytest.raises(ValueError, match="Collection missing not found"):
        await client.query_points("missing", query=[1.0, 0.0, 0.0])
    Spy(monkeypatch, AsyncQdrantLocal, "query_points", delay=5)
    task = asyncio.ensure_future(client.query_points("docs", query=[1.0, 0.0, 0.0]))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    failed, cancelled = retrieve_spans(span_exporter)
    assert failed.attributes[sc.STAGE_FAILURE_CLASS] == "exception:ValueError"
    # issue 13: a cancellation is not a failure of the retrieval
    assert cancelled.attributes[sc.STAGE_STATUS] == sc.STATUS_CANCELLED
    assert sc.STAGE_FAILURE_CLASS not in cancelled.attributes
    assert not any(e.name == "exception" for e in cancelled.events)
    assert cancelled.status.status_code is trace.StatusCode.UNSET
    assert trace.get_current_span() is trace.INVALID_SPAN or not trace.get_current_span().is_recording()


async def test_async_inside_a_pipeline_keeps_the_parent(instrumentor, span_exporter) -> None:
    client = await make_async_client()

    @ragtrail.pipeline
    async def answer(query: str) -> list[str]:
        result = await client.query_points("docs", query=[1.0, 0.0, 0.0], limit=2)
        return [str(p.id) for p in result.points]

    await asyncio.gather(answer("q1"), answer("q2"))
    spans = span_exporter.get_finished_spans()
    pipelines = [s for s in spans if s.attributes.get(sc.STAGE_KIND) == sc.KIND_PIPELINE]
    stages = retrieve_spans(span_exporter)
    assert len(pipelines) == 2 and len(stages) == 2
    assert {s.parent.span_id for s in stages} == {p.context.span_id for p in pipelines}
    for p in pipelines:
        assert p.attributes[sc.COVERAGE_CORPUS_SIZE] == 4
        assert p.attributes[sc.COVERAGE_RETRIEVED] == 2


# --- remote client: config once per collection, no count ------------------------------------------


class _FakeQdrantHandler(BaseHTTPRequestHandler):
    """Qdrant's REST API for the few calls the client makes, answered by a real local collection."""

    local: QdrantClient
    seen: list[tuple[str, str]]
    # when set, a collection-config read is answered only once the test releases it (or after
    # GATE_TIMEOUT); ``late`` records the reads answered without the release
    gate: threading.Event | None = None
    late: list[str]

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _reply(self, payload: Any) -> None:
        body = json.dumps({"result": payload, "status": "ok", "time": 0.0}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        self.seen.append(("GET", self.path))
        if self.path.startswith("/collections/"):
            name = self.path.split("/")[2]
            if self.gate is not None and not self.gate.wait(GATE_TIMEOUT):
                self.late.append(self.path)
            with suppress_instrumentation():  # the stand-in server is not the app under test
                info = self.local.get_collection(name)
            self._reply(info.model_dump(mode="json", exclude_none=True))
        else:
            body = json.dumps({"title": "qdrant", "version": "1.16.0"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        self.seen.append(("POST", self.path))
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        name = self.path.split("/")[2]
        query = request.get("query")
        if isinstance(query, dict) and "nearest" in query:
            query = query["nearest"]
        with suppress_instrumentation():
            result = self.local.query_points(name, query=query, limit=request.get("limit", 10), with_payload=request.get("with_payload", True))
        self._reply(result.model_dump(mode="json", exclude_none=True))


GATE_TIMEOUT = 3.0


@pytest.fixture
def fake_remote():
    handler = type("Handler", (_FakeQdrantHandler,), {"local": make_client(models.Distance.EUCLID), "seen": [], "late": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.handler = handler  # type: ignore[attr-defined]
    yield server, handler.seen
    if handler.gate is not None:
        handler.gate.set()
    server.shutdown()
    server.server_close()


UNREAD = "score kind unknown: the application has not read this collection's config (ragtrail adds no request to the database)"


def _remote_session(port: int, *, read_config: bool, instrument: bool, tracer_provider: Any) -> list[Any]:
    """The same application against the stand-in server, with or without ragtrail: three queries,
    after the app's own ``get_collection`` when ``read_config``. Returns the ids found."""
    instr = QdrantInstrumentor()
    if instrument:
        instr.instrument(tracer_provider=tracer_provider)
    try:
        client = QdrantClient(url=f"http://127.0.0.1:{port}", check_compatibility=False)
        if read_config:
            client.get_collection("docs")
        found = [[p.id for p in client.query_points("docs", query=v, limit=2).points] for v in ([0.9, 0.2, 0.0], [0.0, 0.2, 0.9], [0.9, 0.2, 0.0])]
        client.close()
        return found
    finally:
        if instrument:
            instr.uninstrument()


@pytest.mark.parametrize("read_config", [False, True])
def test_remote_client_ragtrail_adds_no_request(span_exporter, tracer_provider, fake_remote, read_config) -> None:
    """Counted at the transport (the stand-in server's request log): the application's requests with
    ragtrail are exactly its requests without it, whether or not it reads the config itself."""
    server, seen = fake_remote
    port = server.server_address[1]
    plain = _remote_session(port, read_config=read_config, instrument=False, tracer_provider=tracer_provider)
    without = list(seen)
    seen.clear()
    span_exporter.clear()
    recorded = _remote_session(port, read_config=read_config, instrument=True, tracer_provider=tracer_provider)
    assert recorded == plain
    assert seen == without
    assert seen.count(("GET", "/collections/docs")) == (1 if read_config else 0)
    assert not any("count" in path for _, path in seen)
    spans = span_exporter.get_finished_spans()
    stages = retrieve_spans(span_exporter)
    assert len(stages) == 3
    for span, vector in zip(stages, ([0.9, 0.2, 0.0], [0.0, 0.2, 0.9], [0.9, 0.2, 0.0]), strict=False):
        with suppress_instrumentation():
            points = server.handler.local.query_points("docs", query=vector, limit=2).points
        if read_config:
            # the app's own get_collection told the distance and Qdrant's approximate points_count
            check_span(
                span,
                spans,
                points,
                component="qdrant_client.QdrantClient.query_points",
                kind=sc.SCORE_DISTANCE,
                top_k=2,
                vector=vector,
                corpus=4,
                extra={sc.COVERAGE_CORPUS_APPROXIMATE: True},
            )
        else:
            check_span(
                span,
                spans,
                points,
                component="qdrant_client.QdrantClient.query_points",
                kind=sc.SCORE_NONE,
                top_k=2,
                vector=vector,
                corpus=None,
                extra={sc.STAGE_FINDINGS: (UNREAD,)},
            )


def test_remote_corpus_size_the_user_set(instrumentor, span_exporter, fake_remote) -> None:
    import ragtrail
    from ragtrail.recorder import corpus

    server, seen = fake_remote
    client = QdrantClient(url=f"http://127.0.0.1:{server.server_address[1]}", check_compatibility=False)
    ragtrail.corpus_size("docs", 1003)
    try:
        with ragtrail.stage("pipeline", "app"):
            client.query_points("docs", query=[0.9, 0.2, 0.0], limit=2)
    finally:
        corpus.clear()
    [span] = retrieve_spans(span_exporter)
    assert span.attributes[sc.COVERAGE_CORPUS_SIZE] == 1003
    assert sc.COVERAGE_CORPUS_APPROXIMATE not in span.attributes
    pipeline = [s for s in span_exporter.get_finished_spans() if s.attributes.get(sc.STAGE_KIND) == "pipeline"][0]
    assert pipeline.attributes[sc.COVERAGE_CORPUS_SIZE] == 1003
    assert sc.COVERAGE_STORES not in pipeline.attributes  # one store: written only when several
    assert seen == [("POST", "/collections/docs/points/query")]
    client.close()


async def test_async_remote_client_adds_no_request(instrumentor, span_exporter, fake_remote) -> None:
    server, seen = fake_remote
    client = AsyncQdrantClient(url=f"http://127.0.0.1:{server.server_address[1]}", check_compatibility=False)
    first = await client.query_points("docs", query=[0.9, 0.2, 0.0], limit=2)
    await client.get_collection("docs")  # the application's own read
    second = await client.query_points("docs", query=[0.9, 0.2, 0.0], limit=2)
    assert first == second
    assert seen == [("POST", "/collections/docs/points/query"), ("GET", "/collections/docs"), ("POST", "/collections/docs/points/query")]
    a, b = retrieve_spans(span_exporter)
    assert {e.attributes[sc.CANDIDATE_SCORE_KIND] for e in rec_events(a)} == {sc.SCORE_NONE}
    assert a.attributes[sc.STAGE_FINDINGS] == (UNREAD,)
    assert {e.attributes[sc.CANDIDATE_SCORE_KIND] for e in rec_events(b)} == {sc.SCORE_DISTANCE}
    assert b.attributes[sc.COVERAGE_CORPUS_SIZE] == 4
    assert b.attributes[sc.COVERAGE_CORPUS_APPROXIMATE] is True
    await client.close()


def test_local_client_calls_no_client_method_for_its_facts(instrumentor, span_exporter, monkeypatch) -> None:
    """A local client's config and size are read from its memory: no ``count`` (which scans every
    point's payload mask), no ``get_collection`` (a deep copy of the config)."""
    client = make_client(models.Distance.MANHATTAN)
    client.delete("docs", points_selector=models.PointIdsList(points=[4]))
    spies = {name: Spy(monkeypatch, QdrantClient, name) for name in ("count", "get_collection", "scroll")}
    client.query_points("docs", query=[1.0, 0.0, 0.0], limit=2)
    assert {name: len(spy.returned) for name, spy in spies.items()} == {"count": 0, "get_collection": 0, "scroll": 0}
    [span] = retrieve_spans(span_exporter)
    assert span.attributes[sc.COVERAGE_CORPUS_SIZE] == 3  # 4 upserted, 1 deleted: exact
    assert sc.COVERAGE_CORPUS_APPROXIMATE not in span.attributes
    assert {e.attributes[sc.CANDIDATE_SCORE_KIND] for e in rec_events(span)} == {sc.SCORE_DISTANCE}


# --- under opentelemetry-instrument ----------------------------------------------------------------


def run_under_opentelemetry_instrument(script: str, tmp_path: Path, entry_point: str) -> list[Any]:
    return spanutil.run_under_opentelemetry_instrument(script, tmp_path, entry_point, service="vector-app")[1]


def test_under_opentelemetry_instrument_sync_and_async(tmp_path) -> None:
    spans = run_under_opentelemetry_instrument(
        """
        import asyncio
        from qdrant_client import AsyncQdrantClient, QdrantClient, models

        points = [models.PointStruct(id=i, vector=[1.0, i / 300, 0.0], payload={"text": f"p{i}"}) for i in range(300)]
        client = QdrantClient(location=":memory:")
        client.create_collection("c", vectors_config=models.VectorParams(size=3, distance=models.Distance.COSINE))
        client.upsert("c", points=points)
        sync_ids = [p.id for p in client.query_points("c", query=[1.0, 0.5, 0.0], limit=250).points]

        async def main():
            aclient = AsyncQdrantClient(":memory:")
            await aclient.create_collection("c", vectors_config=models.VectorParams(size=3, distance=models.Distance.EUCLID))
            await aclient.upsert("c", points=points)
            return [p.id for p in (await aclient.query_points("c", query=[1.0, 0.5, 0.0], limit=5)).points]

        async_ids = asyncio.run(main())
        with open("ids.txt", "w") as f:
            f.write(",".join(map(str, sync_ids)) + "\\n" + ",".join(map(str, async_ids)))
        print("APP-OK")
    """,
        tmp_path,
        "ragtrail_qdrant",
    )
    sync_ids, async_ids = [line.split(",") for line in (tmp_path / "ids.txt").read_text().splitlines()]
    stages = {
        s.attributes[sc.STAGE_COMPONENT]: s
        for s in spans
        if s.attributes.get(sc.STAGE_KIND) == sc.KIND_RETRIEVE and not s.attributes.get(sc.STAGE_CONTINUATION)
    }
    assert set(stages) == {"qdrant_client.QdrantClient.query_points", "qdrant_client.AsyncQdrantClient.query_points"}
    sync_span = stages["qdrant_client.QdrantClient.query_points"]
    parts = [sync_span] + sorted((s for s in spans if s.parent_span_id == sync_span.span_id), key=lambda s: s.attributes[sc.STAGE_CONTINUATION_INDEX])
    ids = [e.attributes[sc.CANDIDATE_ID] for p in parts for e in rec_events(p)]
    assert ids == sync_ids and len(ids) == 250
    assert all(p.dropped_events == 0 for p in parts)
    async_span = stages["qdrant_client.AsyncQdrantClient.query_points"]
    assert [e.attributes[sc.CANDIDATE_ID] for e in rec_events(async_span)] == async_ids
    assert {e.attributes[sc.CANDIDATE_SCORE_KIND] for e in rec_events(async_span)} == {sc.SCORE_DISTANCE}
    assert async_span.attributes[sc.COVERAGE_CORPUS_SIZE] == 300


def test_instrumentation_errors_never_reach_the_app(instrumentor, span_exporter, monkeypatch) -> None:
    import ragtrail.instrumentation.qdrant as module

    client = make_client()
    with suppress_instrumentation():
        want = client.query_points("docs", query=[1.0, 0.0, 0.0], limit=2)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("recording bug")

    monkeypatch.setattr(module, "_facts", broken)  # the collection read fails: scores kept, kind unknown
    got = client.query_points("docs", query=[1.0, 0.0, 0.0], limit=2)
    assert got == want
    [span] = retrieve_spans(span_exporter)
    assert span.attributes[sc.STAGE_STATUS] == sc.STATUS_OK
    assert span.attributes[sc.STAGE_FINDINGS] == ("score kind unknown: the collection's distance could not be read",)
    assert {e.attributes[sc.CANDIDATE_SCORE_KIND] for e in rec_events(span)} == {sc.SCORE_NONE}
    monkeypatch.setattr(module, "_outcome", broken)
    assert client.query_points("docs", query=[1.0, 0.0, 0.0], limit=2) == want
    assert retrieve_spans(span_exporter)[-1].attributes[sc.STAGE_INSTRUMENTATION_ERRORS] == 1


def test_batch_requests_given_as_an_iterator_are_not_consumed(instrumentor, span_exporter) -> None:
    client = make_client()
    requests = [models.QueryRequest(query=[1.0, 0.0, 0.0], limit=1), models.QueryRequest(query=[0.0, 1.0, 0.0], limit=1)]
    with suppress_instrumentation():
        want = client.query_batch_points("docs", requests=iter(list(requests)))
    got = client.query_batch_points("docs", requests=iter(list(requests)))
    assert got == want and len(got) == 2
    rows = retrieve_spans(span_exporter)
    assert len(rows) == 2  # the results are still recorded; only the per-request knobs are unknown
    assert all(sc.STAGE_TOP_K not in r.attributes for r in rows)
    assert [[e.attributes[sc.CANDIDATE_SCORE_KIND] for e in rec_events(r)] for r in rows] == [[sc.SCORE_SIMILARITY]] * 2


def test_local_mmr_records_its_pool_and_what_it_did_not_pick(instrumentor, span_exporter) -> None:
    """Issue 24, principle 5: an in-memory client runs MMR in this process, so the pool it picked
    from (candidates_limit nearest points, the Qdrant ids and similarities) is the stage's inputs and
    each point it did not pick an exclusion ``custom:not_picked_by_mmr``. Point 4 is the second most
    similar to the query but nearly point 1, which was picked first: MMR took ``UUID5`` instead."""
    client = make_client()
    query = models.NearestQuery(nearest=[0.9, 0.3, 0.0], mmr=models.Mmr(diversity=0.7, candidates_limit=3))
    with suppress_instrumentation():
        plain = client.query_points("docs", query=query, limit=2)
        pool = client.query_points("docs", query=[0.9, 0.3, 0.0], limit=3).points
    result = client.query_points("docs", query=query, limit=2)
    assert result == plain and [p.id for p in result.points] == [1, UUID5]
    assert [p.id for p in pool] == [1, 4, UUID5]
    spans = span_exporter.get_finished_spans()
    [span] = retrieve_spans(span_exporter)
    a = spanutil.own(span)
    expected: dict[str, Any] = {
        sc.SCHEMA: 5,
        sc.STAGE_KIND: sc.KIND_RETRIEVE,
        sc.STAGE_COMPONENT: "qdrant_client.QdrantClient.query_points",
        sc.STAGE_STATUS: sc.STATUS_OK,
        sc.STAGE_TOP_K: 2,
        sc.STAGE_COLLECTION: "docs",
        sc.CANDIDATES_IN: 3,
        sc.CANDIDATES_OUT: 2,
        sc.CANDIDATES_EXCLUDED: 1,
        sc.COVERAGE_CORPUS_SIZE: 4,
        sc.GEN_AI_OPERATION_NAME: "retrieval",
        sc.GEN_AI_DATA_SOURCE_ID: "docs",
        sc.GEN_AI_RETRIEVAL_TOP_K: 2,
        sc.OPENINFERENCE_SPAN_KIND: "RETRIEVER",
    }
    expected[sc.QUERY_VECTOR_DIM], expected[sc.QUERY_VECTOR_SHA256] = vector_receipt([0.9, 0.3, 0.0])
    for key, value in expected.items():
        assert key in a, key
        assert a.pop(key) == value, key
    assert a.pop(sc.STAGE_MMR_LAMBDA) == pytest.approx(0.3)  # 1 - diversity
    evs = stitched(span, spans)
    check_count_and_digest(span, evs)
    a.pop(sc.EVENTS_COUNT), a.pop(sc.EVENTS_DIGEST)
    for i, point in enumerate(result.points):
        assert a.pop(f"retrieval.documents.{i}.document.id") == str(point.id)
        assert a.pop(f"retrieval.documents.{i}.document.score") == point.score
    mirrorutil.pop_mirrors(a, span, spans)
    assert a == {}, f"unexpected attributes {a}"  # no finding: the pool is recorded
    detail = "in the candidates_limit pool of 3, not picked: maximal marginal relevance took 2, diversity=0.7"
    rows = [(point, rank, None) for rank, point in enumerate(result.points)] + [(pool[1], 1, detail)]
    assert [name for name, _ in evs] == [sc.EVENT_CANDIDATE, sc.EVENT_CANDIDATE, sc.EVENT_EXCLUSION]
    for (point, rank, why), (_, ev) in zip(rows, evs, strict=True):
        spanutil.pop_pointer(ev, {})
        assert (ev.pop(sc.CANDIDATE_ID), ev.pop(sc.CANDIDATE_RANK)) == (str(point.id), rank)
        assert (ev.pop(sc.CANDIDATE_SCORE), ev.pop(sc.CANDIDATE_SCORE_KIND)) == (point.score, sc.SCORE_SIMILARITY)
        content = content_of(point)
        if content is not None:
            rec = receipt(content)
            assert (ev.pop(sc.CANDIDATE_CONTENT_CHARS), ev.pop(sc.CANDIDATE_CONTENT_BYTES), ev.pop(sc.CANDIDATE_CONTENT_SHA256)) == (
                rec.chars,
                rec.bytes,
                rec.sha256,
            )
        if why is not None:
            assert (ev.pop(sc.EXCLUSION_REASON), ev.pop(sc.EXCLUSION_DETAIL)) == ("custom:not_picked_by_mmr", why)
        assert ev == {}, ev


def test_mmr_over_a_pool_cut_by_an_offset_keeps_the_finding(instrumentor, span_exporter) -> None:
    """An ``offset`` drops picks after MMR made them: what was returned is not the pick, so the pool is
    not recorded (never a guess) and the finding stays."""
    client = make_client()
    query = models.NearestQuery(nearest=[0.9, 0.3, 0.0], mmr=models.Mmr(diversity=0.7, candidates_limit=3))
    result = client.query_points("docs", query=query, limit=1, offset=1)
    assert [p.id for p in result.points] == [UUID5]
    [span] = retrieve_spans(span_exporter)
    a = spanutil.own(span)
    assert (a[sc.CANDIDATES_IN], a[sc.CANDIDATES_OUT], a[sc.CANDIDATES_EXCLUDED]) == (0, 1, 0)
    assert list(a[sc.STAGE_FINDINGS]) == ["maximal marginal relevance ran inside Qdrant over 3 candidates: the ones it did not pick are not returned"]


def test_uninstrument_restores_the_local_mmr(tracer_provider) -> None:
    from qdrant_client.local.local_collection import LocalCollection

    original = vars(LocalCollection)["_mmr"]
    inst = QdrantInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    assert type(vars(LocalCollection)["_mmr"]).__name__ == "FunctionWrapper"
    inst.uninstrument()
    assert vars(LocalCollection)["_mmr"] is original


async def test_async_local_mmr_records_its_pool(instrumentor, span_exporter) -> None:
    """The async in-memory client picks in the same task: the same pool, the same exclusion."""
    client = await make_async_client()
    query = models.NearestQuery(nearest=[0.9, 0.3, 0.0], mmr=models.Mmr(diversity=0.7, candidates_limit=3))
    result = await client.query_points("docs", query=query, limit=2)
    assert [p.id for p in result.points] == [1, UUID5]
    [span] = retrieve_spans(span_exporter)
    a = spanutil.own(span)
    assert (a[sc.CANDIDATES_IN], a[sc.CANDIDATES_OUT], a[sc.CANDIDATES_EXCLUDED]) == (3, 2, 1) and sc.STAGE_FINDINGS not in a
    [(_, cut)] = [(n, ev) for n, ev in spanutil.records(span) if n == sc.EVENT_EXCLUSION]
    detail = "in the candidates_limit pool of 3, not picked: maximal marginal relevance took 2, diversity=0.7"
    assert (cut[sc.CANDIDATE_ID], cut[sc.CANDIDATE_RANK], cut[sc.EXCLUSION_REASON], cut[sc.EXCLUSION_DETAIL]) == (
        "4",
        1,
        "custom:not_picked_by_mmr",
        detail,
    )
