# Source: pgvector-python's README, section "Psycopg 2" (https://github.com/pgvector/pgvector-python#psycopg-2:
#   register_vector(conn), CREATE TABLE items (id bigserial PRIMARY KEY, embedding vector(3)), numpy
#   embeddings inserted with %s, "SELECT * FROM items ORDER BY embedding <-> %s LIMIT 5").
# Offline swaps: none. The server is found by libpq's own PGHOST/PGUSER variables (set by the test to
#   its local PostgreSQL's socket directory), as psycopg2.connect(dbname=...) does anywhere. Added: a
#   cosine-distance query with the distance selected, from the same README's operator list.
import numpy as np
import psycopg2
from pgvector.psycopg2 import register_vector

conn = psycopg2.connect(dbname="pgvector_example")
conn.autocommit = True
cur = conn.cursor()
cur.execute("CREATE EXTENSION IF NOT EXISTS vector")
register_vector(conn)

cur.execute("DROP TABLE IF EXISTS items")
cur.execute("CREATE TABLE items (id bigserial PRIMARY KEY, embedding vector(3))")

for embedding in (np.array([1, 2, 3]), np.array([1, 1, 1]), np.array([4, 5, 6]), np.array([9, 0, 1])):
    cur.execute("INSERT INTO items (embedding) VALUES (%s)", (embedding,))

embedding = np.array([1, 1, 2])
cur.execute("SELECT * FROM items ORDER BY embedding <-> %s LIMIT 5", (embedding,))
for row in cur.fetchall():
    print(row[0], row[1])

cur.execute("SELECT id, embedding <=> %s AS distance FROM items ORDER BY distance LIMIT 2", (embedding,))
for row in cur.fetchall():
    print(row[0], round(row[1], 4))
conn.close()
