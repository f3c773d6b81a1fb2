# Source: Haystack "Get Started" -> "Build your first RAG application"
#   (https://docs.haystack.deepset.ai/docs/get-started): InMemoryDocumentStore with three
#   Documents, InMemoryBM25Retriever -> ChatPromptBuilder -> chat generator, the question
#   "Who lives in Paris?", results["llm"]["replies"].
# Offline swaps: OpenAIChatGenerator (API key) -> a component with the same run(messages) ->
#   {"replies": [ChatMessage]} contract answering from a fixed list.
from haystack import Document, Pipeline, component
from haystack.components.builders import ChatPromptBuilder
from haystack.components.retrievers import InMemoryBM25Retriever
from haystack.dataclasses import ChatMessage
from haystack.document_stores.in_memory import InMemoryDocumentStore


@component
class FakeChatGenerator:
    """Offline stand-in for OpenAIChatGenerator: replies from a fixed list."""

    def __init__(self, replies):
        self.replies = list(replies)

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage]):
        return {"replies": [ChatMessage.from_assistant(self.replies.pop(0))]}


document_store = InMemoryDocumentStore()
document_store.write_documents(
    [
        Document(content="My name is Jean and I live in Paris."),
        Document(content="My name is Mark and I live in Berlin."),
        Document(content="My name is Giorgio and I live in Rome."),
    ]
)

prompt_template = [
    ChatMessage.from_system(
        """
    Given these documents, answer the question.
    Documents:
    {% for doc in documents %}
        {{ doc.content }}
    {% endfor %}
    Question:
    """
    ),
    ChatMessage.from_user("{{question}}"),
    ChatMessage.from_system("Answer:"),
]

retriever = InMemoryBM25Retriever(document_store=document_store)
prompt_builder = ChatPromptBuilder(template=prompt_template, required_variables="*")
llm = FakeChatGenerator(replies=["Jean lives in Paris."])

rag_pipeline = Pipeline()
rag_pipeline.add_component("retriever", retriever)
rag_pipeline.add_component("prompt_builder", prompt_builder)
rag_pipeline.add_component("llm", llm)
rag_pipeline.connect("retriever", "prompt_builder.documents")
rag_pipeline.connect("prompt_builder", "llm.messages")

question = "Who lives in Paris?"
results = rag_pipeline.run(
    {
        "retriever": {"query": question},
        "prompt_builder": {"question": question},
    }
)

for reply in results["llm"]["replies"]:
    print(reply.text)
