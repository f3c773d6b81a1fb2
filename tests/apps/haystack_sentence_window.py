# Source: Haystack "SentenceWindowRetriever" component page
#   (https://docs.haystack.deepset.ai/docs/sentencewindowretrieval), "In a pipeline": a DocumentSplitter
#   cuts one text into sentences written to an InMemoryDocumentStore; an InMemoryBM25Retriever finds the
#   best sentence and the SentenceWindowRetriever hands on the sentences around it. Here with
#   window_size=1, into the PromptBuilder and a generator as in Haystack's "first RAG pipeline".
# Offline swaps: OpenAIGenerator (API key) -> a component with the same run(prompt) -> replies.
from haystack import Document, Pipeline, component
from haystack.components.builders import PromptBuilder
from haystack.components.preprocessors import DocumentSplitter
from haystack.components.retrievers import SentenceWindowRetriever
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore


@component
class FakeGenerator:
    """Offline stand-in for OpenAIGenerator: one fixed reply."""

    @component.output_types(replies=list[str], meta=list[dict])
    def run(self, prompt: str):
        return {"replies": ["The spice melange is found only on Arrakis."], "meta": [{"model": "fake"}]}


text = (
    "Paul fell asleep to dream of an endless desert. The desert was hot. Paul's mother was a Bene Gesserit. "
    "The spice melange is found only on Arrakis. Arrakis is also called Dune. The Fremen ride sandworms. "
    "Sandworms produce the spice. The Harkonnens ruled Arrakis before the Atreides."
)
splitter = DocumentSplitter(split_length=1, split_overlap=0, split_by="period")
doc_store = InMemoryDocumentStore()
doc_store.write_documents(splitter.run([Document(content=text)])["documents"])

template = """Given these documents, answer the question.
{% for doc in documents %}{{ doc.content }}
{% endfor %}Question: {{ query }}
Answer:"""

rag = Pipeline()
rag.add_component("bm25_retriever", InMemoryBM25Retriever(doc_store, top_k=1))
rag.add_component("sentence_window_retriever", SentenceWindowRetriever(document_store=doc_store, window_size=1))
rag.add_component("prompt_builder", PromptBuilder(template=template, required_variables=["query", "documents"]))
rag.add_component("llm", FakeGenerator())
rag.connect("bm25_retriever", "sentence_window_retriever")
rag.connect("sentence_window_retriever.context_documents", "prompt_builder.documents")
rag.connect("prompt_builder", "llm")

query = "Where is the spice found?"
result = rag.run({"bm25_retriever": {"query": query}, "prompt_builder": {"query": query}})
print(result["llm"]["replies"][0])
