"""Issue 24, principle 3: a SelfQueryRetriever's constructed query is a hop of the question.

The LLM turns the question into a search query and a metadata filter; the store is searched with
those. Before, the constructed query was ``untracked`` (no parent, a finding) and the question, which
no store ever saw, read "→ index". Now the constructed query is a ``rewrite`` of hop 0 produced by the
self-query stage, the filter (as the store got it) is that stage's ``filter``, and only the hop that
was searched is "→ index". The query constructor is LangChain's own prompt | LLM | output parser, with
a scripted LLM; its filter parser is a stand-in because lark (LangChain's filter grammar) is not
installed here.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest

pytest.importorskip("langchain_classic")
pytest.importorskip("chromadb")

with warnings.catch_warnings():  # langchain-community's notice and its Chroma class's deprecation
    warnings.simplefilter("ignore")
    from langchain_classic.chains.query_constructor.base import StructuredQueryOutputParser, get_query_constructor_prompt
    from langchain_classic.chains.query_constructor.schema import AttributeInfo
    from langchain_classic.retrievers.self_query.base import SelfQueryRetriever
    from langchain_community.query_constructors.chroma import ChromaTranslator
    from langchain_community.vectorstores import Chroma
    from langchain_core.documents import Document
    from langchain_core.language_models.fake import FakeListLLM
    from langchain_core.structured_query import Comparator, Comparison

from ragtrail.export.otlp_json import spans_to_dict  # noqa: E402
from ragtrail.inspect.manifest import build  # noqa: E402
from ragtrail.inspect.manifest_model import Manifest  # noqa: E402
from ragtrail.inspect.model import Trace  # noqa: E402
from ragtrail.inspect.otlp import decode_document  # noqa: E402
from ragtrail.instrumentation.langchain import LangChainInstrumentor  # noqa: E402

from .test_langchain_support import HashEmbeddings  # noqa: E402

QUESTION = "What's a movie after 1990 but before 2005 that's all about toys, and preferably is animated"
CONSTRUCTED = {"query": "toys", "filter": 'eq("genre", "animated")'}
MOVIES = [
    Document(page_content="A bunch of scientists bring back dinosaurs and mayhem breaks loose", metadata={"year": 1993, "genre": "science fiction"}),
    Document(page_content="Toys come alive and have a blast doing so", metadata={"year": 1995, "genre": "animated"}),
    Document(page_content="Three men walk into the Zone, three men walk out of the Zone", metadata={"year": 1979, "genre": "thriller"}),
]


@pytest.fixture
def instrumentor(tracer_provider):
    inst = LangChainInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield inst
    inst.uninstrument()


def manifest_of(exporter: Any) -> Manifest:
    spans = list(decode_document(spans_to_dict(exporter.get_finished_spans())))
    [trace_id] = {s.trace_id for s in spans}
    return build(Trace(trace_id=trace_id, spans=spans, source="memory"))


def self_query_retriever(use_original_query: bool = False) -> SelfQueryRetriever:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = Chroma.from_documents(MOVIES, HashEmbeddings(), collection_name=f"movies-{use_original_query}")
    fields = [AttributeInfo(name="genre", description="The genre of the movie", type="string")]
    prompt = get_query_constructor_prompt("Brief summary of a movie", fields)
    llm = FakeListLLM(responses=["```json\n" + json.dumps(CONSTRUCTED) + "\n```"])

    def parse_filter(raw: str) -> Comparison:  # stand-in for LangChain's lark grammar on this one filter
        assert raw == CONSTRUCTED["filter"]
        return Comparison(comparator=Comparator.EQ, attribute="genre", value="animated")

    constructor = prompt | llm | StructuredQueryOutputParser(ast_parse=parse_filter)
    # the translator SelfQueryRetriever picks for a Chroma store, given (its lookup imports every
    # translator, and one of them warns at import)
    return SelfQueryRetriever(
        query_constructor=constructor,
        vectorstore=store,
        structured_query_translator=ChromaTranslator(),
        use_original_query=use_original_query,
        search_kwargs={"k": 1},
    )


def test_the_constructed_query_is_a_rewrite_of_the_question_and_only_it_hit_the_index(instrumentor, span_exporter):
    retriever = self_query_retriever()
    docs = retriever.invoke(QUESTION)
    assert [d.page_content for d in docs] == ["Toys come alive and have a blast doing so"]
    manifest = manifest_of(span_exporter)
    hops = [(h.hop, h.parent_hop, h.transform, h.text, h.hit_index) for h in manifest.query_hops]
    assert hops == [(0, None, "none", QUESTION, False), (1, 0, "rewrite", "toys", True)]
    [self_query] = [s for s in manifest.stages if s.component.endswith("SelfQueryRetriever")]
    assert manifest.query_hops[1].produced_by == self_query.label
    assert self_query.filter == '{"genre":{"$eq":"animated"}}'
    assert manifest.findings == []


def test_a_self_query_that_searches_with_the_question_keeps_it_as_the_searched_hop(instrumentor, span_exporter):
    retriever = self_query_retriever(use_original_query=True)
    retriever.invoke(QUESTION)
    manifest = manifest_of(span_exporter)
    assert [(h.hop, h.transform, h.hit_index) for h in manifest.query_hops] == [(0, "none", True)]
    assert manifest.findings == []


def test_a_rephrased_question_is_a_rewrite_of_the_question(instrumentor, span_exporter):
    """RePhraseQueryRetriever.from_llm (LangChain's own prompt | LLM | parser, scripted LLM): the
    inner retriever searches with the rephrased question, a ``rewrite`` of hop 0, not ``untracked``."""
    from langchain_classic.retrievers.re_phraser import RePhraseQueryRetriever
    from langchain_core.vectorstores import InMemoryVectorStore

    store = InMemoryVectorStore(HashEmbeddings())
    store.add_documents([Document(page_content=d.page_content, id=f"m{i}") for i, d in enumerate(MOVIES)])
    llm = FakeListLLM(responses=["toys come alive"])
    retriever = RePhraseQueryRetriever.from_llm(retriever=store.as_retriever(search_kwargs={"k": 1}), llm=llm)
    retriever.invoke("I'd like a film where the toys come alive, from the nineties")
    manifest = manifest_of(span_exporter)
    hops = [(h.hop, h.parent_hop, h.transform, h.text, h.hit_index) for h in manifest.query_hops]
    assert hops == [
        (0, None, "none", "I'd like a film where the toys come alive, from the nineties", False),
        (1, 0, "rewrite", "toys come alive", True),
    ]
    assert [(s.kind, s.component.rsplit(".", 1)[-1], s.query.hop if s.query else None) for s in manifest.stages] == [
        ("retrieve", "RePhraseQueryRetriever", 0),
        ("retrieve", "VectorStoreRetriever", 1),
    ]
    assert manifest.findings == []
