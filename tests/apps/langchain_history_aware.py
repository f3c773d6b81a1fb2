# Source: LangChain tutorial "Build a Retrieval Augmented Generation (RAG) App: Part 2" (chains version,
#   https://python.langchain.com/v0.2/docs/tutorials/qa_chat_history/), "Adding chat history": the
#   page's contextualize_q_system_prompt, create_history_aware_retriever(llm, retriever,
#   contextualize_q_prompt), its qa_prompt with MessagesPlaceholder("chat_history"),
#   create_stuff_documents_chain + create_retrieval_chain, the first question, the AI answer appended
#   to chat_history, then "What are common ways of doing it?".
# Offline swaps: the web page loader -> three inline Documents; Chroma + OpenAIEmbeddings ->
#   InMemoryVectorStore over a deterministic bag-of-words Embeddings class (k=2); ChatOpenAI ->
#   FakeListChatModel answering in call order (answer 1; the standalone question the contextualizer
#   writes; answer 2).
from langchain_classic.chains import create_history_aware_retriever, create_retrieval_chain
from langchain_classic.chains.combine_documents import create_stuff_documents_chain
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
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


docs = [
    Document(page_content="Task decomposition breaks a hard task into smaller and simpler steps.", metadata={"source": "planning"}),
    Document(
        page_content="Common ways of task decomposition: chain of thought, tree of thoughts, and simple prompting.",
        metadata={"source": "ways"},
    ),
    Document(page_content="Memory gives an agent short-term context and long-term storage.", metadata={"source": "memory"}),
]
vectorstore = InMemoryVectorStore.from_documents(documents=docs, embedding=WordEmbeddings())
retriever = vectorstore.as_retriever(search_kwargs={"k": 2})
llm = FakeListChatModel(
    responses=[
        "Task decomposition splits a hard task into smaller steps.",
        "What are common ways of doing task decomposition?",
        "Chain of thought and tree of thoughts are common ways.",
    ]
)

contextualize_q_system_prompt = (
    "Given a chat history and the latest user question "
    "which might reference context in the chat history, "
    "formulate a standalone question which can be understood "
    "without the chat history. Do NOT answer the question, "
    "just reformulate it if needed and otherwise return it as is."
)
contextualize_q_prompt = ChatPromptTemplate.from_messages(
    [("system", contextualize_q_system_prompt), MessagesPlaceholder("chat_history"), ("human", "{input}")]
)
history_aware_retriever = create_history_aware_retriever(llm, retriever, contextualize_q_prompt)

system_prompt = (
    "You are an assistant for question-answering tasks. "
    "Use the following pieces of retrieved context to answer "
    "the question. If you don't know the answer, say that you "
    "don't know. Use three sentences maximum and keep the "
    "answer concise."
    "\n\n"
    "{context}"
)
qa_prompt = ChatPromptTemplate.from_messages([("system", system_prompt), MessagesPlaceholder("chat_history"), ("human", "{input}")])
question_answer_chain = create_stuff_documents_chain(llm, qa_prompt)
rag_chain = create_retrieval_chain(history_aware_retriever, question_answer_chain)

chat_history = []
question = "What is Task Decomposition?"
ai_msg_1 = rag_chain.invoke({"input": question, "chat_history": chat_history})
chat_history.extend([HumanMessage(content=question), AIMessage(content=ai_msg_1["answer"])])
second_question = "What are common ways of doing it?"
ai_msg_2 = rag_chain.invoke({"input": second_question, "chat_history": chat_history})
print(ai_msg_1["answer"], [d.metadata["source"] for d in ai_msg_1["context"]])
print(ai_msg_2["answer"], [d.metadata["source"] for d in ai_msg_2["context"]])
