# Source: LangGraph "Build a custom RAG agent" (agentic RAG tutorial,
#   https://langchain-ai.github.io/langgraph/tutorials/rag/langgraph_agentic_rag/): a retriever tool
#   over an InMemoryVectorStore; nodes generate_query_or_respond (model with the tool bound), retrieve
#   (ToolNode), grade_documents (a conditional edge with a structured-output grader),
#   rewrite_question and generate_answer; the graph streamed with the tutorial's printing loop.
# Offline swaps: the three blog posts (WebBaseLoader) -> four inline Documents in the same
#   RecursiveCharacterTextSplitter (its character-count form: from_tiktoken_encoder would download an
#   encoding); OpenAIEmbeddings -> a deterministic bag-of-words Embeddings class;
#   init_chat_model("openai:gpt-4.1") -> FakeMessagesListChatModel with scripted replies (a subclass
#   whose bind_tools returns the model, as a tool-calling model's binding does); the grader answers
#   "no" the first time (the tutorial's rewrite loop) and "yes" the second.
from typing import Literal

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import create_retriever_tool
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_text_splitters import RecursiveCharacterTextSplitter
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from pydantic import BaseModel, Field


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


docs_list = [
    Document(page_content="Reward hacking occurs when an agent exploits flaws in the reward function.", metadata={"source": "reward-hacking#intro"}),
    Document(page_content="Hallucination is when a model makes up content not grounded in its inputs.", metadata={"source": "hallucination#intro"}),
    Document(page_content="Diffusion models for video generate frames that stay consistent over time.", metadata={"source": "video-diffusion#intro"}),
    Document(
        page_content="Types of reward hacking: environment or goal misspecification, and reward tampering.",
        metadata={"source": "reward-hacking#types"},
    ),
]
text_splitter = RecursiveCharacterTextSplitter(chunk_size=100, chunk_overlap=50)
doc_splits = text_splitter.split_documents(docs_list)
vectorstore = InMemoryVectorStore.from_documents(documents=doc_splits, embedding=WordEmbeddings())
retriever = vectorstore.as_retriever(search_kwargs={"k": 2})

retriever_tool = create_retriever_tool(
    retriever,
    "retrieve_blog_posts",
    "Search and return information about Lilian Weng blog posts.",
)

response_model = ScriptedChatModel(
    responses=[
        AIMessage(content="", tool_calls=[{"name": "retrieve_blog_posts", "args": {"query": "video frames"}, "id": "call_1"}]),
        AIMessage(content="What are the types of reward hacking described by Lilian Weng?"),
        AIMessage(content="", tool_calls=[{"name": "retrieve_blog_posts", "args": {"query": "types of reward hacking"}, "id": "call_2"}]),
        AIMessage(content="Lilian Weng names environment or goal misspecification and reward tampering."),
    ]
)
grader_model = ScriptedChatModel(
    responses=[
        AIMessage(content="", tool_calls=[{"name": "GradeDocuments", "args": {"binary_score": "no"}, "id": "grade_1"}]),
        AIMessage(content="", tool_calls=[{"name": "GradeDocuments", "args": {"binary_score": "yes"}, "id": "grade_2"}]),
    ]
)


def generate_query_or_respond(state: MessagesState):
    """Call the model to generate a response based on the current state. Given
    the question, it will decide to retrieve using the retriever tool, or simply respond to the user.
    """
    response = response_model.bind_tools([retriever_tool]).invoke(state["messages"])
    return {"messages": [response]}


GRADE_PROMPT = (
    "You are a grader assessing relevance of a retrieved document to a user question. \n "
    "Here is the retrieved document: \n\n {context} \n\n"
    "Here is the user question: {question} \n"
    "If the document contains keyword(s) or semantic meaning related to the user question, grade it as relevant. \n"
    "Give a binary score 'yes' or 'no' score to indicate whether the document is relevant to the question."
)


class GradeDocuments(BaseModel):
    """Grade documents using a binary score for relevance check."""

    binary_score: str = Field(description="Relevance score: 'yes' if relevant, or 'no' if not relevant")


def grade_documents(state: MessagesState) -> Literal["generate_answer", "rewrite_question"]:
    """Determine whether the retrieved documents are relevant to the question."""
    question = state["messages"][0].content
    context = state["messages"][-1].content

    prompt = GRADE_PROMPT.format(question=question, context=context)
    response = grader_model.with_structured_output(GradeDocuments).invoke([{"role": "user", "content": prompt}])
    score = response.binary_score

    if score == "yes":
        return "generate_answer"
    else:
        return "rewrite_question"


REWRITE_PROMPT = (
    "Look at the input and try to reason about the underlying semantic intent / meaning.\n"
    "Here is the initial question:"
    "\n ------- \n"
    "{question}"
    "\n ------- \n"
    "Formulate an improved question:"
)


def rewrite_question(state: MessagesState):
    """Rewrite the original user question."""
    messages = state["messages"]
    question = messages[0].content
    prompt = REWRITE_PROMPT.format(question=question)
    response = response_model.invoke([{"role": "user", "content": prompt}])
    return {"messages": [HumanMessage(content=response.content)]}


GENERATE_PROMPT = (
    "You are an assistant for question-answering tasks. "
    "Use the following pieces of retrieved context to answer the question. "
    "If you don't know the answer, just say that you don't know. "
    "Use three sentences maximum and keep the answer concise.\n"
    "Question: {question} \n"
    "Context: {context}"
)


def generate_answer(state: MessagesState):
    """Generate an answer."""
    question = state["messages"][0].content
    context = state["messages"][-1].content
    prompt = GENERATE_PROMPT.format(question=question, context=context)
    response = response_model.invoke([{"role": "user", "content": prompt}])
    return {"messages": [response]}


workflow = StateGraph(MessagesState)

workflow.add_node(generate_query_or_respond)
workflow.add_node("retrieve", ToolNode([retriever_tool]))
workflow.add_node(rewrite_question)
workflow.add_node(generate_answer)

workflow.add_edge(START, "generate_query_or_respond")
workflow.add_conditional_edges(
    "generate_query_or_respond",
    tools_condition,
    {
        "tools": "retrieve",
        END: END,
    },
)
workflow.add_conditional_edges(
    "retrieve",
    grade_documents,
)
workflow.add_edge("generate_answer", END)
workflow.add_edge("rewrite_question", "generate_query_or_respond")

graph = workflow.compile()

for chunk in graph.stream(
    {
        "messages": [
            {
                "role": "user",
                "content": "What does Lilian Weng say about types of reward hacking?",
            }
        ]
    }
):
    for node, update in chunk.items():
        print("Update from node", node)
        update["messages"][-1].pretty_print()
        print("\n\n")
