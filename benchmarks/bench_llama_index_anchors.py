"""ragtrail's LlamaIndex instrumentation against the anchors, on one offline pipeline.

Pipeline (the same objects in every mode, real llama-index-core): a 3,000-chunk ``VectorStoreIndex``
in memory (deterministic hash embeddings, a real ``BaseEmbedding`` subclass) → ``RetrieverQueryEngine``
with ``similarity_top_k=100`` → ``SimilarityPostprocessor`` (cutoff) → ``LLMRerank`` (``top_n=10``,
batches of 10; the "LLM" is a deterministic word-overlap scorer standing in for a hosted model) →
``SimpleSummarize`` whose ``PromptHelper.truncate`` cuts the joined context to a window that holds
about 5 chunks (the budget) → the scripted LLM's answer.

Modes, each in a fresh process so no instrumentor leaks into another:
  none           no instrumentation (the baseline)
  ragtrail       ragtrail_llama_index (no code change)
  openinference  openinference-instrumentation-llama-index (Arize)
  openllmetry    opentelemetry-instrumentation-llamaindex (Traceloop)
All use one SDK TracerProvider with a BatchSpanProcessor into an exporter that drops the spans during
the timed queries (as a network exporter lets them go; a growing in-memory list would bill every mode
for garbage collection over it), then counts, on 20 further untimed queries, what the exported spans
say: spans, candidates (and how many with a score), exclusions (and how many with a reason), query
hops and receipts — from whatever form each tool writes them in.

Run (the anchors live only in .venv-bench):
    .venv-bench/bin/python benchmarks/bench_llama_index_anchors.py --queries 150 --rounds 3
    .venv-bench/bin/python benchmarks/bench_llama_index_anchors.py --modes ragtrail --rounds 1 --profile 15
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _recorded import count_span, new_stats

MODES = ("none", "ragtrail", "openinference", "openllmetry")
N_CHUNKS = 3000
DIM = 128
TOP_K = 100
CUTOFF = 0.25
RERANK_TOP_N = 10
COUNTED_QUERIES = 20
CONTEXT_WINDOW = 420  # num_output=64 and the QA template leave room for about 5 chunks of ~70 tokens


def _tiktoken_offline() -> None:
    import llama_index.core

    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(Path(llama_index.core.__file__).parent / "_static" / "tiktoken_cache"))


# --- the application ----------------------------------------------------------------------------------
def build_app():
    _tiktoken_offline()
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
    from llama_index.core.llms.callbacks import llm_completion_callback
    from llama_index.core.llms.custom import CustomLLM
    from llama_index.core.postprocessor import LLMRerank, SimilarityPostprocessor
    from llama_index.core.schema import TextNode

    @functools.cache
    def bucket(word: str) -> int:
        return int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % DIM

    def vector(text: str) -> list[float]:
        v = [0.0] * DIM
        for word in text.split():
            v[bucket(word)] += 1.0
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / norm for x in v]

    class HashEmbedding(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return vector(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return vector(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return vector(text)

    document = re.compile(r"Document (\d+):\n(.*?)(?=\n\nDocument \d+:|\nQuestion: )", re.S)

    class OverlapLLM(CustomLLM):
        """The hosted LLM's stand-in: a choice-select prompt is answered by word overlap (top 3 of
        the batch, relevance 1-10); anything else gets a fixed answer."""

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(context_window=CONTEXT_WINDOW, num_output=64, model_name="overlap")

        def _reply(self, prompt: str) -> str:
            if "Let's try this now" not in prompt:
                return "An answer built from the context."
            tail = prompt.split("Let's try this now", 1)[1]
            question = set(tail.rsplit("Question: ", 1)[1].split("\n", 1)[0].split())
            scored = []
            for number, text in document.findall(tail):
                words = text.split()
                scored.append((len(question & set(words)) / (1.0 + len(words)) ** 0.5, int(number)))
            scored.sort(reverse=True)
            return "\n".join(f"Doc: {n}, Relevance: {max(1, min(10, round(s * 20)))}" for s, n in scored[:3])

        @llm_completion_callback()
        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            return CompletionResponse(text=self._reply(prompt))

        @llm_completion_callback()
        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any):
            yield CompletionResponse(text=self._reply(prompt), delta=self._reply(prompt))

    rng = random.Random(7)
    vocabulary = [f"w{i}" for i in range(600)]
    weights = [1.0 / (i + 1) ** 0.8 for i in range(len(vocabulary))]
    texts = [" ".join(rng.choices(vocabulary, weights, k=rng.randint(20, 45))) for _ in range(N_CHUNKS)]
    nodes = [TextNode(text=t, id_=f"c{i}", metadata={"source": f"doc{i // 10}"}) for i, t in enumerate(texts)]
    index = VectorStoreIndex(nodes, embed_model=HashEmbedding())
    llm = OverlapLLM()
    engine = index.as_query_engine(
        llm=llm,
        similarity_top_k=TOP_K,
        response_mode="simple_summarize",
        node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=CUTOFF), LLMRerank(llm=llm, top_n=RERANK_TOP_N, choice_batch_size=10)],
    )
    queries = [" ".join(rng.choices(vocabulary[:200], k=5)) for _ in range(1000)]
    return engine.query, queries


# --- one mode in this process --------------------------------------------------------------------------
def instrument(mode: str, provider: Any) -> None:
    if mode == "ragtrail":
        from ragtrail.instrumentation.llama_index import LlamaIndexInstrumentor

        LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    elif mode == "openinference":
        from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

        LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    elif mode == "openllmetry":
        from opentelemetry.instrumentation.llamaindex import LlamaIndexInstrumentor

        LlamaIndexInstrumentor().instrument(tracer_provider=provider)


_BLOB_ID = re.compile(r"id_\W{1,6}([\w-]+)")
_BLOB_SCORE = re.compile(r"score\W{1,6}-?\d")
_OUTPUT_KEYS = ("output.value", "traceloop.entity.output")


class CountingExporter:
    """A span exporter that counts what the spans say and then drops them, as a real exporter lets
    them go: keeping every span in memory would grow the heap and bill every mode for the extra
    garbage-collection work on it.

    ``candidates``/``scored``: structured per-document records a backend can query — ragtrail's
    ``ragtrail.candidate`` events, OpenInference's flattened ``retrieval.documents.N.document.*`` /
    ``reranker.*_documents.N.document.*`` attributes (once per N; ragtrail's own Phoenix mirror is not
    counted again). ``blob_ids``/``blob_scores``: node ids and scores that only appear inside a
    serialised output text (OpenInference's ``output.value`` reprs, OpenLLMetry's
    ``traceloop.entity.output`` JSON): recorded, but as text, not as data."""

    def __init__(self) -> None:
        self.stats = new_stats(blob_ids=0, blob_scores=0)
        self.hops: set[tuple[int, int]] = set()
        self.budget_out: list[int] = []
        self.counting = True

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        if self.counting:
            for span in spans:
                self._count(span)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def reset(self) -> None:
        self.__init__()  # counting again

    def _count(self, span: Any) -> None:
        attributes = count_span(span, self.stats, self.hops)
        if attributes.get("ragtrail.stage.kind") == "budget":
            self.budget_out.append(attributes["ragtrail.candidates.out"])
        if "ragtrail.schema" not in attributes:
            for key in _OUTPUT_KEYS:
                value = attributes.get(key)
                if isinstance(value, str):
                    self.stats["blob_ids"] += len(_BLOB_ID.findall(value))
                    self.stats["blob_scores"] += len(_BLOB_SCORE.findall(value))


def worker(mode: str, queries: int, warmup: int, profile: int) -> dict[str, Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporter = CountingExporter()
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
    exporter.reset()
    exporter.counting = False  # timed queries: spans are exported and dropped uncounted
    if profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        for q in pool[warmup : warmup + profile]:
            answer(q)
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(45)
        return {"mode": mode, "profiled": profile}
    timings = []
    sizes = []
    cpu_start = time.process_time()
    for q in pool[warmup : warmup + queries]:
        start = time.perf_counter()
        response = answer(q)
        timings.append(time.perf_counter() - start)
        sizes.append(len(response.source_nodes))
    provider.force_flush()
    cpu_ms = (time.process_time() - cpu_start) * 1e3 / queries  # all threads, export included
    # then what the spans say, on separate (untimed) queries
    exporter.reset()
    counted = pool[warmup + queries : warmup + queries + COUNTED_QUERIES]
    for q in counted:
        answer(q)
    provider.force_flush()
    timings.sort()
    return {
        "mode": mode,
        "p50_ms": statistics.median(timings) * 1e3,
        "p95_ms": timings[int(0.95 * (len(timings) - 1))] * 1e3,
        "cpu_ms": cpu_ms,
        "mean_source_nodes": statistics.mean(sizes),
        "mean_in_budget": statistics.mean(exporter.budget_out) if exporter.budget_out else None,
        "per_query": {k: v / len(counted) for k, v in exporter.stats.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--rounds", type=int, default=3, help="runs per mode, interleaved; medians are shown")
    parser.add_argument("--profile", type=int, default=0, help="cProfile this many queries per mode instead of timing")
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(worker(args.mode, args.queries, args.warmup, args.profile)))
        return
    rounds: dict[str, list[dict[str, Any]]] = {}
    for _ in range(args.rounds):
        # modes interleaved round by round, so a change in machine load hits every mode alike
        for mode in args.modes.split(","):
            env = dict(os.environ, OTEL_SDK_DISABLED="false", TRACELOOP_TELEMETRY="false")
            proc = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--mode",
                    mode,
                    "--queries",
                    str(args.queries),
                    "--warmup",
                    str(args.warmup),
                    "--profile",
                    str(args.profile),
                ],
                capture_output=True,
                text=True,
                env=env,
            )
            if proc.returncode != 0:
                print(f"{mode}: failed\n{proc.stderr[-3000:]}", file=sys.stderr)
                continue
            if args.profile:
                print(f"=== {mode} ===\n{proc.stderr}")
                continue
            rounds.setdefault(mode, []).append(json.loads(proc.stdout.strip().splitlines()[-1]))
    if args.profile:
        return
    results = {}
    for mode, runs in rounds.items():
        merged = dict(runs[-1])
        for key in ("p50_ms", "p95_ms", "cpu_ms"):
            merged[key] = statistics.median(r[key] for r in runs)
        results[mode] = merged
    base = results.get("none")
    header = (
        f"{'mode':<14}{'p50 ms':>8}{'p95 ms':>8}{'x p50':>7}{'x p95':>7}{'CPU ms':>8}{'x CPU':>7}{'spans':>7}{'cands':>7}{'scored':>7}"
        f"{'blob ids':>9}{'blob sc':>8}{'excl':>6}{'reasons':>8}{'hops':>6}{'receipts':>9}"
    )
    print(header)
    for mode, r in results.items():
        ratio50 = r["p50_ms"] / base["p50_ms"] if base else float("nan")
        ratio95 = r["p95_ms"] / base["p95_ms"] if base else float("nan")
        q = r["per_query"]
        ratio_cpu = r["cpu_ms"] / base["cpu_ms"] if base else float("nan")
        print(
            f"{mode:<14}{r['p50_ms']:>8.1f}{r['p95_ms']:>8.1f}{ratio50:>7.2f}{ratio95:>7.2f}{r['cpu_ms']:>8.1f}{ratio_cpu:>7.2f}{q['spans']:>7.1f}"
            f"{q['candidates']:>7.1f}{q['scored']:>7.1f}{q['blob_ids']:>9.1f}{q['blob_scores']:>8.1f}"
            f"{q['exclusions']:>6.1f}{q['reasons']:>8.1f}{q['hops']:>6.1f}{q['receipts']:>9.1f}"
        )
    in_budget = results.get("ragtrail", {}).get("mean_in_budget")
    print(
        "(counts are per query, from the exported spans; source_nodes per query:",
        ", ".join(f"{m}={r['mean_source_nodes']:.1f}" for m, r in results.items())
        + (f"; chunks kept whole or cut by the budget: {in_budget:.1f})" if in_budget is not None else ")"),
    )


if __name__ == "__main__":
    main()
