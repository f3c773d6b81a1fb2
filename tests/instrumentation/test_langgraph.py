"""LangGraph runs as one pipeline (issue 24, principle 4), in process: ``invoke``, ``ainvoke`` and
``stream`` each give one trace; a router out of the retrieving node is a filter stage whose decision
follows from where its route leads; ``uninstrument()`` leaves graphs untouched."""

from __future__ import annotations

import asyncio
from typing import Literal

import pytest

pytest.importorskip("langgraph")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.embeddings import Embeddings  # noqa: E402
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langchain_core.tools import create_retriever_tool  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402

from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.langchain import LangChainInstrumentor  # noqa: E402
from spanutil import attrs, events  # noqa: E402


class Words(Embeddings):
    def _vec(self, text: str) -> list[float]:
        v = [0.0] * 16
        for w in text.lower().split():
            v[sum(map(ord, w)) % 16] += 1.0
        return v

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vec(text)


class Scripted(FakeMessagesListChatModel):
    def bind_tools(self, tools, **kwargs):
        return self


def build(verdicts: list[str]):
    store = InMemoryVectorStore(Words())
    store.add_documents([Document(page_content=t, id=f"d{i}") for i, t in enumerate(["red apples", "green pears", "blue sky"])])
    tool = create_retriever_tool(store.as_retriever(search_kwargs={"k": 2}), "search", "search fruit")
    calls = iter(range(100))

    def agent(state: MessagesState):
        n = next(calls)
        return {"messages": [AIMessage(content="", tool_calls=[{"name": "search", "args": {"query": f"fruit {n}"}, "id": f"c{n}"}])]}

    answers = Scripted(responses=[AIMessage(content="apples and pears")])

    def grade(state: MessagesState) -> Literal["answer", "rewrite"]:
        return "answer" if verdicts.pop(0) == "yes" else "rewrite"

    def rewrite(state: MessagesState):
        return {"messages": [HumanMessage(content="which fruit is red?")]}

    def answer(state: MessagesState):
        return {"messages": [answers.invoke([{"role": "user", "content": "Context: " + state["messages"][-1].content}])]}

    g = StateGraph(MessagesState)
    g.add_node(agent)
    g.add_node("retrieve", ToolNode([tool]))
    g.add_node(rewrite)
    g.add_node(answer)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition, {"tools": "retrieve", END: END})
    g.add_conditional_edges("retrieve", grade)
    g.add_edge("rewrite", "agent")
    g.add_edge("answer", END)
    return g.compile()


@pytest.fixture
def instrumentor(tracer_provider, span_exporter):
    inst = LangChainInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield inst
    inst.uninstrument()


QUESTION = {"messages": [{"role": "user", "content": "what fruit is there?"}]}


def stage_names(spans) -> list[str]:
    return [s.name for s in sorted(spans, key=lambda s: s.start_time) if s.name.split(" ")[0] != "pipeline"]


@pytest.mark.parametrize("how", ["invoke", "ainvoke", "stream"])
def test_each_way_of_running_is_one_trace(instrumentor, span_exporter, how):
    graph = build(["yes"])
    if how == "invoke":
        graph.invoke(QUESTION)
    elif how == "ainvoke":
        asyncio.run(graph.ainvoke(QUESTION))
    else:
        list(graph.stream(QUESTION))
    spans = span_exporter.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 1
    [root] = [s for s in spans if s.parent is None]
    assert attrs(root)[sc.STAGE_KIND] == "pipeline" and attrs(root)[sc.QUERY_TEXT] == "what fruit is there?"
    assert stage_names(spans) == ["query_transform agent", "retrieve VectorStoreRetriever", "filter grade", "generate Scripted"]
    [grade] = [s for s in spans if s.name == "filter grade"]
    assert (attrs(grade)[sc.CANDIDATES_IN], attrs(grade)[sc.CANDIDATES_OUT]) == (2, 2)


def test_a_route_back_to_the_retrieval_rejects_its_documents(instrumentor, span_exporter):
    build(["no", "yes"]).invoke(QUESTION)
    spans = sorted(span_exporter.get_finished_spans(), key=lambda s: s.start_time)
    assert stage_names(spans) == [
        "query_transform agent",
        "retrieve VectorStoreRetriever",
        "filter grade",
        "query_transform rewrite",
        "query_transform agent",
        "retrieve VectorStoreRetriever",
        "filter grade",
        "generate Scripted",
    ]
    first_retrieve = next(s for s in spans if s.name == "retrieve VectorStoreRetriever")
    first_grade = next(s for s in spans if s.name == "filter grade")
    rejected = [(e[sc.CANDIDATE_ID], e[sc.EXCLUSION_REASON], e[sc.EXCLUSION_DETAIL]) for e in events(first_grade, sc.EVENT_EXCLUSION)]
    found = [e[sc.CANDIDATE_ID] for e in events(first_retrieve, sc.EVENT_CANDIDATE)]
    assert rejected == [(i, "custom:graded_irrelevant", "grade routed to rewrite, which leads back to retrieve") for i in found]
    transforms = [attrs(s) for s in spans if s.name.startswith("query_transform")]
    # hop 1: the agent's first search; hop 2: the rewritten question (parent 0); hop 3: its search
    assert [(a[sc.QUERY_HOP], a.get(sc.QUERY_TEXT)) for a in transforms] == [
        (0, "what fruit is there?"),
        (0, "what fruit is there?"),
        (2, "which fruit is red?"),
    ]
    retrieves = [attrs(s) for s in spans if s.name == "retrieve VectorStoreRetriever"]
    assert [(a[sc.QUERY_HOP], a[sc.QUERY_PARENT_HOP], a[sc.QUERY_TRANSFORM]) for a in retrieves] == [(1, 0, "rewrite"), (3, 2, "rewrite")]


def test_uninstrument_leaves_graphs_alone(tracer_provider, span_exporter):
    inst = LangChainInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    inst.uninstrument()
    out = build(["yes"]).invoke(QUESTION)
    assert out["messages"][-1].content == "apples and pears"
    assert span_exporter.get_finished_spans() == ()
