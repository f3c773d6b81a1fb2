# Source: Haystack tutorial "Creating Your First QA Pipeline with Retrieval-Augmentation"
#   (https://haystack.deepset.ai/tutorials/27_first_rag_pipeline): documents written to an
#   InMemoryDocumentStore, a retriever, the tutorial's PromptBuilder template, a generator,
#   basic_rag_pipeline connected retriever -> prompt_builder.documents -> llm, the question
#   "What does Rhodes Statue look like?", response["llm"]["replies"][0] printed.
# Offline swaps: the "bilgeyucel/seven-wonders" dataset -> four inline Documents; the
#   SentenceTransformers document/text embedders + InMemoryEmbeddingRetriever -> InMemoryBM25Retriever
#   (no model download); OpenAIGenerator (API key) -> a component with the same run(prompt) ->
#   {"replies": [str], "meta": [dict]} contract answering from a fixed list.
from haystack import Document, Pipeline, component
from haystack.components.builders import PromptBuilder
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore


@component
class FakeGenerator:
    """Offline stand-in for OpenAIGenerator: replies from a fixed list."""

    def __init__(self, replies):
        self.replies = list(replies)

    @component.output_types(replies=list[str], meta=list[dict])
    def run(self, prompt: str):
        return {"replies": [self.replies.pop(0)], "meta": [{"model": "fake"}]}


document_store = InMemoryDocumentStore()
docs = [
    Document(
        content="The Colossus of Rhodes was a statue of the Greek sun-god Helios, about 33 metres high, with a bronze skin over an iron frame.",
        meta={"name": "colossus"},
    ),
    Document(content="The Great Pyramid of Giza is the oldest of the Seven Wonders and the only one still standing.", meta={"name": "pyramid"}),
    Document(content="The Lighthouse of Alexandria guided ships into the harbour with a fire at its top.", meta={"name": "lighthouse"}),
    Document(content="The Hanging Gardens of Babylon were terraces of trees and plants watered by machines.", meta={"name": "gardens"}),
]
document_store.write_documents(docs)

retriever = InMemoryBM25Retriever(document_store, top_k=2)

template = """
Given the following information, answer the question.

Context:
{% for document in documents %}
    {{ document.content }}
{% endfor %}

Question: {{question}}
Answer:
"""

prompt_builder = PromptBuilder(template=template, required_variables=["question", "documents"])
generator = FakeGenerator(replies=["It was a 33 metre bronze statue of the sun-god Helios."])

basic_rag_pipeline = Pipeline()
basic_rag_pipeline.add_component("retriever", retriever)
basic_rag_pipeline.add_component("prompt_builder", prompt_builder)
basic_rag_pipeline.add_component("llm", generator)
basic_rag_pipeline.connect("retriever", "prompt_builder.documents")
basic_rag_pipeline.connect("prompt_builder", "llm")

question = "What does Rhodes Statue look like?"
response = basic_rag_pipeline.run({"retriever": {"query": question}, "prompt_builder": {"question": question}})
print(response["llm"]["replies"][0])
