"""Export path benchmarks: whole-trace processor vs BatchSpanProcessor, and memory under a burst.

Throughput: N traces of S spans (4 attributes each) are created on the application thread and
flushed; spans per second = spans / (creation + flush) wall time. Both processors get the same
exporter: a counting exporter that does nothing (processor overhead alone) and the OTLP/HTTP
exporter sending to a loopback receiver in another process (which decodes every request with
opentelemetry-proto, as in the tests).

Memory: a burst of traces against an exporter that is stuck (a gate that opens only after the
burst), so the buffer fills to its bound; tracemalloc's peak over the burst, minus the baseline,
against the configured ``max_bytes``.

    .venv/bin/python benchmarks/bench_export.py            # everything
    .venv/bin/python benchmarks/bench_export.py --only throughput --repeat 5
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from ragtrail.export.whole_trace import WholeTraceSpanProcessor

ROOT = Path(__file__).resolve().parents[1]


class CountingExporter(SpanExporter):
    """Does nothing but count: measures the processor, not the transport."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


class GatedExporter(CountingExporter):
    """Blocks every export until the gate opens: a stuck backend."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.gate.wait()
        return super().export(spans)


def start_receiver() -> tuple[subprocess.Popen, str]:
    code = (
        f"import sys, time; sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
        "from otlp_server import OTLPServer\n"
        "s = OTLPServer().start(); print(s.traces_url, flush=True)\n"
        "sys.stdin.read()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def workload(provider: TracerProvider, traces: int, spans_per_trace: int) -> None:
    tracer = provider.get_tracer("bench")
    for t in range(traces):
        with tracer.start_as_current_span("root", attributes={"app.request": t, "app.route": "/search"}):
            for _ in range(spans_per_trace - 1):
                with tracer.start_as_current_span("stage") as span:
                    span.set_attribute("ragtrail.stage.kind", "retrieve")
                    span.set_attribute("ragtrail.candidates.out", 10)
                    span.set_attribute("ragtrail.events.count", 10)
                    span.set_attribute("ragtrail.events.digest", "0" * 64)


def throughput(
    make_processor: Callable[[SpanExporter], object], make_exporter: Callable[[], SpanExporter], traces: int, spans_per_trace: int
) -> tuple[float, float]:
    """(spans per second, wall clock; CPU microseconds per span, all threads of this process)."""
    provider = TracerProvider()
    exporter = make_exporter()
    provider.add_span_processor(make_processor(exporter))  # type: ignore[arg-type]
    workload(provider, 20, spans_per_trace)  # warm-up
    provider.force_flush()
    gc.collect()
    start, cpu_start = time.perf_counter(), time.process_time()
    workload(provider, traces, spans_per_trace)
    provider.force_flush(120_000)
    done, cpu_done = time.perf_counter(), time.process_time()
    provider.shutdown()
    total = traces * spans_per_trace
    return total / (done - start), (cpu_done - cpu_start) / total * 1e6


def run_throughput(traces: int, spans_per_trace: int, repeat: int) -> None:
    receiver, url = start_receiver()
    try:
        exporters = {
            "counting (no transport)": CountingExporter,
            "OTLP/HTTP to loopback": lambda: OTLPSpanExporter(endpoint=url),
        }
        processors = {
            "BatchSpanProcessor": lambda e: BatchSpanProcessor(e, max_queue_size=traces * spans_per_trace * 2),
            "WholeTraceSpanProcessor": lambda e: WholeTraceSpanProcessor(e, max_traces=traces * 2),
        }
        print(f"\n{traces} traces x {spans_per_trace} spans, median of {repeat} runs\n")
        print("| exporter | processor | spans/s (wall) | vs BSP (wall) | CPU µs/span | spans/s per CPU-second | vs BSP (CPU) |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for ename, make_exporter in exporters.items():
            runs: dict[str, list[tuple[float, float]]] = {name: [] for name in processors}
            for _ in range(repeat):  # interleaved, so load changes hit both alike
                for pname, make_processor in processors.items():
                    runs[pname].append(throughput(make_processor, make_exporter, traces, spans_per_trace))
            base_wall = statistics.median(r[0] for r in runs["BatchSpanProcessor"])
            base_cpu = statistics.median(r[1] for r in runs["BatchSpanProcessor"])
            for pname in processors:
                wall = statistics.median(r[0] for r in runs[pname])
                cpu = statistics.median(r[1] for r in runs[pname])
                print(f"| {ename} | {pname} | {wall:,.0f} | {wall / base_wall:.0%} | {cpu:.1f} | {1e6 / cpu:,.0f} | {base_cpu / cpu:.0%} |")
    finally:
        assert receiver.stdin is not None
        receiver.stdin.close()
        receiver.wait(10)


def run_memory(traces: int, spans_per_trace: int, max_bytes: int) -> None:
    print(f"\nburst of {traces} traces x {spans_per_trace} spans, exporter stuck until the burst ends\n")
    print("| processor | bound | peak traced memory over baseline | peak buffered (estimate) | traces dropped (counted) |")
    print("|---|---|---:|---:|---:|")
    for name in ("SpanProcessor (keeps nothing)", "WholeTraceSpanProcessor", "BatchSpanProcessor"):
        exporter = GatedExporter()
        provider = TracerProvider()
        processor: object
        if name.startswith("SpanProcessor"):
            processor = SpanProcessor()
            bound = "- (the workload's own transient memory)"
        elif name == "WholeTraceSpanProcessor":
            processor = WholeTraceSpanProcessor(exporter, max_bytes=max_bytes, max_traces=traces * 2)
            bound = f"max_bytes={max_bytes / 2**20:.0f} MiB"
        else:
            processor = BatchSpanProcessor(exporter)
            bound = "max_queue_size=2048 spans"
        provider.add_span_processor(processor)  # type: ignore[arg-type]
        gc.collect()
        tracemalloc.start()
        baseline = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        peak_buffered = 0
        tracer = provider.get_tracer("bench")
        for t in range(traces):
            with tracer.start_as_current_span("root", attributes={"app.request": t}):
                for _ in range(spans_per_trace - 1):
                    with tracer.start_as_current_span("stage", attributes={"ragtrail.events.digest": "0" * 64}):
                        pass
            if isinstance(processor, WholeTraceSpanProcessor) and t % 50 == 0:
                peak_buffered = max(peak_buffered, processor.buffered_bytes)
        peak = tracemalloc.get_traced_memory()[1] - baseline
        tracemalloc.stop()
        exporter.gate.set()
        provider.shutdown()
        if isinstance(processor, WholeTraceSpanProcessor):
            dropped = f"{processor.loss.total_traces_dropped:,} ({processor.loss.total_spans_dropped:,} spans)"
            buffered = f"{peak_buffered / 2**20:.1f} MiB"
        elif not isinstance(processor, BatchSpanProcessor):
            dropped = buffered = "-"
        else:
            dropped = f"spans dropped, not counted: {traces * spans_per_trace - exporter.spans:,}"
            buffered = "-"
        print(f"| {name} | {bound} | {peak / 2**20:.1f} MiB | {buffered} | {dropped} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("throughput", "memory"))
    parser.add_argument("--traces", type=int, default=2000)
    parser.add_argument("--spans-per-trace", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--burst", type=int, default=10_000)
    parser.add_argument("--max-bytes", type=int, default=32 * 2**20)
    args = parser.parse_args()
    if args.only in (None, "throughput"):
        run_throughput(args.traces, args.spans_per_trace, args.repeat)
    if args.only in (None, "memory"):
        run_memory(args.burst, args.spans_per_trace, args.max_bytes)


if __name__ == "__main__":
    main()
