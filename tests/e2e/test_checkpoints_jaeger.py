"""Issue 28: ``ragtrail verify --checkpoints`` against the REAL Jaeger.

The app exports 50 traces with checkpoints by OTLP/HTTP to Jaeger through a pipeline that lies, as a
broken collector or a backend operator could: it acknowledges every segment but drops 3 whole traces
and changes one score of a 4th; a re-stamped copy of a 5th is then sent under a new trace id by a
producer without checkpoints. verify names the 3 missing, the altered one and the one never
checkpointed, exit 1; the same traces sent honestly exit 0.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ragtrail_backends as rb
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanContext, TraceFlags

from fixtures.ragtrail_traces import rag_run
from ragtrail.contract import semconv as sc
from ragtrail.export.stamping import with_attributes
from ragtrail.export.whole_trace import WholeTraceSpanProcessor


class LyingPipeline(SpanExporter):
    """Acknowledges everything; drops the 4th-6th traces it sees and changes the first score of the 11th's retrieval."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.seen: list[str] = []
        self.spans: dict[str, list[ReadableSpan]] = {}

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        out = []
        for span in spans:
            tid = format(span.context.trace_id, "032x")
            if tid not in self.seen:
                self.seen.append(tid)
            self.spans.setdefault(tid, []).append(span)
            index = self.seen.index(tid)
            if 3 <= index <= 5:
                continue
            if index == 10 and span.name.startswith("retrieve") and span.attributes and sc.COLUMN_SCORES in span.attributes:
                scores = list(span.attributes[sc.COLUMN_SCORES])  # type: ignore[arg-type]
                span = with_attributes(span, {sc.COLUMN_SCORES: (0.99, *scores[1:])})
            out.append(span)
        self.inner.export(out)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.inner.shutdown()


def copied(spans: Sequence[ReadableSpan], trace_id: int) -> list[ReadableSpan]:
    """The same spans under another trace id (content and receipts unchanged: a re-stamped copy)."""

    def moved(context: SpanContext | None) -> SpanContext | None:
        return None if context is None else SpanContext(trace_id, context.span_id, False, TraceFlags(TraceFlags.SAMPLED))

    return [
        ReadableSpan(
            name=s.name,
            context=moved(s.context),
            parent=moved(s.parent),
            resource=s.resource,
            attributes=s.attributes,
            events=s.events,
            kind=s.kind,
            start_time=s.start_time,
            end_time=s.end_time,
            instrumentation_scope=s.instrumentation_scope,
        )
        for s in spans
    ]


def export(jaeger: rb.Jaeger, checkpoints: Path, lying: bool) -> tuple[list[str], LyingPipeline | None]:
    url = f"http://127.0.0.1:{jaeger.otlp_http_port}/v1/traces"
    exporter: SpanExporter = OTLPSpanExporter(endpoint=url)
    pipeline = LyingPipeline(exporter) if lying else None
    provider = TracerProvider()
    provider.add_span_processor(
        WholeTraceSpanProcessor(
            pipeline or exporter, schedule_delay_millis=10, grace_millis=10, checkpoint_path=checkpoints, checkpoint_every_segments=20
        )
    )
    tracer = provider.get_tracer("tests.checkpoints")
    ids = [rag_run(tracer) for _ in range(50)]
    provider.shutdown()
    return ids, pipeline


def verify(source: str, checkpoints: Path) -> Any:
    return rb.ragtrail_cli("verify", "--checkpoints", str(checkpoints), "--source", source)


def where(checkpoints: Path, trace_id: str) -> tuple[str, int]:
    for line in map(json.loads, checkpoints.read_text().splitlines()):
        if any(r[0] == "exported" and r[1] == trace_id for r in line["records"]):
            return line["producer"], line["seq"]
    raise AssertionError(trace_id)


def test_verify_checkpoints_against_the_real_jaeger(start_jaeger, tmp_path: Path) -> None:
    honest = start_jaeger("jaeger-honest")
    ids, _ = export(honest, tmp_path / "honest.jsonl", lying=False)
    for tid in ids:
        honest.wait_for_spans(tid, 6)
    ok = verify(honest.source, tmp_path / "honest.jsonl")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines()[-1].startswith("ok 50 traces checkpointed by 1 producer in 3 checkpoints (")
    assert ok.stdout.splitlines()[-1].endswith(": 50 present, 0 missing, 0 altered, 0 not checkpointed; 0 counted lost, 0 sampled out at the head")

    jaeger = start_jaeger("jaeger-lied-to")
    checkpoints = tmp_path / "checkpoints.jsonl"
    ids, pipeline = export(jaeger, checkpoints, lying=True)
    assert pipeline is not None and pipeline.seen == ids
    forged = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{jaeger.otlp_http_port}/v1/traces")
    new_id = "f" * 32
    assert forged.export(copied(pipeline.spans[ids[20]], int(new_id, 16))) == SpanExportResult.SUCCESS
    forged.shutdown()
    for tid in [*ids[:3], *ids[6:], new_id]:
        jaeger.wait_for_spans(tid, 6)

    result = verify(jaeger.source, checkpoints)
    assert result.returncode == 1, result.stdout + result.stderr
    source = f"Jaeger at {jaeger.query_url}"
    lines = result.stdout.splitlines()
    assert lines[:-1] == [
        *(
            f"MISSING trace={t}: checkpointed (producer {where(checkpoints, t)[0]}, checkpoint {where(checkpoints, t)[1]}), not in {source}"
            for t in sorted(ids[3:6])
        ),
        f"ALTERED trace={ids[10]}: 1 of 6 stage receipts differ from the checkpointed ones",
        f"NOT CHECKPOINTED trace={new_id}: in {source} within the checkpointed time, in no checkpoint",
        f"note: {source} lists traces with ragtrail spans only: others are not compared",
    ]
    assert lines[-1].startswith("FAIL 50 traces checkpointed by 1 producer in 3 checkpoints (")
    assert lines[-1].endswith(": 47 present, 3 missing, 1 altered, 1 not checkpointed; 0 counted lost, 0 sampled out at the head")
