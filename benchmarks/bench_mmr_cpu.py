"""CPU cost of recording a LangChain MMR search (issue 24: the fetch_k pool and the unpicked are
recorded). ``InMemoryVectorStore`` with 500 texts and a fake 64-dim embedding, ``k=4, fetch_k=20``,
plain (instrumentation suppressed) and recorded (real SDK, a span processor that discards). Times are
``time.thread_time``: the CPU this thread used, not the time it waited for a core, so the figure
holds on a loaded machine where wall-clock medians do not. Median of 7 blocks of 100 searches, in
microseconds. Usage (run it against two checkouts, interleaved, to compare)::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_mmr_cpu.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


class Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def per_call_us(fn: Callable[[], Any], n: int = 100) -> float:
    start = time.thread_time()
    for _ in range(n):
        fn()
    return (time.thread_time() - start) / n * 1e6


def main() -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.vectorstores import InMemoryVectorStore
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    from ragtrail.instrumentation.langchain import LangChainInstrumentor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Discard()))
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=64))
    store.add_texts([f"doc {i}" for i in range(500)])

    def mmr() -> Any:
        return store.max_marginal_relevance_search("doc 7", k=4, fetch_k=20)

    def plain() -> Any:
        with suppress_instrumentation():
            return mmr()

    LangChainInstrumentor().instrument(tracer_provider=provider)
    for _ in range(30):  # warm-up
        mmr()
        plain()
    plain_us, recorded_us = [], []
    for _ in range(7):  # interleaved blocks
        plain_us.append(per_call_us(plain))
        recorded_us.append(per_call_us(mmr))
    p, r = statistics.median(plain_us), statistics.median(recorded_us)
    print(f"MMR k=4 fetch_k=20: plain {p:.0f} us, recorded {r:.0f} us, added {r - p:.0f} us CPU (x{r / p:.2f})")


if __name__ == "__main__":
    main()
