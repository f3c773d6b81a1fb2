"""Issue 25's garbage-collector benchmark: how often the host's GC runs per query, and why.

The users'-shaped pipeline of benchmarks/bench_users_pipeline.py (the same corpus, pipeline, SDK
``BatchSpanProcessor`` and encoding exporter), one framework x mode per fresh process, after a warm-up:
  collections  ``gc.callbacks`` counting every collection by generation over ``--queries`` timed
               queries, and the wall ms per query spent inside them (the GC's own settings untouched)
  peak         the most GC-counted objects alive at once during a query, above the count at its start
               (``gc.get_count()[0]`` at every Python call and return, under ``sys.setprofile``; the
               collector is switched off in this diagnostic process only, after the timed part, so
               the count is not reset; the profiler's own frames add a few dozen, alike for every
               mode), median of ``--peak-queries`` queries, and the tracked objects alive at the last
               query's peak by type. A young generation collection runs whenever that count passes
               its threshold (700 by default), so a query whose peak is above it pays one per query.
  --thresholds T,...  (a what-if, off by default) the collections per query with the threshold set
               to each T in this diagnostic process: what a peak that much lower would give.

    .venv/bin/python benchmarks/bench_gc.py --modes none,ragtrail,openinference
    .venv/bin/python benchmarks/bench_gc.py --smoke
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_users_pipeline as users  # noqa: E402


def _collections(run: Any, queries: list[str]) -> dict[str, Any]:
    counts: collections.Counter[int] = collections.Counter()
    spent: collections.Counter[int] = collections.Counter()
    started = [0.0]

    def observe(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            counts[info["generation"]] += 1
            started[0] = time.perf_counter()
        else:
            spent[info["generation"]] += time.perf_counter() - started[0]

    gc.callbacks.append(observe)
    try:
        for q in queries:
            run(q)
    finally:
        gc.callbacks.remove(observe)
    n = len(queries)
    return {"per_queries": n, "collections": [counts[g] for g in range(3)], "ms_per_query": [round(spent[g] * 1e3 / n, 3) for g in range(3)]}


def _peaks(run: Any, queries: list[str]) -> dict[str, Any]:
    state = {"max": 0, "snapped": 0}
    at_peak: collections.Counter[str] = collections.Counter()

    def watch(frame: Any, event: str, arg: Any) -> None:
        count = gc.get_count()[0]
        if count > state["max"]:
            state["max"] = count
            if count > state["snapped"] + 25:  # the types at (about) the peak, not at every new high
                state["snapped"] = count
                at_peak.clear()
                at_peak.update(type(o).__qualname__ for o in gc.get_objects(0))

    peaks = []
    gc.disable()
    try:
        for q in queries:
            gc.collect()
            state.update(max=0, snapped=0)
            base = gc.get_count()[0]
            sys.setprofile(watch)
            try:
                run(q)
            finally:
                sys.setprofile(None)
            peaks.append(state["max"] - base)
    finally:
        gc.enable()
    return {"peak_median": statistics.median(peaks), "peaks": peaks, "tracked_at_peak": dict(at_peak.most_common(20))}


def _what_if(run: Any, queries: list[str], thresholds: list[int]) -> dict[str, float]:
    out = {}
    original = gc.get_threshold()
    try:
        for t in thresholds:
            gc.collect()
            gc.set_threshold(t, *original[1:])
            out[str(t)] = _collections(run, queries)["collections"][0] / len(queries)
    finally:
        gc.set_threshold(*original)
    return out


def worker(framework: str, mode: str, queries: int, peak_queries: int, warmup: int, chunks: int, thresholds: list[int]) -> dict[str, Any]:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(users.EncodingExporter(mode)))
    trace.set_tracer_provider(provider)
    users.instrument(framework, mode, provider)
    texts, pool = users.corpus(chunks)
    run = users.build_langchain(texts) if framework == "langchain" else users.build_llama_index(texts)
    for q in pool[:warmup]:
        run(q)
    provider.force_flush()
    start = warmup
    result: dict[str, Any] = {"framework": framework, "mode": mode, **_collections(run, pool[start : start + queries])}
    start += queries
    result.update(_peaks(run, pool[start : start + peak_queries]))
    start += peak_queries
    if thresholds:
        result["what_if_collections_per_query"] = _what_if(run, pool[start : start + queries], thresholds)
    provider.shutdown()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--peak-queries", type=int, default=10)
    users.add_pipeline_arguments(parser, modes="none,ragtrail,openinference", frameworks="langchain")
    parser.add_argument("--thresholds", default="", help="comma-separated young-generation thresholds to try (a what-if)")
    parser.add_argument("--smoke", action="store_true", help="300 chunks, 5 queries, 2 peak queries")
    args = parser.parse_args()
    if args.smoke:
        args.queries, args.peak_queries, args.warmup, args.chunks = 5, 2, 2, 300
    thresholds = [int(t) for t in args.thresholds.split(",") if t]
    if args.worker:  # one framework:mode, in the fresh process run_worker started
        print(json.dumps(worker(*args.worker.split(":"), args.queries, args.peak_queries, args.warmup, args.chunks, thresholds)))
        return
    options = ["--queries", str(args.queries), "--peak-queries", str(args.peak_queries), "--warmup", str(args.warmup), "--chunks", str(args.chunks)]
    options += ["--thresholds", args.thresholds]
    results, failed = [], []
    for framework in args.frameworks.split(","):
        for mode in args.modes.split(","):
            result = users.run_worker(__file__, f"{framework}:{mode}", options, failed)
            if result is not None:
                results.append(result)
    print(json.dumps({"results": results, "failed": failed}))
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
