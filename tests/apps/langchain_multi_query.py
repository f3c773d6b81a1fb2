# Source: LangChain how-to "How to use the MultiQueryRetriever"
#   (https://python.langchain.com/docs/how_to/MultiQueryRetriever/): a vector store retriever
#   wrapped by MultiQueryRetriever.from_llm, question "What are the approaches to Task
#   Decomposition?", the INFO log of the generated queries, len(unique_docs).
# Offline swaps: WebBaseLoader -> four inline Documents; Chroma -> InMemoryVectorStore (no server
#   process); OpenAIEmbeddings -> a deterministic bag-of-words Embeddings class; ChatOpenAI ->
#   FakeListChatModel answering with three alternative questions, one per line.
import logging

from langchain_classic.retrievers.multi_query import MultiQueryRetriever
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import FakeListChatModel
from langchain_core.vectorstores import InMemoryVectorStore


class WordEmbeddings(Embeddings):
    """Deterministic offline stand-in: a hashed bag of lowercase words."""

    def _vec(self, text):
        v = [0.0] * 64
        for w in text.lower().replace(".", " ").replace("?", " ").replace(",", " ").split():
            v[sum(map(ord, w)) % 64] += 1.0
        return v

    def embed_documents(self, texts):
        return [self._vec(t) for t in texts]

    def embed_query(self, text):
        return self._vec(text)


splits = [
    Document(page_content="Task decomposition can be done by an LLM with simple prompting.", id="d1"),
    Document(page_content="Task decomposition can use task-specific instructions.", id="d2"),
    Document(page_content="Human inputs can also break a task into subgoals.", id="d3"),
    Document(page_content="Reflection lets an agent refine past actions.", id="d4"),
    Document(page_content="Subgoal planning breaks large tasks into smaller ones.", id="d5"),
]
embedding = WordEmbeddings()
vectordb = InMemoryVectorStore.from_documents(documents=splits, embedding=embedding)

question = "What are the approaches to Task Decomposition?"
llm = FakeListChatModel(
    responses=[
        "1. How can a task be decomposed by an LLM?\n2. Which instructions help task decomposition?\n3. How do humans break a task into subgoals?"
    ]
)
retriever_from_llm = MultiQueryRetriever.from_llm(retriever=vectordb.as_retriever(), llm=llm)

logging.basicConfig()
logging.getLogger("langchain_classic.retrievers.multi_query").setLevel(logging.INFO)

unique_docs = retriever_from_llm.invoke(question)
print(len(unique_docs))
for doc in unique_docs:
    print(doc.id, doc.page_content)
