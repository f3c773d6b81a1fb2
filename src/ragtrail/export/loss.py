"""Loss accounting: every trace and span the export path gives up on is counted, and the counts reach
the backend.

Two outlets, so that loss is loud wherever people look:

* an OpenTelemetry metric (``ragtrail.loss.traces`` / ``ragtrail.loss.spans`` counters, attribute
  ``ragtrail.loss.reason``) through the global MeterProvider (a no-op when none is configured);
* a ``ragtrail.loss`` record: a one-span trace exported through the same exporter as the traces it
  accounts for, carrying the counts of one window. A window is only closed when its record was
  exported, so a record that fails to leave is folded into the next one: counts are never lost
  twice.

At shutdown the ledger is *closed* (:meth:`LossLedger.close`) after the last trace is settled: the
final window becomes the last record, and any count that still comes later (a span ending after
shutdown) is handed to the ``after_close`` callback as a window of its own, never dropped.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from opentelemetry import metrics
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from opentelemetry.util.types import AttributeValue

from ragtrail.contract import semconv

#: reasons a whole trace (segment) is given up
REASON_QUEUE_FULL = "queue_full"  # max_traces or max_bytes reached: oldest buffered trace dropped
REASON_TRACE_TOO_LARGE = "trace_too_large"  # a segment exceeded max_spans_per_trace
REASON_ROOT_NEVER_ENDED = "root_never_ended"  # a segment's local root did not end within max_trace_age
REASON_EXPORT_FAILED = "export_failed"  # the exporter failed after every retry
REASON_AFTER_SHUTDOWN = "after_shutdown"  # a span ended after the processor shut down

_SCOPE = InstrumentationScope("ragtrail.export")


@dataclass
class LossWindow:
    """Counts accumulated since ``start_ns`` (the last successfully reported window)."""

    start_ns: int
    traces_dropped: int = 0
    spans_dropped: int = 0
    traces_export_failed: int = 0
    spans_export_failed: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.traces_dropped or self.spans_dropped or self.traces_export_failed or self.spans_export_failed)


class LossLedger:
    """Thread-safe counters of lost traces and spans, with cumulative totals and a reporting window."""

    def __init__(self, meter_provider: metrics.MeterProvider | None = None, meter_name: str = "ragtrail.export") -> None:
        self._lock = threading.Lock()
        self._window = LossWindow(start_ns=time.time_ns())
        self.total_traces_dropped = 0
        self.total_spans_dropped = 0
        self.total_traces_export_failed = 0
        self.total_spans_export_failed = 0
        self._after_close: Callable[[LossWindow], None] | None = None
        meter = metrics.get_meter(meter_name, meter_provider=meter_provider)
        self._trace_counter = meter.create_counter(semconv.METRIC_LOSS_TRACES, unit="{trace}", description="Whole traces ragtrail's exporter gave up")
        self._span_counter = meter.create_counter(
            semconv.METRIC_LOSS_SPANS, unit="{span}", description="Spans ragtrail's exporter gave up (always whole traces)"
        )

    def dropped(self, traces: int, spans: int, reason: str) -> None:
        """Count traces/spans dropped before export (back-pressure, size, age, shutdown)."""
        if not traces and not spans:
            return
        with self._lock:
            w = self._window if self._after_close is None else LossWindow(start_ns=time.time_ns())
            w.traces_dropped += traces
            w.spans_dropped += spans
            w.reasons[reason] = w.reasons.get(reason, 0) + traces
            self.total_traces_dropped += traces
            self.total_spans_dropped += spans
            after_close = self._after_close
        self._record(traces, spans, reason)
        if after_close is not None:
            after_close(w)

    def export_failed(self, traces: int, spans: int) -> None:
        """Count traces/spans the exporter did not deliver after every retry."""
        if not traces and not spans:
            return
        with self._lock:
            w = self._window if self._after_close is None else LossWindow(start_ns=time.time_ns())
            w.traces_export_failed += traces
            w.spans_export_failed += spans
            w.reasons[REASON_EXPORT_FAILED] = w.reasons.get(REASON_EXPORT_FAILED, 0) + traces
            self.total_traces_export_failed += traces
            self.total_spans_export_failed += spans
            after_close = self._after_close
        self._record(traces, spans, REASON_EXPORT_FAILED)
        if after_close is not None:
            after_close(w)

    def _record(self, traces: int, spans: int, reason: str) -> None:
        try:
            attributes = {semconv.LOSS_REASON: reason}
            if traces:
                self._trace_counter.add(traces, attributes)
            if spans:
                self._span_counter.add(spans, attributes)
        except Exception:  # pragma: no cover - a broken MeterProvider must not break export
            pass

    def open_window(self) -> LossWindow:
        """The current window's counts (a copy); close it with :meth:`commit` once reported."""
        with self._lock:
            w = self._window
            return LossWindow(
                start_ns=w.start_ns,
                traces_dropped=w.traces_dropped,
                spans_dropped=w.spans_dropped,
                traces_export_failed=w.traces_export_failed,
                spans_export_failed=w.spans_export_failed,
                reasons=dict(w.reasons),
            )

    def close(self, after_close: Callable[[LossWindow], None]) -> LossWindow:
        """The final window (everything not yet reported); every later count goes to ``after_close``
        as a window of its own, so no count ever waits for a record that will not come."""
        with self._lock:
            final, self._window = self._window, LossWindow(start_ns=time.time_ns())
            self._after_close = after_close
        return final

    def commit(self, reported: LossWindow, end_ns: int) -> None:
        """Subtract what a delivered record reported; whatever arrived meanwhile stays for the next.
        After :meth:`close` the final window already holds it (a record delivered by a worker that
        was stuck past shutdown is then reported twice: over-counted, never uncounted)."""
        with self._lock:
            if self._after_close is not None:
                return
            w = self._window
            w.traces_dropped -= reported.traces_dropped
            w.spans_dropped -= reported.spans_dropped
            w.traces_export_failed -= reported.traces_export_failed
            w.spans_export_failed -= reported.spans_export_failed
            for reason, count in reported.reasons.items():
                left = w.reasons.get(reason, 0) - count
                if left > 0:
                    w.reasons[reason] = left
                else:
                    w.reasons.pop(reason, None)
            w.start_ns = end_ns


def loss_record(window: LossWindow, resource: Resource | None, end_ns: int | None = None) -> ReadableSpan:
    """A finished one-span trace named ``ragtrail.loss`` carrying the window's counts."""
    end_ns = end_ns if end_ns is not None else time.time_ns()
    trace_id = random.getrandbits(128) or 1
    span_id = random.getrandbits(64) or 1
    context = SpanContext(trace_id, span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    attributes: dict[str, AttributeValue] = {
        semconv.SCHEMA: semconv.SCHEMA_VERSION,
        semconv.LOSS_TRACES_DROPPED: window.traces_dropped,
        semconv.LOSS_SPANS_DROPPED: window.spans_dropped,
        semconv.LOSS_TRACES_EXPORT_FAILED: window.traces_export_failed,
        semconv.LOSS_SPANS_EXPORT_FAILED: window.spans_export_failed,
        semconv.LOSS_REASON: ",".join(sorted(window.reasons)),
        semconv.LOSS_WINDOW_START: window.start_ns,
        semconv.TRACE_SPAN_COUNT: 1,
    }
    return ReadableSpan(
        name=semconv.LOSS_SPAN_NAME,
        context=context,
        parent=None,
        resource=resource if resource is not None else Resource.create({}),
        attributes=attributes,
        kind=SpanKind.INTERNAL,
        start_time=window.start_ns,
        end_time=end_ns,
        instrumentation_scope=_SCOPE,
    )


__all__ = [
    "LossLedger",
    "LossWindow",
    "loss_record",
    "REASON_QUEUE_FULL",
    "REASON_TRACE_TOO_LARGE",
    "REASON_ROOT_NEVER_ENDED",
    "REASON_EXPORT_FAILED",
    "REASON_AFTER_SHUTDOWN",
]
