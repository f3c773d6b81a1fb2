"""Issue 26 item 3: set up by another configurator (opentelemetry-distro's), ragtrail says at start-up,
once and plainly, what is missing and how to fix it. Each case runs in a fresh interpreter: the check
speaks once per process, and which configurator ran is process state."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")
FIX = "Fix: set OTEL_PYTHON_CONFIGURATOR=ragtrail (or call ragtrail.configure() before the app starts)."


def _python(code: str, *argv: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *argv], capture_output=True, text=True, env=full, cwd=cwd, timeout=120)


def test_a_provider_without_ragtrail_is_said_once_with_the_fix() -> None:
    result = _python("""
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from ragtrail.export.setup_check import SetupCheckInstrumentor, check
        trace.set_tracer_provider(TracerProvider())
        SetupCheckInstrumentor().instrument()
        assert check() is None  # once per process
        """)
    assert result.returncode == 0, result.stderr
    (line,) = result.stderr.splitlines()
    assert line == (
        "ragtrail: OpenTelemetry was set up by another configurator (opentelemetry-distro's?), without ragtrail's sampler "
        "(the sampler is ParentBased{root:AlwaysOnSampler,remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler,"
        "localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}: traces carry no sampling record, stats counts each once); "
        f"without whole-trace export (a tail sampler may see a trace in parts). {FIX}"
    )


def test_ragtrail_configure_and_no_sdk_provider_say_nothing() -> None:
    result = _python("""
        import ragtrail
        from opentelemetry import trace
        from ragtrail.export.setup_check import check, missing
        assert missing() == [] and check() is None  # no SDK provider: nothing recorded, nothing misweighted
        ragtrail.configure(exporter=__import__("opentelemetry.sdk.trace.export.in_memory_span_exporter", fromlist=["x"]).InMemorySpanExporter())
        assert missing() == [] and check() is None
        """)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


APP = """
import ragtrail
for i in range(3):
    with ragtrail.stage("retrieve", "demo.search") as s:
        s.query(f"q{i}")
        hits = [{"id": "d1", "content": "x", "score": 1.0}]
        s.inputs(hits)
        s.outputs(hits)
"""
INSTRUMENT = (
    "import sys; from opentelemetry.instrumentation.auto_instrumentation import run; sys.argv[0] = 'opentelemetry-instrument'; sys.exit(run())"
)


@pytest.mark.skipif(
    importlib.util.find_spec("opentelemetry.distro") is None, reason="opentelemetry-distro is not installed here (not in the test extra)"
)
def test_with_opentelemetry_distro_installed_the_usual_way(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    quiet = {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none"}
    usual = _python(INSTRUMENT, sys.executable, "app.py", env=quiet, cwd=tmp_path)
    assert usual.returncode == 0, usual.stderr
    said = [line for line in usual.stderr.splitlines() if line.startswith("ragtrail:")]
    assert len(said) == 1 and said[0].endswith(FIX) and "without ragtrail's sampler" in said[0], usual.stderr
    fixed = _python(INSTRUMENT, sys.executable, "app.py", env={**quiet, "OTEL_PYTHON_CONFIGURATOR": "ragtrail"}, cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    assert not [line for line in fixed.stderr.splitlines() if line.startswith("ragtrail:")], fixed.stderr
