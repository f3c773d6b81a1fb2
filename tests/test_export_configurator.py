"""One switch: ``opentelemetry-instrument`` (the real tool, in a subprocess) and ``ragtrail.configure``
give the ragtrail sampler, the whole-trace processor and the right exporter; process exit flushes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider

from otlp_server import OTLPServer, otlp_server  # noqa: F401  (fixture)
from ragtrail.contract import semconv
from ragtrail.export.configurator import RagtrailConfigurator, configure, default_trace_exporter_name
from ragtrail.export.local_store import LocalStoreSpanExporter
from ragtrail.export.otlp_json import parse_request
from ragtrail.export.whole_trace import WholeTraceSpanProcessor
from ragtrail.sampling import MAX_THRESHOLD, RagtrailSampler, probability_to_threshold

BIN = Path(sys.executable).parent
APP = textwrap.dedent(
    """
    import json, sys
    from opentelemetry import trace
    provider = trace.get_tracer_provider()
    tracer = trace.get_tracer("app")
    ids = []
    for i in range(int(sys.argv[1])):
        with tracer.start_as_current_span("root") as root:
            with tracer.start_as_current_span("child"):
                pass
        ids.append(f"{root.get_span_context().trace_id:032x}")
    processors = [type(p).__name__ for p in provider._active_span_processor._span_processors]
    print(json.dumps({"ids": ids, "processors": processors, "sampler": provider.sampler.get_description()}))
    # no shutdown, no flush: process exit must flush
    """
)


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RAGTRAIL_"))}
    env["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] = "*"  # library patching is not under test here
    env.update(extra)
    return env


def _run(tmp_path: Path, args: list[str], env: dict[str, str], n: int) -> dict:
    script = tmp_path / "app.py"
    script.write_text(APP)
    done = subprocess.run([*args, sys.executable, str(script), str(n)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith('{"ids"')]
    return json.loads(line)


def _store_spans(directory: Path) -> list:
    spans = []
    for path in sorted(directory.glob("traces-*.jsonl")):
        for line in path.read_text().splitlines():
            for rs in parse_request(line).resource_spans:
                for ss in rs.scope_spans:
                    spans.extend(ss.spans)
    return spans


def test_opentelemetry_instrument_defaults_to_the_local_store_with_whole_traces(tmp_path: Path) -> None:
    out = _run(tmp_path, [str(BIN / "opentelemetry-instrument")], _clean_env(), n=20)
    assert out["processors"] == ["WholeTraceSpanProcessor"]
    assert out["sampler"] == "RagtrailSampler{p=1.0}"
    spans = _store_spans(tmp_path / ".ragtrail")
    assert len(spans) == 40
    assert {s.trace_id.hex() for s in spans} == set(out["ids"])
    roots = [s for s in spans if not s.parent_span_id]
    for root in roots:
        attrs = {kv.key: kv.value for kv in root.attributes}
        assert attrs[semconv.TRACE_SPAN_COUNT].int_value == 2
        assert attrs[semconv.SAMPLING_PROBABILITY].double_value == 1.0


def test_opentelemetry_instrument_with_an_endpoint_samples_consistently_and_exports_otlp(
    tmp_path: Path,
    otlp_server: OTLPServer,  # noqa: F811
) -> None:
    env = _clean_env(
        OTEL_EXPORTER_OTLP_ENDPOINT=otlp_server.url,
        OTEL_TRACES_SAMPLER="ragtrail",
        OTEL_TRACES_SAMPLER_ARG="0.5",
        OTEL_SERVICE_NAME="svc",
    )
    out = _run(tmp_path, [str(BIN / "opentelemetry-instrument")], env, n=200)
    assert out["processors"] == ["WholeTraceSpanProcessor"]
    assert out["sampler"] == "RagtrailSampler{p=0.5}"
    threshold = probability_to_threshold(0.5)
    expected = {t for t in out["ids"] if (int(t, 16) & (MAX_THRESHOLD - 1)) >= threshold}
    traces = otlp_server.traces()
    assert set(traces) == expected and 60 < len(expected) < 140
    for spans in traces.values():
        (root,) = [s for s in spans if not s.parent_span_id]
        assert root.attributes[semconv.TRACE_SPAN_COUNT] == len(spans) == 2
        assert root.attributes[semconv.SAMPLING_ADJUSTED_COUNT] == 2.0
        assert root.resource["service.name"] == "svc"
    assert not (tmp_path / ".ragtrail").exists()


def test_an_explicit_traces_exporter_and_sampler_are_honoured(tmp_path: Path) -> None:
    env = _clean_env(OTEL_TRACES_EXPORTER="console", OTEL_TRACES_SAMPLER="always_on")
    out = _run(tmp_path, [str(BIN / "opentelemetry-instrument")], env, n=1)
    assert out["processors"] == ["WholeTraceSpanProcessor"]
    assert out["sampler"] == "AlwaysOnSampler"
    assert not (tmp_path / ".ragtrail").exists()


def test_configure_in_code_flushes_at_process_exit(tmp_path: Path, otlp_server: OTLPServer) -> None:  # noqa: F811
    script = tmp_path / "app.py"
    script.write_text(f"import ragtrail\nragtrail.configure(endpoint={otlp_server.url!r}, service_name='coded')\n" + APP)
    done = subprocess.run([sys.executable, str(script), "30"], cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["processors"] == ["WholeTraceSpanProcessor"]
    traces = otlp_server.traces()
    assert set(traces) == set(out["ids"])
    assert all(len(spans) == 2 for spans in traces.values())


def test_configure_without_an_endpoint_writes_the_local_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_SAMPLER"):
        monkeypatch.delenv(name, raising=False)
    provider = configure(local_store_dir=tmp_path, sampling_probability=1.0, set_global=False)
    assert isinstance(provider.sampler, RagtrailSampler)
    with provider.get_tracer("t").start_as_current_span("root"):
        pass
    provider.shutdown()
    (span,) = _store_spans(tmp_path)
    assert span.name == "root"


def test_default_exporter_choice_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    ):
        monkeypatch.delenv(name, raising=False)
    assert default_trace_exporter_name() == "ragtrail_file"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:1/v1/traces")
    assert default_trace_exporter_name() == "otlp_proto_http"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    assert default_trace_exporter_name() == "otlp_proto_grpc"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
    with pytest.raises(ValueError, match="unsupported OTLP protocol"):
        default_trace_exporter_name()


def test_the_configurator_is_the_registered_entry_point() -> None:
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="opentelemetry_configurator") if e.name == "ragtrail"]
    assert ep.load() is RagtrailConfigurator


def test_configure_accepts_an_exporter_and_processor_options(tmp_path: Path) -> None:
    exporter = LocalStoreSpanExporter(tmp_path)
    provider = configure(exporter=exporter, processor_options={"max_traces": 7}, set_global=False)
    assert isinstance(provider, TracerProvider)
    (processor,) = provider._active_span_processor._span_processors
    assert isinstance(processor, WholeTraceSpanProcessor) and processor.max_traces == 7
    provider.shutdown()
