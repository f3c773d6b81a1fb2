# Source: Haystack "DocumentJoiner" component page
#   (https://docs.haystack.deepset.ai/docs/documentjoiner), "In a pipeline": a hybrid pipeline whose
#   InMemoryBM25Retriever and InMemoryEmbeddingRetriever both feed one DocumentJoiner, run once per
#   join mode the page lists (concatenate, reciprocal_rank_fusion, distribution_based_rank_fusion)
#   with top_k=3, then merge with the page's weights parameter (weights=[0.3, 0.7]).
# Offline swaps: SentenceTransformersDocumentEmbedder / SentenceTransformersTextEmbedder -> two small
#   @component embedders over a deterministic bag of words (no model download); the page's documents
#   -> six inline ones.
from dataclasses import replace

from haystack import Document, Pipeline, component
from haystack.components.joiners import DocumentJoiner
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever
from haystack.document_stores.in_memory import InMemoryDocumentStore

VOCAB = ["solar", "wind", "electricity", "turbines", "panels", "coal", "fossil", "batteries", "night", "water"]


def bag_of_words(text):
    words = [w.strip(".,?").lower() for w in text.split()]
    vector = [float(words.count(term)) for term in VOCAB]
    norm = sum(v * v for v in vector) ** 0.5 or 1.0
    return [v / norm for v in vector]


@component
class WordsDocumentEmbedder:
    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]):
        return {"documents": [replace(doc, embedding=bag_of_words(doc.content)) for doc in documents]}


@component
class WordsTextEmbedder:
    @component.output_types(embedding=list[float])
    def run(self, text: str):
        return {"embedding": bag_of_words(text)}


documents = [
    Document(content="Solar panels convert sunlight into electricity."),
    Document(content="Wind turbines convert wind into electricity."),
    Document(content="Hydropower uses flowing water to make electricity."),
    Document(content="Coal and gas are fossil fuels."),
    Document(content="Batteries store solar and wind electricity for the night."),
    Document(content="Geothermal energy is heat from inside the earth."),
]
document_store = InMemoryDocumentStore(embedding_similarity_function="cosine")
document_store.write_documents(WordsDocumentEmbedder().run(documents)["documents"])

query = "solar electricity at night"
for join_mode in ["concatenate", "reciprocal_rank_fusion", "distribution_based_rank_fusion", "merge"]:
    weights = [0.3, 0.7] if join_mode == "merge" else None
    pipeline = Pipeline()
    pipeline.add_component("text_embedder", WordsTextEmbedder())
    pipeline.add_component("embedding_retriever", InMemoryEmbeddingRetriever(document_store, top_k=3))
    pipeline.add_component("bm25_retriever", InMemoryBM25Retriever(document_store, top_k=3))
    pipeline.add_component("joiner", DocumentJoiner(join_mode=join_mode, weights=weights, top_k=3))
    pipeline.connect("text_embedder", "embedding_retriever")
    pipeline.connect("bm25_retriever", "joiner")
    pipeline.connect("embedding_retriever", "joiner")
    result = pipeline.run({"text_embedder": {"text": query}, "bm25_retriever": {"query": query}})
    print(join_mode)
    for doc in result["joiner"]["documents"]:
        print(doc.content, round(doc.score, 4))
