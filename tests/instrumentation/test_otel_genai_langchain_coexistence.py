"""ragtrail's LangChain instrumentation beside OpenTelemetry's own (``opentelemetry-instrumentation-genai-langchain``,
from opentelemetry-python-genai, on ``opentelemetry-util-genai``): both on, a LangChain retriever pipeline
(the RAG tutorial's LCEL chain) is one trace in which each tool writes its spans once, each under the
right parent, and ragtrail's spans say exactly what they say with ragtrail alone. Real libraries, offline.

How the two nest (docs/semconv.md §6 "Beside OpenTelemetry's LangChain instrumentation"): ragtrail wraps
``RunnableSequence.invoke`` and the retrievers' ``invoke`` (wrapt), OpenTelemetry's instrumentation
listens to LangChain's callbacks, which LangChain fires inside ``invoke``. So ragtrail's pipeline span
is the root, OpenTelemetry's ``invoke_workflow`` span its child, and under that OpenTelemetry's
``retrieval`` span and ragtrail's ``retrieve`` stage are siblings: both describe the same retrieval."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("langchain_core")
otel_langchain = pytest.importorskip("opentelemetry.instrumentation.genai.langchain")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.language_models import FakeListChatModel  # noqa: E402
from langchain_core.output_parsers import StrOutputParser  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402
from langchain_core.runnables import RunnablePassthrough  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore  # noqa: E402

import ragtrail  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.langchain import LangChainInstrumentor  # noqa: E402

from .test_langchain_support import HashEmbeddings  # noqa: E402

TEXTS = ["the cat sat on the mat", "cats purr when they are happy", "stock markets fell sharply today"]
OTEL_SCOPE = "opentelemetry.instrumentation.genai.langchain"
# (span name, instrumentation scope, parent span name) in the order the spans end
BOTH = [
    ("retrieval", OTEL_SCOPE, "invoke_workflow RunnableSequence"),
    ("retrieve VectorStoreRetriever", "ragtrail", "invoke_workflow RunnableSequence"),
    ("generate FakeListChatModel", "ragtrail", "invoke_workflow RunnableSequence"),
    ("invoke_workflow RunnableSequence", OTEL_SCOPE, "pipeline RunnableSequence"),
    ("pipeline RunnableSequence", "ragtrail", None),
]
ALONE = [
    ("retrieve VectorStoreRetriever", "ragtrail", "pipeline RunnableSequence"),
    ("generate FakeListChatModel", "ragtrail", "pipeline RunnableSequence"),
    ("pipeline RunnableSequence", "ragtrail", None),
]
# what OpenTelemetry's instrumentation (1.3b0) writes on its spans by default (no content capture)
OTEL_ATTRIBUTES = {
    "retrieval": {"gen_ai.operation.name": "retrieval", "gen_ai.provider.name": "InMemoryVectorStore"},
    "invoke_workflow RunnableSequence": {"gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": "RunnableSequence"},
}


@pytest.fixture(autouse=True)
def _otel_defaults(monkeypatch):
    """OpenTelemetry's GenAI switches at their defaults (no content on its spans)."""
    for name in ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "OTEL_SEMCONV_STABILITY_OPT_IN"):
        monkeypatch.delenv(name, raising=False)


def chain():
    store = InMemoryVectorStore(HashEmbeddings())
    store.add_documents([Document(page_content=t, id=f"d{i}") for i, t in enumerate(TEXTS)])
    prompt = ChatPromptTemplate.from_template("Context: {context}\nQuestion: {question}")
    retriever = store.as_retriever(search_kwargs={"k": 2})
    context = retriever | (lambda docs: "\n\n".join(d.page_content for d in docs))
    return {"context": context, "question": RunnablePassthrough()} | prompt | FakeListChatModel(responses=["Cats sit on mats."]) | StrOutputParser()


def run(tracer_provider, span_exporter, order: tuple[str, ...], use_async: bool = False) -> tuple[str, list[Any]]:
    """The chain under the instrumentations named in ``order`` (instrumented in that order, as
    ``opentelemetry-instrument`` does after its own dependency check: ``skip_dep_check``)."""
    made = {"ragtrail": LangChainInstrumentor, "otel": otel_langchain.LangChainInstrumentor}
    instrumentors = [made[name]() for name in order]
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=tracer_provider, skip_dep_check=True)
    try:
        app = chain()
        answer = on_a_fresh_loop(app.ainvoke("cat on the mat")) if use_async else app.invoke("cat on the mat")
    finally:
        for instrumentor in reversed(instrumentors):
            instrumentor.uninstrument()
    spans = list(span_exporter.get_finished_spans())
    span_exporter.clear()
    return answer, spans


def on_a_fresh_loop(coroutine: Any) -> Any:
    """Run ``coroutine`` on a loop of its own, closed after, leaving the thread's current event loop
    as it was (``asyncio.run`` unsets it: a loop another library left there is then collected unclosed)."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


def shape(spans: list[Any]) -> list[tuple[str, str, str | None]]:
    by_id = {s.context.span_id: s.name for s in spans}
    assert len({s.context.trace_id for s in spans}) == 1  # one trace, nothing broken off
    return [(s.name, s.instrumentation_scope.name, by_id[s.parent.span_id] if s.parent else None) for s in spans]


def ragtrail_attributes(span: Any, spans: list[Any]) -> dict[str, Any]:
    """A ragtrail span's attributes with schema 4's ``content.from`` (a span id: ids differ from run
    to run) replaced by the name of the span it points to, and the stage receipt, which covers that
    id, left out; its per-field digests are kept but the one of ``content.from``."""
    names = {format(s.context.span_id, "016x"): s.name for s in spans}
    attributes = dict(span.attributes)
    if sc.COLUMN_CONTENT_FROM in attributes:
        attributes[sc.COLUMN_CONTENT_FROM] = names[attributes[sc.COLUMN_CONTENT_FROM]]
    attributes.pop(sc.STAGE_RECEIPT)
    fields = attributes.pop(sc.STAGE_RECEIPT_FIELDS).split(";")
    attributes[sc.STAGE_RECEIPT_FIELDS] = [f for f in fields if not f.startswith("candidates.content.from=")]
    return attributes


@pytest.mark.parametrize("use_async", [False, True], ids=["invoke", "ainvoke"])
@pytest.mark.parametrize("order", [("otel", "ragtrail"), ("ragtrail", "otel")])
def test_both_instrumentations_write_each_span_once_under_the_right_parent(tracer_provider, span_exporter, order, use_async):
    alone_answer, alone = run(tracer_provider, span_exporter, ("ragtrail",), use_async)
    answer, both = run(tracer_provider, span_exporter, order, use_async)
    assert answer == alone_answer == "Cats sit on mats."  # the app's result untouched
    assert shape(alone) == ALONE
    assert shape(both) == BOTH
    # OpenTelemetry's spans, exactly
    for span in both:
        if span.instrumentation_scope.name == OTEL_SCOPE:
            assert dict(span.attributes) == OTEL_ATTRIBUTES[span.name], span.name
    # ragtrail's spans say what they say without OpenTelemetry's instrumentation, attribute for attribute
    mine = [s for s in both if s.instrumentation_scope.name == "ragtrail"]
    assert [s.name for s in mine] == [s.name for s in alone]
    for with_otel, without in zip(mine, alone, strict=True):
        assert ragtrail_attributes(with_otel, both) == ragtrail_attributes(without, alone), with_otel.name
        assert [(e.name, dict(e.attributes)) for e in with_otel.events] == [(e.name, dict(e.attributes)) for e in without.events]


def test_the_genai_mirror_doubles_the_retrieval_operation_unless_switched_off(tracer_provider, span_exporter):
    """Both tools name the one retrieval ``gen_ai.operation.name=retrieval``: a GenAI reader counts two.
    ``RAGTRAIL_MIRROR_GENAI=false`` leaves the GenAI names to OpenTelemetry's span; ragtrail's stage
    keeps its own attributes and the OpenInference mirror."""

    def retrievals(spans: list[Any]) -> list[str]:
        return [s.name for s in spans if s.attributes.get("gen_ai.operation.name") == "retrieval"]

    _, both = run(tracer_provider, span_exporter, ("otel", "ragtrail"))
    assert retrievals(both) == ["retrieval", "retrieve VectorStoreRetriever"]
    ragtrail.set_capture(mirror_genai=False)
    _, both = run(tracer_provider, span_exporter, ("otel", "ragtrail"))
    assert retrievals(both) == ["retrieval"]
    stage = next(s for s in both if s.name == "retrieve VectorStoreRetriever")
    assert [k for k in stage.attributes if k.startswith("gen_ai.")] == []
    assert stage.attributes[sc.OPENINFERENCE_SPAN_KIND] == "RETRIEVER" and stage.attributes[sc.STAGE_TOP_K] == 2


def test_the_rag_tutorial_under_opentelemetry_instrument_with_both(tmp_path):
    """The documentation app, unchanged, under ``opentelemetry-instrument`` with both entry points on
    (``ragtrail_langchain`` and OpenTelemetry's ``langchain``): the app's output untouched, the span
    tree above in the local store, ``verify`` without an alarm, and the manifest of the ragtrail-only
    run (tests/apps/test_langchain_haystack_apps.py::test_rag_tutorial)."""
    from tests.apps.runner import assert_host_untouched, run_app

    run = run_app("langchain_rag_tutorial.py", tmp_path, enabled=["ragtrail_langchain", "langchain"])
    assert_host_untouched(run)
    assert run.stdout == "Task decomposition splits a task into smaller steps.\n"
    by_id = {s.span_id: s for s in run.spans}
    assert len({s.trace_id for s in run.spans}) == 1
    tree = [(s.name, s.scope_name, by_id[s.parent_span_id].name if s.parent_span_id else None) for s in run.spans]
    assert sorted(tree, key=str) == sorted(BOTH, key=str)
    [trace] = run.traces()
    report = run.verify(trace["trace_id"])
    assert report["fidelity"]["alarms"] == [] and report["fidelity"]["missing_spans"] == 0, report
    manifest = run.show(trace["trace_id"])
    assert [(s["kind"], s["component"].rsplit(".", 1)[-1], s["in"], s["out"]) for s in manifest["stages"]] == [
        ("retrieve", "VectorStoreRetriever", 0, 2),
        ("generate", "FakeListChatModel", 2, 2),
    ]
    coverage = manifest["coverage"]
    assert (coverage["corpus_size"], coverage["retrieved"], coverage["in_context"]) == (3, 2, 2)
