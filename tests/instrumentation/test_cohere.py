"""cohere rerank (v1 and v2 clients, sync and async) as ragtrail ``rerank`` stages.

The real cohere client runs end to end; only the network is replaced, at the transport
(``httpx.MockTransport``): a fake rerank endpoint that scores documents from a table and answers
like Cohere's API (``results[{index, relevance_score}]``, best first, cut at ``top_n``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

import spanutil

cohere = pytest.importorskip("cohere")
httpx = pytest.importorskip("httpx")

from opentelemetry import trace  # noqa: E402
from opentelemetry.instrumentation.utils import suppress_instrumentation  # noqa: E402

import ragtrail  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.cohere import CohereInstrumentor  # noqa: E402

from .test_rerankers_shared import check_rerank_span, doc, rerank_spans, run_under_opentelemetry_instrument  # noqa: E402

SCORES = {"alpha doc": 0.11, "beta doc": 0.93, "gamma doc": 0.52, "delta doc": 0.37, "epsilon": 0.05}
DOCS = ["alpha doc", "beta doc", "gamma doc", "delta doc"]
QUERY = "which doc is beta?"


class FakeRerankAPI:
    """Cohere's rerank endpoint, answering from the SCORES table; remembers what it was sent."""

    def __init__(self, delay: float = 0.0) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.delay = delay

    def answer(self, request: Any) -> Any:
        body = json.loads(request.content)
        self.requests.append((request.url.path, body))
        texts = [d if isinstance(d, str) else d["text"] for d in body["documents"]]
        order = sorted(range(len(texts)), key=lambda i: SCORES[texts[i]], reverse=True)
        order = order[: body.get("top_n", len(order))]
        results = [{"index": i, "relevance_score": SCORES[texts[i]]} for i in order]
        if body.get("return_documents"):
            for r in results:
                r["document"] = {"text": texts[r["index"]]}
        return httpx.Response(200, json={"id": "req-1", "results": results})

    def sync(self, request: Any) -> Any:
        return self.answer(request)

    async def async_(self, request: Any) -> Any:
        await asyncio.sleep(self.delay)
        self.handled_at = time.time_ns()
        return self.answer(request)


def client(cls: Any, handler: Callable[..., Any]) -> Any:
    transport = httpx.MockTransport(handler)
    http = httpx.AsyncClient(transport=transport) if cls.__name__.startswith("Async") else httpx.Client(transport=transport)
    return cls(api_key="test-key", httpx_client=http, max_retries=0)


@pytest.fixture
def instrumentor(tracer_provider):
    inst = CohereInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield inst
    inst.uninstrument()


def uninstrumented(inst: CohereInstrumentor, tracer_provider: Any, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` with the library exactly as shipped (patches removed), then patch again."""
    inst.uninstrument()
    try:
        return fn()
    finally:
        inst.instrument(tracer_provider=tracer_provider)


def outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        value = fn()
    except Exception as exc:  # noqa: BLE001 - compared between runs
        return "raised", (type(exc), str(exc))
    return "returned", (type(value), value.model_dump() if hasattr(value, "model_dump") else value)


def test_v2_rerank_records_candidates_scores_and_rank_cutoff(instrumentor, tracer_provider, span_exporter) -> None:
    api = FakeRerankAPI()
    co = client(cohere.ClientV2, api.sync)

    def call() -> Any:
        return co.rerank(model="rerank-v3.5", query=QUERY, documents=DOCS, top_n=2)

    baseline = uninstrumented(instrumentor, tracer_provider, lambda: outcome(call))
    assert span_exporter.get_finished_spans() == ()
    result = call()
    assert outcome(lambda: result) == baseline
    assert [(r.index, r.relevance_score) for r in result.results] == [(1, 0.93), (2, 0.52)]
    assert api.requests[-1] == ("/v2/rerank", {"model": "rerank-v3.5", "query": QUERY, "documents": DOCS, "top_n": 2})

    (span,) = span_exporter.get_finished_spans()
    inputs = [doc(t) for t in DOCS]
    check_rerank_span(
        span,
        component="cohere.client_v2.ClientV2",
        query=QUERY,
        top_k=2,
        model="rerank-v3.5",
        inputs=inputs,
        outputs=[doc("beta doc", score=0.93), doc("gamma doc", score=0.52)],
        exclusions=[(0, inputs[0], "below_rank_cutoff", "top_k=2"), (3, inputs[3], "below_rank_cutoff", "top_k=2")],
    )


def test_v1_rerank_uses_the_documents_own_ids(instrumentor, tracer_provider, span_exporter) -> None:
    api = FakeRerankAPI()
    co = client(cohere.Client, api.sync)
    documents = [{"id": "doc-a", "text": "alpha doc"}, "beta doc", {"text": "gamma doc", "title": "g"}]

    def call() -> Any:
        return co.rerank(model="rerank-english-v3.0", query=QUERY, documents=documents, return_documents=True)

    baseline = uninstrumented(instrumentor, tracer_provider, lambda: outcome(call))
    result = call()
    assert outcome(lambda: result) == baseline
    assert [r.document.text for r in result.results] == ["beta doc", "gamma doc", "alpha doc"]
    assert api.requests[-1][0] == "/v1/rerank"

    (span,) = span_exporter.get_finished_spans()
    a, b, g = doc("alpha doc", "doc-a"), doc("beta doc"), doc("gamma doc")
    check_rerank_span(
        span,
        component="cohere.client.Client",
        query=QUERY,
        model="rerank-english-v3.0",
        inputs=[a, b, g],
        outputs=[doc("beta doc", score=0.93), doc("gamma doc", score=0.52), doc("alpha doc", "doc-a", score=0.11)],
    )


def test_client_v2_namespace_on_a_v1_client_is_one_span(instrumentor, span_exporter) -> None:
    co = client(cohere.Client, FakeRerankAPI().sync)
    co.v2.rerank(model="rerank-v3.5", query=QUERY, documents=DOCS[:2])
    (span,) = span_exporter.get_finished_spans()
    assert span.attributes[sc.STAGE_COMPONENT] == "cohere.v2.client.V2Client"
    assert span.attributes[sc.CANDIDATES_OUT] == 2


@pytest.mark.parametrize(
    "cls, component, path",
    [
        (cohere.AsyncClientV2, "cohere.client_v2.AsyncClientV2", "/v2/rerank"),
        (cohere.AsyncClient, "cohere.client.AsyncClient", "/v1/rerank"),
    ],
)
async def test_async_rerank_is_a_real_async_span_under_the_callers_parent(instrumentor, span_exporter, cls, component, path) -> None:
    api = FakeRerankAPI(delay=0.05)
    co = client(cls, api.async_)
    tracer = trace.get_tracer("test")

    async def one(name: str, docs: list[str]) -> Any:
        with tracer.start_as_current_span(name):
            return await co.rerank(model="rerank-v3.5", query=QUERY, documents=docs, top_n=1)

    first, second = await asyncio.gather(one("request-1", DOCS[:2]), one("request-2", DOCS[2:]))
    assert [r.index for r in first.results] == [1] and [r.index for r in second.results] == [0]
    assert {p for p, _ in api.requests} == {path}

    spans = span_exporter.get_finished_spans()
    parents = {s.name: s for s in spans if s.name.startswith("request-")}
    reranks = rerank_spans(span_exporter)
    assert len(reranks) == 2
    for s in reranks:
        assert s.end_time - s.start_time >= 50_000_000, "the span must cover the awaited request"
    by_parent = {s.parent.span_id: s for s in reranks}
    r1 = by_parent[parents["request-1"].context.span_id]
    r2 = by_parent[parents["request-2"].context.span_id]
    assert r1.context.trace_id == parents["request-1"].context.trace_id
    i1 = [doc(t) for t in DOCS[:2]]
    check_rerank_span(
        r1,
        component=component,
        query=QUERY,
        top_k=1,
        model="rerank-v3.5",
        inputs=i1,
        outputs=[doc("beta doc", score=0.93)],
        exclusions=[(0, i1[0], "below_rank_cutoff", "top_k=1")],
    )
    i2 = [doc(t) for t in DOCS[2:]]
    check_rerank_span(
        r2,
        component=component,
        query=QUERY,
        top_k=1,
        model="rerank-v3.5",
        inputs=i2,
        outputs=[doc("gamma doc", score=0.52)],
        exclusions=[(1, i2[1], "below_rank_cutoff", "top_k=1")],
    )


def test_empty_document_list_is_an_empty_stage(instrumentor, tracer_provider, span_exporter) -> None:
    co = client(cohere.ClientV2, FakeRerankAPI().sync)

    def call() -> Any:
        return co.rerank(model="rerank-v3.5", query=QUERY, documents=[])

    baseline = uninstrumented(instrumentor, tracer_provider, lambda: outcome(call))
    assert outcome(call) == baseline
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(span, component="cohere.client_v2.ClientV2", query=QUERY, model="rerank-v3.5", inputs=[], outputs=[], status="empty")


def test_nan_scores_are_recorded_raw_with_a_finding(instrumentor, span_exporter) -> None:
    def handler(request: Any) -> Any:
        return httpx.Response(
            200,
            headers={"content-type": "application/json"},
            content=b'{"results":[{"index":1,"relevance_score":NaN},{"index":0,"relevance_score":0.2}]}',
        )

    result = client(cohere.ClientV2, handler).rerank(model="m", query=QUERY, documents=DOCS[:2])
    assert str(result.results[0].relevance_score) == "nan"
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(
        span,
        component="cohere.client_v2.ClientV2",
        query=QUERY,
        model="m",
        inputs=[doc(DOCS[0]), doc(DOCS[1])],
        outputs=[doc(DOCS[1], score=float("nan")), doc(DOCS[0], score=0.2)],
        findings=["1 non-finite rerank score(s), recorded as ragtrail.candidate.score_raw"],
    )


def test_result_index_outside_the_request_is_a_finding(instrumentor, span_exporter) -> None:
    def handler(request: Any) -> Any:
        return httpx.Response(200, json={"results": [{"index": 5, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.2}]})

    client(cohere.ClientV2, handler).rerank(model="m", query=QUERY, documents=DOCS[:1])
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(
        span,
        component="cohere.client_v2.ClientV2",
        query=QUERY,
        model="m",
        inputs=[doc(DOCS[0])],
        outputs=[doc(DOCS[0], score=0.2)],
        findings=["1 result(s) pointed at no input document"],
    )


def test_api_error_fails_the_stage_and_propagates_unchanged(instrumentor, tracer_provider, span_exporter) -> None:
    def handler(request: Any) -> Any:
        return httpx.Response(500, json={"message": "internal"})

    co = client(cohere.ClientV2, handler)

    def call() -> Any:
        return co.rerank(model="m", query=QUERY, documents=DOCS[:2], top_n=1)

    baseline = uninstrumented(instrumentor, tracer_provider, lambda: outcome(call))
    assert baseline[0] == "raised" and baseline[1][0] is cohere.errors.InternalServerError
    assert outcome(call) == baseline
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(
        span,
        component="cohere.client_v2.ClientV2",
        query=QUERY,
        model="m",
        top_k=1,
        inputs=[doc(DOCS[0]), doc(DOCS[1])],
        outputs=[],
        status="failed",
        failure_class="exception:InternalServerError",
        exception_type="cohere.errors.internal_server_error.InternalServerError",
    )


async def test_async_timeout_is_failure_class_timeout_and_the_same_exception(instrumentor, span_exporter) -> None:
    error = httpx.ReadTimeout("upstream too slow")

    async def handler(request: Any) -> Any:
        raise error

    with pytest.raises(httpx.ReadTimeout) as caught:
        await client(cohere.AsyncClientV2, handler).rerank(model="m", query=QUERY, documents=DOCS[:1])
    assert caught.value is error
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(
        span,
        component="cohere.client_v2.AsyncClientV2",
        query=QUERY,
        model="m",
        inputs=[doc(DOCS[0])],
        outputs=[],
        status="failed",
        failure_class="timeout",
        exception_type="httpx.ReadTimeout",
    )


def test_failed_call_status_and_exception_identity(instrumentor, span_exporter) -> None:
    error = httpx.ConnectError("no route")

    def handler(request: Any) -> Any:
        raise error

    with pytest.raises(httpx.ConnectError) as caught:
        client(cohere.ClientV2, handler).rerank(model="m", query=QUERY, documents=DOCS[:2])
    assert caught.value is error
    (span,) = span_exporter.get_finished_spans()
    assert span.attributes[sc.STAGE_STATUS] == "failed"
    assert span.attributes[sc.STAGE_FAILURE_CLASS] == "exception:ConnectError"
    assert span.attributes[sc.CANDIDATES_IN] == 2 and span.attributes[sc.CANDIDATES_OUT] == 0
    assert span.events[0].name == "exception"


def test_no_second_span_inside_an_open_rerank_stage_or_when_suppressed(instrumentor, span_exporter) -> None:
    co = client(cohere.ClientV2, FakeRerankAPI().sync)
    with ragtrail.stage("rerank", "app.rerank") as s:
        s.inputs(DOCS)
        result = co.rerank(model="m", query=QUERY, documents=DOCS, top_n=2)
        s.outputs([DOCS[r.index] for r in result.results])
    assert [sp.name for sp in span_exporter.get_finished_spans()] == ["rerank rerank"]
    span_exporter.clear()
    with suppress_instrumentation():
        co.rerank(model="m", query=QUERY, documents=DOCS)
    assert span_exporter.get_finished_spans() == ()


def test_rerank_inside_a_retrieve_stage_is_its_own_child_stage(instrumentor, span_exporter) -> None:
    co = client(cohere.ClientV2, FakeRerankAPI().sync)
    with ragtrail.stage("retrieve", "app.search"):
        co.rerank(model="m", query=QUERY, documents=DOCS, top_n=2)
    rerank, retrieve = span_exporter.get_finished_spans()
    assert rerank.name == "rerank ClientV2" and rerank.parent.span_id == retrieve.context.span_id


def test_uninstrument_restores_the_library(instrumentor, span_exporter) -> None:
    from cohere.base_client import AsyncBaseCohere, BaseCohere
    from cohere.v2.client import AsyncV2Client, V2Client

    instrumentor.uninstrument()
    try:
        for owner in (BaseCohere, AsyncBaseCohere, V2Client, AsyncV2Client):
            assert not hasattr(owner.__dict__["rerank"], "__wrapped__")
        client(cohere.ClientV2, FakeRerankAPI().sync).rerank(model="m", query=QUERY, documents=DOCS)
        assert span_exporter.get_finished_spans() == ()
    finally:
        instrumentor.instrument()


def test_under_opentelemetry_instrument(tmp_path) -> None:
    script = """
        import sys
        assert "cohere" not in sys.modules  # patched when the app imports it
        import httpx, cohere
        def handler(request):
            return httpx.Response(200, json={"results": [{"index": 2, "relevance_score": 0.8},
                                                         {"index": 0, "relevance_score": 0.4}]})
        co = cohere.ClientV2(api_key="k", httpx_client=httpx.Client(transport=httpx.MockTransport(handler)))
        result = co.rerank(model="rerank-v3.5", query="capital of France",
                           documents=["Paris is the capital", "Berlin", {"id": "d3", "text": "France"}], top_n=2)
        assert [r.index for r in result.results] == [2, 0]
        print("APP-OK")
    """
    spans = run_under_opentelemetry_instrument(script, tmp_path, "ragtrail_cohere")
    (span,) = spans
    assert span.name == "rerank ClientV2"
    a = span.attributes
    assert (a[sc.STAGE_KIND], a[sc.STAGE_STATUS], a[sc.STAGE_TOP_K]) == ("rerank", "ok", 2)
    assert (a[sc.CANDIDATES_IN], a[sc.CANDIDATES_OUT], a[sc.CANDIDATES_EXCLUDED]) == (3, 2, 1)
    assert a[sc.QUERY_TEXT] == "capital of France" and a[sc.STAGE_MODEL] == "rerank-v3.5"
    got = [(name, e[sc.CANDIDATE_ID], e.get(sc.CANDIDATE_SCORE), e.get(sc.EXCLUSION_REASON)) for name, e in spanutil.records(span)]
    from ragtrail.contract.receipts import content_id

    assert got == [
        ("ragtrail.candidate", "d3", 0.8, None),
        ("ragtrail.candidate", content_id("Paris is the capital"), 0.4, None),
        ("ragtrail.exclusion", content_id("Berlin"), None, "below_rank_cutoff"),
    ]
    assert a[sc.EVENTS_COUNT] == 3


def test_a_document_generator_is_not_consumed_and_is_a_finding(instrumentor, tracer_provider, span_exporter) -> None:
    api = FakeRerankAPI()
    co = client(cohere.ClientV2, api.sync)

    def call() -> Any:
        return co.rerank(model="m", query=QUERY, documents=(d for d in DOCS), top_n=1)

    baseline = uninstrumented(instrumentor, tracer_provider, lambda: outcome(call))
    assert outcome(call) == baseline
    assert api.requests[-1][1]["documents"] == api.requests[-2][1]["documents"] == DOCS
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(
        span,
        component="cohere.client_v2.ClientV2",
        query=QUERY,
        model="m",
        top_k=1,
        inputs=[],
        outputs=[],
        findings=[
            "documents are a generator, not a list: not snapshotted",
            "1 result(s) pointed at no input document",
            "inputs not recorded: candidates.in is out + excluded",
        ],
        status="empty",
    )
