# Source: Haystack tutorial "Preprocessing Different File Types" / the "Creating Pipelines" page's
#   indexing pipeline (https://docs.haystack.deepset.ai/docs/creating-pipelines): DocumentCleaner ->
#   DocumentSplitter(split_by="sentence") -> DocumentWriter into an InMemoryDocumentStore, then the
#   "Get Started" query pipeline (InMemoryBM25Retriever -> PromptBuilder -> generator) over it.
# Offline swaps: the file converters over downloaded files -> Documents built inline;
#   split_by="sentence" (needs NLTK data downloaded) -> split_by="period";
#   OpenAIGenerator -> a component with the same run(prompt) -> {"replies": [str]} contract.
from haystack import Document, Pipeline, component
from haystack.components.builders import PromptBuilder
from haystack.components.preprocessors import DocumentCleaner, DocumentSplitter
from haystack.components.retrievers import InMemoryBM25Retriever
from haystack.components.writers import DocumentWriter
from haystack.document_stores.in_memory import InMemoryDocumentStore


@component
class FakeGenerator:
    """Offline stand-in for OpenAIGenerator: replies from a fixed list."""

    def __init__(self, replies):
        self.replies = list(replies)

    @component.output_types(replies=list[str])
    def run(self, prompt: str):
        return {"replies": [self.replies.pop(0)]}


document_store = InMemoryDocumentStore()

indexing = Pipeline()
indexing.add_component("cleaner", DocumentCleaner())
indexing.add_component("splitter", DocumentSplitter(split_by="period", split_length=1))
indexing.add_component("writer", DocumentWriter(document_store=document_store))
indexing.connect("cleaner", "splitter")
indexing.connect("splitter", "writer")
result = indexing.run(
    {
        "cleaner": {
            "documents": [
                Document(
                    content="The Colossus of Rhodes was a statue of Helios.  It stood about 33 metres high. An earthquake destroyed it in 226 BC.",
                    meta={"file": "colossus.txt"},
                ),
                Document(
                    content="The Great Pyramid of Giza is the oldest of the Seven Wonders. It was built as a tomb.", meta={"file": "pyramid.txt"}
                ),
            ]
        }
    }
)
print("written:", result["writer"]["documents_written"])

template = """
Given the following information, answer the question.

Context:
{% for document in documents %}
    {{ document.content }}
{% endfor %}

Question: {{question}}
Answer:
"""
query = Pipeline()
query.add_component("retriever", InMemoryBM25Retriever(document_store=document_store, top_k=3))
query.add_component("prompt_builder", PromptBuilder(template=template, required_variables="*"))
query.add_component("llm", FakeGenerator(replies=["It stood about 33 metres high."]))
query.connect("retriever", "prompt_builder.documents")
query.connect("prompt_builder", "llm")

question = "How high was the Colossus of Rhodes?"
response = query.run({"retriever": {"query": question}, "prompt_builder": {"question": question}})
print(response["llm"]["replies"][0])
