"""ragtrail's configurator and ``configure()`` send the recorder's metrics (counted before any
sampling) where the traces go: the real ``opentelemetry-instrument`` and a real process exit, in a
subprocess, against the loopback OTLP receiver."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from otlp_server import METRICS_PATH, OTLPServer, otlp_server  # noqa: F401  (fixture)
from ragtrail.contract import semconv as sc
from ragtrail.export.configurator import default_metric_exporter_names
from ragtrail.recorder import metrics as rm

BIN = Path(sys.executable).parent
RUNS = 40
APP = textwrap.dedent(
    """
    import ragtrail
    {setup}
    for i in range({runs}):
        with ragtrail.stage("pipeline", "app.Pipeline"):
            with ragtrail.stage("retrieve", "app.Retriever") as r:
                r.outputs([{{"id": "a"}}, {{"id": "b"}}])
            with ragtrail.stage("rerank", "app.Reranker") as k:
                if i % 4 == 0:
                    k.set_status("degraded", failure_class="timeout")
                k.exclude("b", "below_rank_cutoff")
                k.outputs([{{"id": "a"}}])
    # no shutdown, no flush: process exit must flush
    """
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RAGTRAIL_"))}
    env["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] = "*"
    env.update(extra)
    return env


def _run(tmp_path: Path, args: list[str], env: dict[str, str], setup: str = "") -> None:
    script = tmp_path / "app.py"
    script.write_text(APP.format(setup=setup, runs=RUNS))
    done = subprocess.run([*args, sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def _sums(server: OTLPServer) -> dict[tuple[str, frozenset[tuple[str, object]]], float]:
    """The last value of every counter data point the receiver got (cumulative: the last export says all)."""
    found: dict[tuple[str, frozenset[tuple[str, object]]], float] = {}
    for received in server.requests:
        if received.path != METRICS_PATH:
            continue
        request = ExportMetricsServiceRequest.FromString(received.body)
        for rm_ in request.resource_metrics:
            for scope in rm_.scope_metrics:
                for metric in scope.metrics:
                    if not metric.HasField("sum"):
                        continue
                    for point in metric.sum.data_points:
                        attributes = frozenset((kv.key, getattr(kv.value, kv.value.WhichOneof("value"))) for kv in point.attributes)
                        found[metric.name, attributes] = point.as_int
    return found


def _expect_counts(server: OTLPServer) -> None:
    sums = _sums(server)
    rerank = {sc.STAGE_KIND: "rerank", sc.STAGE_COMPONENT: "app.Reranker"}
    degraded = frozenset({**rerank, sc.STAGE_STATUS: "degraded", sc.STAGE_FAILURE_CLASS: "timeout"}.items())
    assert sums[rm.STAGE_RUNS, degraded] == RUNS // 4
    assert sums[rm.STAGE_RUNS, frozenset({**rerank, sc.STAGE_STATUS: "ok"}.items())] == RUNS - RUNS // 4
    assert sums[rm.STAGE_EXCLUSIONS, degraded | {(sc.EXCLUSION_REASON, "below_rank_cutoff")}] == RUNS // 4
    runs = {attributes: n for (name, attributes), n in sums.items() if name == rm.PIPELINE_RUNS}
    assert sum(runs.values()) == RUNS
    assert runs[frozenset({sc.STAGE_COMPONENT: "app.Pipeline", sc.RUN_STATUS: sc.RUN_DEGRADED}.items())] == RUNS // 4


def test_opentelemetry_instrument_with_an_endpoint_exports_metrics_of_every_run(tmp_path: Path, otlp_server: OTLPServer) -> None:  # noqa: F811
    """Head sampling at 10%: the traces are a sample, the metrics count every run."""
    env = _env(OTEL_EXPORTER_OTLP_ENDPOINT=otlp_server.url, OTEL_TRACES_SAMPLER_ARG="0.1")
    _run(tmp_path, [str(BIN / "opentelemetry-instrument")], env)
    assert len(otlp_server.traces()) < RUNS
    _expect_counts(otlp_server)


def test_configure_with_an_endpoint_exports_metrics(tmp_path: Path, otlp_server: OTLPServer) -> None:  # noqa: F811
    setup = f"ragtrail.configure(endpoint={otlp_server.url!r}, sampling_probability=0.1)"
    _run(tmp_path, [], _env(), setup)
    _expect_counts(otlp_server)


@pytest.mark.parametrize(
    ("args", "env", "setup"),
    [
        ([], {}, "ragtrail.configure(endpoint={url!r}, metrics=False)"),
        (["opentelemetry-instrument"], {"OTEL_EXPORTER_OTLP_ENDPOINT": "{url}", "OTEL_METRICS_EXPORTER": "none"}, ""),
    ],
    ids=["configure-metrics-false", "instrument-metrics-exporter-none"],
)
def test_metrics_can_be_turned_off(tmp_path: Path, otlp_server: OTLPServer, args: list[str], env: dict[str, str], setup: str) -> None:  # noqa: F811
    url = otlp_server.url
    _run(tmp_path, [str(BIN / a) for a in args], _env(**{k: v.format(url=url) for k, v in env.items()}), setup.format(url=url))
    assert otlp_server.traces()
    assert not [r for r in otlp_server.requests if r.path == METRICS_PATH]


def test_the_default_metrics_exporter_follows_the_otlp_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    ):
        monkeypatch.delenv(name, raising=False)
    assert default_metric_exporter_names() == []
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    assert default_metric_exporter_names() == ["otlp_proto_http"]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc")
    assert default_metric_exporter_names() == ["otlp_proto_grpc"]
