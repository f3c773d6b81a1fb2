"""ragtrail's LangChain instrumentation against the anchors, on one offline pipeline.

Pipeline (the same objects in every mode): a 3,000-chunk InMemoryVectorStore (deterministic hash
embeddings) → ``VectorStoreRetriever`` k=100 → ``ContextualCompressionRetriever`` with a
``DocumentCompressorPipeline`` of ``EmbeddingsFilter`` (similarity threshold) and
``CrossEncoderReranker`` (a deterministic word-overlap cross-encoder, top_n=10) → a context budget
(a plain function keeping 5 documents within a character limit).

Modes, each in a fresh process so no instrumentor leaks into another:
  none           no instrumentation (the baseline)
  ragtrail       ragtrail_langchain (no code change for LangChain) + ``@ragtrail.pipeline`` and
                 ``@ragtrail.budgeter`` on the two plain functions (custom code uses the decorators)
  openinference  openinference-instrumentation-langchain
  openllmetry    opentelemetry-instrumentation-langchain (Traceloop)
All use one SDK TracerProvider with a BatchSpanProcessor into an in-memory exporter; after the run
the exported spans are counted: spans, candidates with scores, exclusions with reasons, query hops,
receipts.

Run (the anchors live only in .venv-bench):
    .venv-bench/bin/python benchmarks/bench_langchain_anchors.py --queries 150 --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from typing import Any

from _recorded import count_span, new_stats

MODES = ("none", "ragtrail", "openinference", "openllmetry")
N_CHUNKS = 3000
DIM = 256
THRESHOLD = 0.12
BUDGET_CHARS = 1200
RERANK_TOP_N = 10
BUDGET_DOCS = 5


# --- the application ----------------------------------------------------------------------------------
def build_app(mode: str):
    from langchain_classic.retrievers import ContextualCompressionRetriever
    from langchain_classic.retrievers.document_compressors import (
        CrossEncoderReranker,
        DocumentCompressorPipeline,
        EmbeddingsFilter,
    )
    from langchain_core.cross_encoders import BaseCrossEncoder
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.vectorstores import InMemoryVectorStore

    @functools.cache
    def bucket(word: str) -> int:
        return int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % DIM

    class HashEmbeddings(Embeddings):
        def _vector(self, text: str) -> list[float]:
            vector = [0.0] * DIM
            for word in text.split():
                vector[bucket(word)] += 1.0
            norm = math.sqrt(sum(x * x for x in vector)) or 1.0
            return [x / norm for x in vector]

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [self._vector(t) for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return self._vector(text)

    class OverlapCrossEncoder(BaseCrossEncoder):
        def score(self, text_pairs: list[tuple[str, str]]) -> list[float]:
            out = []
            for query, passage in text_pairs:
                words = passage.split()
                out.append(len(set(query.split()) & set(words)) / (1.0 + len(words)) ** 0.5)
            return out

    rng = random.Random(7)
    vocabulary = [f"w{i}" for i in range(600)]
    weights = [1.0 / (i + 1) ** 0.8 for i in range(len(vocabulary))]
    texts = [" ".join(rng.choices(vocabulary, weights, k=rng.randint(20, 45))) for _ in range(N_CHUNKS)]
    store = InMemoryVectorStore(HashEmbeddings())
    store.add_documents([Document(page_content=t, id=f"c{i}", metadata={"source": f"doc{i // 10}"}) for i, t in enumerate(texts)])
    retriever = ContextualCompressionRetriever(
        base_retriever=store.as_retriever(search_kwargs={"k": 100}),
        base_compressor=DocumentCompressorPipeline(
            transformers=[
                EmbeddingsFilter(embeddings=HashEmbeddings(), k=None, similarity_threshold=THRESHOLD),
                CrossEncoderReranker(model=OverlapCrossEncoder(), top_n=RERANK_TOP_N),
            ]
        ),
    )

    def budget(documents: list, limit: int = BUDGET_CHARS) -> list:
        kept, used = [], 0
        for doc in documents:
            if len(kept) == BUDGET_DOCS or used + len(doc.page_content) > limit:
                continue
            kept.append(doc)
            used += len(doc.page_content)
        return kept

    def answer(query: str) -> list:
        return budget(retriever.invoke(query))

    if mode == "ragtrail":
        import ragtrail

        budget = ragtrail.budgeter(limit=BUDGET_CHARS, unit="chars")(budget)
        answer = ragtrail.pipeline(answer)
    queries = [" ".join(rng.choices(vocabulary[:200], k=5)) for _ in range(1000)]
    return answer, queries


# --- one mode in this process --------------------------------------------------------------------------
def instrument(mode: str, provider: Any) -> None:
    if mode == "ragtrail":
        from ragtrail.instrumentation.langchain import LangChainInstrumentor

        LangChainInstrumentor().instrument(tracer_provider=provider)
    elif mode == "openinference":
        from openinference.instrumentation.langchain import LangChainInstrumentor

        LangChainInstrumentor().instrument(tracer_provider=provider)
    elif mode == "openllmetry":
        from opentelemetry.instrumentation.langchain import LangchainInstrumentor

        LangchainInstrumentor().instrument(tracer_provider=provider)


def count(spans: list[Any]) -> dict[str, int]:
    """What the exported spans say, whoever wrote them (benchmarks/_recorded.py), plus what the SDK
    evicted and OpenLLMetry's documents serialised as one JSON string."""
    stats, hops = new_stats(lost=0), set()
    for span in spans:
        attributes = count_span(span, stats, hops)
        # what the SDK evicted (count limits): attributes/events the backend will never see
        stats["lost"] += span.dropped_attributes + span.dropped_events
        output = attributes.get("traceloop.entity.output")  # OpenLLMetry: documents as one JSON string
        if isinstance(output, str) and output.startswith('{"documents"'):
            with contextlib.suppress(ValueError, KeyError, TypeError):
                stats["candidates"] += len(json.loads(output)["documents"])
    return stats


def worker(mode: str, queries: int, warmup: int) -> dict[str, Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=1_000_000, max_export_batch_size=512, schedule_delay_millis=200))
    if mode != "none":
        from opentelemetry import trace

        trace.set_tracer_provider(provider)
    instrument(mode, provider)
    answer, pool = build_app(mode)
    for q in pool[:warmup]:
        answer(q)
    provider.force_flush()
    exporter.clear()
    timings, cpu = [], []
    sizes = []
    for q in pool[warmup : warmup + queries]:
        start, start_cpu = time.perf_counter(), time.thread_time()
        out = answer(q)
        cpu.append(time.thread_time() - start_cpu)  # this thread only: robust on a shared machine
        timings.append(time.perf_counter() - start)
        sizes.append(len(out))
    provider.force_flush()
    spans = list(exporter.get_finished_spans())
    stats = count(spans) if mode != "none" else dict(spans=0, candidates=0, scored=0, exclusions=0, reasons=0, hops=0, receipts=0, lost=0)
    return {
        "mode": mode,
        "wall": timings,
        "cpu": cpu,
        "mean_docs_out": statistics.mean(sizes),
        "per_query": {k: v / queries for k, v in stats.items()},
    }


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Pool the rounds of one mode (rounds are interleaved across modes, so load drift on a shared
    machine hits every mode alike)."""
    wall = sorted(t for r in runs for t in r["wall"])
    cpu = sorted(t for r in runs for t in r["cpu"])
    return {
        "p50_ms": statistics.median(wall) * 1e3,
        "p95_ms": wall[int(0.95 * (len(wall) - 1))] * 1e3,
        "cpu_p50_ms": statistics.median(cpu) * 1e3,
        "cpu_p95_ms": cpu[int(0.95 * (len(cpu) - 1))] * 1e3,
        "mean_docs_out": statistics.mean(r["mean_docs_out"] for r in runs),
        "per_query": runs[-1]["per_query"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=150, help="measured queries per mode and round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every mode")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(worker(args.mode, args.queries, args.warmup)))
        return
    runs: dict[str, list[dict[str, Any]]] = {}
    modes = args.modes.split(",")
    for _ in range(args.rounds):
        for mode in modes:
            env = dict(os.environ, OTEL_SDK_DISABLED="false", TRACELOOP_TELEMETRY="false")
            proc = subprocess.run(
                [sys.executable, __file__, "--mode", mode, "--queries", str(args.queries), "--warmup", str(args.warmup)],
                capture_output=True,
                text=True,
                env=env,
            )
            if proc.returncode != 0:
                print(f"{mode}: failed\n{proc.stderr[-3000:]}", file=sys.stderr)
                continue
            runs.setdefault(mode, []).append(json.loads(proc.stdout.strip().splitlines()[-1]))
    results = {mode: summarise(r) for mode, r in runs.items()}
    base = results.get("none")

    def ratio(r: dict[str, Any], key: str) -> float:
        return r[key] / base[key] if base else float("nan")

    print("latency per query (wall clock, and CPU time of the calling thread), x = ratio to none")
    print(f"{'mode':<14}{'p50 ms':>9}{'p95 ms':>9}{'x p50':>7}{'x p95':>7}{'cpu p50':>9}{'cpu p95':>9}{'x cpu50':>8}{'x cpu95':>8}")
    for mode, r in results.items():
        print(
            f"{mode:<14}{r['p50_ms']:>9.2f}{r['p95_ms']:>9.2f}{ratio(r, 'p50_ms'):>7.2f}{ratio(r, 'p95_ms'):>7.2f}"
            f"{r['cpu_p50_ms']:>9.2f}{r['cpu_p95_ms']:>9.2f}{ratio(r, 'cpu_p50_ms'):>8.2f}{ratio(r, 'cpu_p95_ms'):>8.2f}"
        )
    print("recorded per query (from the exported spans)")
    print(f"{'mode':<14}{'spans':>7}{'cands':>7}{'scored':>8}{'excl':>6}{'reasons':>8}{'hops':>6}{'receipts':>9}{'lost':>6}")
    for mode, r in results.items():
        q = r["per_query"]
        print(
            f"{mode:<14}{q['spans']:>7.1f}{q['candidates']:>7.1f}{q['scored']:>8.1f}{q['exclusions']:>6.1f}"
            f"{q['reasons']:>8.1f}{q['hops']:>6.1f}{q['receipts']:>9.1f}{q['lost']:>6.1f}"
        )
    print(
        "(counts are per query, from the exported spans; docs out per query:",
        ", ".join(f"{m}={r['mean_docs_out']:.1f}" for m, r in results.items()) + ")",
    )


if __name__ == "__main__":
    main()
