"""Per-stage cost of the recorder (issue 2): a retrieve stage returning N candidates and a reranker
stage over N candidates keeping N/2, decorated vs undecorated, recording (sampled in) and sampled
out. Prints medians in one run.

    .venv/bin/python benchmarks/bench_recorder.py [--repeat 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

import ragtrail


class _Discard(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS


def _median_us(fn, args, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        fn(*args)
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=2000)
    opts = parser.parse_args()

    on = TracerProvider(sampler=ALWAYS_ON)
    on.add_span_processor(SimpleSpanProcessor(_Discard()))
    off = TracerProvider(sampler=ALWAYS_OFF)

    def rerank(query, candidates):
        return candidates[: max(1, len(candidates) // 2)]

    def search(query, docs):
        return docs

    stages = {
        "retrieve (N out)": (
            search,
            ragtrail.retriever(search, tracer=on.get_tracer("bench")),
            ragtrail.retriever(search, tracer=off.get_tracer("bench")),
        ),
        "rerank (N in, N/2 out)": (
            rerank,
            ragtrail.reranker(rerank, tracer=on.get_tracer("bench")),
            ragtrail.reranker(rerank, tracer=off.get_tracer("bench")),
        ),
    }
    print(f"{'stage':<24} {'N':>5} {'plain µs':>9} {'recorded µs':>12} {'overhead µs':>12} {'sampled-out µs':>15} {'s-o overhead µs':>16}")
    for label, (plain_fn, traced, sampled_out) in stages.items():
        for n in (10, 100, 1000):
            docs = [{"id": f"doc-{i}", "content": f"chunk {i} " * 40, "score": 1 - i / n} for i in range(n)]
            repeat = max(50, opts.repeat // (n // 10))
            plain = _median_us(plain_fn, ("q", docs), repeat)
            recorded = _median_us(traced, ("q", docs), repeat)
            out = _median_us(sampled_out, ("q", docs), repeat)
            print(f"{label:<24} {n:>5} {plain:>9.1f} {recorded:>12.1f} {recorded - plain:>12.1f} {out:>15.2f} {out - plain:>16.2f}")


if __name__ == "__main__":
    main()
