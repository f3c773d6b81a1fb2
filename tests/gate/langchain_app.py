"""The LangChain RAG tutorial app (tests/apps/langchain_rag_tutorial.py: InMemoryVectorStore,
``as_retriever``, a prompt, a chat model, StrOutputParser, the LCEL chain) as a function the gate calls,
over a twelve-document corpus in two slices. Offline swaps as in the app: a deterministic bag-of-words
embedding, FakeListChatModel. No ragtrail code here: ``ragtrail gate`` switches the installed
LangChain instrumentation on, as ``opentelemetry-instrument`` would.

``build(dims)``: the embedding's size; a "rebuild" with fewer dimensions makes words collide, which
is what a cheaper embedding model does to a vector index.
"""

from __future__ import annotations

from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore

TOPICS = {
    "agent": [
        "planning decomposition steps",
        "memory storage recall",
        "tools apis calls",
        "reflection critique retry",
        "goals objectives rewards",
        "dialogue turns history",
    ],
    "infra": [
        "kubernetes pods nodes",
        "postgres indexes vacuum",
        "kafka partitions offsets",
        "redis eviction ttl",
        "nginx proxy upstream",
        "terraform modules state",
    ],
}


class WordEmbeddings(Embeddings):
    """Deterministic offline stand-in: a hashed bag of lowercase words."""

    def __init__(self, dims: int = 64) -> None:
        self.dims = dims

    def _vec(self, text: str) -> list[float]:
        v = [0.0] * self.dims
        for w in text.lower().replace(".", " ").replace("?", " ").replace(",", " ").split():
            v[sum(map(ord, w)) % self.dims] += 1.0
        return v

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vec(text)


def eval_lines() -> list[dict[str, Any]]:
    return [
        {"id": f"{s}-{i}", "query": f"how do {words.split()[0]} and {words.split()[1]} work?", "relevant": [f"{s}-{i}"], "slice": s}
        for s, topics in TOPICS.items()
        for i, words in enumerate(topics)
    ]


def build(dims: int = 64) -> Any:
    docs = [
        Document(id=f"{s}-{i}", page_content=f"Notes on {words}: how {words} work together.", metadata={"source": f"{s}#{i}"})
        for s, topics in TOPICS.items()
        for i, words in enumerate(topics)
    ]
    vector_store = InMemoryVectorStore(WordEmbeddings(dims))
    vector_store.add_documents(documents=docs, ids=[d.id for d in docs])
    retriever = vector_store.as_retriever(search_kwargs={"k": 2})
    prompt = ChatPromptTemplate.from_template("Use the context to answer.\nQuestion: {question} \nContext: {context} \nAnswer:")
    llm = FakeListChatModel(responses=["It depends on the context."])

    def format_docs(found: list[Document]) -> str:
        return "\n\n".join(doc.page_content for doc in found)

    chain = {"context": retriever | format_docs, "question": RunnablePassthrough()} | prompt | llm | StrOutputParser()

    def answer(question: str) -> str:
        return chain.invoke(question)

    return answer
