"""Issue 25's receipt benchmark: a stage's receipt and events digest, pure Python against the native package.

The inputs are real: the stages of the users'-shaped LangChain pipeline of benchmarks/bench_users_pipeline.py
(BM25 top 100 -> cutoff -> rerank 10 -> word budget, instrumented by ragtrail), captured as the writer hands
them over (the span attributes the SDK holds, the stage's events, its record groups) for ``--queries``
queries. Then, per round, interleaved, each of them computed
  python   ``digests.stage_receipt(digests.stage_fields(...))`` and ``events.digest`` with the native package
           switched off (what a process without it runs, the reference)
  native   ``digests.stage_receipt_of(...)`` and ``events.digest`` as the recorder calls them, through
           ``ragtrail_native`` (native/ragtrail-encoder) when it is installed
and every receipt and digest checked equal both ways. Figures: µs per query (all of a query's stages),
min / median over rounds (process CPU time).

    .venv/bin/python benchmarks/bench_receipts.py --queries 20 --rounds 7
    .venv/bin/python benchmarks/bench_receipts.py --smoke
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_users_pipeline as users  # noqa: E402


def capture(queries: int, chunks: int) -> list[tuple[dict[str, Any], list[Any], list[Any]]]:
    """Each stage's (span attributes as held, events, record groups) as the writer stamps them."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from ragtrail.recorder import events

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(users.EncodingExporter("ragtrail")))
    trace.set_tracer_provider(provider)
    users.instrument("langchain", "ragtrail", provider)
    stages: list[tuple[dict[str, Any], list[Any], list[Any]]] = []
    pending: list[list[Any]] = []
    receipt, digest = events.receipt, events.digest

    def keep_digest(items: Any) -> str:
        pending.append(list(items))
        return digest(items)

    def keep_receipt(attributes: Any, stage_events: Any, key: Any) -> Any:
        stages.append((dict(attributes), list(stage_events), pending.pop() if pending else []))
        return receipt(attributes, stage_events, key)

    texts, pool = users.corpus(chunks)
    run = users.build_langchain(texts)
    run(pool[0])  # warm: lazy patches, caches
    events.receipt, events.digest = keep_receipt, keep_digest
    try:
        for query in pool[1 : 1 + queries]:
            run(query)
    finally:
        events.receipt, events.digest = receipt, digest
    provider.shutdown()
    return stages


def both_ways(stages: list[tuple[dict[str, Any], list[Any], list[Any]]]) -> dict[str, Any]:
    from ragtrail.contract.receipts import digests
    from ragtrail.recorder import events

    def python() -> list[Any]:
        with digests.rule_only():
            return [(digests.stage_receipt(digests.stage_fields(a, e)), events.digest(g)) for a, e, g in stages]

    def native() -> list[Any]:
        return [(digests.stage_receipt_of(a, e), events.digest(g)) for a, e, g in stages]

    return {"python": python, "native": native}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--chunks", type=int, default=users.N_CHUNKS)
    parser.add_argument("--smoke", action="store_true", help="2 queries, 2 rounds, 300 chunks")
    opts = parser.parse_args()
    if opts.smoke:
        opts.queries, opts.rounds, opts.chunks = 2, 2, 300
    from ragtrail.contract.receipts import digests

    stages = capture(opts.queries, opts.chunks)
    ways = both_ways(stages)
    made = {name: way() for name, way in ways.items()}
    if made["python"] != made["native"]:
        raise SystemExit("the native receipts differ from the rule's")
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(opts.rounds):
        for name, way in ways.items():
            start = time.process_time()
            way()
            times[name].append((time.process_time() - start) * 1e6 / opts.queries)
    installed = digests._native_receipt_of is not None
    print(f"{len(stages)} stages of {opts.queries} queries; native package {'installed' if installed else 'NOT installed (both rows are Python)'}")
    print("| path | µs per query, min / median |\n|---|---:|")
    for name, values in times.items():
        print(f"| {name} | {min(values):.1f} / {statistics.median(values):.1f} |")


if __name__ == "__main__":
    main()
