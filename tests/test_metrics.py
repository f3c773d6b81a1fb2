"""Metrics counted before any sampling (issue 26, docs/semconv.md §9).

300 pipeline runs head-sampled at p = 0.1, 30 of them with a reranker that falls back: the metrics
count every run, every degraded stage and every exclusion by reason exactly, while only the sampled
traces are exported. A failing instrument never raises into the host; with no MeterProvider set up
the recorder makes no instrument at all.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry import metrics as otel_metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

import ragtrail
from ragtrail.contract import semconv as sc
from ragtrail.recorder import metrics as rm
from ragtrail.recorder.errors import internal_error_count
from ragtrail.sampling import RagtrailSampler

RUNS = 300
DEGRADED_EVERY = 10  # 30 of the 300 runs have the reranker fall back
REFUSED_EVERY = 50
DOCS = 10

Install = Callable[[otel_metrics.MeterProvider], None]


class _SeededIds(IdGenerator):
    """Reproducible trace ids, so the number of traces sampled at p = 0.1 is fixed."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)

    def generate_span_id(self) -> int:
        return self._random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self._random.getrandbits(128) or 1


def _run(i: int, tracer: Any) -> None:
    """One question: a pipeline, a retriever (10 hits), a reranker (keeps 3, or 5 when it falls
    back), a freshness filter that drops one as superseded."""
    docs = [{"id": f"doc-{i}-{j}", "content": f"text {i} {j}"} for j in range(DOCS)]
    with ragtrail.stage(sc.KIND_PIPELINE, "app.Pipeline", tracer=tracer) as p:
        p.query(f"question {i}")
        with ragtrail.stage(sc.KIND_RETRIEVE, "app.Retriever", tracer=tracer) as r:
            r.query(f"question {i}")
            r.outputs(docs)
        with ragtrail.stage(sc.KIND_RERANK, "app.Reranker", tracer=tracer) as k:
            k.inputs(docs)
            degraded = i % DEGRADED_EVERY == 0
            if degraded:
                k.set_status(sc.STATUS_DEGRADED, failure_class="timeout", fallback="input_order")
            kept = docs[: 5 if degraded else 3]
            for d in docs[len(kept) :]:
                k.exclude(d, sc.REASON_BELOW_RANK_CUTOFF)
            k.outputs(kept)
        with ragtrail.stage(sc.KIND_FILTER, "app.Freshness", tracer=tracer) as f:
            f.inputs(kept)
            f.exclude(kept[-1], sc.REASON_SUPERSEDED, "newer version exists")
            f.outputs(kept[:-1])
        ragtrail.answer(f"answer {i}", refused=i % REFUSED_EVERY == 0)


def _points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    assert data is not None
    found: dict[str, list[Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == rm.METER_NAME
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def _sums(points: list[NumberDataPoint]) -> Counter[frozenset[tuple[str, Any]]]:
    return Counter({frozenset((p.attributes or {}).items()): int(p.value) for p in points})


def _attrs(**kw: Any) -> frozenset[tuple[str, Any]]:
    return frozenset(kw.items())


def _stage(kind: str, component: str, status: str, failure_class: str | None = None, **extra: Any) -> frozenset[tuple[str, Any]]:
    attributes = {sc.STAGE_KIND: kind, sc.STAGE_COMPONENT: component, sc.STAGE_STATUS: status, **extra}
    if failure_class is not None:
        attributes[sc.STAGE_FAILURE_CLASS] = failure_class
    return frozenset(attributes.items())


def test_metrics_count_every_run_while_traces_are_sampled(install_meter_provider: Install) -> None:
    reader = InMemoryMetricReader()
    install_meter_provider(MeterProvider(metric_readers=[reader]))
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=RagtrailSampler(0.1), id_generator=_SeededIds(26))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    for i in range(RUNS):
        _run(i, tracer)

    traces = {s.context.trace_id for s in exporter.get_finished_spans()}
    assert 10 <= len(traces) <= 60  # a sample: about 30 of the 300
    points = _points(reader)

    degraded = RUNS // DEGRADED_EVERY
    refused = {i for i in range(RUNS) if i % REFUSED_EVERY == 0}
    degraded_runs = {i for i in range(RUNS) if i % DEGRADED_EVERY == 0}
    runs = _sums(points[rm.PIPELINE_RUNS])
    expected_runs: Counter[frozenset[tuple[str, Any]]] = Counter()
    for i in range(RUNS):
        status = sc.RUN_DEGRADED if i in degraded_runs else sc.RUN_AVAILABLE
        expected_runs[_attrs(**{sc.STAGE_COMPONENT: "app.Pipeline", sc.RUN_STATUS: status, sc.ANSWER_REFUSED: i in refused})] += 1
    assert runs == expected_runs
    assert sum(runs.values()) == RUNS

    stages = _sums(points[rm.STAGE_RUNS])
    assert stages == {
        _stage(sc.KIND_PIPELINE, "app.Pipeline", sc.STATUS_OK): RUNS,
        _stage(sc.KIND_RETRIEVE, "app.Retriever", sc.STATUS_OK): RUNS,
        _stage(sc.KIND_RERANK, "app.Reranker", sc.STATUS_OK): RUNS - degraded,
        _stage(sc.KIND_RERANK, "app.Reranker", sc.STATUS_DEGRADED, "timeout"): degraded,
        _stage(sc.KIND_FILTER, "app.Freshness", sc.STATUS_OK): RUNS,
    }

    exclusions = _sums(points[rm.STAGE_EXCLUSIONS])
    cutoff = {sc.EXCLUSION_REASON: sc.REASON_BELOW_RANK_CUTOFF}
    assert exclusions == {
        _stage(sc.KIND_RERANK, "app.Reranker", sc.STATUS_OK, **cutoff): (RUNS - degraded) * (DOCS - 3),
        _stage(sc.KIND_RERANK, "app.Reranker", sc.STATUS_DEGRADED, "timeout", **cutoff): degraded * (DOCS - 5),
        _stage(sc.KIND_FILTER, "app.Freshness", sc.STATUS_OK, **{sc.EXCLUSION_REASON: sc.REASON_SUPERSEDED}): RUNS,
    }

    # the histograms are of the recording stages: one point per sampled run
    sampled = len(traces)
    by_name: dict[str, list[HistogramDataPoint]] = {name: points[name] for name in (rm.STAGE_CANDIDATES_IN, rm.STAGE_CANDIDATES_OUT)}
    rerank_in = [p for p in by_name[rm.STAGE_CANDIDATES_IN] if (p.attributes or {}).get(sc.STAGE_KIND) == sc.KIND_RERANK]
    assert sum(p.count for p in rerank_in) == sampled and sum(p.sum for p in rerank_in) == sampled * DOCS
    (retrieve_out,) = [p for p in by_name[rm.STAGE_CANDIDATES_OUT] if (p.attributes or {}).get(sc.STAGE_KIND) == sc.KIND_RETRIEVE]
    assert (retrieve_out.count, retrieve_out.sum, tuple(retrieve_out.explicit_bounds)) == (sampled, sampled * DOCS, rm.BUCKETS)
    assert dict(retrieve_out.attributes or {}) == dict(_stage(sc.KIND_RETRIEVE, "app.Retriever", sc.STATUS_OK))


def test_a_sampled_out_stage_says_failed_empty_and_cancelled(install_meter_provider: Install) -> None:
    """Sampled out, the status still follows the recorder's rule: raised -> failed with the
    exception's class, an empty output list -> empty, a failed run -> failed."""
    reader = InMemoryMetricReader()
    install_meter_provider(MeterProvider(metric_readers=[reader]))
    tracer = TracerProvider(sampler=RagtrailSampler(0.0)).get_tracer("test")
    with ragtrail.stage(sc.KIND_PIPELINE, "app.Pipeline", tracer=tracer):
        with ragtrail.stage(sc.KIND_RETRIEVE, "app.Retriever", tracer=tracer) as r:
            r.outputs([])
        with pytest.raises(TimeoutError), ragtrail.stage(sc.KIND_RERANK, "app.Reranker", tracer=tracer):
            raise TimeoutError
    points = _points(reader)
    assert _sums(points[rm.STAGE_RUNS]) == {
        _stage(sc.KIND_PIPELINE, "app.Pipeline", sc.STATUS_OK): 1,
        _stage(sc.KIND_RETRIEVE, "app.Retriever", sc.STATUS_EMPTY): 1,
        _stage(sc.KIND_RERANK, "app.Reranker", sc.STATUS_FAILED, "timeout"): 1,
    }
    assert _sums(points[rm.PIPELINE_RUNS]) == {_attrs(**{sc.STAGE_COMPONENT: "app.Pipeline", sc.RUN_STATUS: sc.RUN_FAILED}): 1}


def test_a_sampled_out_stage_that_handed_over_nothing_is_unknown_not_ok(install_meter_provider: Install) -> None:
    """A library stage sampled out does no work: whether it found nothing or fell back is not known,
    so its status is ``unknown``, and so is its run's: never a guessed ``ok`` or ``available``."""
    reader = InMemoryMetricReader()
    install_meter_provider(MeterProvider(metric_readers=[reader]))
    tracer = TracerProvider(sampler=RagtrailSampler(0.0)).get_tracer("test")
    with ragtrail.stage(sc.KIND_PIPELINE, "app.Pipeline", tracer=tracer):
        with ragtrail.stage(sc.KIND_RETRIEVE, "lib.Retriever", tracer=tracer):
            pass  # a hook that records nothing sampled out: no outputs, no status
        with ragtrail.stage(sc.KIND_RERANK, "app.Reranker", tracer=tracer) as k:
            k.outputs([{"id": "a"}])
    points = _points(reader)
    assert _sums(points[rm.STAGE_RUNS]) == {
        _stage(sc.KIND_PIPELINE, "app.Pipeline", sc.STATUS_OK): 1,
        _stage(sc.KIND_RETRIEVE, "lib.Retriever", rm.UNKNOWN): 1,
        _stage(sc.KIND_RERANK, "app.Reranker", sc.STATUS_OK): 1,
    }
    assert _sums(points[rm.PIPELINE_RUNS]) == {_attrs(**{sc.STAGE_COMPONENT: "app.Pipeline", sc.RUN_STATUS: rm.UNKNOWN}): 1}


class _Broken(Exception):
    pass


class _RaisingInstrument:
    def add(self, *args: Any, **kwargs: Any) -> None:
        raise _Broken("counter")

    def record(self, *args: Any, **kwargs: Any) -> None:
        raise _Broken("histogram")


class _RaisingMeter(otel_metrics.NoOpMeter):
    def create_counter(self, *args: Any, **kwargs: Any) -> Any:
        return _RaisingInstrument()

    def create_histogram(self, *args: Any, **kwargs: Any) -> Any:
        return _RaisingInstrument()


class _RaisingProvider(otel_metrics.MeterProvider):
    def get_meter(self, name: str, *args: Any, **kwargs: Any) -> otel_metrics.Meter:
        return _RaisingMeter(name)


class _UnmakeableMeter(otel_metrics.NoOpMeter):
    def create_observable_counter(self, *args: Any, **kwargs: Any) -> Any:
        raise _Broken("observable counter")


class _UnmakeableProvider(otel_metrics.MeterProvider):
    def get_meter(self, name: str, *args: Any, **kwargs: Any) -> otel_metrics.Meter:
        return _UnmakeableMeter(name)


def _reranker_stage(tracer: Any) -> None:
    with ragtrail.stage(sc.KIND_RERANK, "app.Reranker", tracer=tracer) as s:
        s.inputs([{"id": "a"}, {"id": "b"}])
        s.exclude("b", sc.REASON_BELOW_RANK_CUTOFF)
        s.outputs([{"id": "a"}])


def test_a_failing_instrument_never_reaches_the_host(install_meter_provider: Install, tracer_provider: TracerProvider) -> None:
    """A histogram that raises (recording stages only record them), a meter that cannot make the
    counters (tried once per provider): counted as internal errors, never raised."""
    sampled_out = TracerProvider(sampler=RagtrailSampler(0.0)).get_tracer("test")
    install_meter_provider(_RaisingProvider())
    before = internal_error_count()
    for tracer in (tracer_provider.get_tracer("test"), sampled_out):
        _reranker_stage(tracer)
    assert internal_error_count() == before + 1
    install_meter_provider(_UnmakeableProvider())
    for tracer in (tracer_provider.get_tracer("test"), sampled_out, sampled_out):
        _reranker_stage(tracer)
    assert internal_error_count() == before + 2


def test_no_meter_provider_no_instruments() -> None:
    """Without a MeterProvider set up (the API's proxy) a stage makes no instrument and keeps no tally."""
    assert type(otel_metrics.get_meter_provider()).__name__ == "_ProxyMeterProvider"
    assert rm.instruments() is None
    assert rm.open_tally(sc.KIND_RETRIEVE, "app.Retriever") is None
    assert rm.open_tally(sc.KIND_RETRIEVE, "app.Retriever", outermost_retrieval=True) is None  # nothing timed either


def test_instruments_follow_the_global_provider(install_meter_provider: Install) -> None:
    first, second = MeterProvider(), MeterProvider()
    install_meter_provider(first)
    made = rm.instruments()
    assert made is not None and rm.instruments() is made
    install_meter_provider(second)
    assert rm.instruments() is not made
    install_meter_provider(first)
    assert rm.instruments() is made  # its counters kept, no second set registered
    install_meter_provider(otel_metrics.NoOpMeterProvider())
    assert rm.instruments() is None


def test_decorated_stages_sampled_out_count_their_outputs(install_meter_provider: Install) -> None:
    """The decorators hand a sampled-out stage the number of its outputs (so an empty result is an
    ``empty`` stage) and user code inside reaches the stage as usual (``current_stage().set_status``)."""
    reader = InMemoryMetricReader()
    install_meter_provider(MeterProvider(metric_readers=[reader]))
    tracer = TracerProvider(sampler=RagtrailSampler(0.0)).get_tracer("test")

    @ragtrail.retriever(component="app.search", tracer=tracer)
    def search(query: str) -> list[dict[str, str]]:
        return [] if query == "nothing" else [{"id": "a"}]

    @ragtrail.reranker(component="app.rerank", tracer=tracer)
    def rerank(query: str, docs: list[dict[str, str]]) -> list[dict[str, str]]:
        s = ragtrail.current_stage()
        assert s is not None
        s.set_status(sc.STATUS_DEGRADED, failure_class="timeout")
        for d in docs:
            s.exclude(d, sc.REASON_BELOW_SCORE_THRESHOLD)
        return []

    for query in ("nothing", "something"):
        rerank(query, search(query))
    points = _points(reader)
    assert _sums(points[rm.STAGE_RUNS]) == {
        _stage(sc.KIND_RETRIEVE, "app.search", sc.STATUS_EMPTY): 1,
        _stage(sc.KIND_RETRIEVE, "app.search", sc.STATUS_OK): 1,
        _stage(sc.KIND_RERANK, "app.rerank", sc.STATUS_DEGRADED, "timeout"): 2,
    }
    degraded = {sc.EXCLUSION_REASON: sc.REASON_BELOW_SCORE_THRESHOLD}
    assert _sums(points[rm.STAGE_EXCLUSIONS]) == {_stage(sc.KIND_RERANK, "app.rerank", sc.STATUS_DEGRADED, "timeout", **degraded): 1}
