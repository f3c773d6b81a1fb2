"""Shared fixtures: one real SDK TracerProvider for the whole session, exported to memory.

OpenTelemetry allows the global provider to be set once per process, so it is set here and each
test gets a cleared InMemorySpanExporter. Tests that need other providers build their own and pass
``tracer_provider=`` / ``tracer=`` explicitly.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator

import pytest
from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import spanutil  # installs the exported-span memory its records() follows schema 4 pointers through
from weaviateutil import weaviate_server  # noqa: F401 - the session's one real Weaviate server (started on first use)

# no library may phone home from the tests (chromadb's posthog, haystack's telemetry): the machine
# has no network but the package registries, and test traffic goes to loopback only
for _name, _value in (
    ("ANONYMIZED_TELEMETRY", "False"),
    ("HAYSTACK_TELEMETRY_ENABLED", "False"),
    ("HF_HUB_OFFLINE", "1"),
    ("TRANSFORMERS_OFFLINE", "1"),
    ("DO_NOT_TRACK", "1"),
):
    os.environ.setdefault(_name, _value)

_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))
trace.set_tracer_provider(_PROVIDER)


@pytest.fixture
def tracer_provider() -> TracerProvider:
    return _PROVIDER


@pytest.fixture
def span_exporter() -> Iterator[InMemorySpanExporter]:
    """The session exporter, cleared before and after the test."""
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


Install = Callable[[otel_metrics.MeterProvider], None]


@pytest.fixture
def install_meter_provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    """Set the API's global MeterProvider for one test (the API sets it once per process; tests
    put it back as it was)."""
    from ragtrail.recorder import metrics as rm

    internal = importlib.import_module("opentelemetry.metrics._internal")

    def install(provider: otel_metrics.MeterProvider) -> None:
        monkeypatch.setattr(internal, "_METER_PROVIDER", provider)
        rm.refresh()

    yield install


@pytest.fixture(autouse=True)
def _fresh_ragtrail_config(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts from the environment defaults of ragtrail's capture config."""
    for name in (
        "RAGTRAIL_CAPTURE_QUERY",
        "RAGTRAIL_CAPTURE_CONTENT",
        "RAGTRAIL_CAPTURE_METADATA",
        "RAGTRAIL_MIRROR_GENAI",
        "RAGTRAIL_MIRROR_OPENINFERENCE",
        "RAGTRAIL_MIRROR_DOCUMENTS",
        "RAGTRAIL_EVENTS_PER_SPAN",
    ):
        monkeypatch.delenv(name, raising=False)
    try:
        from ragtrail import settings as config
    except ImportError:  # pragma: no cover - before the core lands
        yield
        return
    config.reset()
    yield
    config.reset()
    spanutil.forget()


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Where the real Weaviate server comes from, or that its tests will fail (CI) / skip."""
    import weaviateutil

    path = weaviateutil.binary_path()
    if path.is_file() and os.access(path, os.X_OK):
        return [f"ragtrail weaviate server: {path}"]
    verdict = "FAIL (CI is set)" if os.environ.get("CI") else "SKIP"
    return [f"ragtrail weaviate server MISSING ({path}) -> Weaviate tests will {verdict}: scripts/build-backends.sh weaviate"]
