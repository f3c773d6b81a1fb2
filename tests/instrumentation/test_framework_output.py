"""The framework's own answer on a framework root (issue 27, Phoenix parity): a LangChain chain's output
string and a LlamaIndex query engine's ``Response.response`` become the OpenInference mirror's
``output.value`` on the ``pipeline`` span, as content capture allows, never a ``ragtrail.*`` attribute;
the run's answer (``ragtrail.answer()``, a generate stage) has the last word. Real libraries, offline."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.language_models import FakeListChatModel  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402
from langchain_core.runnables import RunnableLambda, RunnablePassthrough  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore  # noqa: E402

import ragtrail  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.contract.receipts import preview, receipt  # noqa: E402
from ragtrail.instrumentation.langchain import LangChainInstrumentor  # noqa: E402
from ragtrail.instrumentation.llama_index import LlamaIndexInstrumentor  # noqa: E402

from .test_langchain_support import HashEmbeddings, one  # noqa: E402

TEXTS = ["the cat sat on the mat " * 20, "cats purr when they are happy", "stock markets fell sharply today"]
MIRROR_PREFIXES = ("openinference.", "input.", "output.", "gen_ai.", "retrieval.", "reranker.")


def mirrors_of(span: Any) -> dict[str, Any]:
    return {k: v for k, v in span.attributes.items() if k.startswith(MIRROR_PREFIXES)}


def root_mirrors(query: str | None, output: str | None) -> dict[str, Any]:
    """What the OpenInference mirror writes on a pipeline root: CHAIN, its query, its output."""
    want: dict[str, Any] = {sc.OPENINFERENCE_SPAN_KIND: "CHAIN"}
    if query is not None:
        want.update({sc.OI_INPUT_VALUE: query, sc.OI_INPUT_MIME_TYPE: "text/plain"})
    if output is not None:
        want.update({sc.OI_OUTPUT_VALUE: output, sc.OI_OUTPUT_MIME_TYPE: "text/plain"})
    return want


def answers(span: Any) -> dict[str, Any]:
    return {k: v for k, v in span.attributes.items() if k.startswith("ragtrail.answer")}


@pytest.fixture
def langchain(tracer_provider):
    inst = LangChainInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield inst
    inst.uninstrument()


@pytest.fixture
def llama(tracer_provider):
    inst = LlamaIndexInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield inst
    inst.uninstrument()


def retriever():
    store = InMemoryVectorStore(HashEmbeddings())
    store.add_documents([Document(page_content=t, id=f"d{i}") for i, t in enumerate(TEXTS)])
    return store.as_retriever(search_kwargs={"k": 2})


def join(docs: list[Document]) -> str:
    return "\n\n".join(d.page_content for d in docs)


@pytest.mark.parametrize("content", ["off", "preview", "full"])
def test_a_chain_without_a_model_shows_its_output_string(langchain, span_exporter, content):
    ragtrail.set_capture(content=content)
    out = (retriever() | RunnableLambda(join)).invoke("cat on the mat")
    assert len(out) > 256  # the preview cut is visible
    pipeline = one(span_exporter.get_finished_spans(), "RunnableSequence")
    shown = {"off": None, "preview": preview(out), "full": out}[content]
    assert mirrors_of(pipeline) == root_mirrors("cat on the mat", shown)
    assert answers(pipeline) == {}  # the framework's output is not the app's answer: no ragtrail.answer.*


def test_the_openinference_mirror_off_writes_no_output(langchain, span_exporter):
    ragtrail.set_capture(content="full", mirror_openinference=False)
    (retriever() | RunnableLambda(join)).invoke("cat on the mat")
    pipeline = one(span_exporter.get_finished_spans(), "RunnableSequence")
    assert mirrors_of(pipeline) == {}  # GenAI names nothing on a pipeline


def test_a_chain_ending_in_the_model_shows_the_message_text(langchain, span_exporter):
    ragtrail.set_capture(content="full")
    prompt = ChatPromptTemplate.from_template("Context: {context}\nQuestion: {question}")
    chain = {"context": retriever() | join, "question": RunnablePassthrough()} | prompt | FakeListChatModel(responses=["Cats sit."])
    assert chain.invoke("cat").content == "Cats sit."
    pipeline = one(span_exporter.get_finished_spans(), "RunnableSequence")
    assert mirrors_of(pipeline) == root_mirrors("cat", "Cats sit.")
    want = {**receipt("Cats sit.").as_attributes(sc.ANSWER_RECEIPT_PREFIX), sc.ANSWER_TEXT: "Cats sit."}  # the generate stage's
    assert answers(pipeline) == want


def test_create_retrieval_chain_shows_its_answer(langchain, span_exporter):
    from langchain_classic.chains import create_retrieval_chain
    from langchain_classic.chains.combine_documents import create_stuff_documents_chain

    ragtrail.set_capture(content="full")
    prompt = ChatPromptTemplate.from_template("Context: {context}\nQuestion: {input}")
    chain = create_retrieval_chain(retriever(), create_stuff_documents_chain(FakeListChatModel(responses=["Mats."]), prompt))
    assert chain.invoke({"input": "cat"})["answer"] == "Mats."
    pipeline = one(span_exporter.get_finished_spans(), "RunnableSequence")
    assert mirrors_of(pipeline) == root_mirrors("cat", "Mats.")


def test_a_chain_returning_documents_shows_no_output(langchain, span_exporter):
    ragtrail.set_capture(content="full")
    (RunnablePassthrough() | retriever()).invoke("cat")
    pipeline = one(span_exporter.get_finished_spans(), "RunnableSequence")
    assert mirrors_of(pipeline) == root_mirrors("cat", None)  # a list of documents is no answer


def test_the_apps_answer_has_the_last_word(langchain, span_exporter, tracer_provider):
    """The chain inside the app's pipeline is not the root; the app's answer is the output."""
    ragtrail.set_capture(content="full")
    with ragtrail.stage("pipeline", "app", tracer=tracer_provider.get_tracer("app")):
        (retriever() | RunnableLambda(join)).invoke("cat")
        ragtrail.answer("the app's words")
    spans = span_exporter.get_finished_spans()
    assert [s.name for s in spans] == ["retrieve VectorStoreRetriever", "pipeline app"]
    assert mirrors_of(spans[1]) == root_mirrors(None, "the app's words")


def llama_engine(**options: Any):
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.llms import MockLLM
    from llama_index.core.schema import TextNode

    nodes = [TextNode(text=t, id_=f"n{i}") for i, t in enumerate(TEXTS)]
    index = VectorStoreIndex(nodes, embed_model=MockEmbedding(embed_dim=8))
    return index.as_query_engine(llm=MockLLM(max_tokens=6), similarity_top_k=2, **options)


@pytest.mark.parametrize("content", ["off", "preview", "full"])
def test_a_llama_index_query_engine_shows_its_response(llama, span_exporter, content):
    ragtrail.set_capture(content=content)
    response = llama_engine().query("cat on the mat")
    assert response.response == "text text text text text text"  # MockLLM: max_tokens words
    spans = span_exporter.get_finished_spans()
    pipeline = one(spans, "RetrieverQueryEngine")
    assert pipeline.attributes[sc.STAGE_KIND] == "pipeline" and pipeline.parent is None
    shown = {"off": None, "preview": preview(response.response), "full": response.response}[content]
    assert mirrors_of(pipeline) == root_mirrors("cat on the mat", shown)
    assert answers(pipeline) == {}


def test_a_streaming_llama_index_response_is_not_read(llama, span_exporter):
    ragtrail.set_capture(content="full")
    response = llama_engine(streaming=True).query("cat on the mat")
    pipeline = one(span_exporter.get_finished_spans(), "RetrieverQueryEngine")
    assert mirrors_of(pipeline) == root_mirrors("cat on the mat", None)
    assert "".join(response.response_gen) == "text text text text text text"  # the user's stream untouched


def test_a_llama_index_chat_turn_shows_its_response(llama, span_exporter):
    from llama_index.core.chat_engine import CondensePlusContextChatEngine
    from llama_index.core.llms import MockLLM

    ragtrail.set_capture(content="full")
    engine = llama_engine()
    chat = CondensePlusContextChatEngine.from_defaults(engine.retriever, llm=MockLLM(max_tokens=3))
    reply = chat.chat("cat on the mat")
    pipeline = span_exporter.get_finished_spans()[-1]
    assert pipeline.name == "pipeline CondensePlusContextChatEngine"
    assert reply.response == "text text text" and mirrors_of(pipeline) == root_mirrors("cat on the mat", reply.response)
