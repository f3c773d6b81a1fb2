"""An app for the Prometheus e2e test, run as its own process (the global MeterProvider is set once per
process): ragtrail's configurator sets up the SDK from the environment the test gives it (OTLP to the
gateway, traces head-sampled at ``OTEL_TRACES_SAMPLER_ARG``, metrics every ``OTEL_METRIC_EXPORT_INTERVAL``),
then 300 questions run, the reranker falls back on every tenth, and the app exits (flushing both).

It prints one JSON line: how many runs it made and how many of them were sampled (traced).
"""

from __future__ import annotations

import json
import sys

from opentelemetry import metrics, trace

import ragtrail
from ragtrail.contract import semconv as sc
from ragtrail.export.configurator import RagtrailConfigurator

RUNS = 300
DEGRADED_EVERY = 10  # 30 of the 300 runs have the reranker fall back
REFUSED_EVERY = 50
DOCS = 10
KEPT, KEPT_DEGRADED = 3, 5  # the reranker keeps 3, or 5 when it falls back


def run(i: int) -> bool:
    """One question (the same as tests/test_metrics.py's): a pipeline, a retriever (10 hits), a reranker,
    a freshness filter that drops one as superseded. Returns whether its trace was sampled."""
    docs = [{"id": f"doc-{i}-{j}", "content": f"text {i} {j}"} for j in range(DOCS)]
    with ragtrail.stage(sc.KIND_PIPELINE, "app.Pipeline") as p:
        sampled = trace.get_current_span().get_span_context().trace_flags.sampled
        p.query(f"question {i}")
        with ragtrail.stage(sc.KIND_RETRIEVE, "app.Retriever") as r:
            r.query(f"question {i}")
            r.outputs(docs)
        with ragtrail.stage(sc.KIND_RERANK, "app.Reranker") as k:
            k.inputs(docs)
            degraded = i % DEGRADED_EVERY == 0
            if degraded:
                k.set_status(sc.STATUS_DEGRADED, failure_class="timeout", fallback="input_order")
            kept = docs[: KEPT_DEGRADED if degraded else KEPT]
            for d in docs[len(kept) :]:
                k.exclude(d, sc.REASON_BELOW_RANK_CUTOFF)
            k.outputs(kept)
        with ragtrail.stage(sc.KIND_FILTER, "app.Freshness") as f:
            f.inputs(kept)
            f.exclude(kept[-1], sc.REASON_SUPERSEDED, "newer version exists")
            f.outputs(kept[:-1])
        ragtrail.answer(f"answer {i}", refused=i % REFUSED_EVERY == 0)
    return bool(sampled)


def main() -> int:
    RagtrailConfigurator().configure()
    sampled = sum(run(i) for i in range(RUNS))
    tracer_provider, meter_provider = trace.get_tracer_provider(), metrics.get_meter_provider()
    tracer_provider.shutdown()  # type: ignore[attr-defined]  # the SDK's providers: flush, then stop
    meter_provider.shutdown()  # type: ignore[attr-defined]
    print(json.dumps({"runs": RUNS, "sampled": sampled}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
