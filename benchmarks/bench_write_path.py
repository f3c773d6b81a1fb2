"""The recorder's write path on the host thread (issue 11): time inside a stage's end (``conclude`` + ``writer.write``) per query.

The users' pipeline of ``bench_users_pipeline.py`` (BM25 top 100 over 3,000 chunks, cutoff, rerank to
10, word budget), ragtrail only, a SimpleSpanProcessor whose exporter keeps the spans (no exporter
thread competing for the GIL). Per round: the host's wall ms/query, and the thread CPU ms/query spent
inside ``conclude`` and ``writer.write`` (CPU time, so a busy machine inflates it less than wall time); the minimum over
rounds is printed, then the OTLP protobuf encode ms/query of the kept spans. Compare two trees by
running it with each one's ``src`` first on ``PYTHONPATH``, interleaved, several times::

    HF_HUB_OFFLINE=1 PYTHONPATH=$PWD/src .venv-bench/bin/python benchmarks/bench_write_path.py langchain
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_users_pipeline as users  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402


class Keep(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Any) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("framework", choices=("langchain", "llama_index"))
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    keep = Keep()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(keep))
    trace.set_tracer_provider(provider)
    users.instrument(args.framework, "ragtrail", provider)
    from ragtrail.recorder import stage, writer

    spent = [0.0]

    def timed(step: Any) -> Any:
        def run(*call: Any) -> Any:
            start = time.thread_time()
            try:
                return step(*call)
            finally:
                spent[0] += time.thread_time() - start

        return run

    # a stage's end: conclude the record, then write it (a tree before the split: write alone did both)
    stage.write = timed(writer.write)
    if hasattr(stage, "conclude"):
        stage.conclude = timed(stage.conclude)
    texts, pool = users.corpus(3000)
    run = users.build_langchain(texts) if args.framework == "langchain" else users.build_llama_index(texts)
    for query in pool[:30]:
        run(query)
    keep.spans.clear()
    n = args.queries
    host, inside = [], []
    for _ in range(args.rounds):
        spent[0] = 0.0
        start = time.perf_counter()
        for query in pool[30 : 30 + n]:
            run(query)
        host.append((time.perf_counter() - start) / n * 1e3)
        inside.append(spent[0] / n * 1e3)
    spans = list(keep.spans)
    start = time.process_time()
    for i in range(0, len(spans), 512):
        encode_spans(spans[i : i + 512]).SerializeToString()
    encode = (time.process_time() - start) / args.rounds / n * 1e3
    import ragtrail

    print(
        f"{args.framework} ({os.path.dirname(ragtrail.__file__)}): host {min(host):.2f} ms/q, "
        f"write {min(inside):.2f} ms/q (thread CPU), encode {encode:.2f} ms/q"
    )


if __name__ == "__main__":
    main()
