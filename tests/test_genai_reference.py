"""The GenAI mirror against OpenTelemetry's own writer of the GenAI retrieval span,
``opentelemetry-util-genai`` (installed with ``opentelemetry-instrumentation-genai-langchain``, test
extra): for the same retrieval, ragtrail's retrieve stage writes exactly the ``gen_ai.*`` attributes
util-genai's ``TelemetryHandler.retrieval()`` writes (semantic-conventions-genai v0.1.0's
``gen_ai.retrieval.top_k``, not ``gen_ai.request.top_k``), under content capture and without."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import ragtrail

handler_module = pytest.importorskip("opentelemetry.util.genai.handler")
types_module = pytest.importorskip("opentelemetry.util.genai.types")


def provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(memory))
    return tracer_provider, memory


def genai_of(span: Any) -> dict[str, Any]:
    return {k: v for k, v in span.attributes.items() if k.startswith("gen_ai.")}


@pytest.mark.parametrize("nested", [False, True], ids=["one-stage", "store-stage-inside"])
@pytest.mark.parametrize("content", [True, False], ids=["content", "no-content"])
def test_a_retrieve_stage_writes_what_util_genai_writes(monkeypatch, content, nested):
    """``nested``: a store's retrieve stage runs inside ragtrail's stage; util-genai writes one
    retrieval span for the one retrieval, and so do ragtrail's GenAI names (docs/semconv.md §6)."""
    # util-genai: its content switch (both variables, as its instrumentations document them)
    if content:
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
        monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    else:
        monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
        monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)
    theirs_provider, theirs_memory = provider()
    retrieval = handler_module.TelemetryHandler(tracer_provider=theirs_provider).retrieval(data_source_id="my_app.search")
    retrieval.top_k = 2
    retrieval.query_text = "cats in the park"
    retrieval.documents = [types_module.RetrievalDocument(id="d1", score=0.75), types_module.RetrievalDocument(id="d2", score=0.5)]
    retrieval.stop()
    [theirs] = theirs_memory.get_finished_spans()

    # ragtrail: the same retrieval, GenAI mirror only; the query text is written only in query mode `text`
    ragtrail.set_capture(query="text" if content else "hash", content="off", mirror_openinference=False)
    try:
        mine_provider, mine_memory = provider()
        tracer = mine_provider.get_tracer("t")
        with ragtrail.stage("retrieve", "my_app.search", top_k=2, tracer=tracer) as s:
            s.query("cats in the park")
            if nested:
                with ragtrail.stage("retrieve", "my_store.query", top_k=2, tracer=tracer) as inner:
                    inner.query("cats in the park")
                    inner.outputs([{"id": "d1", "score": 0.75}, {"id": "d2", "score": 0.5}], score_kind="similarity")
            s.outputs([{"id": "d1", "score": 0.75}, {"id": "d2", "score": 0.5}], score_kind="similarity")
    finally:
        ragtrail.set_capture(query="text", mirror_openinference=True)
    spans = mine_memory.get_finished_spans()
    [mine] = [span for span in spans if genai_of(span)]
    assert len(spans) == (2 if nested else 1) and mine.attributes["ragtrail.stage.component"] == "my_app.search"

    want = {
        "gen_ai.operation.name": "retrieval",
        "gen_ai.data_source.id": "my_app.search",
        "gen_ai.retrieval.top_k": 2,
    }
    if content:
        want["gen_ai.retrieval.query.text"] = "cats in the park"
        want["gen_ai.retrieval.documents"] = '[{"id":"d1","score":0.75},{"id":"d2","score":0.5}]'
    assert genai_of(theirs) == want
    # ragtrail always writes the ids and scores (they are not content); util-genai only under its content switch
    assert genai_of(mine) == {**want, "gen_ai.retrieval.documents": '[{"id":"d1","score":0.75},{"id":"d2","score":0.5}]'}
    assert theirs.kind == mine.kind == SpanKind.CLIENT
