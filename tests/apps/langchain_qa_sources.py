# Source: LangChain how-to "How to get your RAG application to return sources"
#   (https://python.langchain.com/docs/how_to/qa_sources/), section "Using create_retrieval_chain":
#   a retriever over a vector store, the system prompt of the page, create_stuff_documents_chain +
#   create_retrieval_chain, rag_chain.invoke({"input": "What is Task Decomposition?"}), then the
#   answer and the sources (result["context"]) printed.
# Offline swaps: the web page loader (WebBaseLoader over Lilian Weng's blog post) -> three inline
#   Documents split with the page's RecursiveCharacterTextSplitter; Chroma + OpenAIEmbeddings ->
#   InMemoryVectorStore over a deterministic bag-of-words Embeddings class; ChatOpenAI ->
#   FakeListChatModel with one answer.
from langchain_classic.chains import create_retrieval_chain
from langchain_classic.chains.combine_documents import create_stuff_documents_chain
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import FakeListChatModel
from langchain_core.prompts import ChatPromptTemplate
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
splits = text_splitter.split_documents(docs)
vectorstore = InMemoryVectorStore.from_documents(documents=splits, embedding=WordEmbeddings())
retriever = vectorstore.as_retriever(search_kwargs={"k": 2})
llm = FakeListChatModel(responses=["Task decomposition splits a hard task into smaller, simpler steps."])

system_prompt = (
    "You are an assistant for question-answering tasks. "
    "Use the following pieces of retrieved context to answer "
    "the question. If you don't know the answer, say that you "
    "don't know. Use three sentences maximum and keep the "
    "answer concise."
    "\n\n"
    "{context}"
)

prompt = ChatPromptTemplate.from_messages(
    [
        ("system", system_prompt),
        ("human", "{input}"),
    ]
)

question_answer_chain = create_stuff_documents_chain(llm, prompt)
rag_chain = create_retrieval_chain(retriever, question_answer_chain)

result = rag_chain.invoke({"input": "What is Task Decomposition?"})
print(result["answer"])
for document in result["context"]:
    print(document.metadata["source"])
