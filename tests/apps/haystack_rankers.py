# Source: Haystack "MetaFieldRanker" and "LostInTheMiddleRanker" component pages
#   (https://docs.haystack.deepset.ai/docs/metafieldranker,
#   https://docs.haystack.deepset.ai/docs/lostinthemiddleranker), "In a pipeline": an
#   InMemoryBM25Retriever into MetaFieldRanker(meta_field="rating") (here with top_k=2), and an
#   InMemoryBM25Retriever into LostInTheMiddleRanker (here with word_count_threshold=20).
# Offline swaps: none needed (BM25 and the rankers run locally); the pages' documents -> the
#   MetaFieldRanker page's three cities with ratings and one without, worded so BM25 finds them all.
from haystack import Document, Pipeline
from haystack.components.rankers import LostInTheMiddleRanker, MetaFieldRanker
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore

docs = [
    Document(content="Paris is a city in Europe with many museums", meta={"rating": 1.3}),
    Document(content="Berlin is a city in Europe with many parks", meta={"rating": 0.7}),
    Document(content="Barcelona is a city in Europe by the sea", meta={"rating": 2.1}),
    Document(content="Lisbon is a city in Europe on seven hills"),
]
document_store = InMemoryDocumentStore()
document_store.write_documents(docs)

retriever = InMemoryBM25Retriever(document_store=document_store)
ranker = MetaFieldRanker(meta_field="rating", top_k=2)

document_ranker_pipeline = Pipeline()
document_ranker_pipeline.add_component(instance=retriever, name="retriever")
document_ranker_pipeline.add_component(instance=ranker, name="ranker")
document_ranker_pipeline.connect("retriever.documents", "ranker.documents")

query = "city in Europe"
result = document_ranker_pipeline.run(data={"retriever": {"query": query, "top_k": 4}, "ranker": {"top_k": 2}})
for doc in result["ranker"]["documents"]:
    print(doc.content, doc.meta.get("rating"))

lost_in_the_middle = Pipeline()
lost_in_the_middle.add_component("retriever", InMemoryBM25Retriever(document_store=document_store, top_k=4))
lost_in_the_middle.add_component("ranker", LostInTheMiddleRanker(word_count_threshold=20))
lost_in_the_middle.connect("retriever.documents", "ranker.documents")
result = lost_in_the_middle.run(data={"retriever": {"query": "museums in Europe"}})
for doc in result["ranker"]["documents"]:
    print(doc.content)
