"""Cost of the metrics counted before any sampling (issue 26): µs per stage, sampled in and sampled
out, without a MeterProvider (the API's proxy: the recorder makes no instrument) and with the SDK's
(an in-memory reader: every measurement aggregated, nothing exported).

A reranker stage over 20 candidates keeping 10, with one ``exclude`` per dropped candidate and, every
tenth call, ``set_status("degraded")``: the calls a sampled-out stage now counts. Each figure is the
time of ``--stages`` stages (a tenth of them sampled in) divided by their number, min and median
over ``--rounds`` rounds, the rounds with and without a provider interleaved.

    .venv/bin/python benchmarks/bench_metrics.py [--stages 10000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON
from opentelemetry.trace import Tracer

import ragtrail
from ragtrail.recorder import metrics as rm

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


def _per_stage_us(tracer: Tracer, stages: int) -> float:
    start = time.perf_counter_ns()
    for i in range(stages):
        _stage(tracer, i)
    return (time.perf_counter_ns() - start) / stages / 1000


def _use(provider: MeterProvider | None) -> None:
    """Set (or unset) the API's global MeterProvider, as the tests do (the API sets it once per
    process), so the rounds with and without one interleave on a machine whose load changes."""
    internal = importlib.import_module("opentelemetry.metrics._internal")
    internal._METER_PROVIDER = provider  # type: ignore[attr-defined]
    rm.refresh()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stages", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=7)
    opts = parser.parse_args()
    on = TracerProvider(sampler=ALWAYS_ON)
    on.add_span_processor(SimpleSpanProcessor(_Discard()))
    tracers = {"sampled out": TracerProvider(sampler=ALWAYS_OFF).get_tracer("bench"), "sampled in": on.get_tracer("bench")}
    reader = InMemoryMetricReader()
    providers = {"no MeterProvider": None, "SDK MeterProvider": MeterProvider(metric_readers=[reader])}
    samples: dict[tuple[str, str], list[float]] = {(t, p): [] for t in tracers for p in providers}
    for round_ in range(opts.rounds + 1):  # round 0 warms up
        for label, tracer in tracers.items():
            stages = opts.stages if label == "sampled out" else max(1, opts.stages // 10)
            for name, provider in providers.items():
                _use(provider)
                figure = _per_stage_us(tracer, stages if round_ else max(1, stages // 10))
                if round_:
                    samples[label, name].append(figure)
    _use(None)
    print(f"{'stage':<12} {'no MeterProvider µs (min/median)':>34} {'SDK MeterProvider µs (min/median)':>35} {'cost µs (min/median)':>22}")
    for label in tracers:
        without, with_ = samples[label, "no MeterProvider"], samples[label, "SDK MeterProvider"]
        a, b = (min(without), statistics.median(without)), (min(with_), statistics.median(with_))
        print(f"{label:<12} {a[0]:>16.2f} / {a[1]:<15.2f} {b[0]:>17.2f} / {b[1]:<15.2f} {b[0] - a[0]:>10.2f} / {b[1] - a[1]:<10.2f}")


if __name__ == "__main__":
    main()
