"""Per-call cost of the vector-store instrumentations (chromadb, qdrant, faiss), issue 4.

Each case times the same store call bare (instrumentation suppressed), instrumented and recorded (real
SDK, a span processor that discards), and instrumented under a sampled-out parent. Prints medians in
microseconds and the added cost. Usage::

    .venv/bin/python benchmarks/bench_vectorstores.py --repeat 300
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from opentelemetry import trace
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased


class Discard(SpanExporter):
    def export(self, spans: list[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def median_us(fn: Callable[[], Any], repeat: int) -> float:
    for _ in range(min(20, repeat)):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000


def cases() -> list[tuple[str, Callable[[], Any]]]:
    import chromadb
    import faiss
    from chromadb.api.types import EmbeddingFunction
    from chromadb.config import Settings
    from qdrant_client import QdrantClient, models

    rng = np.random.default_rng(0)
    data = rng.standard_normal((10_000, 64)).astype("float32")
    flat = faiss.IndexFlatL2(64)
    flat.add(data)
    one = rng.standard_normal((1, 64)).astype("float32")
    hundred = rng.standard_normal((100, 64)).astype("float32")

    class Hash(EmbeddingFunction):
        def __init__(self) -> None:
            pass

        def __call__(self, input: Any) -> Any:  # noqa: A002
            out = []
            for text in input:
                v = np.zeros(64, dtype="float32")
                for w in text.split():
                    v[int(hashlib.sha256(w.encode()).hexdigest(), 16) % 64] += 1
                out.append(v)
            return out

        @staticmethod
        def name() -> str:
            return "bench-hash"

        def get_config(self) -> dict:
            return {}

        @staticmethod
        def build_from_config(config: dict) -> Hash:
            return Hash()

    chroma = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
    col = chroma.create_collection("bench-docs", embedding_function=Hash())
    col.add(ids=[f"d{i}" for i in range(2000)], embeddings=data[:2000], documents=[f"doc {i}" for i in range(2000)])

    qdrant = QdrantClient(location=":memory:")
    qdrant.create_collection("bench", vectors_config=models.VectorParams(size=64, distance=models.Distance.COSINE))
    qdrant.upsert("bench", points=[models.PointStruct(id=i, vector=data[i].tolist(), payload={"text": f"doc {i}"}) for i in range(2000)])
    q = one[0].tolist()
    return [
        ("faiss IndexFlatL2 10k x 64, 1 query, k=10", lambda: flat.search(one, 10)),
        ("faiss IndexFlatL2 10k x 64, 1 query, k=1000", lambda: flat.search(one, 1000)),
        ("faiss IndexFlatL2 10k x 64, 100 queries, k=10", lambda: flat.search(hundred, 10)),
        ("chroma Ephemeral 2k docs, 1 embedding, n=10", lambda: col.query(query_embeddings=one, n_results=10)),
        ("qdrant :memory: 2k points, query_points limit=10", lambda: qdrant.query_points("bench", query=q, limit=10)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()

    from ragtrail.instrumentation.chromadb import ChromaInstrumentor
    from ragtrail.instrumentation.faiss import FaissInstrumentor
    from ragtrail.instrumentation.qdrant import QdrantInstrumentor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Discard()))
    trace.set_tracer_provider(provider)
    off = TracerProvider(sampler=ParentBased(ALWAYS_OFF))
    for inst in (FaissInstrumentor(), ChromaInstrumentor(), QdrantInstrumentor()):
        inst.instrument(tracer_provider=provider)
    parent = off.get_tracer("bench").start_span("sampled-out")
    sampled_out_ctx = trace.set_span_in_context(parent)

    print(f"{'case':52s} {'bare':>9s} {'recorded':>9s} {'added':>9s} {'sampled-out':>12s}")
    for name, fn in cases():

        def bare(fn: Callable[[], Any] = fn) -> Any:
            with suppress_instrumentation():
                return fn()

        def sampled_out(fn: Callable[[], Any] = fn) -> Any:
            from opentelemetry import context

            token = context.attach(sampled_out_ctx)
            try:
                return fn()
            finally:
                context.detach(token)

        b = median_us(bare, args.repeat)
        r = median_us(fn, args.repeat)
        s = median_us(sampled_out, args.repeat)
        print(f"{name:52s} {b:9.1f} {r:9.1f} {r - b:9.1f} {s - b:12.1f}")


if __name__ == "__main__":
    main()
