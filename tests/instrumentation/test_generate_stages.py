"""Generate stages on the real libraries, offline: a LangChain LCEL chain (``retriever | prompt | llm``)
and a Haystack pipeline (retriever -> PromptBuilder -> generator). The generate stage's inputs are the
documents offered to the prompt, its outputs those whose text is in the prompt the model got (the rest
``custom:not_in_prompt``), and the answer's receipt is on the pipeline span."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("haystack")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.language_models import FakeListChatModel  # noqa: E402
from langchain_core.output_parsers import StrOutputParser  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402
from langchain_core.runnables import RunnablePassthrough  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore  # noqa: E402

from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.contract.receipts import receipt  # noqa: E402
from ragtrail.instrumentation.langchain import LangChainInstrumentor  # noqa: E402
from spanutil import rec_events  # noqa: E402

from .test_langchain_support import HashEmbeddings, assert_events, candidate_event, exclusion_event, one  # noqa: E402

TEXTS = ["the cat sat on the mat", "cats purr when they are happy", "stock markets fell sharply today"]
NOT_IN_PROMPT = ("custom:not_in_prompt", "its text does not occur in the prompt the model received")


def answer_attributes(text: str) -> dict:
    return receipt(text).as_attributes(sc.ANSWER_RECEIPT_PREFIX)


@pytest.fixture
def langchain(tracer_provider, span_exporter):
    inst = LangChainInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield inst
    inst.uninstrument()


def lcel_chain(format_docs):
    store = InMemoryVectorStore(HashEmbeddings())
    store.add_documents([Document(page_content=t, id=f"d{i}") for i, t in enumerate(TEXTS)])
    prompt = ChatPromptTemplate.from_template("Context: {context}\nQuestion: {question}")
    llm = FakeListChatModel(responses=["Cats sit on mats."])
    retriever = store.as_retriever(search_kwargs={"k": 2})
    return {"context": retriever | format_docs, "question": RunnablePassthrough()} | prompt | llm | StrOutputParser()


def test_an_lcel_rag_chain_is_a_pipeline_with_a_generate_stage(langchain, span_exporter):
    # the app's own format_docs puts only the first document in the prompt
    chain = lcel_chain(lambda docs: docs[0].page_content)
    assert chain.invoke("cat on the mat") == "Cats sit on mats."
    spans = span_exporter.get_finished_spans()
    assert [s.name for s in spans] == ["retrieve VectorStoreRetriever", "generate FakeListChatModel", "pipeline RunnableSequence"]
    retrieve, generate, pipeline = spans
    assert retrieve.parent.span_id == generate.parent.span_id == pipeline.context.span_id
    hits = [e.attributes[sc.CANDIDATE_ID] for e in rec_events(retrieve) if e.name == sc.EVENT_CANDIDATE]
    assert hits[0] == "d0" and len(hits) == 2
    first, second = hits
    assert_events(
        generate,
        [
            (sc.EVENT_CANDIDATE, candidate_event(first, 0, TEXTS[0], hop=0)),
            (sc.EVENT_EXCLUSION, exclusion_event(second, 1, TEXTS[int(second[1:])], *NOT_IN_PROMPT, hop=0)),
        ],
    )
    attributes = dict(generate.attributes)
    assert (attributes[sc.STAGE_KIND], attributes[sc.CANDIDATES_IN], attributes[sc.CANDIDATES_OUT], attributes[sc.CANDIDATES_EXCLUDED]) == (
        "generate",
        2,
        1,
        1,
    )
    own = dict(pipeline.attributes)
    for key, value in answer_attributes("Cats sit on mats.").items():
        assert own.pop(key) == value, key
    # whether the reply is a refusal, or what it claims, only the app can say
    assert sc.ANSWER_CLAIM not in own and sc.ANSWER_REFUSED not in own


def test_a_chain_without_a_retriever_records_nothing(langchain, span_exporter):
    chain = ChatPromptTemplate.from_template("Say {word}") | FakeListChatModel(responses=["hi"]) | StrOutputParser()
    assert chain.invoke({"word": "hi"}) == "hi"
    assert span_exporter.get_finished_spans() == ()


def test_every_document_the_prompt_holds_is_an_output(langchain, span_exporter):
    chain = lcel_chain(lambda docs: "\n\n".join(d.page_content for d in docs))

    def app(question: str) -> str:
        return chain.invoke(question)

    answer = app("cat on the mat")
    spans = span_exporter.get_finished_spans()
    pipeline = one(spans, "RunnableSequence")
    assert dict(pipeline.attributes)[sc.ANSWER_SHA256] == receipt(answer).sha256
    generate = one(spans, "FakeListChatModel")
    retrieve = one(spans, "VectorStoreRetriever")
    hits = [e.attributes[sc.CANDIDATE_ID] for e in rec_events(retrieve) if e.name == sc.EVENT_CANDIDATE]
    assert [e.attributes[sc.CANDIDATE_ID] for e in rec_events(generate)] == hits and len(hits) == 2  # both in the prompt
    assert all(e.name == sc.EVENT_CANDIDATE for e in rec_events(generate))


def test_a_question_a_model_call_rewrote_is_a_rewrite_hop_of_the_chains_question(langchain, span_exporter):
    """``prompt | llm | StrOutputParser() | retriever`` under a chain (``create_history_aware_retriever``'s
    contextualizer): the retriever is asked the very text the model call wrote having read no
    document, so that call rewrote the question: a ``query_transform`` stage named after the model,
    its query the chain's question (its prompt held it), its output hop the retriever's query. The
    retriever's hop was ``untracked`` with a finding "changed by no instrumented transform"."""
    store = InMemoryVectorStore(HashEmbeddings())
    store.add_documents([Document(page_content=t, id=f"d{i}") for i, t in enumerate(TEXTS)])
    rewrite = ChatPromptTemplate.from_template("Rewrite as a standalone question: {question}")
    llm = FakeListChatModel(responses=["why do cats purr", "Because they are happy."])
    contextualized = rewrite | llm | StrOutputParser() | store.as_retriever(search_kwargs={"k": 1})
    prompt = ChatPromptTemplate.from_template("Context: {context}\nQuestion: {question}")
    chain = {"context": contextualized, "question": RunnablePassthrough()} | prompt | llm | StrOutputParser()
    assert chain.invoke("and that?") == "Because they are happy."
    spans = span_exporter.get_finished_spans()
    assert [s.name for s in spans] == [
        "generate FakeListChatModel",
        "query_transform FakeListChatModel",
        "retrieve VectorStoreRetriever",
        "generate FakeListChatModel",
        "pipeline RunnableSequence",
    ]
    _, transform, retrieve, _, pipeline = spans
    assert dict(transform.attributes)[sc.STAGE_COMPONENT] == "langchain_core.language_models.fake_chat_models.FakeListChatModel"
    assert (transform.attributes[sc.QUERY_HOP], transform.attributes[sc.QUERY_TEXT]) == (0, "and that?")
    [made] = [e.attributes for e in rec_events(transform) if e.name == sc.EVENT_QUERY]
    assert (made[sc.QUERY_HOP], made[sc.QUERY_PARENT_HOP], made[sc.QUERY_TRANSFORM], made[sc.QUERY_TEXT]) == (1, 0, "rewrite", "why do cats purr")
    own = dict(retrieve.attributes)
    assert (own[sc.QUERY_HOP], own[sc.QUERY_TRANSFORM], own[sc.QUERY_TEXT]) == (1, "rewrite", "why do cats purr")
    assert sc.STAGE_FINDINGS not in own
    assert pipeline.attributes[sc.QUERY_HOP] == 0


def test_a_haystack_generator_is_a_generate_stage(tracer_provider, span_exporter):
    from haystack import Document as HDocument
    from haystack import Pipeline, component
    from haystack.components.builders import PromptBuilder
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    from ragtrail.instrumentation.haystack import HaystackInstrumentor

    @component
    class ScriptedGenerator:
        @component.output_types(replies=list[str])
        def run(self, prompt: str):
            return {"replies": ["Paris." if "Paris" in prompt else "unknown"]}

    store = InMemoryDocumentStore()
    docs = [HDocument(content="Jean lives in Paris", id="jean"), HDocument(content="Mark lives in Berlin", id="mark")]
    store.write_documents(docs)
    pipe = Pipeline()
    pipe.add_component("retriever", InMemoryBM25Retriever(store, top_k=2))
    # the template shows only the first document: the second never reaches the prompt
    pipe.add_component(
        "prompt_builder", PromptBuilder(template="{{ documents[0].content }}\nQ: {{ question }}", required_variables=["question", "documents"])
    )
    pipe.add_component("llm", ScriptedGenerator())
    pipe.connect("retriever", "prompt_builder.documents")
    pipe.connect("prompt_builder", "llm")
    inst = HaystackInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    try:
        result = pipe.run({"retriever": {"query": "who lives in Paris"}, "prompt_builder": {"question": "who lives in Paris"}})
    finally:
        inst.uninstrument()
    assert result["llm"]["replies"] == ["Paris."]
    spans = span_exporter.get_finished_spans()
    assert [s.name for s in spans] == ["retrieve InMemoryBM25Retriever", "generate ScriptedGenerator", "pipeline Pipeline"]
    retrieve, generate, pipeline = spans
    ranked = [(e.attributes[sc.CANDIDATE_ID], e.attributes[sc.CANDIDATE_SCORE]) for e in rec_events(retrieve) if e.name == sc.EVENT_CANDIDATE]
    assert [i for i, _ in ranked] == ["jean", "mark"]
    text = {"jean": "Jean lives in Paris", "mark": "Mark lives in Berlin"}
    score = dict(ranked)
    assert_events(
        generate,
        [
            (sc.EVENT_CANDIDATE, candidate_event("jean", 0, text["jean"], score=score["jean"], score_kind="bm25", hop=0)),
            (sc.EVENT_EXCLUSION, exclusion_event("mark", 1, text["mark"], *NOT_IN_PROMPT, score=score["mark"], score_kind="bm25", hop=0)),
        ],
    )
    assert dict(pipeline.attributes)[sc.ANSWER_SHA256] == receipt("Paris.").sha256
    # after uninstrument() the generator class is as it was
    assert not hasattr(ScriptedGenerator.run, "__wrapped__")
