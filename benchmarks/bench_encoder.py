"""Issue 25's encoder benchmark: the stock OTLP encoder against ragtrail's pure-Python one, on captured spans.

Spans: the users'-shaped pipelines of benchmarks/bench_users_pipeline.py (BM25 top 100 over 3,000 chunks
-> cutoff -> rerank 10 -> word budget), LangChain and LlamaIndex, instrumented by ragtrail, ``--queries``
distinct queries each, captured with the real SDK (in-memory exporter), then cut into export batches of
``--batch`` spans (the whole-trace processor's default request is 512 spans). OpenInference's spans are
captured instead with ``--mode openinference`` when ``openinference-instrumentation-langchain`` /
``-llama-index`` are importable (they are not in the project's .venv; the script says so).

Per round, interleaved (every encoder once per round, so a change in machine load hits all alike):
  stock        ``opentelemetry.exporter.otlp.proto.common.trace_encoder.encode_spans(batch).SerializeToString()``
  ragtrail     ``ragtrail.export.encode_spans(batch)`` (warm: its key/value/resource memory from earlier rounds)
  ragtrail-cold  the same after ``clear_caches()`` at the start of the round
  ragtrail-32  ``encode_spans(batch, chunk=32)``, what the exporters run (yields the GIL every 32 spans)
Every batch is checked byte-identical to the stock first. Figures: µs per span and per value (every
attribute value of spans and events, an array's elements one each), min / median / max over rounds
(process CPU time), and the speed-up (stock / ragtrail) per round, min / median / max.

    .venv/bin/python benchmarks/bench_encoder.py --queries 20 --rounds 7
    .venv/bin/python benchmarks/bench_encoder.py --smoke
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

import bench_users_pipeline as users  # noqa: E402  (the pipelines, shared with the users' benchmark)

ENCODERS = ("stock", "ragtrail", "ragtrail-cold", "ragtrail-32")


def capture(framework: str, mode: str, queries: int, chunks: int) -> list[Any]:
    """The spans ``queries`` distinct queries of one pipeline record (the real SDK, in memory)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    users.instrument(framework, mode, provider)
    texts, pool = users.corpus(chunks)
    run = users.build_langchain(texts) if framework == "langchain" else users.build_llama_index(texts)
    for query in pool[:queries]:
        run(query)
    spans = list(exporter.get_finished_spans())
    provider.shutdown()
    return spans


def count_values(spans: Sequence[Any]) -> int:
    total = 0
    for span in spans:
        for attributes in [span.attributes or {}, *(event.attributes or {} for event in span.events)]:
            total += sum(len(v) if isinstance(v, tuple) else 1 for v in attributes.values())
    return total


def encoders() -> dict[str, Callable[[Sequence[Any]], bytes]]:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as stock

    from ragtrail.export.otlp_encode import clear_caches, encode_spans

    return {
        "stock": lambda batch: stock(batch).SerializeToString(),
        "ragtrail": encode_spans,
        "ragtrail-cold": encode_spans,  # after "_clear"
        "ragtrail-32": lambda batch: encode_spans(batch, chunk=32),
        "_clear": lambda batch: (clear_caches(), b"")[1],
    }


def measure(batches: list[list[Any]], rounds: int) -> dict[str, list[float]]:
    """Seconds of process CPU time per encoder per round, over all batches."""
    run = encoders()
    for batch in batches:
        expected = run["stock"](batch)
        for name in ENCODERS[1:]:
            assert run[name](batch) == expected, f"{name} differs from the stock encoder"
    times: dict[str, list[float]] = {name: [] for name in ENCODERS}
    for _ in range(rounds):
        for name in ENCODERS:
            if name == "ragtrail-cold":
                run["_clear"]([])
            encode = run[name]
            started = time.process_time()
            for batch in batches:
                encode(batch)
            times[name].append(time.process_time() - started)
    return times


def summary(label: str, spans: list[Any], batch_size: int, rounds: int) -> dict[str, Any]:
    batches = [spans[i:i + batch_size] for i in range(0, len(spans), batch_size)]
    values = count_values(spans)
    times = measure(batches, rounds)
    result: dict[str, Any] = {"label": label, "spans": len(spans), "values": values, "batches": len(batches), "encoders": {}}
    for name, seconds in times.items():
        per_span = [s * 1e6 / len(spans) for s in seconds]
        per_value = [s * 1e6 / values for s in seconds]
        result["encoders"][name] = {
            "us_per_span": [min(per_span), statistics.median(per_span), max(per_span)],
            "us_per_value": [min(per_value), statistics.median(per_value), max(per_value)],
        }
        if name != "stock":
            ratios = [a / b for a, b in zip(times["stock"], seconds)]
            result["encoders"][name]["speedup"] = [min(ratios), statistics.median(ratios), max(ratios)]
    return result


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| spans | encoder | µs/span min / med / max | µs/value min / med / max | speed-up min / med / max |",
             "|---|---|---:|---:|---:|"]
    for result in results:
        label = f"{result['label']} ({result['spans']} spans, {result['values']} values)"
        for name, figures in result["encoders"].items():
            span = " / ".join(f"{v:.1f}" for v in figures["us_per_span"])
            value = " / ".join(f"{v:.2f}" for v in figures["us_per_value"])
            speed = " / ".join(f"{v:.2f}×" for v in figures["speedup"]) if "speedup" in figures else "1×"
            lines.append(f"| {label} | {name} | {span} | {value} | {speed} |")
    return "\n".join(lines)


def openinference_available() -> bool:
    try:
        importlib.import_module("openinference.instrumentation.langchain")
        importlib.import_module("openinference.instrumentation.llama_index")
    except ImportError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--chunks", type=int, default=users.N_CHUNKS)
    parser.add_argument("--smoke", action="store_true", help="2 queries, 2 rounds, 300 chunks")
    parser.add_argument("--mode", choices=("ragtrail", "openinference"), default="ragtrail", help="whose instrumentation records the spans")
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    if opts.smoke:
        opts.queries, opts.rounds, opts.chunks = 2, 2, 300
    if opts.mode == "openinference" and not openinference_available():
        raise SystemExit("OpenInference's instrumentation is not importable by this interpreter (see benchmarks/README.md)")
    if opts.mode == "ragtrail" and not openinference_available():
        print("note: OpenInference's instrumentation is not importable here; its spans cannot be measured", file=sys.stderr)
    results = []
    for framework in users.FRAMEWORKS:
        spans = capture(framework, opts.mode, opts.queries, opts.chunks)
        results.append(summary(f"{opts.mode} {framework}", spans, opts.batch, opts.rounds))
    print(json.dumps(results, indent=1) if opts.json else table(results))


if __name__ == "__main__":
    main()
