"""Metrics counted before any sampling, end to end (issue 26): an app whose traces are head-sampled at
p = 0.1 runs 300 questions through ragtrail's configurator (its MeterProvider with the OTLP metrics
exporter) into the REAL gateway Collector (collector-config/gateway.yaml + metrics.yaml, the
Prometheus exporter), a REAL Prometheus scrapes it, and its HTTP API says exactly 300 pipeline runs,
30 degraded and every exclusion by reason, while the backend holds only the sampled traces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import metrics_app as app
import pytest
import ragtrail_backends as rb

SERVICE = "ragtrail-e2e-metrics"
APP = Path(__file__).resolve().parent / "metrics_app.py"
BELOW_CUTOFF = (app.RUNS - app.RUNS // app.DEGRADED_EVERY) * (app.DOCS - app.KEPT)
BELOW_CUTOFF_DEGRADED = app.RUNS // app.DEGRADED_EVERY * (app.DOCS - app.KEPT_DEGRADED)


@pytest.fixture
def start_prometheus(tmp_path: Path) -> Iterator[Callable[[list[str]], rb.Prometheus]]:
    binary = rb.require_prometheus()
    started: list[rb.Prometheus] = []

    def start(targets: list[str]) -> rb.Prometheus:
        server = rb.Prometheus(binary, tmp_path, targets)
        started.append(server)
        return server.start()  # type: ignore[return-value]

    yield start
    for server in started:
        server.stop()


def _dashboard_exprs() -> list[str]:
    dashboard = json.loads((rb.REPO / "deploy" / "grafana" / "dashboards" / "ragtrail-alarms.json").read_text())
    targets = [t for panel in dashboard["panels"] for t in panel.get("targets", [])]
    exprs = [t["expr"] for t in targets if t["datasource"]["type"] == "prometheus"]
    assert len(exprs) >= 6
    return exprs


def _run_app(collector: rb.Collector) -> dict[str, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {
        "OTEL_SERVICE_NAME": SERVICE,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.otlp_http_port}",
        "OTEL_TRACES_SAMPLER_ARG": "0.1",
        "OTEL_METRIC_EXPORT_INTERVAL": "500",
    }
    done = subprocess.run([sys.executable, str(APP)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _by(prometheus: rb.Prometheus, metric: str, *labels: str) -> dict[tuple[str, ...], float]:
    series = prometheus.query(f'sum by ({", ".join(labels)}) ({metric}{{job="{SERVICE}"}})')
    return {tuple(m.get(label, "") for label in labels): value for m, value in series}


def test_prometheus_reads_back_every_run_of_a_sampled_app(start_jaeger, start_collector, start_prometheus) -> None:
    jaeger = start_jaeger("jaeger")
    exporter_port = rb.free_port()
    env = rb.gateway_env(jaeger, jaeger) | {"RAGTRAIL_PROMETHEUS_ENDPOINT": f"127.0.0.1:{exporter_port}"}
    collector = start_collector("gateway.yaml", env, overlays=("metrics.yaml",))
    rb.wait_until(lambda: rb.port_open(exporter_port), 30, what="the Prometheus exporter to listen")
    prometheus = start_prometheus([f"127.0.0.1:{exporter_port}"])

    ran = _run_app(collector)
    assert ran["runs"] == app.RUNS and 10 <= ran["sampled"] <= 60  # the traces are a sample of about 30
    rb.wait_until(lambda: _by(prometheus, "ragtrail_pipeline_runs_total") == {(): app.RUNS}, 60, interval=0.5, what="300 runs scraped by Prometheus")

    assert _by(prometheus, "ragtrail_pipeline_runs_total", "ragtrail_run_status") == {("available",): 270, ("degraded",): 30}
    assert _by(prometheus, "ragtrail_pipeline_runs_total", "ragtrail_answer_refused") == {("false",): 294, ("true",): 6}
    stages = "ragtrail_stage_kind", "ragtrail_stage_status", "ragtrail_stage_failure_class"
    assert _by(prometheus, "ragtrail_stage_runs_total", *stages) == {
        ("pipeline", "ok", ""): 300,
        ("retrieve", "ok", ""): 300,
        ("rerank", "ok", ""): 270,
        ("rerank", "degraded", "timeout"): 30,
        ("filter", "ok", ""): 300,
    }
    assert _by(prometheus, "ragtrail_stage_exclusions_total", "ragtrail_stage_kind", "ragtrail_stage_status", "ragtrail_exclusion_reason") == {
        ("rerank", "ok", "below_rank_cutoff"): BELOW_CUTOFF,
        ("rerank", "degraded", "below_rank_cutoff"): BELOW_CUTOFF_DEGRADED,
        ("filter", "ok", "superseded"): 300,
    }
    assert _by(prometheus, "ragtrail_stage_exclusions_total", "ragtrail_exclusion_reason") == {
        ("below_rank_cutoff",): 2040,
        ("superseded",): 300,
    }
    # the histograms are of the recording (sampled) stages: one observation per traced run
    traced = float(ran["sampled"])
    kinds = ("pipeline",), ("retrieve",), ("rerank",), ("filter",)
    assert _by(prometheus, "ragtrail_stage_candidates_in_count", "ragtrail_stage_kind") == dict.fromkeys(kinds, traced)
    assert _by(prometheus, "ragtrail_stage_candidates_out_sum", "ragtrail_stage_kind")[("retrieve",)] == traced * app.DOCS
    # every PromQL panel of the Grafana dashboard is a query this Prometheus accepts and has series for
    for expr in _dashboard_exprs():
        prometheus.query(expr.replace("$__rate_interval", "1m"))
    assert prometheus.query('ragtrail_stage_runs_total{ragtrail_stage_status="degraded"}')  # the degraded panel's series exist
    # while the trace backend holds the sample only
    rb.wait_until(lambda: len(jaeger.traces_of_service(SERVICE)) == ran["sampled"], 30, what="the sampled traces in Jaeger")
    assert collector.proc is not None and collector.proc.poll() is None
