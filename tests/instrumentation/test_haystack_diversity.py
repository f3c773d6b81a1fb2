"""Haystack's ``SentenceTransformersDiversityRanker`` (now in ``haystack_integrations``; issue 24,
principle 5: every component that cuts candidates is a stage). Before, a pipeline ending in it
claimed every retrieved document while the ranker dropped the BM25 top hit, and alone it left no
trace. The model is a bag-of-words stand-in (the ranker's own code runs: dedup, diversity order or
MMR pick, ``top_k``)."""

from __future__ import annotations

import pytest

pytest.importorskip("haystack_integrations.components.rankers.sentence_transformers")
pytestmark = pytest.mark.torch

import torch  # noqa: E402
from haystack import Document  # noqa: E402
from haystack_integrations.components.rankers.sentence_transformers import SentenceTransformersDiversityRanker  # noqa: E402

from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.haystack import HaystackInstrumentor  # noqa: E402
from spanutil import attrs, events  # noqa: E402

VOCAB = ["solar", "wind", "electricity", "coal", "fossil", "batteries", "night", "panels"]
DOCS = [
    ("a", "solar panels electricity", 3.0),
    ("b", "solar panels electricity solar", 2.5),
    ("c", "wind electricity", 2.0),
    ("d", "coal fossil", 1.0),
]


class BagOfWords:
    """Stands in for the SentenceTransformer: ``encode`` as the ranker calls it."""

    def encode(self, texts, convert_to_tensor=True):
        return torch.tensor([[float(t.split().count(w)) for w in VOCAB] for t in texts])


def documents():
    return [Document(id=i, content=c, score=s) for i, c, s in DOCS]


@pytest.fixture
def instrument(tracer_provider, span_exporter):
    inst = HaystackInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield span_exporter
    inst.uninstrument()


def ranker(**kwargs):
    r = SentenceTransformersDiversityRanker(**kwargs)
    r.model = BagOfWords()
    return r


def test_mmr_pick_is_a_rerank_stage_with_its_lambda(instrument):
    out = ranker(top_k=2, strategy="maximum_margin_relevance", lambda_threshold=0.3).run(query="solar electricity", documents=documents())
    kept = [d.id for d in out["documents"]]
    [span] = instrument.get_finished_spans()
    a = attrs(span)
    assert (span.name, a[sc.STAGE_KIND], a[sc.STAGE_TOP_K], a[sc.STAGE_MMR_LAMBDA]) == (
        "rerank SentenceTransformersDiversityRanker",
        "rerank",
        2,
        0.3,
    )
    assert (a[sc.CANDIDATES_IN], a[sc.CANDIDATES_OUT], a[sc.CANDIDATES_EXCLUDED]) == (4, 2, 2)
    assert [e[sc.CANDIDATE_ID] for e in events(span, sc.EVENT_CANDIDATE)] == kept
    assert kept == ["b", "d"]  # b is nearest the query; with lambda 0.3 the pick favours d, unlike b
    detail = "top_k=2: not picked by maximum_margin_relevance (lambda_threshold=0.3)"
    assert sorted((e[sc.CANDIDATE_ID], e[sc.EXCLUSION_REASON], e[sc.EXCLUSION_DETAIL]) for e in events(span, sc.EVENT_EXCLUSION)) == [
        ("a", "below_rank_cutoff", detail),
        ("c", "below_rank_cutoff", detail),
    ]


def test_greedy_diversity_order_cut_by_top_k(instrument):
    out = ranker(top_k=3).run(query="solar electricity", documents=[*documents(), documents()[0]])
    kept = [d.id for d in out["documents"]]
    [span] = instrument.get_finished_spans()
    a = attrs(span)
    assert sc.STAGE_MMR_LAMBDA not in a
    assert (a[sc.CANDIDATES_IN], a[sc.CANDIDATES_OUT], a[sc.CANDIDATES_EXCLUDED]) == (5, 3, 2)
    assert [e[sc.CANDIDATE_ID] for e in events(span, sc.EVENT_CANDIDATE)] == kept
    [dropped] = sorted(set("abcd") - set(kept))
    assert sorted((e[sc.CANDIDATE_ID], e[sc.EXCLUSION_REASON], e[sc.EXCLUSION_DETAIL]) for e in events(span, sc.EVENT_EXCLUSION)) == sorted(
        [(dropped, "below_rank_cutoff", "top_k=3 after greedy_diversity_order"), ("a", "deduplicated", "duplicate id of a")]
    )
