# Source: Elasticsearch's kNN search guide, Python client tab
#   (https://www.elastic.co/docs/solutions/search/vector/knn: the "image-index" with "image-vector"
#   dense vectors (l2_norm), "title" and "file-type"; client.bulk(..., refresh=True) of the three
#   documents; client.search(knn={field, query_vector, k, num_candidates}, fields=[...]); the
#   filtered kNN search (knn.filter term file-type png); the hybrid search combining a match query
#   and a kNN clause with boosts) and its retrievers guide (https://www.elastic.co/docs/solutions/
#   search/retrievers-overview: the rrf retriever over a standard match query and a knn retriever).
# Offline swaps: the Elasticsearch cluster -> ELASTICSEARCH_URL (the client's documented way to point
#   at a cluster: `Elasticsearch(os.environ["ELASTICSEARCH_URL"])`), set by the test to a loopback
#   HTTP server answering with Elasticsearch's documented response bodies. The app's code is the
#   guide's.
import os

from elasticsearch import Elasticsearch

client = Elasticsearch(os.environ["ELASTICSEARCH_URL"])

client.indices.create(
    index="image-index",
    mappings={
        "properties": {
            "image-vector": {"type": "dense_vector", "dims": 3, "similarity": "l2_norm"},
            "title": {"type": "text"},
            "file-type": {"type": "keyword"},
        }
    },
)
client.bulk(
    index="image-index",
    refresh=True,
    operations=[
        {"index": {"_id": "1"}},
        {"image-vector": [1, 5, -20], "title": "moose family", "file-type": "jpg"},
        {"index": {"_id": "2"}},
        {"image-vector": [42, 8, -15], "title": "alpine lake", "file-type": "png"},
        {"index": {"_id": "3"}},
        {"image-vector": [15, 11, 23], "title": "full moon", "file-type": "jpg"},
    ],
)

resp = client.search(
    index="image-index",
    knn={"field": "image-vector", "query_vector": [-5, 9, -12], "k": 10, "num_candidates": 100},
    fields=["title", "file-type"],
)
for hit in resp["hits"]["hits"]:
    print("knn", hit["_id"], hit["_score"], hit["_source"]["title"])

resp = client.search(
    index="image-index",
    knn={
        "field": "image-vector",
        "query_vector": [54, 10, -2],
        "k": 5,
        "num_candidates": 50,
        "filter": {"term": {"file-type": "png"}},
    },
    fields=["title"],
)
for hit in resp["hits"]["hits"]:
    print("filtered", hit["_id"], hit["_score"], hit["_source"]["title"])

resp = client.search(
    index="image-index",
    query={"match": {"title": {"query": "mountain lake", "boost": 0.9}}},
    knn={"field": "image-vector", "query_vector": [54, 10, -2], "k": 5, "num_candidates": 50, "boost": 0.1},
    size=10,
)
for hit in resp["hits"]["hits"]:
    print("hybrid", hit["_id"], hit["_score"], hit["_source"]["title"])

resp = client.search(
    index="image-index",
    retriever={
        "rrf": {
            "retrievers": [
                {"standard": {"query": {"match": {"title": "mountain lake"}}}},
                {"knn": {"field": "image-vector", "query_vector": [54, 10, -2], "k": 5, "num_candidates": 50}},
            ],
            "rank_window_size": 50,
            "rank_constant": 20,
        }
    },
    size=3,
)
for hit in resp["hits"]["hits"]:
    print("rrf", hit["_id"], hit["_score"], hit["_source"]["title"])
client.close()
