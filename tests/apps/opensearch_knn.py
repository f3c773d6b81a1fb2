# Source: opensearch-py's k-NN guide (https://github.com/opensearch-project/opensearch-py/blob/main/
#   guides/plugins/knn.md) and its samples samples/knn/knn-efficient-filter.py (the "hotels-index"
#   with a lucene HNSW l2 "location" knn_vector, the twelve hotels bulk-indexed with helpers.bulk, the
#   search for the three hotels nearest [5, 4] rated 8-10 with parking) and
#   samples/knn/knn-boolean-filter.py (the boolean post-filter: a bool query whose must is the knn
#   and whose filter is outside it), plus the guide's plain nearest-neighbours search, all on the
#   hotels. The client is configured as the samples do (HOST and PORT environment variables).
# Offline swaps: the OpenSearch cluster -> HOST/PORT set by the test to a loopback HTTP server
#   answering with OpenSearch's documented response bodies; use_ssl=False (the loopback server speaks
#   plain HTTP; the samples use TLS without verifying certificates); keyword arguments for
#   indices.exists/create (opensearch-py 3 takes no positional ones).
import os

from opensearchpy import OpenSearch, helpers

host = os.getenv("HOST", default="localhost")
port = int(os.getenv("PORT", 9200))
auth = (os.getenv("USERNAME", "admin"), os.getenv("PASSWORD", "admin"))

client = OpenSearch(hosts=[{"host": host, "port": port}], http_auth=auth, use_ssl=False)

index_name = "hotels-index"
if not client.indices.exists(index=index_name):
    client.indices.create(
        index=index_name,
        body={
            "settings": {"index.knn": True, "knn.algo_param.ef_search": 100, "number_of_shards": 1, "number_of_replicas": 0},
            "mappings": {
                "properties": {
                    "location": {
                        "type": "knn_vector",
                        "dimension": 2,
                        "method": {"name": "hnsw", "space_type": "l2", "engine": "lucene", "parameters": {"ef_construction": 100, "m": 16}},
                    },
                }
            },
        },
    )

vectors = [
    {"_index": "hotels-index", "_id": "1", "location": [5.2, 4.4], "parking": "true", "rating": 5},
    {"_index": "hotels-index", "_id": "2", "location": [5.2, 3.9], "parking": "false", "rating": 4},
    {"_index": "hotels-index", "_id": "3", "location": [4.9, 3.4], "parking": "true", "rating": 9},
    {"_index": "hotels-index", "_id": "4", "location": [4.2, 4.6], "parking": "false", "rating": 6},
    {"_index": "hotels-index", "_id": "5", "location": [3.3, 4.5], "parking": "true", "rating": 8},
    {"_index": "hotels-index", "_id": "6", "location": [6.4, 3.4], "parking": "true", "rating": 9},
    {"_index": "hotels-index", "_id": "7", "location": [4.2, 6.2], "parking": "true", "rating": 5},
    {"_index": "hotels-index", "_id": "8", "location": [2.4, 4.0], "parking": "true", "rating": 8},
    {"_index": "hotels-index", "_id": "9", "location": [1.4, 3.2], "parking": "false", "rating": 5},
    {"_index": "hotels-index", "_id": "10", "location": [7.0, 9.9], "parking": "true", "rating": 9},
    {"_index": "hotels-index", "_id": "11", "location": [3.0, 2.3], "parking": "false", "rating": 6},
    {"_index": "hotels-index", "_id": "12", "location": [5.0, 1.0], "parking": "true", "rating": 3},
]
helpers.bulk(client, vectors)
client.indices.refresh(index=index_name)

search_query = {"size": 3, "query": {"knn": {"location": {"vector": [5, 4], "k": 3}}}}
results = client.search(index=index_name, body=search_query)
for hit in results["hits"]["hits"]:
    print("knn", hit["_id"], hit["_score"], hit["_source"]["rating"])

search_query = {
    "size": 3,
    "query": {
        "knn": {
            "location": {
                "vector": [5, 4],
                "k": 3,
                "filter": {"bool": {"must": [{"range": {"rating": {"gte": 8, "lte": 10}}}, {"term": {"parking": "true"}}]}},
            }
        }
    },
}
results = client.search(index=index_name, body=search_query)
for hit in results["hits"]["hits"]:
    print("efficient", hit["_id"], hit["_score"], hit["_source"]["rating"])

search_query = {
    "query": {
        "bool": {
            "filter": {"bool": {"must": [{"term": {"parking": "true"}}]}},
            "must": {"knn": {"location": {"vector": [5, 4], "k": 5}}},
        }
    }
}
results = client.search(index=index_name, body=search_query)
for hit in results["hits"]["hits"]:
    print("boolean", hit["_id"], hit["_score"], hit["_source"]["rating"])

client.indices.delete(index=index_name)
