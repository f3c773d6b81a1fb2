"""ragtrail's Haystack instrumentation against the anchors, on one offline pipeline.

Pipeline (the same components in every mode), on a 1,000-chunk ``InMemoryDocumentStore``:
``QueryExpander`` (a scripted chat generator: 2 expansions per query) → ``MultiQueryTextRetriever``
over ``InMemoryBM25Retriever`` top_k=20, plus ``InMemoryEmbeddingRetriever`` top_k=20 on the raw query
(deterministic hash embeddings) → ``DocumentJoiner`` (reciprocal rank fusion, top_k=30) →
``MetaFieldRanker`` (meta ``year``, missing_meta=drop, top_k=15) → ``LostInTheMiddleRanker``
(word_count_threshold=150, top_k=10).

Modes, each in a fresh process so no instrumentor leaks into another:
  none           no instrumentation (the baseline)
  ragtrail       ragtrail_haystack (no code change)
  openinference  openinference-instrumentation-haystack
  openllmetry    opentelemetry-instrumentation-haystack (Traceloop)
All use one SDK TracerProvider with a BatchSpanProcessor into an in-memory exporter; after the run
the exported spans are counted: spans, candidates with scores, exclusions with reasons, query hops,
receipts.

Run (the anchors live only in .venv-bench):
    .venv-bench/bin/python benchmarks/bench_haystack_anchors.py --queries 100 --rounds 3
    .venv-bench/bin/python benchmarks/bench_haystack_anchors.py --paired --queries 200
"""

from __future__ import annotations

import argparse
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
N_CHUNKS = 1000
DIM = 256

VOCABULARY = [f"w{i}" for i in range(600)]


@functools.cache
def bucket(word: str) -> int:
    return int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % DIM


def vector(text: str) -> list[float]:
    v = [0.0] * DIM
    for word in text.split():
        v[bucket(word)] += 1.0
    norm = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / norm for x in v]


# module-level components: OpenInference re-resolves each component class by module and name
from haystack import component  # noqa: E402
from haystack.dataclasses import ChatMessage  # noqa: E402


@component
class HashEmbedder:
    @component.output_types(embedding=list[float])
    def run(self, text: str):
        return {"embedding": vector(text)}


@component
class ScriptedChatGenerator:
    """The LLM behind QueryExpander: two deterministic variants of the query in the prompt."""

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage]):
        r = random.Random(messages[-1].text)
        variants = [" ".join(r.choices(VOCABULARY[:200], k=5)) for _ in range(2)]
        return {"replies": [ChatMessage.from_assistant(json.dumps({"queries": variants}))]}


def build_app():
    import logging

    logging.getLogger("haystack").setLevel(logging.ERROR)  # MetaFieldRanker warns on every dropped doc
    from haystack import Document, Pipeline
    from haystack.components.joiners import DocumentJoiner
    from haystack.components.query import QueryExpander
    from haystack.components.rankers import LostInTheMiddleRanker, MetaFieldRanker
    from haystack.components.retrievers import MultiQueryTextRetriever
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    rng = random.Random(7)
    vocabulary = VOCABULARY
    weights = [1.0 / (i + 1) ** 0.8 for i in range(len(vocabulary))]
    store = InMemoryDocumentStore(embedding_similarity_function="cosine")
    docs = []
    for i in range(N_CHUNKS):
        text = " ".join(rng.choices(vocabulary, weights, k=rng.randint(20, 45)))
        meta = {"year": 2000 + i % 25} if i % 7 else {}
        docs.append(Document(id=f"c{i}", content=text, meta=meta, embedding=vector(text)))
    store.write_documents(docs)

    p = Pipeline()
    p.add_component("expander", QueryExpander(chat_generator=ScriptedChatGenerator(), n_expansions=2))
    p.add_component("multi", MultiQueryTextRetriever(retriever=InMemoryBM25Retriever(store, top_k=20)))
    p.add_component("embedder", HashEmbedder())
    p.add_component("dense", InMemoryEmbeddingRetriever(store, top_k=20))
    p.add_component("joiner", DocumentJoiner(join_mode="reciprocal_rank_fusion", top_k=30))
    p.add_component("meta", MetaFieldRanker(meta_field="year", missing_meta="drop", top_k=15))
    p.add_component("litm", LostInTheMiddleRanker(word_count_threshold=150, top_k=10))
    p.connect("expander.queries", "multi.queries")
    p.connect("embedder.embedding", "dense.query_embedding")
    p.connect("multi", "joiner")
    p.connect("dense", "joiner")
    p.connect("joiner", "meta")
    p.connect("meta", "litm")

    def answer(query: str) -> list:
        return p.run({"expander": {"query": query}, "embedder": {"text": query}})["litm"]["documents"]

    queries = [" ".join(rng.choices(vocabulary[:200], k=5)) for _ in range(1000)]
    return answer, queries


def instrument(mode: str, provider: Any) -> None:
    if mode == "ragtrail":
        from ragtrail.instrumentation.haystack import HaystackInstrumentor
    elif mode == "openinference":
        from openinference.instrumentation.haystack import HaystackInstrumentor
    elif mode == "openllmetry":
        from opentelemetry.instrumentation.haystack import HaystackInstrumentor
    else:
        return
    HaystackInstrumentor().instrument(tracer_provider=provider)


def count(spans: list[Any]) -> dict[str, int]:
    """What the exported spans say, whoever wrote them (benchmarks/_recorded.py)."""
    stats, hops = new_stats(), set()
    for span in spans:
        count_span(span, stats, hops)
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
    answer, pool = build_app()
    for q in pool[:warmup]:
        answer(q)
    provider.force_flush()
    exporter.clear()
    timings, sizes = [], []
    for q in pool[warmup : warmup + queries]:
        start = time.perf_counter()
        out = answer(q)
        timings.append(time.perf_counter() - start)
        sizes.append(len(out))
    provider.force_flush()
    spans = list(exporter.get_finished_spans())
    stats = count(spans) if mode != "none" else dict(spans=0, candidates=0, scored=0, exclusions=0, reasons=0, hops=0, receipts=0)
    timings.sort()
    return {
        "mode": mode,
        "p50_ms": statistics.median(timings) * 1e3,
        "p95_ms": timings[int(0.95 * (len(timings) - 1))] * 1e3,
        "mean_docs_out": statistics.mean(sizes),
        "per_query": {k: v / queries for k, v in stats.items()},
    }


def paired(queries: int, warmup: int) -> dict[str, Any]:
    """ragtrail's own cost, robust to a busy machine: one process, one pipeline, each query run
    twice back to back, recorded and inside ``suppress_instrumentation()`` (ragtrail's wrappers then
    call straight through), alternating which goes first; the median of the per-pair differences."""
    from opentelemetry.instrumentation.utils import suppress_instrumentation
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=1_000_000, max_export_batch_size=512, schedule_delay_millis=200))
    instrument("ragtrail", provider)
    answer, pool = build_app()
    for q in pool[:warmup]:
        answer(q)

    def timed(q: str, on: bool) -> float:
        start = time.perf_counter()
        if on:
            answer(q)
        else:
            with suppress_instrumentation():
                answer(q)
        return time.perf_counter() - start

    diffs, offs = [], []
    for i, q in enumerate(pool[warmup : warmup + queries]):
        if i % 2:
            off, on = timed(q, False), timed(q, True)
        else:
            on, off = timed(q, True), timed(q, False)
        diffs.append(on - off)
        offs.append(off)
        if i % 50 == 49:
            provider.force_flush()
            exporter.clear()
    return {"overhead_ms_p50": statistics.median(diffs) * 1e3, "baseline_ms_p50": statistics.median(offs) * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--paired", action="store_true", help="only ragtrail's own cost, paired in one process")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(worker(args.mode, args.queries, args.warmup)))
        return
    if args.paired:
        r = paired(args.queries, args.warmup)
        print(
            f"ragtrail overhead per query (paired, median): {r['overhead_ms_p50']:.2f} ms "
            f"on a {r['baseline_ms_p50']:.1f} ms pipeline run ({r['overhead_ms_p50'] / r['baseline_ms_p50']:.1%})"
        )
        return
    results: dict[str, Any] = {}
    failed: set[str] = set()
    # modes alternate over rounds and each keeps its best round: on a shared 2-core machine a
    # neighbour's burst lands on one mode's run, not on all of them
    for _ in range(args.rounds):
        for mode in args.modes.split(","):
            if mode in failed:
                continue
            env = dict(os.environ, OTEL_SDK_DISABLED="false", TRACELOOP_TELEMETRY="false", HAYSTACK_TELEMETRY_ENABLED="False")
            proc = subprocess.run(
                [sys.executable, __file__, "--mode", mode, "--queries", str(args.queries), "--warmup", str(args.warmup)],
                capture_output=True,
                text=True,
                env=env,
            )
            if proc.returncode != 0:
                print(f"{mode}: failed\n{proc.stderr[-3000:]}", file=sys.stderr)
                failed.add(mode)
                continue
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            if mode not in results or result["p50_ms"] < results[mode]["p50_ms"]:
                results[mode] = result
    base = results.get("none")
    print(
        f"{'mode':<14}{'p50 ms':>9}{'p95 ms':>9}{'x p50':>7}{'x p95':>7}{'spans':>7}{'cands':>7}{'scored':>8}"
        f"{'excl':>6}{'reasons':>8}{'hops':>6}{'receipts':>9}"
    )
    for mode, r in results.items():
        ratio50 = r["p50_ms"] / base["p50_ms"] if base else float("nan")
        ratio95 = r["p95_ms"] / base["p95_ms"] if base else float("nan")
        q = r["per_query"]
        print(
            f"{mode:<14}{r['p50_ms']:>9.2f}{r['p95_ms']:>9.2f}{ratio50:>7.2f}{ratio95:>7.2f}{q['spans']:>7.1f}"
            f"{q['candidates']:>7.1f}{q['scored']:>8.1f}{q['exclusions']:>6.1f}{q['reasons']:>8.1f}{q['hops']:>6.1f}"
            f"{q['receipts']:>9.1f}"
        )
    print(
        "(counts are per query, from the exported spans; docs out per query:",
        ", ".join(f"{m}={r['mean_docs_out']:.1f}" for m, r in results.items()) + ")",
    )


if __name__ == "__main__":
    main()
