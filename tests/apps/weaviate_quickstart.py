# Source: Weaviate's "Quickstart: Bring your own vectors" (https://docs.weaviate.io/weaviate/starter-guides/custom-vectors:
#   weaviate.connect_to_local(), create the "Question" collection with Configure.Vectors.self_provided(),
#   import the Jeopardy questions with their vectors (DataObject(properties=..., vector=...), insert_many),
#   then questions.query.near_vector(near_vector=query_vector, limit=2, return_metadata=MetadataQuery(distance=True)))
#   and the search pages it links: a filter (https://docs.weaviate.io/weaviate/search/filters:
#   filters=Filter.by_property("category").equal(...)), keyword search (https://docs.weaviate.io/weaviate/search/bm25:
#   query.bm25(query=..., limit=3, return_metadata=MetadataQuery(score=True))) and hybrid search
#   (https://docs.weaviate.io/weaviate/search/hybrid: query.hybrid(query=..., vector=..., limit=3, ...)),
#   the quickstart's RAG step (generate.near_vector(near_vector=query_vector, limit=2, grouped_task="Write a
#   tweet with emojis about these facts."), printing response.generative.text) and the basic search page's
#   fetch with a filter and a sort (https://docs.weaviate.io/weaviate/search/basics and its "Sorting" section:
#   query.fetch_objects(limit=..., filters=..., sort=Sort.by_property(name="answer", ascending=True))).
# Offline swaps: the guide downloads jeopardy_tiny_with_vectors (1536-dim OpenAI vectors) with requests ->
#   the same shape from data/jeopardy_tiny_with_vectors.json, eight of its questions with fixed 4-dim vectors;
#   the query vector the guide embeds with OpenAI -> a fixed 4-dim vector near "biology"; the server's ports
#   (Docker's 8080/50051 in the guide) come from WEAVIATE_PORT / WEAVIATE_GRPC_PORT; object ids are
#   generate_uuid5 of each question (Weaviate's documented deterministic ids) so both runs print the same;
#   the guide's generative model (a provider's API) -> Weaviate's own offline "generative-dummy" module.
import json
import os

import weaviate
from weaviate.classes.config import Configure
from weaviate.classes.data import DataObject
from weaviate.classes.query import Filter, MetadataQuery, Sort
from weaviate.util import generate_uuid5

client = weaviate.connect_to_local(port=int(os.environ.get("WEAVIATE_PORT", "8080")), grpc_port=int(os.environ.get("WEAVIATE_GRPC_PORT", "50051")))

try:
    if client.collections.exists("Question"):
        client.collections.delete("Question")
    client.collections.create(
        "Question", vector_config=Configure.Vectors.self_provided(), generative_config=Configure.Generative.custom("generative-dummy")
    )

    with open("data/jeopardy_tiny_with_vectors.json") as f:
        data = json.load(f)
    question_objs = []
    for d in data:
        properties = {"answer": d["Answer"], "question": d["Question"], "category": d["Category"]}
        question_objs.append(DataObject(properties=properties, vector=d["Vector"], uuid=generate_uuid5(d["Question"])))
    questions = client.collections.get("Question")
    questions.data.insert_many(question_objs)

    query_vector = [0.2, 0.95, 0.05, 0.0]

    response = questions.query.near_vector(near_vector=query_vector, limit=2, return_metadata=MetadataQuery(distance=True))
    for o in response.objects:
        print(o.uuid, round(o.metadata.distance, 4), o.properties["answer"])
    print()

    response = questions.query.near_vector(
        near_vector=query_vector, limit=2, filters=Filter.by_property("category").equal("ANIMALS"), return_metadata=MetadataQuery(distance=True)
    )
    for o in response.objects:
        print(o.uuid, round(o.metadata.distance, 4), o.properties["answer"])
    print()

    response = questions.query.bm25(query="species", limit=3, return_metadata=MetadataQuery(score=True))
    for o in response.objects:
        print(o.uuid, round(o.metadata.score, 4), o.properties["answer"])
    print()

    response = questions.query.hybrid(query="species", vector=query_vector, limit=3, return_metadata=MetadataQuery(score=True))
    for o in response.objects:
        print(o.uuid, round(o.metadata.score, 4), o.properties["answer"])
    print()

    response = questions.generate.near_vector(near_vector=query_vector, limit=2, grouped_task="Write a tweet with emojis about these facts.")
    print(response.generative.text)
    print()

    response = questions.query.fetch_objects(
        limit=2, filters=Filter.by_property("category").equal("ANIMALS"), sort=Sort.by_property(name="answer", ascending=True)
    )
    for o in response.objects:
        print(o.uuid, o.properties["answer"])
    print()
finally:
    client.close()
