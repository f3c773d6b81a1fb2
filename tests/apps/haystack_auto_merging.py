# Source: Haystack "AutoMergingRetriever" component page and API reference
#   (https://docs.haystack.deepset.ai/docs/automergingretriever): HierarchicalDocumentSplitter(
#   block_sizes={10, 3}, split_overlap=0, split_by="word"), the leaf documents (no children) written to
#   one InMemoryDocumentStore and the parents to another, an InMemoryBM25Retriever over the leaves into
#   AutoMergingRetriever(parent store, threshold=0.5); "In a pipeline" with a PromptBuilder and a generator
#   as in Haystack's "first RAG pipeline".
# Offline swaps: OpenAIGenerator (API key) -> a component with the same run(prompt) -> replies.
from haystack import Document, Pipeline, component
from haystack.components.builders import PromptBuilder
from haystack.components.preprocessors import HierarchicalDocumentSplitter
from haystack.components.retrievers import AutoMergingRetriever
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.document_stores.types import DuplicatePolicy


@component
class FakeGenerator:
    """Offline stand-in for OpenAIGenerator: one fixed reply."""

    @component.output_types(replies=list[str], meta=list[dict])
    def run(self, prompt: str):
        return {"replies": ["The birds began to sing in the warm morning."], "meta": [{"model": "fake"}]}


def indexing(documents):
    splitter = HierarchicalDocumentSplitter(block_sizes={10, 3}, split_overlap=0, split_by="word")
    docs = splitter.run(documents)["documents"]
    leaf_documents = [doc for doc in docs if not doc.meta["__children_ids"]]
    leaf_doc_store = InMemoryDocumentStore()
    leaf_doc_store.write_documents(leaf_documents, policy=DuplicatePolicy.OVERWRITE)
    parent_documents = [doc for doc in docs if doc.meta["__children_ids"]]
    parent_doc_store = InMemoryDocumentStore()
    parent_doc_store.write_documents(parent_documents, policy=DuplicatePolicy.OVERWRITE)
    return leaf_doc_store, parent_doc_store


docs = [
    Document(content="The sun rose early in the morning. It cast a warm glow over the trees. Birds began to sing."),
    Document(content="The harbour was quiet at night. Fishing boats rested on the water until dawn."),
]
leaf_doc_store, parent_doc_store = indexing(docs)

template = """Given these documents, answer the question.
{% for doc in documents %}{{ doc.content }}
{% endfor %}Question: {{ query }}
Answer:"""

pipeline = Pipeline()
pipeline.add_component("bm25_retriever", InMemoryBM25Retriever(document_store=leaf_doc_store, top_k=4))
pipeline.add_component("retriever", AutoMergingRetriever(parent_doc_store, threshold=0.5))
pipeline.add_component("prompt_builder", PromptBuilder(template=template, required_variables=["query", "documents"]))
pipeline.add_component("llm", FakeGenerator())
pipeline.connect("bm25_retriever.documents", "retriever.documents")
pipeline.connect("retriever.documents", "prompt_builder.documents")
pipeline.connect("prompt_builder", "llm")

query = "Birds began to sing over the warm glow of the water"
result = pipeline.run({"bm25_retriever": {"query": query}, "prompt_builder": {"query": query}}, include_outputs_from={"bm25_retriever", "retriever"})
for doc in result["bm25_retriever"]["documents"]:
    print("bm25", doc.id[:8], doc.meta["__level"], repr(doc.content))
for doc in result["retriever"]["documents"]:
    print("merged", doc.id[:8], doc.meta["__level"], repr(doc.content))
print(result["llm"]["replies"][0])
