# Source: LangGraph's prebuilt ReAct agent with a retriever tool, as in LangChain's "Build a
#   Retrieval Augmented Generation (RAG) App: Part 2" (agents section: `create_react_agent(llm,
#   [retrieve])`, streamed with `stream_mode="values"` and `pretty_print()`) and LangGraph's agentic
#   RAG page (`create_retriever_tool(retriever, "retrieve_blog_posts", ...)`).
# Offline swaps: the blog posts (WebBaseLoader) -> three inline Documents; OpenAIEmbeddings -> a
#   deterministic bag-of-words Embeddings class; init_chat_model("openai:gpt-4.1") ->
#   FakeMessagesListChatModel with scripted replies (a subclass whose bind_tools returns the model, as
#   a tool-calling model's binding does): it calls the tool once, then answers.
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import create_retriever_tool
from langchain_core.vectorstores import InMemoryVectorStore
from langgraph.prebuilt import create_react_agent


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


class ScriptedChatModel(FakeMessagesListChatModel):
    """Offline stand-in for a tool-calling chat model: replies in order; binding tools keeps it."""

    def bind_tools(self, tools, **kwargs):
        return self


docs = [
    Document(id="task-decomposition", page_content="Task decomposition splits a complicated task into smaller and simpler steps."),
    Document(id="chain-of-thought", page_content="Chain of thought prompting asks the model to think step by step."),
    Document(id="video-diffusion", page_content="Diffusion models for video generate frames that stay consistent over time."),
]
vector_store = InMemoryVectorStore(embedding=WordEmbeddings())
vector_store.add_documents(documents=docs)
retriever = vector_store.as_retriever(search_kwargs={"k": 2})

retriever_tool = create_retriever_tool(
    retriever,
    "retrieve_blog_posts",
    "Search and return information about Lilian Weng blog posts.",
)

llm = ScriptedChatModel(
    responses=[
        AIMessage(content="", tool_calls=[{"name": "retrieve_blog_posts", "args": {"query": "task decomposition steps"}, "id": "call_1"}]),
        AIMessage(content="Task decomposition splits a complicated task into smaller, simpler steps."),
    ]
)

agent_executor = create_react_agent(llm, [retriever_tool])

input_message = "What is Task Decomposition?"

for event in agent_executor.stream(
    {"messages": [{"role": "user", "content": input_message}]},
    stream_mode="values",
):
    event["messages"][-1].pretty_print()
