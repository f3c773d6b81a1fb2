"""Run the demo pipeline under ragtrail with the embedded local store, read it back, write the report.

The trace takes the product's real path: ragtrail sampler -> whole-trace processor -> local store
(OTLP JSON lines in ``./.ragtrail/``) -> the inspector's file reader -> manifest -> HTML report. When
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) is set, the same spans also go there
by OTLP (``OTEL_EXPORTER_OTLP_PROTOCOL``: ``http/protobuf`` by default, or ``grpc``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

import ragtrail
from ragtrail import settings
from ragtrail.demo.pipeline import QUESTION, load_corpus, make_pipeline
from ragtrail.export.configurator import configure
from ragtrail.export.local_store import LocalStoreSpanExporter
from ragtrail.inspect import report
from ragtrail.inspect.manifest import build
from ragtrail.inspect.manifest_model import Manifest
from ragtrail.inspect.sources import FileSource

DEMO_METADATA = ("updated_at", "version", "status", "source")


@dataclass
class DemoResult:
    answer: str
    trace_id: str
    manifest: Manifest
    report_path: Path
    store_path: Path
    otlp_endpoint: str | None
    otlp_failures: int = 0


def _otlp_endpoint() -> str | None:
    return os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None


class _Tee(SpanExporter):
    """The local store first (its result is the result), then OTLP; an OTLP failure is counted, not retried,
    so a dead collector neither duplicates local lines nor hangs the demo."""

    def __init__(self, primary: SpanExporter, secondary: SpanExporter) -> None:
        self.primary, self.secondary = primary, secondary
        self.secondary_failures = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.primary.export(spans)
        try:
            if self.secondary.export(spans) is not SpanExportResult.SUCCESS:
                self.secondary_failures += 1
        except Exception:  # noqa: BLE001 - an exporter bug must not stop the local copy
            self.secondary_failures += 1
        return result

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.primary.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.primary.shutdown()
        self.secondary.shutdown()


def _otlp_exporter() -> SpanExporter:
    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # type: ignore[assignment]
    return OTLPSpanExporter(timeout=3)  # endpoint and headers from the OTEL_EXPORTER_OTLP_* variables


def run_demo(
    store: str | os.PathLike[str] = ".ragtrail", report_path: str | os.PathLike[str] | None = None, question: str = QUESTION, budget_words: int = 90
) -> DemoResult:
    """Run the pipeline once, export, read the trace back from the store, write the HTML report."""
    store_path = Path(store)
    previous = settings.get()
    endpoint = _otlp_endpoint()
    exporter: SpanExporter = LocalStoreSpanExporter(store_path)
    tee = _Tee(exporter, _otlp_exporter()) if endpoint else None
    provider: TracerProvider = configure(
        exporter=tee or exporter,
        service_name="ragtrail-demo",
        sampling_probability=1.0,
        set_global=False,
        processor_options={"schedule_delay_millis": 50, "grace_millis": 50, "retry_timeout_millis": 3000},
    )
    try:
        ragtrail.set_capture(content="preview", metadata=list(DEMO_METADATA))
        answer = make_pipeline(load_corpus(), tracer=provider.get_tracer("ragtrail.demo"), budget_words=budget_words)
        result = answer(question)
    finally:
        settings.set_capture(**{f.name: getattr(previous, f.name) for f in dataclasses.fields(previous) if f.name not in ("invalid",)})
        provider.force_flush()
        provider.shutdown()
    trace = FileSource(store_path).get(result["trace_id"])
    manifest = build(trace)
    out = report.write(manifest, Path(report_path or store_path / "demo-report.html"))
    return DemoResult(
        answer=result["answer"],
        trace_id=result["trace_id"],
        manifest=manifest,
        report_path=out,
        store_path=store_path.resolve(),
        otlp_endpoint=endpoint,
        otlp_failures=tee.secondary_failures if tee else 0,
    )
