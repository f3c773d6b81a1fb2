"""docker-compose.yml cannot run here (no Docker engine): check its structure instead.

Every mounted file exists, every cross-service endpoint names a service and a port that service
really listens on (read from the service's own config), host ports are unique and loopback-only,
images are pinned to the versions the e2e tests build, and Grafana's provisioning points at the
compose services and queries ragtrail's real attribute names (TraceQL) and the metric names the
recorder really emits, as the Collector's Prometheus exporter names them (PromQL).
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import Histogram, InMemoryMetricReader, Sum
from opentelemetry.sdk.trace import TracerProvider

import ragtrail
from ragtrail.contract import semconv
from ragtrail.recorder import metrics as recorder_metrics

REPO = Path(__file__).resolve().parents[1]
COMPOSE = REPO / "docker-compose.yml"
ENV_REF = re.compile(r"\$\{env:([A-Z0-9_]+)(?::-([^}]*))?\}")
ALARM_QUERIES = {
    '{ span.ragtrail.stage.status = "degraded" }',
    '{ span.ragtrail.stage.status = "failed" }',
    '{ event.ragtrail.exclusion.reason = "unexplained" }',
    '{ name = "ragtrail.loss" }',
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())  # SafeLoader resolves the x-gateway anchor / `<<` merge


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def bind_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """container path -> host path of the service's ./relative bind mounts."""
    out = {}
    for volume in service.get("volumes", []):
        host, container = volume.split(":")[:2]
        if host.startswith("./"):
            out[container] = REPO / host
    return out


def mounted_configs(service: dict[str, Any]) -> list[Path]:
    """The config files a service is started with (--config=/path or -config.file=/path), in order:
    a Collector merges the later ones over the first (collector-config/metrics.yaml is an overlay)."""
    mounts = bind_mounts(service)
    found = []
    for arg in service.get("command", []):
        match = re.match(r"--?config(?:\.file)?=(.+)", arg)
        if match and not match.group(1).startswith("yaml:"):
            found.append(mounts[match.group(1)])
    return found


def mounted_config(service: dict[str, Any]) -> Path | None:
    """The (first) config file a service is started with."""
    configs = mounted_configs(service)
    return configs[0] if configs else None


def listen_ports(name: str, service: dict[str, Any]) -> set[int]:
    """Ports a service listens on inside its container, from its own config + environment."""
    if name == "clickhouse":  # the image's own config: HTTP and native
        return {8123, 9000}
    config = mounted_config(service)
    assert config is not None, f"{name} has no config"
    text = config.read_text()
    env = {k: str(v) for k, v in (service.get("environment") or {}).items()}
    ports: set[int] = set()
    if name == "tempo":
        cfg = yaml.safe_load(text)
        ports.add(cfg["server"]["http_listen_port"])
        for proto in cfg["distributor"]["receivers"]["otlp"]["protocols"].values():
            ports.add(int(proto["endpoint"].rsplit(":", 1)[1]))
        return ports
    if name == "prometheus":
        addresses = [a.split("=", 1)[1] for a in service["command"] if a.startswith("--web.listen-address=")]
        return {int(a.rsplit(":", 1)[1]) for a in addresses}
    for config_path in mounted_configs(service):
        cfg = yaml.safe_load(config_path.read_text())
        # only what the collector SERVES (receivers, extensions, the Prometheus exporter's /metrics),
        # not where it exports to
        served = [cfg.get("receivers") or {}, cfg.get("extensions") or {}, (cfg.get("exporters") or {}).get("prometheus") or {}]
        for endpoint in _endpoints(served):
            value = ENV_REF.sub(lambda m: env.get(m.group(1), m.group(2) or ""), endpoint)
            ports.add(int(value.rsplit(":", 1)[1]))
    return ports


def _endpoints(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "endpoint" and isinstance(v, str)] + [
            e for k, v in node.items() if k != "endpoint" for e in _endpoints(v)
        ]
    if isinstance(node, list):
        return [e for item in node for e in _endpoints(item)]
    return []


def test_services_and_profiles(services: dict[str, Any]) -> None:
    assert set(services) == {
        "gateway-1",
        "gateway-2",
        "loadbalancer",
        "jaeger",
        "tempo",
        "prometheus",
        "grafana",
        "clickhouse",
        "collector-clickhouse",
    }
    for name, service in services.items():
        for dep in service.get("depends_on", []):
            assert dep in services, f"{name} depends on unknown service {dep}"
            # a service outside a profile must not depend on one that only runs in a profile
            dep_profiles = set(services[dep].get("profiles", []))
            if dep_profiles:
                assert dep_profiles <= set(service.get("profiles", [])), f"{name} needs {dep} ({dep_profiles})"


def test_every_bind_mount_exists(services: dict[str, Any]) -> None:
    for name, service in services.items():
        for container, host in bind_mounts(service).items():
            assert host.exists(), f"{name}: {host} (mounted at {container}) does not exist"
        config = mounted_config(service)
        if name not in ("grafana", "clickhouse"):  # both run on their image's own config
            assert config is not None and config.is_file(), f"{name} is not started with a mounted config"


def test_env_vars_given_to_services_are_read_by_their_config(services: dict[str, Any]) -> None:
    # a typo in a variable name would silently fall back to the config's default
    for name, service in services.items():
        configs = mounted_configs(service)
        if not configs:
            continue
        referenced = {m.group(1) for config in configs for m in ENV_REF.finditer(config.read_text())}
        for var in service.get("environment") or {}:
            assert var in referenced, f"{name}: {var} is set but {[c.name for c in configs]} never read it"


def test_host_ports_are_unique_loopback_and_reach_a_listener(services: dict[str, Any]) -> None:
    seen: dict[int, str] = {}
    for name, service in services.items():
        for mapping in service.get("ports", []):
            ip, host_port, container_port = mapping.split(":")
            assert ip == "127.0.0.1", f"{name}: {mapping} is not bound to loopback"
            assert int(host_port) not in seen, f"host port {host_port} used by {seen.get(int(host_port))} and {name}"
            seen[int(host_port)] = name
            if name != "grafana":  # grafana listens on its image default 3000
                assert int(container_port) in listen_ports(name, service), f"{name}: nothing listens on {container_port}"
    assert seen == {
        4317: "gateway-1",
        4318: "gateway-1",
        14317: "loadbalancer",
        14318: "loadbalancer",
        16686: "jaeger",
        3200: "tempo",
        9090: "prometheus",
        3000: "grafana",
        8123: "clickhouse",
        24317: "collector-clickhouse",
        24318: "collector-clickhouse",
    }


def test_cross_service_endpoints_name_a_listening_service(services: dict[str, Any]) -> None:
    checked = 0
    for name, service in services.items():
        for var, value in (service.get("environment") or {}).items():
            value = str(value).split("://", 1)[-1]  # tcp://clickhouse:9000 names the service clickhouse
            host, _, port = value.rpartition(":")
            if var.endswith(("_ENDPOINT", "GATEWAY_1", "GATEWAY_2")) and host and host != "0.0.0.0":
                assert host in services, f"{name}: {var}={value} names no service"
                assert int(port) in listen_ports(host, services[host]), f"{name}: {host} does not listen on {port}"
                checked += 1
    assert checked == 7  # 2 gateways x (jaeger, tempo) + load balancer x 2 gateways + the ClickHouse collector


def test_images_are_pinned_to_the_versions_the_e2e_tests_build(services: dict[str, Any]) -> None:
    script = (REPO / "scripts" / "build-backends.sh").read_text()
    contrib = re.search(r'^OTELCOL_CONTRIB_VERSION="v([0-9.]+)"', script, re.M).group(1)
    jaeger_module = re.search(r'^JAEGER_MODULE_VERSION="v1\.([0-9]+)\.([0-9]+)"', script, re.M)
    # Jaeger's Go module v1.N.P is Jaeger v2.(N-63).P (v1.76.0 == v2.13.0: same commit)
    jaeger_v2 = f"2.{int(jaeger_module.group(1)) - 63}.{jaeger_module.group(2)}"
    for name, service in services.items():
        image, _, tag = service["image"].partition(":")
        assert tag and tag != "latest", f"{name}: image {service['image']} is not pinned"
        if image == "otel/opentelemetry-collector-contrib":
            assert tag == contrib
        if image == "jaegertracing/jaeger":
            assert tag == jaeger_v2


def test_gateways_record_the_tail_sampling_policy(services: dict[str, Any]) -> None:
    for name in ("gateway-1", "gateway-2"):
        assert "--feature-gates=processor.tailsamplingprocessor.recordpolicy" in services[name]["command"]
        assert [c.name for c in mounted_configs(services[name])] == ["gateway.yaml", "metrics.yaml"]
    assert mounted_config(services["loadbalancer"]).name == "loadbalancer.yaml"


def test_grafana_datasources_point_at_compose_services(services: dict[str, Any]) -> None:
    grafana = services["grafana"]
    mounts = bind_mounts(grafana)
    provisioning = mounts["/etc/grafana/provisioning"]
    datasources = yaml.safe_load((provisioning / "datasources" / "ragtrail.yaml").read_text())["datasources"]
    by_type = {d["type"]: d for d in datasources}
    assert set(by_type) == {"tempo", "jaeger", "prometheus"}
    for kind, ds in by_type.items():
        match = re.fullmatch(r"http://([a-z0-9-]+):(\d+)", ds["url"])
        assert match, ds["url"]
        host, port = match.group(1), int(match.group(2))
        assert host == kind and host in grafana["depends_on"]
        assert port in listen_ports(host, services[host])
    # the dashboards provider reads the directory compose mounts the dashboards into
    providers = yaml.safe_load((provisioning / "dashboards" / "ragtrail.yaml").read_text())["providers"]
    assert [p["options"]["path"] for p in providers] == ["/var/lib/grafana/dashboards"]
    assert "/var/lib/grafana/dashboards" in mounts


def _dashboard_targets(services: dict[str, Any]) -> list[dict[str, Any]]:
    dashboards = bind_mounts(services["grafana"])["/var/lib/grafana/dashboards"]
    dash = json.loads((dashboards / "ragtrail-alarms.json").read_text())
    return [target for panel in dash["panels"] for target in panel.get("targets", [])]  # a row panel has none


def test_alarm_dashboard_queries_ragtrail_attributes(services: dict[str, Any]) -> None:
    datasource_uids = {d["uid"] for d in yaml.safe_load((REPO / "deploy/grafana/provisioning/datasources/ragtrail.yaml").read_text())["datasources"]}
    queries = set()
    for target in _dashboard_targets(services):
        assert target["datasource"]["uid"] in datasource_uids
        if target["datasource"]["type"] == "tempo":
            assert target["queryType"] == "traceql"
            queries.add(target["query"])
    assert queries >= ALARM_QUERIES
    # every ragtrail attribute a query names is a real name from semconv (no typo'd alarms)
    known = {v for k, v in vars(semconv).items() if k.isupper() and isinstance(v, str)}
    for query in queries:
        for name in re.findall(r"(?:span|event)\.(ragtrail\.[a-z_.]+)", query):
            assert name in known, f"{query}: {name} is not a ragtrail attribute"


def _prometheus_name(otel_name: str) -> str:
    """The Collector's Prometheus exporter's default translation (checked against the real exporter by
    tests/e2e/test_prometheus_metrics.py): every character outside [a-zA-Z0-9_] becomes `_`."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", otel_name)


@pytest.fixture
def emitted(monkeypatch: pytest.MonkeyPatch) -> tuple[set[str], set[str]]:
    """(metric names, label names) as Prometheus sees them, of what the recorder really emits: one
    recorded pipeline run (stages, an exclusion, an answer) collected by the SDK's in-memory reader."""
    reader = InMemoryMetricReader()
    monkeypatch.setattr(importlib.import_module("opentelemetry.metrics._internal"), "_METER_PROVIDER", MeterProvider(metric_readers=[reader]))
    recorder_metrics.refresh()
    tracer = TracerProvider().get_tracer("test")
    with ragtrail.stage(semconv.KIND_PIPELINE, "app.Pipeline", tracer=tracer):
        with ragtrail.stage(semconv.KIND_RERANK, "app.Reranker", tracer=tracer) as stage:
            stage.inputs([{"id": "a"}, {"id": "b"}])
            stage.set_status(semconv.STATUS_DEGRADED, failure_class="timeout")
            stage.exclude("b", semconv.REASON_BELOW_RANK_CUTOFF)
            stage.outputs([{"id": "a"}])
        ragtrail.answer("an answer")
    data = reader.get_metrics_data()
    assert data is not None
    metrics, labels = set(), {"le", "job", "instance"}
    for metric in (m for r in data.resource_metrics for sm in r.scope_metrics for m in sm.metrics):
        base = _prometheus_name(metric.name)
        if isinstance(metric.data, Sum):
            assert metric.data.is_monotonic
            metrics.add(base + "_total")
        else:
            assert isinstance(metric.data, Histogram)
            metrics |= {base + "_bucket", base + "_sum", base + "_count"}
        labels |= {_prometheus_name(k) for p in metric.data.data_points for k in (p.attributes or {})}
    return metrics, labels


def test_metric_panels_query_what_the_recorder_emits(services: dict[str, Any], emitted: tuple[set[str], set[str]]) -> None:
    """Each PromQL panel names only metrics the recorder emits and labels they carry (as the Collector's
    Prometheus exporter names them), with label values from semconv; the counters all have a panel."""
    metrics, labels = emitted
    assert {"ragtrail_stage_runs_total", "ragtrail_stage_exclusions_total", "ragtrail_pipeline_runs_total"} <= metrics
    known_values = {v for k, v in vars(semconv).items() if k.isupper() and isinstance(v, str)} | {recorder_metrics.UNKNOWN, "true", "false"}
    exprs = [t["expr"] for t in _dashboard_targets(services) if t["datasource"]["type"] == "prometheus"]
    used: set[str] = set()
    for expr in exprs:
        names = set(re.findall(r"\b(?:ragtrail_\w+|le|job|instance)\b", expr))
        assert names & metrics, f"{expr}: queries no ragtrail metric"
        assert names <= metrics | labels, f"{expr}: {sorted(names - metrics - labels)} are neither emitted metrics nor their labels"
        for label, value in re.findall(r'(\w+)="([^"]*)"', expr):
            assert label in labels and value in known_values, f"{expr}: {label}={value!r}"
        used |= names & metrics
    assert {"ragtrail_stage_runs_total", "ragtrail_stage_exclusions_total", "ragtrail_pipeline_runs_total"} <= used


def test_prometheus_scrapes_the_gateways_exporter(services: dict[str, Any]) -> None:
    config = yaml.safe_load(mounted_config(services["prometheus"]).read_text())
    targets = [t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    assert targets == ["gateway-1:8889"]
    for target in targets:
        host, port = target.rsplit(":", 1)
        assert host in services["prometheus"]["depends_on"]
        assert int(port) in listen_ports(host, services[host]), f"{host} does not serve {port}"
    assert all(job["honor_labels"] for job in config["scrape_configs"])  # the app's service.name stays `job`
