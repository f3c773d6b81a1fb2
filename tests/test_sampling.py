"""The ragtrail sampler: whole traces, consistent with OTel probability sampling, probability visible.

Decisions are checked exactly against the threshold arithmetic (randomness = low 56 bits of the
trace id), and the sampling rate statistically, over 10,000 traces exported through the whole-trace
processor to a real OTLP/HTTP receiver.
"""

from __future__ import annotations

import math
from importlib.metadata import entry_points

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._configuration import _import_sampler
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.trace.span import TraceState

from otlp_server import otlp_server  # noqa: F401  (fixture)
from ragtrail.contract import semconv
from ragtrail.export.whole_trace import WholeTraceSpanProcessor
from ragtrail.sampling import (
    MAX_THRESHOLD,
    RagtrailSampler,
    decode_threshold,
    encode_threshold,
    probability_to_threshold,
    sampler_factory,
    threshold_to_probability,
)

MASK56 = MAX_THRESHOLD - 1


def _memory_provider(sampler: RagtrailSampler) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _root_attributes(p: float) -> dict:
    return {
        semconv.SAMPLING_PROBABILITY: p,
        semconv.SAMPLING_ADJUSTED_COUNT: 1.0 / p,
        semconv.JAEGER_SAMPLER_TYPE: "probabilistic",
        semconv.JAEGER_SAMPLER_PARAM: p,
    }


@pytest.mark.parametrize(
    ("p", "th"),
    [(1.0, "0"), (0.5, "8"), (0.25, "c"), (0.1, "e6666666666666"), (0.75, "4"), (2**-56, "ffffffffffffff")],
)
def test_threshold_encoding_matches_the_otel_spec(p: float, th: str) -> None:
    threshold = probability_to_threshold(p)
    assert encode_threshold(threshold) == th
    assert decode_threshold(th) == threshold
    assert threshold_to_probability(threshold) == pytest.approx(p, rel=1e-12)


@pytest.mark.parametrize("bad", ["", "g", "123456789abcdef", "E"])
def test_malformed_threshold_is_rejected(bad: str) -> None:
    assert decode_threshold(bad) is None


@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan")])
def test_probability_out_of_range_is_an_error(p: float) -> None:
    with pytest.raises(ValueError):
        RagtrailSampler(p)


def test_root_decision_is_consistent_with_trace_id_randomness() -> None:
    sampler = RagtrailSampler(0.3)
    threshold = probability_to_threshold(0.3)
    for trace_id in [threshold, threshold - 1, 0, MASK56, (0xABC << 56) | (threshold - 1), (1 << 127) | threshold]:
        result = sampler.should_sample(None, trace_id, "root")
        assert result.decision.is_sampled() is ((trace_id & MASK56) >= threshold), hex(trace_id)


def test_sampled_root_is_stamped_and_children_are_not() -> None:
    provider, exporter = _memory_provider(RagtrailSampler(1.0))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("root"), tracer.start_as_current_span("child"):
        pass
    child, root = exporter.get_finished_spans()
    attrs = dict(root.attributes)
    assert attrs.pop(semconv.SAMPLING_PROBABILITY) == 1.0
    assert attrs.pop(semconv.SAMPLING_ADJUSTED_COUNT) == 1.0
    assert attrs.pop(semconv.JAEGER_SAMPLER_TYPE) == "probabilistic"
    assert attrs.pop(semconv.JAEGER_SAMPLER_PARAM) == 1.0
    assert attrs == {}
    assert dict(child.attributes) == {}
    assert root.context.trace_state.to_header() == "ot=th:0"
    assert child.context.trace_state.to_header() == "ot=th:0"


def test_remote_parent_tracestate_is_kept_by_children_and_grandchildren() -> None:
    provider, exporter = _memory_provider(RagtrailSampler(0.01))
    tracer = provider.get_tracer("t")
    header = "congo=t61rcWkgMzE,ot=th:c;rv:0123456789abcd;x:y,rojo=00f067aa0ba902b7"
    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": header}
    ctx = TraceContextTextMapPropagator().extract(carrier)
    with tracer.start_as_current_span("server", context=ctx), tracer.start_as_current_span("child"), tracer.start_as_current_span("grandchild"):
        pass
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["grandchild", "child", "server"]
    for span in spans:
        assert span.context.trace_state.to_header() == header
        assert dict(span.attributes) == {}  # not a root: the probability is the upstream's business
    # and it propagates onwards unchanged
    out: dict[str, str] = {}
    with tracer.start_as_current_span("server2", context=ctx) as s:
        TraceContextTextMapPropagator().inject(out, context=trace.set_span_in_context(s))
    assert out["tracestate"] == header


def test_remote_parent_not_sampled_drops_the_whole_trace() -> None:
    provider, exporter = _memory_provider(RagtrailSampler(1.0))
    tracer = provider.get_tracer("t")
    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", "tracestate": "a=b"}
    ctx = TraceContextTextMapPropagator().extract(carrier)
    with tracer.start_as_current_span("server", context=ctx) as server:
        assert not server.is_recording()
        assert server.get_span_context().trace_state.to_header() == "a=b"
        with tracer.start_as_current_span("child") as child:
            assert not child.is_recording()
    assert exporter.get_finished_spans() == ()


def _context_with_tracestate(header: str):
    invalid = SpanContext(0, 0, is_remote=True, trace_flags=TraceFlags(0), trace_state=TraceState.from_header([header]))
    return trace.set_span_in_context(NonRecordingSpan(invalid), otel_context.Context())


def test_explicit_rv_randomness_wins_over_the_trace_id_and_other_members_survive() -> None:
    sampler = RagtrailSampler(0.01)
    trace_id_that_would_sample = MASK56  # randomness from the id alone: always sampled
    keep = sampler.should_sample(_context_with_tracestate("vendor=v1,ot=rv:ffffffffffffff;zz:1"), 5, "root")
    assert keep.decision.is_sampled()
    assert keep.trace_state.to_header() == "ot=th:fd70a3d70a3d71;rv:ffffffffffffff;zz:1,vendor=v1"
    drop = sampler.should_sample(_context_with_tracestate("vendor=v1,ot=rv:00000000000000"), trace_id_that_would_sample, "root")
    assert not drop.decision.is_sampled()
    assert drop.attributes == {}


def test_an_existing_threshold_is_replaced_not_duplicated() -> None:
    result = RagtrailSampler(0.5).should_sample(_context_with_tracestate("ot=th:c;rv:ffffffffffffff"), 1, "root")
    assert result.trace_state["ot"] == "th:8;rv:ffffffffffffff"


def test_probability_zero_keeps_nothing_and_one_keeps_everything() -> None:
    assert not RagtrailSampler(0.0).should_sample(None, (1 << 128) - 1, "root").decision.is_sampled()
    assert RagtrailSampler(1.0).should_sample(None, 1 << 56, "root").decision.is_sampled()


def test_sampler_is_registered_for_otel_traces_sampler(monkeypatch: pytest.MonkeyPatch) -> None:
    (ep,) = [e for e in entry_points(group="opentelemetry_traces_sampler") if e.name == "ragtrail"]
    assert ep.load() is sampler_factory
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.1")
    sampler = _import_sampler("ragtrail")  # what the SDK configurator runs
    assert isinstance(sampler, RagtrailSampler)
    assert sampler.probability == 0.1
    monkeypatch.delenv("OTEL_TRACES_SAMPLER_ARG")
    assert _import_sampler("ragtrail").probability == 1.0


def test_sampler_factory_rejects_a_bad_argument_loudly() -> None:
    with pytest.raises(ValueError, match="OTEL_TRACES_SAMPLER_ARG"):
        sampler_factory("ten percent")
    with pytest.raises(ValueError):
        sampler_factory("2")


def test_ten_thousand_traces_rate_within_bounds_and_all_whole(otlp_server) -> None:  # noqa: F811
    p = 0.1
    n = 10_000
    provider = TracerProvider(sampler=RagtrailSampler(p))
    processor = WholeTraceSpanProcessor(OTLPSpanExporter(endpoint=otlp_server.traces_url), schedule_delay_millis=50, max_traces=n)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    trace_ids = []
    for _ in range(n):
        with tracer.start_as_current_span("root") as root:
            with tracer.start_as_current_span("a"):
                pass
            with tracer.start_as_current_span("b"):
                pass
        trace_ids.append(root.get_span_context().trace_id)
    assert provider.force_flush(60_000)
    threshold = probability_to_threshold(p)
    expected = {f"{t:032x}" for t in trace_ids if (t & MASK56) >= threshold}
    received = otlp_server.traces()
    assert set(received) == expected  # exactly the consistent decision, nothing else
    k = len(received)
    sd = math.sqrt(n * p * (1 - p))
    assert abs(k - n * p) < 5 * sd, k
    for _trace_id, spans in received.items():
        assert sorted(s.name for s in spans) == ["a", "b", "root"]
        (root,) = [s for s in spans if s.parent_span_id == ""]
        attrs = dict(root.attributes)
        assert attrs.pop(semconv.TRACE_SPAN_COUNT) == 3
        assert attrs == _root_attributes(p)
        assert all(s.trace_state == "ot=th:e6666666666666" for s in spans)
    assert processor.loss.total_traces_dropped == 0
    provider.shutdown()


def test_the_callers_start_attributes_are_kept_on_roots_and_children() -> None:
    provider, exporter = _memory_provider(RagtrailSampler(1.0))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("root", attributes={"app.a": 1}), tracer.start_as_current_span("child", attributes={"app.b": "x"}):
        pass
    child, root = exporter.get_finished_spans()
    assert dict(root.attributes) == {"app.a": 1, **_root_attributes(1.0)}
    assert dict(child.attributes) == {"app.b": "x"}
