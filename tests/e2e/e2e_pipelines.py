"""Instrumented RAG pipelines for the e2e tests, exported the way a user's app exports them.

Each :class:`App` is one "process": its own SDK TracerProvider (service name unique per test) with
ragtrail's whole-trace sampler and whole-trace span processor in front of the standard
``OTLPSpanExporter`` (http/protobuf) aimed at a collector on loopback. The pipeline is written with
ragtrail's public decorators and ``ragtrail.stage``: query rewrite -> retrieve -> rerank -> filter
-> budget -> cite, with switches for each finding the gateway's tail sampling must keep.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

import ragtrail
from ragtrail.contract import semconv
from ragtrail.export.whole_trace import WholeTraceSpanProcessor
from ragtrail.sampling import RagtrailSampler

# a small corpus; contents are 40..400 bytes so a 128-byte collector cut hits some and not others
CORPUS = [
    {
        "id": f"doc-{i:02d}",
        "content": f"Document {i:02d} about retrieval pipelines. " + ("Evidence sentence number %d. " % i) * (1 + i % 12),
        "score": round(1.0 - i / 40, 4),
    }
    for i in range(30)
]
LONG_QUERY = (
    "Which retrieval stages dropped the evidence that the quarterly revenue figure was restated, "
    "and did the reranker fall back to input order when its output could not be parsed? "
) * 2

FINDINGS = ("degraded", "failed", "unexplained", "error", "untracked")
#: the tail-sampling policy (collector-config/gateway.yaml) that must keep each kind of finding
POLICY_FOR = {
    "degraded": "finding-stage-status",
    "failed": "finding-stage-status",
    "unexplained": "finding-unexplained-exclusion",
    "error": "finding-error",
    "untracked": "finding-recorder",
}


class RootRecorder(SpanProcessor):
    """Remembers the trace ids of the local roots this process ended, and how many spans each had."""

    def __init__(self) -> None:
        self.spans_per_trace: dict[str, int] = {}
        self.roots: list[str] = []
        self._lock = threading.Lock()

    def on_end(self, span: ReadableSpan) -> None:
        tid = format(span.context.trace_id, "032x")
        with self._lock:
            self.spans_per_trace[tid] = self.spans_per_trace.get(tid, 0) + 1
            if span.parent is None or span.parent.is_remote:
                self.roots.append(tid)


@dataclass
class App:
    """One instrumented process exporting to ``traces_url``."""

    traces_url: str
    probability: float = 1.0
    service: str = field(default_factory=lambda: f"ragtrail-e2e-{uuid.uuid4().hex[:10]}")
    processor_options: dict[str, Any] = field(default_factory=dict)
    exporter_timeout: float = 5.0
    id_generator: Any = None  # the SDK's random ids unless a test needs the same ids (and so the same tail decisions) every run

    def __post_init__(self) -> None:
        self.recorder = RootRecorder()
        self.provider = TracerProvider(
            sampler=RagtrailSampler(self.probability), resource=Resource.create({"service.name": self.service}), id_generator=self.id_generator
        )
        self.provider.add_span_processor(self.recorder)
        # what the process produced, to compare byte for byte with what the backend returns
        self.local = InMemorySpanExporter()
        self.provider.add_span_processor(SimpleSpanProcessor(self.local))
        self.exporter = OTLPSpanExporter(endpoint=self.traces_url, timeout=self.exporter_timeout)
        self.processor = WholeTraceSpanProcessor(self.exporter, **{"grace_millis": 100, "schedule_delay_millis": 100, **self.processor_options})
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("ragtrail.e2e")
        self.run = build_pipeline(self.tracer)

    def run_many(self, n: int, finding: str | None = None, query: str = "what changed in the Q3 report?") -> list[str]:
        """Run the pipeline ``n`` times; return the trace ids that were sampled (and so exported)."""
        sampled = []
        for _ in range(n):
            tid = self.run(query, finding=finding)
            if tid is not None:
                sampled.append(tid)
        return sampled

    def local_spans(self, trace_id: str) -> list[ReadableSpan]:
        return [s for s in self.local.get_finished_spans() if format(s.context.trace_id, "032x") == trace_id]

    def flush(self) -> None:
        assert self.provider.force_flush(30_000), "force_flush timed out"

    def shutdown(self) -> None:
        self.provider.shutdown()


def build_pipeline(tracer: Any, remote_retriever: Callable[[str, dict[str, str]], list[dict]] | None = None) -> Callable[..., str | None]:
    """A decorated pipeline bound to ``tracer``. ``run(query, finding=None)`` returns the trace id
    (hex) when the trace was sampled, else None. ``remote_retriever(query, carrier)`` runs the
    retrieve step in another "service" (context propagated through W3C headers)."""

    @ragtrail.query_transform(transform=semconv.TRANSFORM_REWRITE, component="e2e.rewrite", tracer=tracer)
    def rewrite(query: str) -> str:
        return query.strip().rstrip("?") + " (rewritten)"

    @ragtrail.retriever(component="e2e.search", top_k=12, score_kind=semconv.SCORE_SIMILARITY, tracer=tracer)
    def search(query: str, failing: bool = False) -> list[dict]:
        if failing:
            raise TimeoutError("vector store timed out")
        stage = ragtrail.current_stage()
        if stage is not None:
            stage.corpus_size(len(CORPUS))
        return [dict(d) for d in CORPUS[:12]]

    @ragtrail.reranker(component="e2e.rerank", top_k=8, tracer=tracer)
    def rerank(query: str, candidates: list[dict], degraded: bool = False) -> list[dict]:
        if degraded:
            # the model's output could not be parsed: fall back to input order (status degraded, docs/semconv.md §1)
            stage = ragtrail.current_stage()
            if stage is not None:
                stage.set_status(semconv.STATUS_DEGRADED, failure_class="parse_error", fallback="input_order")
            return candidates[:8]
        ranked = sorted(candidates, key=lambda d: (len(d["content"]) % 7, d["id"]))
        return [{**d, "score": round(0.9 - i * 0.05, 4)} for i, d in enumerate(ranked[:8])]

    @ragtrail.filter(component="e2e.filter", tracer=tracer)
    def drop_superseded(candidates: list[dict], silent_drop: bool = False) -> list[dict]:
        stage = ragtrail.current_stage()
        kept = []
        for i, d in enumerate(candidates):
            if i == 1:
                if stage is not None:
                    stage.exclude(d, semconv.REASON_SUPERSEDED, detail="replaced by a newer version")
                continue
            if silent_drop and i == 3:
                continue  # vanishes with no reason: recorded as `unexplained`
            kept.append(d)
        return kept

    def fit_budget(candidates: list[dict]) -> list[dict]:
        # the context-manager form of the recorder (the other stages use the decorators)
        with ragtrail.stage(semconv.KIND_BUDGET, "e2e.budget", budget_limit=1200, budget_unit="chars", tracer=tracer) as stage:
            stage.inputs(candidates)
            out, used = [], 0
            for d in candidates:
                if used + len(d["content"]) > 1200:
                    continue
                out.append(d)
                used += len(d["content"])
            stage.set(budget_used=used)
            stage.outputs(out)
        return out

    @ragtrail.pipeline(component="e2e.pipeline", tracer=tracer)
    def answer(query: str, finding: str | None = None) -> str | None:
        root = ragtrail.current_stage()
        tid = None
        if root is not None and root.span is not None and root.span.get_span_context().trace_flags.sampled:
            tid = format(root.span.get_span_context().trace_id, "032x")
        q = rewrite(query)
        if remote_retriever is not None:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            docs = remote_retriever(q, carrier)
        else:
            try:
                # an uninstrumented step changed the query: the recorder flags an untracked hop
                docs = search(q + " [expanded elsewhere]" if finding == "untracked" else q, failing=finding == "failed")
            except TimeoutError:
                docs = []
        docs = rerank(q, docs, degraded=finding == "degraded")
        docs = drop_superseded(docs, silent_drop=finding == "unexplained")
        docs = fit_budget(docs)
        if finding == "error":
            # the application's own span fails (an LLM call): a finding that is not ragtrail's
            with tracer.start_as_current_span("llm.generate") as span:
                span.set_status(Status(StatusCode.ERROR, "upstream 503"))
        ragtrail.cite([d["id"] for d in docs[:2]], tracer=tracer)
        return tid

    def run(query: str, finding: str | None = None) -> str | None:
        return answer(query, finding=finding)

    return run


def remote_search_service(app: App) -> Callable[[str, dict[str, str]], list[dict]]:
    """The retrieve step as a separate service: it continues the caller's trace from W3C headers
    and exports its spans through its OWN provider (so one trace reaches the collector in parts)."""

    @ragtrail.retriever(component="e2e.remote_search", top_k=12, score_kind=semconv.SCORE_SIMILARITY, tracer=app.tracer)
    def search(query: str) -> list[dict]:
        return [dict(d) for d in CORPUS[:12]]

    def handle(query: str, carrier: dict[str, str]) -> list[dict]:
        token = otel_context.attach(propagate.extract(carrier))
        try:
            return search(query)
        finally:
            otel_context.detach(token)

    return handle
