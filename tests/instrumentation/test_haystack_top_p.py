"""Haystack's ``TopPSampler`` (it needs torch): a ``filter`` stage whose every exclusion is the
component's own rule replayed on the snapshotted scores.

The scores are ln 1 .. ln 4, so the softmax probabilities are 0.1 .. 0.4 and, highest first, the
cumulative probabilities 0.4, 0.7, 0.9, 1.0: every expected figure below is known by hand.
"""

from __future__ import annotations

import itertools
import math

import pytest

pytestmark = pytest.mark.torch

pytest.importorskip("torch")

from haystack import Document, Pipeline  # noqa: E402
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever  # noqa: E402
from haystack.components.samplers import TopPSampler  # noqa: E402
from haystack.document_stores.in_memory import InMemoryDocumentStore  # noqa: E402

from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.haystack import HaystackInstrumentor  # noqa: E402
from spanutil import attrs, events, pop_all  # noqa: E402

from .test_haystack import candidate, check_span, excluded, run_plain_then_instrumented  # noqa: E402

COMPONENT = "haystack.components.samplers.top_p.TopPSampler"
TEXTS = {"p1": "one tenth", "p2": "two tenths", "p3": "three tenths", "p4": "four tenths"}


def docs(**overrides: float | None) -> list[Document]:
    """p1..p4 scored ln 1..ln 4 (probabilities 0.1..0.4), in an order that is not the score order."""
    scores = {"p2": math.log(2), "p4": math.log(4), "p1": math.log(1), "p3": math.log(3)} | overrides
    return [Document(id=i, content=TEXTS.get(i, i), score=s) for i, s in scores.items()]


def sample(tracer_provider, span_exporter, sampler, documents, **kwargs):
    plain, traced, spans = run_plain_then_instrumented(tracer_provider, span_exporter, lambda: sampler.run(documents=documents, **kwargs))
    assert plain == traced
    assert [id(d) for d in plain["documents"]] == [id(d) for d in traced["documents"]]
    (span,) = spans
    assert span.name == "filter TopPSampler"
    return traced["documents"], span


def reasons(span) -> list[tuple[str, str, str | None]]:
    return [(e[sc.CANDIDATE_ID], e[sc.EXCLUSION_REASON], e.get(sc.EXCLUSION_DETAIL)) for e in events(span, sc.EVENT_EXCLUSION)]


def check_top_p_cut(ids: list[str], scores: list[float], top_p: float, got: list[tuple[str, str, str | None]]) -> list[float]:
    """``ids`` and ``scores``: the sampler's inputs, highest score first. The drops ``got`` must be
    those past ``top_p`` by a softmax worked out here in float64 (far from the edge, so float32 cannot
    disagree), each detail naming its cumulative probability. Returns the cumulative probabilities
    of the kept ones (a cut by ``top_p`` itself: at least two kept, at least one dropped)."""
    weights = [math.exp(s - scores[0]) for s in scores]
    cumulative = list(itertools.accumulate(w / sum(weights) for w in weights))
    kept = sum(1 for c in cumulative if c <= top_p)
    assert 1 < kept < len(scores) and all(abs(c - top_p) > 1e-3 for c in cumulative), cumulative
    assert [(i, r) for i, r, _ in got] == [(i, "budget_exceeded") for i in ids[kept:]]
    for (_, _, detail), c in zip(got, cumulative[kept:], strict=True):
        figure, rest = detail.removeprefix("cumulative probability ").split(" > ")
        assert float(figure) == pytest.approx(c, rel=1e-5) and rest == f"top_p={top_p:g}"
    return cumulative[:kept]


def test_cut_exact_span(tracer_provider, span_exporter):
    inputs = docs()
    out, span = sample(tracer_provider, span_exporter, TopPSampler(top_p=0.75), inputs)
    assert [d.id for d in out] == ["p4", "p3"]  # 0.4, 0.7 <= 0.75 < 0.9
    by_id = {d.id: d for d in inputs}
    check_span(
        span,
        kind="filter",
        component=COMPONENT,
        inputs=[(d.id, d.score) for d in inputs],
        own={
            sc.STAGE_STATUS: "ok",
            sc.STAGE_BUDGET_LIMIT: 0.75,
            sc.STAGE_BUDGET_USED: pytest.approx(0.7, abs=1e-6),
            sc.STAGE_BUDGET_UNIT: "probability",
            sc.CANDIDATES_IN: 4,
            sc.CANDIDATES_OUT: 2,
            sc.CANDIDATES_EXCLUDED: 2,
        },
        cands=[candidate(d, i, "none", None) for i, d in enumerate(out)],
        excl=[
            excluded(by_id["p2"], 0, "none", "budget_exceeded", "cumulative probability 0.9 > top_p=0.75", None),
            excluded(by_id["p1"], 2, "none", "budget_exceeded", "cumulative probability 1 > top_p=0.75", None),
        ],
    )


def test_per_call_top_p_overrides_and_isclose_keeps_the_edge(tracer_provider, span_exporter):
    # 0.7 is past 0.7 - 5e-7 but within torch.isclose(atol=1e-6): the sampler keeps it
    top_p = 0.7 - 5e-7
    out, span = sample(tracer_provider, span_exporter, TopPSampler(top_p=0.2), docs(), top_p=top_p)
    assert [d.id for d in out] == ["p4", "p3"]
    a = attrs(span)
    pop_all(a, {sc.STAGE_BUDGET_LIMIT: top_p, sc.STAGE_BUDGET_USED: pytest.approx(0.7, abs=1e-6)})
    assert reasons(span) == [
        ("p2", "budget_exceeded", f"cumulative probability 0.9 > top_p={top_p:g}"),
        ("p1", "budget_exceeded", f"cumulative probability 1 > top_p={top_p:g}"),
    ]


def test_min_top_k_tops_up_the_cut(tracer_provider, span_exporter):
    out, span = sample(tracer_provider, span_exporter, TopPSampler(top_p=0.5, min_top_k=3), docs())
    assert [d.id for d in out] == ["p4", "p3", "p2"]  # top_p alone keeps only p4
    assert attrs(span)[sc.STAGE_BUDGET_USED] == pytest.approx(0.9, abs=1e-6)
    assert reasons(span) == [("p1", "budget_exceeded", "cumulative probability 1 > top_p=0.5; min_top_k=3 kept the 3 highest-scored")]


def test_none_within_top_p_keeps_the_highest_scored(tracer_provider, span_exporter):
    out, span = sample(tracer_provider, span_exporter, TopPSampler(top_p=0.1), docs())
    assert [d.id for d in out] == ["p4"]
    a = attrs(span)
    pop_all(a, {sc.STAGE_BUDGET_LIMIT: 0.1, sc.STAGE_BUDGET_USED: pytest.approx(0.4, abs=1e-6), sc.CANDIDATES_OUT: 1, sc.CANDIDATES_EXCLUDED: 3})
    note = "; none within top_p=0.1: the highest-scored one kept"
    assert reasons(span) == [
        ("p2", "budget_exceeded", f"cumulative probability 0.9 > top_p=0.1{note}"),
        ("p1", "budget_exceeded", f"cumulative probability 1 > top_p=0.1{note}"),
        ("p3", "budget_exceeded", f"cumulative probability 0.7 > top_p=0.1{note}"),
    ]


def test_a_scoreless_document_beside_scored_ones_is_dropped(tracer_provider, span_exporter):
    out, span = sample(tracer_provider, span_exporter, TopPSampler(top_p=1.0), docs(p0=None))
    assert [d.id for d in out] == ["p4", "p3", "p2", "p1"]
    assert reasons(span) == [("p0", "custom:no_score", "no score in Document.score while 4 of 5 documents have one")]


def test_a_meta_score_field_and_a_bool_is_no_score(tracer_provider, span_exporter):
    inputs = [Document(id=i, content=i, meta={"s": s}) for i, s in [("a", 2.0), ("b", True), ("c", 1.0), ("d", None)]]
    inputs.append(Document(id="e", content="e"))
    out, span = sample(tracer_provider, span_exporter, TopPSampler(score_field="s"), inputs)
    assert [d.id for d in out] == ["a", "c"]
    detail = "no score in meta['s'] while 2 of 5 documents have one"
    assert reasons(span) == [("b", "custom:no_score", detail), ("d", "custom:no_score", detail), ("e", "custom:no_score", detail)]


def test_no_document_scored_hands_all_on_untouched(tracer_provider, span_exporter):
    inputs = [Document(id=i, content=i) for i in "xyz"]
    out, span = sample(tracer_provider, span_exporter, TopPSampler(top_p=0.1), inputs)
    assert out == inputs
    a = attrs(span)
    pop_all(a, {sc.STAGE_BUDGET_LIMIT: 0.1, sc.CANDIDATES_IN: 3, sc.CANDIDATES_OUT: 3, sc.CANDIDATES_EXCLUDED: 0})
    assert sc.STAGE_BUDGET_USED not in a
    assert reasons(span) == []


def test_an_invalid_per_call_top_p_raises_the_same_error(tracer_provider, span_exporter):
    def call():
        try:
            TopPSampler().run(documents=docs(), top_p=1.5)
        except ValueError as exc:
            return str(exc)

    plain, traced, spans = run_plain_then_instrumented(tracer_provider, span_exporter, call)
    assert plain == traced == "top_p must be between 0 and 1. Got 1.5."
    (span,) = spans
    assert attrs(span)[sc.STAGE_STATUS] == "failed"


def test_after_bm25_in_a_pipeline_the_cut_keeps_hops_and_bm25_scores(tracer_provider, span_exporter):
    store = InMemoryDocumentStore()
    texts = ["solar panels make solar power", "solar heat warms water", "wind turbines", "solar and wind farms"]
    store.write_documents([Document(id=f"t{i}", content=t) for i, t in enumerate(texts)])
    pipe = Pipeline()
    pipe.add_component("retriever", InMemoryBM25Retriever(document_store=store, top_k=4))
    pipe.add_component("sampler", TopPSampler(top_p=0.97))
    pipe.connect("retriever.documents", "sampler.documents")
    plain, traced, spans = run_plain_then_instrumented(tracer_provider, span_exporter, lambda: pipe.run({"retriever": {"query": "solar power"}}))
    assert plain == traced
    (span,) = [s for s in spans if s.name == "filter TopPSampler"]
    (retrieved,) = [s for s in spans if s.name == "retrieve InMemoryBM25Retriever"]
    ranked = events(retrieved, sc.EVENT_CANDIDATE)
    within = check_top_p_cut([e[sc.CANDIDATE_ID] for e in ranked], [e[sc.CANDIDATE_SCORE] for e in ranked], 0.97, reasons(span))
    assert [d.id for d in traced["sampler"]["documents"]] == [e[sc.CANDIDATE_ID] for e in ranked[: len(within)]]
    out = events(span, sc.EVENT_CANDIDATE)
    assert [(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_SCORE], e[sc.CANDIDATE_SCORE_KIND], e[sc.CANDIDATE_HOP]) for e in out] == [
        (e[sc.CANDIDATE_ID], e[sc.CANDIDATE_SCORE], "bm25", 0) for e in ranked[: len(within)]
    ]
    assert attrs(span)[sc.STAGE_BUDGET_USED] == pytest.approx(within[-1], rel=1e-5)


def test_uninstrument_restores_run(tracer_provider):
    original = TopPSampler.__dict__["run"]
    instrumentor = HaystackInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    assert TopPSampler.__dict__["run"] is not original
    instrumentor.uninstrument()
    assert TopPSampler.__dict__["run"] is original


def test_a_failing_replay_is_counted_and_the_output_untouched(tracer_provider, span_exporter, monkeypatch):
    from ragtrail.instrumentation.haystack import _sampler

    def broken(*args, **kwargs):
        raise RuntimeError("replay broke")

    monkeypatch.setattr(_sampler, "replay", broken)
    out, span = sample(tracer_provider, span_exporter, TopPSampler(top_p=0.75), docs())
    assert [d.id for d in out] == ["p4", "p3"]
    a = attrs(span)
    pop_all(a, {sc.STAGE_INSTRUMENTATION_ERRORS: 1, sc.CANDIDATES_OUT: 2})
    assert sc.STAGE_BUDGET_LIMIT not in a  # no budget, so the recorder derives no budget_exceeded either
    assert reasons(span) == [("p2", "unexplained", None), ("p1", "unexplained", None)]


def test_an_output_the_replay_does_not_select_is_unexplained_with_a_finding(tracer_provider, span_exporter, monkeypatch):
    from ragtrail.instrumentation.haystack import _sampler

    monkeypatch.setattr(_sampler, "replay", lambda *args: _sampler.TopPCut(kept={0}))  # p2 alone: not what ran
    out, span = sample(tracer_provider, span_exporter, TopPSampler(top_p=0.75), docs())
    assert [d.id for d in out] == ["p4", "p3"]
    assert attrs(span)[sc.STAGE_FINDINGS] == ["TopPSampler returned other documents than its top-p rule selects: its exclusions are unexplained"]
    assert reasons(span) == [("p2", "unexplained", None), ("p1", "unexplained", None)]
