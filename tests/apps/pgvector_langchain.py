# Source: langchain-postgres' README / the PGVector integration page
#   (https://python.langchain.com/docs/integrations/vectorstores/pgvector/: PGVector(embeddings=...,
#   collection_name=..., connection="postgresql+psycopg://...", use_jsonb=True), add_documents(docs,
#   ids=[doc.metadata["id"] ...]), similarity_search_with_score(query, k=...), filter={"topic": ...},
#   as_retriever(search_type="mmr", search_kwargs={"k": 1}) -> here the default similarity retriever).
# Offline swaps: OpenAIEmbeddings -> langchain_core's DeterministicFakeEmbedding (the docs' own testing
#   stand-in); the connection string's host is the local PostgreSQL's socket directory, read from
#   libpq's PGHOST/PGUSER variables that the test sets.
import os

from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_postgres import PGVector

connection = f"postgresql+psycopg://{os.environ['PGUSER']}@/langchain?host={os.environ['PGHOST']}"
collection_name = "my_docs"

vector_store = PGVector(
    embeddings=DeterministicFakeEmbedding(size=64),
    collection_name=collection_name,
    connection=connection,
    use_jsonb=True,
)

docs = [
    Document(page_content="there are cats in the pond", metadata={"id": 1, "location": "pond", "topic": "animals"}),
    Document(page_content="ducks are also found in the pond", metadata={"id": 2, "location": "pond", "topic": "animals"}),
    Document(page_content="fresh apples are available at the market", metadata={"id": 3, "location": "market", "topic": "food"}),
    Document(page_content="the market also sells fresh oranges", metadata={"id": 4, "location": "market", "topic": "food"}),
    Document(page_content="the new art exhibit is fascinating", metadata={"id": 5, "location": "museum", "topic": "art"}),
]
vector_store.add_documents(docs, ids=[str(doc.metadata["id"]) for doc in docs])

results = vector_store.similarity_search_with_score(query="cats", k=2, filter={"topic": {"$eq": "animals"}})
for doc, score in results:
    print(doc.id, round(score, 4), doc.page_content)

retriever = vector_store.as_retriever(search_kwargs={"k": 3})
for doc in retriever.invoke("kitty"):
    print(doc.id, doc.page_content)
