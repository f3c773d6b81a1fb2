# Source: Haystack API reference, "Retrievers" > InMemoryBM25Retriever
#   (https://docs.haystack.deepset.ai/reference/retrievers-api): the usage example as written (two
#   documents, `retriever.run(query="Programmiersprache")`), then the same retriever with the
#   documented `scale_score=True` ("Scales the BM25 score to a unit interval in the range of 0 to 1")
#   and the documented `filters` argument at run time.
# Offline swaps: none (BM25 in memory needs no model); a third document with a `lang` field so the
#   filter has something to drop; the scores printed rounded.
from haystack import Document
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore

docs = [
    Document(content="Python is a popular programming language", meta={"lang": "en"}),
    Document(content="python ist eine beliebte Programmiersprache", meta={"lang": "de"}),
    Document(content="Programmiersprache und Python: eine Einführung", meta={"lang": "de"}),
]

doc_store = InMemoryDocumentStore()
doc_store.write_documents(docs)
retriever = InMemoryBM25Retriever(doc_store)

result = retriever.run(query="Programmiersprache")
print([round(float(d.score), 4) for d in result["documents"]])

scaled = InMemoryBM25Retriever(doc_store, top_k=2, scale_score=True)
result = scaled.run(query="Programmiersprache Einführung", filters={"field": "meta.lang", "operator": "==", "value": "de"})
print([round(float(d.score), 4) for d in result["documents"]])
