# Source: Pinecone's Python quickstart (https://docs.pinecone.io/guides/get-started/quickstart, the
#   serverless index "quickstart": create_index(dimension=2, metric="cosine", spec=ServerlessSpec(...)),
#   wait until describe_index says ready, pc.Index(index_name), upsert three vectors into each of
#   "example-namespace1" and "example-namespace2", describe_index_stats, query(namespace=...,
#   vector=[1.0, 1.5], top_k=3, include_values=True)) and its metadata filtering guide
#   (https://docs.pinecone.io/guides/search/filter-by-metadata: a "genre" on each record,
#   query(..., filter={"genre": {"$eq": "documentary"}}, include_metadata=True)).
# Offline swaps: Pinecone's control plane -> PINECONE_CONTROLLER_HOST (the client's documented
#   setting for it), set by the test to a loopback HTTP server; the index host it describes is the
#   same server. It answers with Pinecone's documented response bodies. The API key is a dummy.
import os
import time

from pinecone import Pinecone, ServerlessSpec

pc = Pinecone(api_key=os.environ.get("PINECONE_API_KEY", "YOUR_API_KEY"))

index_name = "quickstart"
pc.create_index(name=index_name, dimension=2, metric="cosine", spec=ServerlessSpec(cloud="aws", region="us-east-1"))
while not pc.describe_index(index_name).status["ready"]:
    time.sleep(1)

index = pc.Index(index_name)

index.upsert(
    vectors=[
        {"id": "vec1", "values": [1.0, 1.5], "metadata": {"genre": "drama"}},
        {"id": "vec2", "values": [2.0, 1.0], "metadata": {"genre": "documentary"}},
        {"id": "vec3", "values": [0.1, 3.0], "metadata": {"genre": "documentary"}},
    ],
    namespace="example-namespace1",
)
index.upsert(
    vectors=[
        {"id": "vec1", "values": [1.0, -2.5], "metadata": {"genre": "drama"}},
        {"id": "vec2", "values": [3.0, -2.0], "metadata": {"genre": "documentary"}},
        {"id": "vec3", "values": [0.5, -1.5], "metadata": {"genre": "comedy"}},
    ],
    namespace="example-namespace2",
)
print("vectors", index.describe_index_stats().total_vector_count)

query_results1 = index.query(namespace="example-namespace1", vector=[1.0, 1.5], top_k=3, include_values=True)
for match in query_results1.matches:
    print("ns1", match.id, match.score, match.values)

query_results2 = index.query(namespace="example-namespace2", vector=[1.0, -2.5], top_k=3, include_values=True)
for match in query_results2.matches:
    print("ns2", match.id, match.score, match.values)

filtered = index.query(
    namespace="example-namespace1",
    vector=[1.0, 1.5],
    top_k=3,
    filter={"genre": {"$eq": "documentary"}},
    include_metadata=True,
)
for match in filtered.matches:
    print("filtered", match.id, match.score, match.metadata["genre"])
