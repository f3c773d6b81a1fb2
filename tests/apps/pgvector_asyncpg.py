# Source: pgvector-python's README, section "asyncpg" (https://github.com/pgvector/pgvector-python#asyncpg:
#   register_vector(conn), CREATE TABLE items (id bigserial PRIMARY KEY, embedding vector(3)), numpy
#   embeddings inserted with $1, "SELECT * FROM items ORDER BY embedding <-> $1 LIMIT 5", and "or with a
#   connection pool": asyncpg.create_pool(..., init=init) with init calling register_vector).
# Offline swaps: none. The server is found by libpq's own PGHOST/PGUSER variables (set by the test to
#   its local PostgreSQL's socket directory), which asyncpg.connect(database=...) reads too. Added: a
#   cosine-distance query with the distance selected and a WHERE filter, run through the pool, from the
#   same README's operator list.
import asyncio

import asyncpg
import numpy as np
from pgvector.asyncpg import register_vector


async def init(conn):
    await register_vector(conn)


async def main():
    conn = await asyncpg.connect(database="pgvector_example")
    await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    await register_vector(conn)

    await conn.execute("DROP TABLE IF EXISTS items")
    await conn.execute("CREATE TABLE items (id bigserial PRIMARY KEY, embedding vector(3))")

    for embedding in (np.array([1, 2, 3]), np.array([1, 1, 1]), np.array([4, 5, 6]), np.array([9, 0, 1])):
        await conn.execute("INSERT INTO items (embedding) VALUES ($1)", embedding)

    embedding = np.array([1, 1, 2])
    for row in await conn.fetch("SELECT * FROM items ORDER BY embedding <-> $1 LIMIT 5", embedding):
        print(row["id"], row["embedding"])
    await conn.close()

    pool = await asyncpg.create_pool(database="pgvector_example", init=init)
    async with pool:
        rows = await pool.fetch("SELECT id, embedding <=> $1 AS distance FROM items WHERE id <> $2 ORDER BY distance LIMIT 2", embedding, 2)
        for row in rows:
            print(row["id"], round(row["distance"], 4))


asyncio.run(main())
