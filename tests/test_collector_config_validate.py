"""collector-config/*.yaml: the shape ragtrail relies on, and the REAL collector's own `validate`.

The structural checks run everywhere (PyYAML only). The `validate` checks run the binaries built by
scripts/build-backends.sh (marker ``e2e``: required under CI, skipped loudly without Go).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))
import ragtrail_backends as rb  # noqa: E402

from ragtrail.contract import semconv  # noqa: E402

CONFIG_DIR = rb.CONFIG_DIR
COLLECTOR_CONFIGS = ("gateway.yaml", "loadbalancer.yaml", "truncate-example.yaml", "clickhouse.yaml")
# configs whose exporters start with nobody listening (the ClickHouse exporter creates its schema at
# start, so clickhouse.yaml starts in the ClickHouse e2e tier, tests/e2e/test_clickhouse.py)
STARTS_ALONE = ("gateway.yaml", "loadbalancer.yaml", "truncate-example.yaml")
ENV_REF = re.compile(r"\$\{env:([A-Z0-9_]+)(:-[^}]*)?\}")


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((CONFIG_DIR / name).read_text())


def endpoints(node: Any) -> list[str]:
    """Every `endpoint` / `hostnames` value anywhere in a config."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "endpoint" and isinstance(value, str):
                found.append(value)
            elif key == "hostnames":
                found.extend(value)
            else:
                found.extend(endpoints(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(endpoints(item))
    return found


@pytest.mark.parametrize("name", COLLECTOR_CONFIGS + ("jaeger.yaml",))
def test_every_endpoint_is_an_env_var_with_a_default(name: str) -> None:
    # the e2e tests bind 127.0.0.1 on free ports and docker-compose uses service names: both only
    # work if no endpoint is hard-coded
    eps = endpoints(load(name))
    assert eps
    for ep in eps:
        match = ENV_REF.fullmatch(ep)
        assert match and match.group(2), f"{name}: endpoint {ep!r} is not ${{env:NAME:-default}}"


@pytest.mark.parametrize("name", COLLECTOR_CONFIGS)
def test_pipeline_references_only_defined_components(name: str) -> None:
    cfg = load(name)
    for pipeline in cfg["service"]["pipelines"].values():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                assert component in cfg[kind], f"{name}: {kind} {component} used but not defined"
    for kind in ("receivers", "processors", "exporters"):
        used = {c for p in cfg["service"]["pipelines"].values() for c in p.get(kind, [])}
        assert set(cfg.get(kind) or {}) == used, f"{name}: {kind} defined but unused"


def test_gateway_keeps_every_finding_before_the_probabilistic_share() -> None:
    cfg = load("gateway.yaml")
    assert cfg["service"]["pipelines"]["traces"]["processors"] == ["memory_limiter", "tail_sampling", "transform/tail_weight", "batch"]
    ts = cfg["processors"]["tail_sampling"]
    policies = ts.pop("policies")
    # with the record-policy gate the FIRST matching policy is recorded: findings must come first
    assert [p["name"] for p in policies] == [
        "finding-stage-status",
        "finding-unexplained-exclusion",
        "finding-error",
        "finding-recorder",
        "ragtrail-loss-record",
        "baseline-probabilistic",
    ]
    status, unexplained, error, recorder, loss, share = policies
    assert status["type"] == "string_attribute"
    assert status["string_attribute"] == {"key": semconv.STAGE_STATUS, "values": [semconv.STATUS_FAILED, semconv.STATUS_DEGRADED]}
    assert unexplained["type"] == "ottl_condition"
    assert unexplained["ottl_condition"]["spanevent"] == [
        f'name == "{semconv.EVENT_EXCLUSION}" and attributes["{semconv.EXCLUSION_REASON}"] == "{semconv.REASON_UNEXPLAINED}"'
    ]
    assert error == {"name": "finding-error", "type": "status_code", "status_code": {"status_codes": ["ERROR"]}}
    assert recorder["ottl_condition"]["span"] == [
        f'attributes["{semconv.STAGE_FINDINGS}"] != nil',
        f'attributes["{semconv.STAGE_INSTRUMENTATION_ERRORS}"] != nil',
        f'attributes["{semconv.QUERY_TRANSFORM}"] == "{semconv.TRANSFORM_UNTRACKED}"',
    ]
    assert loss["ottl_condition"]["span"] == [f'name == "{semconv.LOSS_SPAN_NAME}"']
    assert share["type"] == "probabilistic"
    assert set(share["probabilistic"]) == {"sampling_percentage", "hash_salt"}
    # decisions are remembered, so late spans follow their trace's decision
    assert ts["decision_cache"]["sampled_cache_size"] > ts["num_traces"]
    assert set(cfg["exporters"]) == {"otlp_grpc/jaeger", "otlp_grpc/tempo"}
    assert rb.RECORD_POLICY_GATE in (CONFIG_DIR / "gateway.yaml").read_text()


def test_loadbalancer_routes_by_trace_id_to_gateways() -> None:
    cfg = load("loadbalancer.yaml")
    lb = cfg["exporters"]["loadbalancing"]
    assert lb["routing_key"] == "traceID"
    assert len(lb["resolver"]["static"]["hostnames"]) == 2
    # nothing that buffers or reorders whole traces before routing
    assert cfg["service"]["pipelines"]["traces"]["processors"] == ["memory_limiter"]


def test_truncate_example_cuts_span_and_event_attributes() -> None:
    cfg = load("truncate-example.yaml")
    statements = cfg["processors"]["transform/truncate"]["trace_statements"]
    assert [s["context"] for s in statements] == ["span", "spanevent"]
    for s in statements:
        assert s["statements"] == ["truncate_all(attributes, ${env:RAGTRAIL_TRUNCATE_BYTES:-128})"]


# ---- the real collector's own validation -----------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("name", COLLECTOR_CONFIGS)
def test_collector_validates_config(name: str) -> None:
    binary = rb.require_binaries(rb.OTELCOL_BIN)[rb.OTELCOL_BIN]
    result = rb.validate_config(binary, CONFIG_DIR / name, f"--feature-gates={rb.RECORD_POLICY_GATE}")
    assert result.returncode == 0, f"{name} is invalid:\n{result.stdout}\n{result.stderr}"


@pytest.mark.e2e
def test_jaeger_validates_config() -> None:
    binary = rb.require_binaries(rb.JAEGER_BIN)[rb.JAEGER_BIN]
    result = rb.validate_config(binary, CONFIG_DIR / "jaeger.yaml")
    assert result.returncode == 0, f"jaeger.yaml is invalid:\n{result.stdout}\n{result.stderr}"


def _loopback_env() -> dict[str, str]:
    """Every endpoint variable of collector-config/*.yaml on a free 127.0.0.1 port."""
    names = set()
    for name in COLLECTOR_CONFIGS:
        names |= {
            m.group(1) for m in ENV_REF.finditer((CONFIG_DIR / name).read_text()) if m.group(1).endswith(("_ENDPOINT", "GATEWAY_1", "GATEWAY_2"))
        }
    return {n: f"127.0.0.1:{rb.free_port()}" for n in sorted(names)}


@pytest.mark.e2e
@pytest.mark.parametrize("name", STARTS_ALONE)
def test_collector_starts_with_config(tmp_path: Path, name: str) -> None:
    # `validate` does not build the pipelines (see below): start each config for real on loopback
    binary = rb.require_binaries(rb.OTELCOL_BIN)[rb.OTELCOL_BIN]
    collector = rb.Collector(binary, CONFIG_DIR / name, tmp_path, env=_loopback_env(), feature_gates=[rb.RECORD_POLICY_GATE], name=name)
    collector.start()
    try:
        assert "Everything is ready" in collector.log_text()
    finally:
        assert collector.stop() == 0, collector.log_tail()


@pytest.mark.e2e
def test_collector_validate_rejects_an_undefined_component(tmp_path: Path) -> None:
    # proves `validate` really checks the pipeline graph (it is not a YAML parse only)
    binary = rb.require_binaries(rb.OTELCOL_BIN)[rb.OTELCOL_BIN]
    cfg = load("gateway.yaml")
    cfg["service"]["pipelines"]["traces"]["processors"].append("filter/missing")
    broken = tmp_path / "gateway.yaml"
    broken.write_text(yaml.safe_dump(cfg))
    result = rb.validate_config(binary, broken)
    assert result.returncode != 0
    assert "filter/missing" in result.stdout + result.stderr


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda c: c["processors"]["tail_sampling"]["policies"][0].update(type="string_attributes"),
            "unknown sampling policy type string_attributes",
        ),
        (lambda c: c["processors"]["tail_sampling"]["policies"][1]["ottl_condition"].update(spanevent=["name =="]), "finding-unexplained-exclusion"),
    ],
)
def test_tail_sampling_policy_errors_pass_validate_but_fail_at_start(tmp_path: Path, mutate: Any, message: str) -> None:
    # collector v0.161.0: tail_sampling builds its policies at start, so `validate` accepts a typo'd
    # policy. This is why CI also starts every config (test_collector_starts_with_config).
    binary = rb.require_binaries(rb.OTELCOL_BIN)[rb.OTELCOL_BIN]
    cfg = load("gateway.yaml")
    mutate(cfg)
    broken = tmp_path / "gateway.yaml"
    broken.write_text(yaml.safe_dump(cfg))
    assert rb.validate_config(binary, broken).returncode == 0
    collector = rb.Collector(binary, broken, tmp_path, env=_loopback_env(), name="broken-gateway")
    with pytest.raises(RuntimeError, match="exited with 1") as failure:
        collector.start(timeout=30)
    assert message in str(failure.value) + collector.log_text()
