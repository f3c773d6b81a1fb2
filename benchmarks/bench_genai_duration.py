"""Cost of ``gen_ai.client.operation.duration`` (issue 27): µs per sampled-out outermost retrieve
stage with the SDK's MeterProvider (an in-memory reader) and the GenAI mirror on, against the same
with the mirror off (no duration recorded; §9's counters alike). Min and median over ``--rounds``
rounds of ``--stages`` stages, the two settings interleaved.

    .venv/bin/python benchmarks/bench_genai_duration.py [--stages 10000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

import ragtrail
from ragtrail.recorder import metrics as rm

DOCS = [{"id": f"doc-{i}"} for i in range(10)]


def per_stage(tracer: object, stages: int) -> float:
    start = time.perf_counter()
    for _ in range(stages):
        with ragtrail.stage("retrieve", "app.search", tracer=tracer) as s:  # type: ignore[arg-type]
            s.outputs(DOCS)
    return (time.perf_counter() - start) / stages * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stages", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    importlib.import_module("opentelemetry.metrics._internal")._METER_PROVIDER = MeterProvider(metric_readers=[InMemoryMetricReader()])
    rm.refresh()
    tracer = TracerProvider(sampler=ALWAYS_OFF).get_tracer("bench")
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.rounds):
        for genai in (True, False):
            ragtrail.set_capture(mirror_genai=genai)
            times[genai].append(per_stage(tracer, args.stages))
    for genai in (False, True):
        label = "GenAI mirror on (duration recorded)" if genai else "GenAI mirror off"
        print(f"{label:38s} min {min(times[genai]):6.2f} µs  median {statistics.median(times[genai]):6.2f} µs")


if __name__ == "__main__":
    main()
