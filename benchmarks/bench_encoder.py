"""Issue 25's encoder benchmark: the stock OTLP encoder against ragtrail's pure-Python and native ones, on captured spans.

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
  native       ``ragtrail_native.encode_spans(batch)``, the optional native encoder (native/ragtrail-encoder),
               when importable (``pip install ./native/ragtrail-encoder``); it must answer every batch itself
  native-8     the same in 8-span chunks (what the exporters run when it is installed:
               ``otlp_encode.NATIVE_CHUNK_SPANS``)
  native-32, native-16  the native encoder yielding every 32 / 16 spans (coarser yields, measured)
The ``ragtrail*`` rows are the pure-Python encoder (``encode_spans_python``) whether or not the native
one is installed.
Every batch is checked byte-identical to the stock first. Figures: µs per span and per value (every
attribute value of spans and events, an array's elements one each), min / median / max over rounds
(process CPU time), and the speed-up (stock / ragtrail) per round, min / median / max.

With ``--host``: the host's latency while an exporter thread encodes. The main thread runs the
(uninstrumented) LangChain pipeline query after query; a second thread encodes the captured spans in
``--batch``-span batches back to back (the worst case: an exporter that never idles; ``--idle-ms``
makes it rest between batches), with the stock
encoder, ragtrail's in one hold, or ragtrail's in 32-span chunks (``time.sleep(0)`` between), or the
native one in 32-, 16- or 8-span chunks when installed (8: what the exporters run). Figures:
the host's p50 / p95 per query (ms) and its p95 against no exporter, per mode, interleaved rounds.

    .venv/bin/python benchmarks/bench_encoder.py --queries 20 --rounds 7
    .venv/bin/python benchmarks/bench_encoder.py --host --rounds 3 --host-queries 200
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


def native_available() -> bool:
    try:
        importlib.import_module("ragtrail_native")
    except ImportError:
        return False
    return True


ENCODERS = ("stock", "ragtrail", "ragtrail-cold", "ragtrail-32") + (("native", "native-32", "native-8") if native_available() else ())


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
    _uninstrument(framework, mode)
    provider.shutdown()
    return spans


def _uninstrument(framework: str, mode: str) -> None:
    """Instrumentors are singletons: a new one uninstruments the one ``users.instrument`` set up."""
    if mode == "ragtrail":
        from ragtrail.instrumentation.langchain import LangChainInstrumentor
        from ragtrail.instrumentation.llama_index import LlamaIndexInstrumentor
    else:
        from openinference.instrumentation.langchain import LangChainInstrumentor  # type: ignore[no-redef]
        from openinference.instrumentation.llama_index import LlamaIndexInstrumentor  # type: ignore[no-redef]
    (LangChainInstrumentor() if framework == "langchain" else LlamaIndexInstrumentor()).uninstrument()


def count_values(spans: Sequence[Any]) -> int:
    total = 0
    for span in spans:
        for attributes in [span.attributes or {}, *(event.attributes or {} for event in span.events)]:
            total += sum(len(v) if isinstance(v, tuple) else 1 for v in attributes.values())
    return total


def encoders() -> dict[str, Callable[[Sequence[Any]], bytes]]:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as stock

    from ragtrail.export.otlp_encode import clear_caches, encode_spans_python

    run: dict[str, Callable[[Sequence[Any]], bytes]] = {
        "stock": lambda batch: stock(batch).SerializeToString(),
        "ragtrail": encode_spans_python,
        "ragtrail-cold": encode_spans_python,  # after "_clear"
        "ragtrail-32": lambda batch: encode_spans_python(batch, chunk=32),
        "_clear": lambda batch: (clear_caches(), b"")[1],
    }
    if native_available():
        native = importlib.import_module("ragtrail_native").encode_spans
        run["native"] = lambda batch: native(batch, 0)  # None (declined) fails the byte check below
        run["native-32"] = lambda batch: native(batch, 32)
        run["native-16"] = lambda batch: native(batch, 16)
        run["native-8"] = lambda batch: native(batch, 8)  # NATIVE_CHUNK_SPANS: what the exporters run
    return run


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
    batches = [spans[i : i + batch_size] for i in range(0, len(spans), batch_size)]
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
            ratios = [a / b for a, b in zip(times["stock"], seconds, strict=False)]
            result["encoders"][name]["speedup"] = [min(ratios), statistics.median(ratios), max(ratios)]
    return result


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| spans | encoder | µs/span min / med / max | µs/value min / med / max | speed-up min / med / max |", "|---|---|---:|---:|---:|"]
    for result in results:
        label = f"{result['label']} ({result['spans']} spans, {result['values']} values)"
        for name, figures in result["encoders"].items():
            span = " / ".join(f"{v:.1f}" for v in figures["us_per_span"])
            value = " / ".join(f"{v:.2f}" for v in figures["us_per_value"])
            speed = " / ".join(f"{v:.2f}×" for v in figures["speedup"]) if "speedup" in figures else "1×"
            lines.append(f"| {label} | {name} | {span} | {value} | {speed} |")
    return "\n".join(lines)


HOST_MODES = ("none", "stock", "ragtrail", "ragtrail-32") + (("native-32", "native-16", "native-8") if native_available() else ())


def host_round(run: Callable[[str], Any], pool: list[str], batches: list[list[Any]], mode: str, idle: float) -> list[float]:
    """The host's per-query seconds while an exporter thread encodes ``batches`` over and over."""
    import threading

    encode = encoders()[mode] if mode != "none" else None
    stop = threading.Event()

    def exporter() -> None:
        while encode is not None and not stop.is_set():
            for batch in batches:
                encode(batch)
                if stop.wait(idle) if idle else stop.is_set():
                    return

    thread = threading.Thread(target=exporter, daemon=True)
    thread.start()
    timings = []
    for query in pool:
        started = time.perf_counter()
        run(query)
        timings.append(time.perf_counter() - started)
    stop.set()
    thread.join()
    return timings


def host_benchmark(spans: list[Any], batch_size: int, rounds: int, queries: int, chunks: int, idle: float) -> str:
    texts, pool = users.corpus(chunks)
    run = users.build_langchain(texts)
    for query in pool[:20]:
        run(query)
    batches = [spans[i : i + batch_size] for i in range(0, len(spans), batch_size)]
    per_mode: dict[str, dict[str, list[float]]] = {mode: {"p50": [], "p95": []} for mode in HOST_MODES}
    for _ in range(rounds):
        for mode in HOST_MODES:
            timings = sorted(host_round(run, pool[20 : 20 + queries], batches, mode, idle))
            per_mode[mode]["p50"].append(statistics.median(timings) * 1e3)
            per_mode[mode]["p95"].append(users.percentile(timings, 0.95) * 1e3)
    base = statistics.median(per_mode["none"]["p95"])
    lines = ["| exporter thread | host p50 ms (median of rounds) | host p95 ms (median) | p95 × no exporter |", "|---|---:|---:|---:|"]
    for mode, figures in per_mode.items():
        p95 = statistics.median(figures["p95"])
        lines.append(f"| {mode} | {statistics.median(figures['p50']):.2f} | {p95:.2f} | {p95 / base:.2f} |")
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
    parser.add_argument("--host", action="store_true", help="the host's latency while an exporter thread encodes")
    parser.add_argument("--host-queries", type=int, default=200)
    parser.add_argument("--idle-ms", type=float, default=0.0, help="--host: the exporter thread rests this long between batches")
    opts = parser.parse_args()
    if opts.smoke:
        opts.queries, opts.rounds, opts.chunks = 2, 2, 300
    if opts.mode == "openinference" and not openinference_available():
        raise SystemExit("OpenInference's instrumentation is not importable by this interpreter (see benchmarks/README.md)")
    if opts.mode == "ragtrail" and not openinference_available():
        print("note: OpenInference's instrumentation is not importable here; its spans cannot be measured", file=sys.stderr)
    if opts.host:
        spans = capture("langchain", opts.mode, opts.queries, opts.chunks)
        spans = (spans * (1 + opts.batch // max(1, len(spans))))[: max(opts.batch, len(spans))]  # at least one full batch
        print(host_benchmark(spans, opts.batch, opts.rounds, opts.host_queries, opts.chunks, opts.idle_ms / 1e3))
        return
    results = []
    for framework in users.FRAMEWORKS:
        spans = capture(framework, opts.mode, opts.queries, opts.chunks)
        results.append(summary(f"{opts.mode} {framework}", spans, opts.batch, opts.rounds))
    print(json.dumps(results, indent=1) if opts.json else table(results))


if __name__ == "__main__":
    main()
