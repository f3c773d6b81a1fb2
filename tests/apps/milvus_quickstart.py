# Source: Milvus's quickstart (https://milvus.io/docs/quickstart.md: MilvusClient("milvus_demo.db"),
#   create_collection(collection_name="demo_collection", dimension=...), insert rows with "id",
#   "vector", "text" and "subject", client.search(..., limit=2, output_fields=["text", "subject"]),
#   then the same search with filter="subject == 'history'").
# Offline swaps: the quickstart's pymilvus[model] DefaultEmbeddingFunction (a model download) -> a
#   fixed 4-dim vector per document (the search is the point, not the embedding).
from pymilvus import MilvusClient

client = MilvusClient("milvus_demo.db")
if client.has_collection(collection_name="demo_collection"):
    client.drop_collection(collection_name="demo_collection")
client.create_collection(collection_name="demo_collection", dimension=4)

docs = [
    ("Artificial intelligence was founded as an academic discipline in 1956.", "history", [0.9, 0.1, 0.0, 0.1]),
    ("Alan Turing was the first person to conduct substantial research in AI.", "history", [0.8, 0.3, 0.1, 0.0]),
    ("Born in Maida Vale, London, Turing was raised in southern England.", "biology", [0.1, 0.9, 0.2, 0.0]),
]
data = [{"id": i, "vector": v, "text": t, "subject": s} for i, (t, s, v) in enumerate(docs)]
client.insert(collection_name="demo_collection", data=data)

query_vectors = [[0.85, 0.2, 0.05, 0.05]]
res = client.search(collection_name="demo_collection", data=query_vectors, limit=2, output_fields=["text", "subject"])
for hit in res[0]:
    print(hit["id"], round(hit["distance"], 4), hit["entity"]["subject"])

res = client.search(collection_name="demo_collection", data=query_vectors, filter="subject == 'biology'", limit=2, output_fields=["text", "subject"])
for hit in res[0]:
    print(hit["id"], round(hit["distance"], 4), hit["entity"]["subject"])
client.close()
