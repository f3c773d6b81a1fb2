"""Cost of the metrics counted before any sampling (issue 26): µs per stage, sampled in and sampled
out, without a MeterProvider (the API's proxy: the recorder makes no instrument) and with the SDK's
(an in-memory reader: every measurement aggregated, nothing exported).

A reranker stage over 20 candidates keeping 10, with one ``exclude`` per dropped candidate and, every
tenth call, ``set_status("degraded")``: the calls a sampled-out stage now counts. Each figure is the
time of ``--stages`` stages divided by their number, min and median over ``--rounds`` rounds. The
provider is set once (the API allows it once per process), so "without" runs first.

    .venv/bin/python benchmarks/bench_metrics.py [--stages 10000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON
from opentelemetry.trace import Tracer

import ragtrail

DOCS = [{"id": f"doc-{i}", "content": f"chunk {i} " * 40, "score": 1 - i / 20} for i in range(20)]


class _Discard(SpanExporter):
    def export(self, spans: object) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _stage(tracer: Tracer, i: int) -> None:
    with ragtrail.stage("rerank", "bench.Reranker", tracer=tracer) as s:
        s.inputs(DOCS)
        if i % 10 == 0:
            s.set_status("degraded", failure_class="timeout", fallback="input_order")
        for d in DOCS[10:]:
            s.exclude(d, "below_rank_cutoff")
        s.outputs(DOCS[:10])


def _rounds(fn: Callable[[Tracer, int], None], tracer: Tracer, stages: int, rounds: int) -> tuple[float, float]:
    """(min, median) µs per stage over ``rounds`` rounds of ``stages`` stages."""
    per_stage = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for i in range(stages):
            fn(tracer, i)
        per_stage.append((time.perf_counter_ns() - start) / stages / 1000)
    return min(per_stage), statistics.median(per_stage)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stages", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=7)
    opts = parser.parse_args()
    on = TracerProvider(sampler=ALWAYS_ON)
    on.add_span_processor(SimpleSpanProcessor(_Discard()))
    tracers = {"sampled out": TracerProvider(sampler=ALWAYS_OFF).get_tracer("bench"), "sampled in": on.get_tracer("bench")}
    results: dict[tuple[str, str], tuple[float, float]] = {}
    reader = InMemoryMetricReader()
    for provider in ("no MeterProvider", "SDK MeterProvider"):
        if provider == "SDK MeterProvider":
            metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        for label, tracer in tracers.items():
            stages = opts.stages if label == "sampled out" else max(1, opts.stages // 10)
            _rounds(_stage, tracer, max(1, stages // 10), 1)  # warm up
            results[label, provider] = _rounds(_stage, tracer, stages, opts.rounds)
    print(f"{'stage':<12} {'no MeterProvider µs (min/median)':>34} {'SDK MeterProvider µs (min/median)':>35} {'metrics cost µs (median)':>25}")
    for label in tracers:
        without, with_ = results[label, "no MeterProvider"], results[label, "SDK MeterProvider"]
        print(f"{label:<12} {without[0]:>16.2f} / {without[1]:<15.2f} {with_[0]:>17.2f} / {with_[1]:<15.2f} {with_[1] - without[1]:>25.2f}")
    data = reader.get_metrics_data()
    counted = sum(
        int(point.value)
        for rm in (data.resource_metrics if data else [])
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "ragtrail.stage.runs"
        for point in m.data.data_points
    )
    print(f"ragtrail.stage.runs counted {counted} stages (every one measured with the SDK MeterProvider, warm-ups included)")


if __name__ == "__main__":
    main()
