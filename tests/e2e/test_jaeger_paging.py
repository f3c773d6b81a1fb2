"""Server reads that never silently stop (issue 26): ``stats`` and ``ls`` read every trace in the lookback
from the REAL Jaeger v2 (more than one search page), ``--limit`` reads exactly that many, and Jaeger is
asked in time windows (its search has no cursor and its memory store does not answer the newest first)."""

from __future__ import annotations

import json

import ragtrail_backends as rb
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import ragtrail
from ragtrail.inspect.sources import JaegerSource

TRACES = 250


def _send(jaeger: rb.Jaeger, n: int) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "ragtrail-e2e-paging"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{jaeger.otlp_http_port}/v1/traces", timeout=5)))
    tracer = provider.get_tracer("ragtrail.e2e")
    for i in range(n):
        hits = [{"id": f"doc-{i}", "content": f"passage {i}", "score": 1.0}]
        with ragtrail.stage("retrieve", "tests.paging", tracer=tracer) as s:
            s.query(f"question {i}")
            s.inputs(hits)
            s.outputs(hits)
    assert provider.force_flush(30_000)
    provider.shutdown()


def test_stats_and_ls_read_every_trace_from_the_real_jaeger(start_jaeger) -> None:
    jaeger = start_jaeger("jaeger")
    _send(jaeger, TRACES)
    rb.wait_until(lambda: len(jaeger.traces_of_service("ragtrail-e2e-paging")) >= TRACES, 30, what="250 traces in Jaeger")

    source = JaegerSource(jaeger.query_url)
    source.page_size = 100  # three pages' worth: the read must split the lookback into windows
    found = source.search_all(None, None, "1h")
    assert len(found.trace_ids) == TRACES and len(set(found.trace_ids)) == TRACES
    assert not found.capped and found.requests > 5  # one per schema version, and more for the full windows
    assert len(source.search_all(120, None, "1h").trace_ids) == 120
    source.close()

    stats = rb.ragtrail_cli("stats", "--source", jaeger.source, "--json")
    assert stats.returncode == 0, stats.stderr
    result = json.loads(stats.stdout)
    assert result["traces"] == TRACES
    assert result["server_read"] == {"traces_read": TRACES, "complete": True, "note": None}
    assert result["sampling"].startswith(f"{TRACES} traces")

    listed = rb.ragtrail_cli("ls", "--source", jaeger.source)
    assert listed.returncode == 0, listed.stderr
    assert len(listed.stdout.splitlines()) == TRACES
    assert "incomplete" not in listed.stderr.lower()
    assert f"ragtrail: {TRACES} traces read from Jaeger at {jaeger.query_url} (every trace in the range)" in listed.stderr
    human = rb.ragtrail_cli("stats", "--source", jaeger.source)
    assert human.stdout.splitlines()[0] == f"{TRACES} traces read from Jaeger at {jaeger.query_url} (every trace in the range)"

    limited = rb.ragtrail_cli("ls", "--source", jaeger.source, "--limit", "120", "--json")
    assert limited.returncode == 0, limited.stderr
    assert len(json.loads(limited.stdout)) == 120
    stats_120 = json.loads(rb.ragtrail_cli("stats", "--source", jaeger.source, "--limit", "120", "--json").stdout)
    assert stats_120["traces"] == 120 and stats_120["server_read"]["traces_read"] == 120
