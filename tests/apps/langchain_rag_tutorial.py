# Source: LangChain "Build a Retrieval Augmented Generation (RAG) App: Part 1"
#   (https://python.langchain.com/docs/tutorials/rag/), the LCEL chain of the "Retrieval and
#   Generation" section: InMemoryVectorStore, vector_store.as_retriever(), a prompt, a chat model,
#   StrOutputParser.
# Offline swaps: the web page loader (WebBaseLoader over Lilian Weng's blog post) -> three inline
#   Documents split with the same RecursiveCharacterTextSplitter; OpenAIEmbeddings -> a
#   deterministic bag-of-words Embeddings class; ChatOpenAI -> FakeListChatModel with one answer;
#   the hub prompt "rlm/rag-prompt" -> its text inline.
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_text_splitters import RecursiveCharacterTextSplitter


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


docs = [
    Document(
        page_content="Task decomposition breaks a hard task into smaller and simpler steps. "
        "Chain of thought prompts the model to think step by step.",
        metadata={"source": "agent-post#planning"},
    ),
    Document(
        page_content="Memory gives an agent short-term context and long-term storage through an external vector store.",
        metadata={"source": "agent-post#memory"},
    ),
    Document(
        page_content="Tool use lets the model call external APIs for information missing from its weights.", metadata={"source": "agent-post#tools"}
    ),
]
text_splitter = RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200)
all_splits = text_splitter.split_documents(docs)

vector_store = InMemoryVectorStore(WordEmbeddings())
_ = vector_store.add_documents(documents=all_splits)

retriever = vector_store.as_retriever(search_kwargs={"k": 2})
prompt = ChatPromptTemplate.from_template(
    "You are an assistant for question-answering tasks. Use the following pieces of retrieved "
    "context to answer the question. If you don't know the answer, just say that you don't know. "
    "Use three sentences maximum and keep the answer concise.\n"
    "Question: {question} \nContext: {context} \nAnswer:"
)
llm = FakeListChatModel(responses=["Task decomposition splits a task into smaller steps."])


def format_docs(docs):
    return "\n\n".join(doc.page_content for doc in docs)


rag_chain = {"context": retriever | format_docs, "question": RunnablePassthrough()} | prompt | llm | StrOutputParser()

print(rag_chain.invoke("What is Task Decomposition?"))
