"""DSPy's ``dspy.retrievers.Embeddings`` (and ``EmbeddingsWithScores``) and ``dspy.Retrieve`` as
ragtrail ``retrieve`` stages, against the real DSPy offline (a local embedder function, no LM call).
Exact attributes; what the app gets is the same with and without ragtrail.

``Embeddings`` searches in a worker thread of its own (``Unbatchify``): the stage must be a child of
the caller's span, and the embedder's own work in that thread must nest under the stage (it started
unrelated traces before)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

dspy = pytest.importorskip("dspy")
np = pytest.importorskip("numpy")

from opentelemetry.instrumentation.utils import suppress_instrumentation  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

import mirrorutil  # noqa: E402
import spanutil  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.contract.receipts import content_id, receipt  # noqa: E402
from ragtrail.instrumentation.dspy import DSPyInstrumentor  # noqa: E402
from storeutil import Expected, check_span  # noqa: E402

CORPUS = ["a b c", "d e f", "a a g", "h i j"]
LETTERS = "abcdefghij"


def vector(text: str) -> list[float]:
    return [float(text.split().count(c)) for c in LETTERS]


class Embed:
    """A local embedder function (DSPy's ``Embedder(callable)`` form) that opens a span of the
    user's tracer and remembers the thread it ran in."""

    def __init__(self, tracer: Any) -> None:
        self.tracer = tracer
        self.threads: list[int] = []
        self.gate: threading.Event | None = None

    def __call__(self, texts: list[str]) -> list[list[float]]:
        self.threads.append(threading.get_ident())
        with self.tracer.start_as_current_span("user.embed"):
            if self.gate is not None:
                self.gate.wait(10)
            return [vector(t) for t in texts]


def cosine_ranking(query: str, k: int) -> tuple[list[int], list[float]]:
    """The expected ids and scores, computed here independently of DSPy."""
    corpus = np.array([vector(t) for t in CORPUS])
    corpus = corpus / np.linalg.norm(corpus, axis=1, keepdims=True)
    q = np.array(vector(query))
    scores = corpus @ (q / np.linalg.norm(q))
    order = [int(i) for i in np.argsort(-scores)[:k]]
    return order, [float(scores[i]) for i in order]


@pytest.fixture
def instrumentor(tracer_provider) -> Iterator[DSPyInstrumentor]:
    inst = DSPyInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield inst
    inst.uninstrument()


@pytest.fixture
def user_tracer(tracer_provider) -> Any:
    return tracer_provider.get_tracer("user-app")


def retrieve_spans(exporter: Any) -> list[Any]:
    return spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)


def expect(query: str, k: int, *, component: str = "dspy.Embeddings", scores: bool = True, **kw: Any) -> Expected:
    ids, values = cosine_ranking(query, k)
    return Expected(
        component=component,
        collection=None,
        ids=[str(i) for i in ids],
        kind=sc.SCORE_SIMILARITY if scores else sc.SCORE_NONE,
        scores=values if scores else None,
        contents=[CORPUS[i] for i in ids],
        top_k=k,
        text=query,
        extra={sc.COVERAGE_CORPUS_SIZE: len(CORPUS)},
        **kw,
    )


def test_search_is_a_child_of_the_callers_span_and_the_embedder_nests_under_it(instrumentor, span_exporter, user_tracer) -> None:
    embed = Embed(user_tracer)
    search = dspy.retrievers.Embeddings(corpus=CORPUS, embedder=dspy.Embedder(embed, caching=False), k=2)
    with suppress_instrumentation():
        bare = search("a a b")
    span_exporter.clear()
    with user_tracer.start_as_current_span("user.question") as user:
        found = search("a a b")
    assert (found.passages, found.indices) == (bare.passages, bare.indices) == (["a a g", "a b c"], [2, 0])
    [stage] = retrieve_spans(span_exporter)
    assert stage.name == "retrieve Embeddings"
    assert stage.parent.span_id == user.get_span_context().span_id
    # the query was embedded in DSPy's search thread, under the retrieve stage, in the same trace
    [embedded] = [s for s in span_exporter.get_finished_spans() if s.name == "user.embed"]
    assert embed.threads[-1] != threading.get_ident()
    assert embedded.parent is not None and embedded.parent.span_id == stage.context.span_id
    assert embedded.context.trace_id == user.get_span_context().trace_id
    check_span(stage, span_exporter.get_finished_spans(), expect("a a b", 2))


def test_embeddings_with_scores_records_the_returned_scores(instrumentor, span_exporter, user_tracer) -> None:
    search = dspy.retrievers.EmbeddingsWithScores(corpus=CORPUS, embedder=dspy.Embedder(Embed(user_tracer), caching=False), k=3)
    found = search("d e a")
    ids, scores = cosine_ranking("d e a", 3)
    assert found.indices == ids and found.scores == pytest.approx(scores)
    [stage] = retrieve_spans(span_exporter)
    check_span(stage, span_exporter.get_finished_spans(), expect("d e a", 3, component="dspy.EmbeddingsWithScores"))


def test_a_retriever_built_before_instrument_has_no_scores_but_its_ids(tracer_provider, span_exporter, user_tracer) -> None:
    # its search thread holds the unwrapped _batch_forward: no crossing, no scores (never recomputed)
    search = dspy.retrievers.Embeddings(corpus=CORPUS, embedder=dspy.Embedder(Embed(user_tracer), caching=False), k=2)
    inst = DSPyInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    try:
        search("a a b")
    finally:
        inst.uninstrument()
    [stage] = retrieve_spans(span_exporter)
    check_span(stage, span_exporter.get_finished_spans(), expect("a a b", 2, scores=False))
    [embedded] = [s for s in span_exporter.get_finished_spans() if s.name == "user.embed" and s.parent is None and s.start_time > stage.start_time]
    assert embedded.context.trace_id != stage.context.trace_id


def test_concurrent_searches_batched_together_each_say_so(instrumentor, span_exporter, user_tracer) -> None:
    embed = Embed(user_tracer)
    search = dspy.retrievers.Embeddings(corpus=CORPUS, embedder=dspy.Embedder(embed, caching=False), k=1)
    embed.gate = threading.Event()
    results: dict[str, Any] = {}

    def ask(query: str) -> None:
        results[query] = search(query)

    first = threading.Thread(target=ask, args=("h i",))
    first.start()
    while len(embed.threads) < 2:  # the search thread is embedding the first query (held at the gate)
        threading.Event().wait(0.01)
    others = [threading.Thread(target=ask, args=(q,)) for q in ("d e", "a a")]
    for t in others:
        t.start()
    while search.search_fn.input_queue.qsize() < 2:  # both queued: the next batch holds both
        threading.Event().wait(0.01)
    embed.gate.set()
    for t in [first, *others]:
        t.join(10)
    assert [results[q].indices for q in ("h i", "d e", "a a")] == [[3], [1], [2]]
    stages = {spanutil.own(s)[sc.QUERY_TEXT]: s for s in retrieve_spans(span_exporter)}
    finding = (
        "searched in one batch with 1 other query (DSPy's search thread batches concurrent calls): the embedder's work is not nested under this stage"
    )
    spans = span_exporter.get_finished_spans()
    check_span(stages["h i"], spans, expect("h i", 1))
    for query in ("d e", "a a"):
        check_span(stages[query], spans, expect(query, 1, findings=(finding,)))
    # two embedder calls: the first query's, under its stage; the batch's, nested under neither stage
    embeds = [s for s in spans if s.name == "user.embed" and s.start_time > stages["h i"].start_time]
    assert [s.parent.span_id if s.parent else None for s in embeds] == [stages["h i"].context.span_id, None]


def test_a_failing_embedder_passes_through_and_fails_the_stage(instrumentor, span_exporter, user_tracer) -> None:
    embed = Embed(user_tracer)
    search = dspy.retrievers.Embeddings(corpus=CORPUS, embedder=dspy.Embedder(embed, caching=False), k=2)
    boom = ValueError("embedding service down")

    def failing(texts: list[str]) -> Any:
        raise boom

    search.embedder = dspy.Embedder(failing, caching=False)
    with pytest.raises(ValueError) as raised:
        search("a a b")
    assert raised.value is boom
    [stage] = retrieve_spans(span_exporter)
    assert stage.status.status_code == StatusCode.ERROR
    assert spanutil.own(stage)[sc.STAGE_STATUS] == sc.STATUS_FAILED


def test_retrieve_with_a_configured_rm_is_a_stage_with_content_ids(instrumentor, span_exporter) -> None:
    from dspy.dsp.utils import dotdict

    calls: list[tuple[str, int]] = []

    def rm(query: str, k: int) -> list[Any]:
        calls.append((query, k))
        return [dotdict(long_text=t) for t in CORPUS[:k]]

    with dspy.context(rm=rm):
        found = dspy.Retrieve(k=2)("a b")
    assert found.passages == CORPUS[:2] and calls == [("a b", 2)]
    [stage] = retrieve_spans(span_exporter)
    finding = "dspy.Retrieve returns passage texts only: the 2 passages are identified by the sha256 of their text"
    want = Expected(
        component="dspy.Retrieve",
        collection=None,
        ids=[content_id(t) for t in CORPUS[:2]],
        kind=sc.SCORE_NONE,
        contents=CORPUS[:2],
        top_k=2,
        text="a b",
        findings=(finding,),
    )
    check_span(stage, span_exporter.get_finished_spans(), want)


def test_uninstrument_restores_the_library(tracer_provider, span_exporter, user_tracer) -> None:
    from dspy.clients.base_lm import BaseLM
    from dspy.primitives.module import Module
    from dspy.retrievers.embeddings import Embeddings

    def methods() -> tuple[Any, ...]:
        return (
            Embeddings.forward,
            Embeddings._batch_forward,
            dspy.Retrieve.forward,
            Module.__call__,
            Module.acall,
            dspy.Predict.forward,
            dspy.Predict.aforward,
            BaseLM.__call__,
            BaseLM.acall,
        )

    originals = methods()
    inst = DSPyInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    assert all(p is not o for p, o in zip(methods(), originals, strict=True))
    inst.uninstrument()
    assert methods() == originals
    dspy.retrievers.Embeddings(corpus=CORPUS, embedder=dspy.Embedder(Embed(user_tracer), caching=False), k=1)("a")
    assert retrieve_spans(span_exporter) == []


class MultiHop(dspy.Module):
    """A module holding its retriever, searching twice (the second query from the first passage)."""

    def __init__(self, search: Any) -> None:
        super().__init__()
        self.search = search

    def forward(self, question: str) -> Any:
        first = self.search(question)
        follow_up = first.passages[0].replace("a", "d")
        return self.search(follow_up)


def test_a_program_holding_a_retriever_is_the_pipeline_root_of_its_searches(instrumentor, span_exporter, user_tracer) -> None:
    search = dspy.retrievers.Embeddings(corpus=CORPUS, embedder=dspy.Embedder(Embed(user_tracer), caching=False), k=1)
    with user_tracer.start_as_current_span("user.request") as user:
        found = MultiHop(search)(question="a a b")
    assert found.indices == [1]  # "a a g" -> "d d g" -> "d e f"
    [pipeline] = spanutil.stage_spans(span_exporter, sc.KIND_PIPELINE)
    stages = retrieve_spans(span_exporter)
    assert pipeline.parent.span_id == user.get_span_context().span_id
    assert [s.parent.span_id for s in stages] == [pipeline.context.span_id] * 2
    a = spanutil.own(pipeline)
    assert (a[sc.STAGE_COMPONENT], a[sc.QUERY_TEXT], a[sc.QUERY_HOP]) == (f"{MultiHop.__module__}.MultiHop", "a a b", 0)
    queries = [(spanutil.own(s)[sc.QUERY_TEXT], spanutil.own(s)[sc.QUERY_HOP], spanutil.own(s)[sc.QUERY_TRANSFORM]) for s in stages]
    assert queries == [("a a b", 0, "none"), ("d d g", 1, "untracked")]


def test_a_module_without_a_retriever_records_nothing(instrumentor, span_exporter) -> None:
    class Echo(dspy.Module):
        def forward(self, question: str) -> Any:
            return dspy.Prediction(answer=question)

    assert Echo()(question="q").answer == "q"
    assert [s for s in span_exporter.get_finished_spans() if sc.STAGE_KIND in (s.attributes or {})] == []


class RAG(dspy.Module):
    """DSPy's RAG tutorial module, holding its retriever."""

    def __init__(self, search: Any, joined: bool = False) -> None:
        super().__init__()
        self.search = search
        self.joined = joined
        self.respond = dspy.ChainOfThought("context, question -> response")

    def forward(self, question: str) -> Any:
        context = self.search(question).passages
        return self.respond(context="\\n".join(context) if self.joined else context, question=question)


def answer_lm() -> Any:
    from dspy.utils import DummyLM

    return DummyLM([{"reasoning": "it says so", "response": "g follows a"}])


def test_the_predictor_given_the_searched_passages_is_a_generate_stage(instrumentor, span_exporter, user_tracer) -> None:
    search = dspy.retrievers.Embeddings(corpus=CORPUS, embedder=dspy.Embedder(Embed(user_tracer), caching=False), k=2)
    with dspy.context(lm=answer_lm()):
        found = RAG(search)(question="a a b")
    assert found.response == "g follows a"
    [pipeline] = spanutil.stage_spans(span_exporter, sc.KIND_PIPELINE)
    [retrieve] = retrieve_spans(span_exporter)
    [generate] = spanutil.stage_spans(span_exporter, sc.KIND_GENERATE)
    assert generate.parent.span_id == pipeline.context.span_id and retrieve.parent.span_id == pipeline.context.span_id
    a = spanutil.own(generate)
    mirrorutil.pop_mirrors(a, generate, span_exporter.get_finished_spans())
    a.pop(sc.EVENTS_COUNT), a.pop(sc.EVENTS_DIGEST)
    assert a == {
        sc.SCHEMA: 5,
        sc.STAGE_KIND: sc.KIND_GENERATE,
        sc.STAGE_COMPONENT: "dspy.utils.dummies.DummyLM",
        sc.STAGE_STATUS: sc.STATUS_OK,
        sc.STAGE_MODEL: "dummy",
        sc.CANDIDATES_IN: 2,
        sc.CANDIDATES_OUT: 2,
        sc.CANDIDATES_EXCLUDED: 0,
    }
    # the searched passages (by their corpus positions), both in the prompt the model received
    events = spanutil.stitched(generate, span_exporter.get_finished_spans())
    assert [name for name, _ in events] == [sc.EVENT_CANDIDATE] * 2
    for rank, (ident, (_, ev)) in enumerate(zip(["2", "0"], events, strict=True)):
        spanutil.pop_pointer(ev, {})
        rec = receipt(CORPUS[int(ident)])
        assert ev == {
            sc.CANDIDATE_ID: ident,
            sc.CANDIDATE_RANK: rank,
            sc.CANDIDATE_SCORE_KIND: sc.SCORE_NONE,
            sc.CANDIDATE_HOP: 0,
            sc.CANDIDATE_CONTENT_CHARS: rec.chars,
            sc.CANDIDATE_CONTENT_BYTES: rec.bytes,
            sc.CANDIDATE_CONTENT_SHA256: rec.sha256,
        }


def test_passages_handed_on_as_another_object_are_no_generation(instrumentor, span_exporter, user_tracer) -> None:
    # joined into one string: the model got text, not the search's list; what reached it stays unknown
    search = dspy.retrievers.Embeddings(corpus=CORPUS, embedder=dspy.Embedder(Embed(user_tracer), caching=False), k=2)
    with dspy.context(lm=answer_lm()):
        assert RAG(search, joined=True)(question="a a b").response == "g follows a"
    assert spanutil.stage_spans(span_exporter, sc.KIND_GENERATE) == []
    assert len(retrieve_spans(span_exporter)) == 1 and len(spanutil.stage_spans(span_exporter, sc.KIND_PIPELINE)) == 1


def test_batched_examples_are_each_a_trace_of_their_own(instrumentor, span_exporter, user_tracer) -> None:
    # one question per trace: DSPy's thread pool does not carry the caller's context, and ragtrail
    # does not carry it either (several questions in one trace would each claim hop 0)
    search = dspy.retrievers.Embeddings(corpus=CORPUS, embedder=dspy.Embedder(Embed(user_tracer), caching=False), k=1)
    with user_tracer.start_as_current_span("user.batch") as user:
        found = MultiHop(search).batch(
            [dspy.Example(question=q).with_inputs("question") for q in ("a a", "h i")], num_threads=2, disable_progress_bar=True
        )
    assert [p.indices for p in found] == [[1], [3]]
    pipelines = spanutil.stage_spans(span_exporter, sc.KIND_PIPELINE)
    assert sorted(spanutil.own(p)[sc.QUERY_TEXT] for p in pipelines) == ["a a", "h i"]
    assert [p.parent for p in pipelines] == [None, None]
    assert len({p.context.trace_id for p in pipelines} | {user.get_span_context().trace_id}) == 3


# --- async programs (DSPy's async guide: ``await program.acall(...)``, ``aforward`` awaiting ``acall``) ----
class BothRAG(RAG):
    """The RAG module with the async guide's ``aforward`` beside its ``forward``: the same steps, awaited."""

    async def aforward(self, question: str) -> Any:
        context = self.search(question).passages
        return await self.respond.acall(context=context, question=question)


def recorded(exporter: Any) -> list[tuple[str, Any, dict[str, Any], list[tuple[str, dict[str, Any]]]]]:
    """Each stage span of the trace: its kind, its parent's kind, its own attributes (the stage
    receipt checked and left out) and its records, in finishing order."""
    spans = [s for s in exporter.get_finished_spans() if sc.STAGE_KIND in (s.attributes or {})]
    kinds = {s.context.span_id: s.attributes[sc.STAGE_KIND] for s in spans}
    out = []
    for s in spans:
        records = spanutil.stitched(s, exporter.get_finished_spans())
        for _name, ev in records:
            spanutil.pop_pointer(ev, {})
        out.append((s.attributes[sc.STAGE_KIND], kinds.get(s.parent.span_id) if s.parent else None, spanutil.own(s), records))
    return out


def test_an_async_program_records_what_the_sync_one_does(instrumentor, span_exporter, user_tracer) -> None:
    search = dspy.retrievers.Embeddings(corpus=CORPUS, embedder=dspy.Embedder(Embed(user_tracer), caching=False), k=2)
    with dspy.context(lm=answer_lm()):
        sync_answer = BothRAG(search)(question="a a b")
    sync = recorded(span_exporter)
    span_exporter.clear()
    with dspy.context(lm=answer_lm()), user_tracer.start_as_current_span("user.request") as user:
        async_answer = asyncio.run(BothRAG(search).acall(question="a a b"))
    assert async_answer.response == sync_answer.response == "g follows a"
    # the same stages, attributes and records: pipeline root, retrieve (ids, scores, k), generate
    assert [(kind, parent) for kind, parent, _a, _r in sync] == [
        (sc.KIND_RETRIEVE, sc.KIND_PIPELINE),
        (sc.KIND_GENERATE, sc.KIND_PIPELINE),
        (sc.KIND_PIPELINE, None),
    ]
    assert recorded(span_exporter) == sync
    [pipeline] = spanutil.stage_spans(span_exporter, sc.KIND_PIPELINE)
    [retrieve] = retrieve_spans(span_exporter)
    assert pipeline.parent.span_id == user.get_span_context().span_id
    check_span(retrieve, span_exporter.get_finished_spans(), expect("a a b", 2))
    # the embedder's work in DSPy's search thread nests under the stage, in the caller's trace
    [embedded] = [s for s in span_exporter.get_finished_spans() if s.name == "user.embed"]
    assert embedded.parent.span_id == retrieve.context.span_id


def test_concurrent_async_runs_are_each_their_own_trace(instrumentor, span_exporter, user_tracer) -> None:
    # asyncio.gather interleaves the two runs at their awaits: each keeps its own pipeline, search and generation
    search = dspy.retrievers.Embeddings(corpus=CORPUS, embedder=dspy.Embedder(Embed(user_tracer), caching=False), k=1)
    lm = dspy.utils.DummyLM([{"reasoning": "r", "response": "one"}, {"reasoning": "r", "response": "two"}])

    async def main() -> list[Any]:
        rag = BothRAG(search)
        return await asyncio.gather(rag.acall(question="a a"), rag.acall(question="h i"))

    with dspy.context(lm=lm):
        answers = asyncio.run(main())
    assert sorted(a.response for a in answers) == ["one", "two"]
    pipelines = spanutil.stage_spans(span_exporter, sc.KIND_PIPELINE)
    assert sorted(spanutil.own(p)[sc.QUERY_TEXT] for p in pipelines) == ["a a", "h i"]
    assert len({p.context.trace_id for p in pipelines}) == 2 and [p.parent for p in pipelines] == [None, None]
    for pipeline in pipelines:
        children = [s for s in span_exporter.get_finished_spans() if s.parent is not None and s.parent.span_id == pipeline.context.span_id]
        assert sorted(s.attributes[sc.STAGE_KIND] for s in children) == [sc.KIND_GENERATE, sc.KIND_RETRIEVE]
        [searched] = [s for s in children if s.attributes[sc.STAGE_KIND] == sc.KIND_RETRIEVE]
        [generated] = [s for s in children if s.attributes[sc.STAGE_KIND] == sc.KIND_GENERATE]
        question = spanutil.own(pipeline)[sc.QUERY_TEXT]
        check_span(searched, span_exporter.get_finished_spans(), expect(question, 1))
        # the generation is of this run's passage, not the other run's
        ids = [ev[sc.CANDIDATE_ID] for _n, ev in spanutil.stitched(generated, span_exporter.get_finished_spans())]
        assert ids == [str(cosine_ranking(question, 1)[0][0])]


class ThreadedRAG(BothRAG):
    """An async program that searches off the event loop (``asyncio.to_thread``, which copies the context)."""

    async def aforward(self, question: str) -> Any:
        context = (await asyncio.to_thread(self.search, question)).passages
        return await self.respond.acall(context=context, question=question)


def test_a_search_run_in_a_thread_from_async_code_is_the_programs_stage(instrumentor, span_exporter, user_tracer) -> None:
    search = dspy.retrievers.Embeddings(corpus=CORPUS, embedder=dspy.Embedder(Embed(user_tracer), caching=False), k=2)
    with dspy.context(lm=answer_lm()):
        assert asyncio.run(ThreadedRAG(search).acall(question="a a b")).response == "g follows a"
    [pipeline] = spanutil.stage_spans(span_exporter, sc.KIND_PIPELINE)
    [retrieve] = retrieve_spans(span_exporter)
    [generate] = spanutil.stage_spans(span_exporter, sc.KIND_GENERATE)
    assert retrieve.parent.span_id == generate.parent.span_id == pipeline.context.span_id
    check_span(retrieve, span_exporter.get_finished_spans(), expect("a a b", 2))
    assert spanutil.own(generate)[sc.CANDIDATES_OUT] == 2


def test_asyncify_runs_the_sync_program_under_the_callers_span(instrumentor, span_exporter, user_tracer) -> None:
    # dspy.asyncify runs the program's __call__ in a worker thread (anyio copies the context)
    search = dspy.retrievers.Embeddings(corpus=CORPUS, embedder=dspy.Embedder(Embed(user_tracer), caching=False), k=2)

    async def main() -> Any:
        with user_tracer.start_as_current_span("user.request") as user:
            return user, await dspy.asyncify(RAG(search))(question="a a b")

    with dspy.context(lm=answer_lm()):
        user, answer = asyncio.run(main())
    assert answer.response == "g follows a"
    [pipeline] = spanutil.stage_spans(span_exporter, sc.KIND_PIPELINE)
    assert pipeline.parent.span_id == user.get_span_context().span_id
    assert [s.parent.span_id for s in [*retrieve_spans(span_exporter), *spanutil.stage_spans(span_exporter, sc.KIND_GENERATE)]] == [
        pipeline.context.span_id
    ] * 2


def test_a_failing_search_in_an_async_program_passes_through_and_fails_its_stages(instrumentor, span_exporter, user_tracer) -> None:
    boom = ValueError("embedding service down")

    def failing(texts: list[str]) -> Any:
        raise boom

    search = dspy.retrievers.Embeddings(corpus=CORPUS, embedder=dspy.Embedder(Embed(user_tracer), caching=False), k=2)
    search.embedder = dspy.Embedder(failing, caching=False)
    with dspy.context(lm=answer_lm()), pytest.raises(ValueError) as raised:
        asyncio.run(BothRAG(search).acall(question="a a b"))
    assert raised.value is boom
    [pipeline] = spanutil.stage_spans(span_exporter, sc.KIND_PIPELINE)
    [retrieve] = retrieve_spans(span_exporter)
    assert retrieve.parent.span_id == pipeline.context.span_id and spanutil.stage_spans(span_exporter, sc.KIND_GENERATE) == []
    for span in (retrieve, pipeline):
        assert spanutil.own(span)[sc.STAGE_STATUS] == sc.STATUS_FAILED and span.status.status_code == StatusCode.ERROR
