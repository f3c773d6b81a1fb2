"""Fixtures for the end-to-end tests: the REAL Jaeger v2 and OpenTelemetry Collector on loopback.

Every test here that uses a real backend (the ``binaries`` fixture) is marked ``e2e``. Binaries come from scripts/build-backends.sh (see
ragtrail_backends.py); without them the tests fail under CI and skip loudly elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ragtrail_backends as rb

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # every test here that runs a real backend is `e2e`; the recorded-fixture tests run anywhere
    for item in items:
        if Path(str(item.fspath)).resolve().is_relative_to(_HERE) and "binaries" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.e2e)


def pytest_report_header(config: pytest.Config) -> list[str]:
    missing = rb.missing_binaries(rb.JAEGER_BIN, rb.OTELCOL_BIN)
    if not missing:
        return [f"ragtrail e2e backends: {rb.backends_dir() / 'bin'}"]
    verdict = "FAIL (CI is set)" if os.environ.get("CI") else "SKIP"
    return [f"ragtrail e2e backends MISSING -> e2e tests will {verdict}:" + rb.missing_message(missing)]


@pytest.fixture(scope="session")
def binaries() -> dict[str, Path]:
    return rb.require_binaries(rb.JAEGER_BIN, rb.OTELCOL_BIN)


@pytest.fixture
def start_jaeger(binaries: dict[str, Path], tmp_path: Path) -> Iterator[Callable[..., rb.Jaeger]]:
    """Start a fresh Jaeger (memory storage) per call; all are stopped after the test."""
    started: list[rb.Jaeger] = []

    def start(name: str = "jaeger") -> rb.Jaeger:
        j = rb.Jaeger(binaries[rb.JAEGER_BIN], tmp_path, name=name)
        started.append(j)
        return j.start()  # type: ignore[return-value]

    yield start
    for j in reversed(started):
        j.kill()  # the test is over: nothing in memory storage needs a graceful goodbye


@pytest.fixture
def start_collector(binaries: dict[str, Path], tmp_path: Path) -> Iterator[Callable[..., rb.Collector]]:
    """Start the built collector with one of collector-config/*.yaml; all are stopped after the test."""
    started: list[rb.Collector] = []

    def start(
        config: str, env: dict[str, str] | None = None, *, record_policy: bool = True, name: str = "collector", overlays: tuple[str, ...] = ()
    ) -> rb.Collector:
        gates = [rb.RECORD_POLICY_GATE] if record_policy else []
        more = [rb.CONFIG_DIR / o for o in overlays]
        c = rb.Collector(binaries[rb.OTELCOL_BIN], rb.CONFIG_DIR / config, tmp_path, env=env, feature_gates=gates, name=name, overlays=more)
        started.append(c)
        return c.start()  # type: ignore[return-value]

    yield start
    for c in reversed(started):
        c.kill()


@pytest.fixture
def jaeger(start_jaeger: Callable[..., rb.Jaeger]) -> rb.Jaeger:
    return start_jaeger()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Say it again at the end, in red: skipped e2e tests are not passed e2e tests."""
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "real backend binaries not found" in str(getattr(r, "longrepr", ""))]
    if skipped:
        terminalreporter.write_sep("!", f"{len(skipped)} ragtrail e2e tests SKIPPED: no real Jaeger/Collector", red=True, bold=True)
        terminalreporter.write_line(rb.missing_message(rb.missing_binaries(rb.JAEGER_BIN, rb.OTELCOL_BIN)), red=True)
