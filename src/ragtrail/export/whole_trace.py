"""A span processor that exports whole trace segments or counts them lost: never a trace with holes.

``BatchSpanProcessor`` drops single spans when its queue overflows, so the backend holds traces that
look complete and are not. This processor buffers the spans of each *trace segment* (the spans this
process produced under one local root) until the local root has ended and its open children have
ended too, or a short grace period has passed, then hands the segment to the exporter as a unit:

* the exported copy of the local root carries ``ragtrail.trace.span_count``, so a reader can check
  by arithmetic that every span of the segment arrived (:mod:`~ragtrail.export.stamping`);
* memory is bounded (``max_traces``, ``max_spans_per_trace``, ``max_bytes``); on overflow the oldest
  whole segment is dropped, never a single span, and every dropped trace and span is counted
  (:mod:`~ragtrail.export.buffer`);
* spans that end after their segment left are exported on their own, marked
  ``ragtrail.trace.late=true``; spans of a dropped segment are counted as dropped;
* a segment whose local root has not ended after ``max_trace_age_millis`` is dropped and counted
  (reason ``root_never_ended``) rather than held forever;
* exports run on one worker thread: the application thread only appends under a short lock;
* failed exports (endpoint down, 5xx, payload too large) are retried with exponential backoff; a
  segment given up is counted as a lost whole trace; segments larger than ``max_request_bytes`` are
  split across requests (the part with the root and its count first) and a receiver with a smaller
  limit than configured is found by halving the request (:mod:`~ragtrail.export.sender`);
* losses reach the backend as periodic ``ragtrail.loss`` records and as metrics
  (:mod:`~ragtrail.export.loss`, :mod:`~ragtrail.export.reporting`);
* with ``RAGTRAIL_CHECKPOINT_PATH`` (or ``..._ENDPOINT``) set, the worker keeps a hash chain over every
  segment it delivered or gave up and writes checkpoints outside the backend
  (:mod:`~ragtrail.export.checkpoints`, docs/semconv.md §10);
* ``force_flush`` exports every segment whose root has ended (grace ignored); ``shutdown`` exports
  everything, marking spans of segments whose root never ended ``ragtrail.trace.incomplete=true``,
  counts whatever it could not deliver (in flight included) and then sends the final loss record,
  to the local store when the backend does not take it.

Every limit has a keyword argument and an environment variable (``RAGTRAIL_EXPORT_*``, listed in
:mod:`ragtrail.contract.semconv`), keyword first.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, TypedDict

from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.sampling import Sampler

from ragtrail import settings
from ragtrail.contract import semconv
from ragtrail.export.buffer import BufferLimits, Segment, SegmentBuffer
from ragtrail.export.checkpoints import CheckpointWriter, checkpoint_writer
from ragtrail.export.loss import REASON_ROOT_NEVER_ENDED, LossLedger
from ragtrail.export.reporting import LossReporter
from ragtrail.export.sender import Sender
from ragtrail.export.sizing import estimate_span_bytes
from ragtrail.sampling import RagtrailSampler

_logger = logging.getLogger(__name__)
_STUCK_GRACE = 2.0  # seconds a worker still inside a request at the shutdown deadline is given


class _SenderOptions(TypedDict):
    """What every :class:`Sender` this processor makes is built with (again after a fork)."""

    max_request_bytes: int
    max_export_batch_size: int
    retry_timeout: float


def _seconds(env: str, millis: float | None) -> float:
    return settings.export_limit(env, millis) / 1000.0


#: every whole-trace processor alive in the process (export/setup_check.py asks whether any is)
_LIVE: weakref.WeakSet[WholeTraceSpanProcessor] = weakref.WeakSet()


def any_live() -> bool:
    """True when some whole-trace processor exists in this process (someone set up whole-trace export)."""
    return len(_LIVE) > 0


class WholeTraceSpanProcessor(SpanProcessor):
    """Exports whole trace segments (or counts them lost); see the module docstring.

    ``loss_store_dir`` is where the final loss record goes when the backend does not take it
    (default: the local store directory, ``RAGTRAIL_LOCAL_STORE_DIR`` or ``./.ragtrail``).
    """

    def __init__(
        self,
        span_exporter: SpanExporter,
        *,
        max_traces: int | None = None,
        max_spans_per_trace: int | None = None,
        max_bytes: int | None = None,
        grace_millis: float | None = None,
        schedule_delay_millis: float | None = None,
        max_export_batch_size: int | None = None,
        max_request_bytes: int | None = None,
        retry_timeout_millis: float | None = None,
        max_trace_age_millis: float | None = None,
        loss_report_interval_millis: float | None = None,
        loss_ledger: LossLedger | None = None,
        meter_provider: MeterProvider | None = None,
        loss_store_dir: str | os.PathLike[str] | None = None,
        checkpoint_path: str | os.PathLike[str] | None = None,
        checkpoint_endpoint: str | None = None,
        checkpoint_every_segments: int | None = None,
        checkpoint_every_millis: float | None = None,
        sampler: Sampler | None = None,
    ) -> None:
        self._exporter = span_exporter
        _LIVE.add(self)
        batch = settings.export_limit(semconv.ENV_EXPORT_MAX_BATCH_SPANS, max_export_batch_size)
        self._sender_options = _SenderOptions(
            max_request_bytes=settings.export_limit(semconv.ENV_EXPORT_MAX_REQUEST_BYTES, max_request_bytes),
            max_export_batch_size=batch,
            retry_timeout=_seconds(semconv.ENV_EXPORT_RETRY_TIMEOUT_MILLIS, retry_timeout_millis),
        )
        self._limits = BufferLimits(
            max_traces=settings.export_limit(semconv.ENV_EXPORT_MAX_TRACES, max_traces),
            max_spans_per_trace=settings.export_limit(semconv.ENV_EXPORT_MAX_SPANS_PER_TRACE, max_spans_per_trace),
            max_bytes=settings.export_limit(semconv.ENV_EXPORT_MAX_BYTES, max_bytes),
            grace=_seconds(semconv.ENV_EXPORT_GRACE_MILLIS, grace_millis),
            delay=_seconds(semconv.ENV_EXPORT_SCHEDULE_DELAY_MILLIS, schedule_delay_millis),
            max_export_batch_size=batch,
            max_age=_seconds(semconv.ENV_EXPORT_MAX_TRACE_AGE_MILLIS, max_trace_age_millis),
            max_request_bytes=lambda: self._sender.max_request_bytes,
        )
        self._loss_interval = _seconds(semconv.ENV_LOSS_REPORT_INTERVAL_MILLIS, loss_report_interval_millis)
        self._loss_store_dir = loss_store_dir
        self.loss = loss_ledger or LossLedger(meter_provider)
        self._checkpoint_options = (checkpoint_path, checkpoint_endpoint, checkpoint_every_segments, checkpoint_every_millis)
        self._init_state()
        if isinstance(sampler, RagtrailSampler) and self.checkpoints is not None:
            sampler.watch_drops(self._sampled_out)
        if hasattr(os, "register_at_fork"):
            weak_reinit = weakref.WeakMethod(self._init_state)

            def _after_in_child() -> None:
                reinit = weak_reinit()
                if reinit is not None:
                    reinit()

            os.register_at_fork(after_in_child=_after_in_child)

    def _init_state(self) -> None:
        self._sender = Sender(self._exporter, **self._sender_options)
        self._buffer = SegmentBuffer(self._limits, self.loss, id(self))
        self._reporter = LossReporter(self.loss, self._sender, self._loss_interval, self._loss_store_dir)
        self.checkpoints: CheckpointWriter | None = checkpoint_writer(self.loss, *self._checkpoint_options)
        if self.checkpoints is not None:
            self._buffer.lost = self.checkpoints.note_lost
        self._flush_waiters: list[threading.Event] = []
        self._shutdown_requested = False
        self._exporter_shut = False
        self._stopped = False
        self._worker = threading.Thread(target=self._run, name="ragtrail-whole-trace-export", daemon=True)
        self._worker.start()

    # --- limits and state, for callers and tests ------------------------------------------------------
    @property
    def max_traces(self) -> int:
        return self._limits.max_traces

    @property
    def max_spans_per_trace(self) -> int:
        return self._limits.max_spans_per_trace

    @property
    def max_bytes(self) -> int:
        return self._limits.max_bytes

    @property
    def max_export_batch_size(self) -> int:
        return self._limits.max_export_batch_size

    @property
    def max_request_bytes(self) -> int:
        """Estimated bytes per request; lowered for good when a receiver refuses by size."""
        return self._sender.max_request_bytes

    @property
    def buffered_bytes(self) -> int:
        """Estimated bytes of finished spans held right now (bounded by ``max_bytes``)."""
        return self._buffer.bytes

    @property
    def buffered_traces(self) -> int:
        return len(self._buffer.segments)

    @property
    def in_flight_traces(self) -> int:
        """Trace segments taken for export and not yet delivered or counted lost."""
        return len(self._buffer.in_flight)

    @property
    def loss_store_directory(self) -> Any:
        """Where the final loss record goes when the backend does not take it."""
        return self._reporter.store_directory

    # --- application thread -------------------------------------------------------------------------
    def _sampled_out(self, trace_id: int) -> None:
        """The sampler dropped a root: noted for the checkpoint chain (one append; after a fork, the
        child's writer)."""
        checkpoints = self.checkpoints
        if checkpoints is not None:
            checkpoints.note_sampled_out(trace_id)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        context = span.context
        if context is None or not context.trace_flags.sampled or self._shutdown_requested:
            return
        self._buffer.start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context
        if context is None or not context.trace_flags.sampled:
            return
        if self._reporter.resource is None:
            self._reporter.resource = span.resource
        self._buffer.end(span)

    # --- worker thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            try:
                if not self._iteration():
                    return
            except Exception:  # never let the worker die: spans would pile up unexported
                _logger.exception("ragtrail: whole-trace export worker error (continuing)")
                time.sleep(0.1)

    def _wait_for_work(self) -> tuple[list[Segment], list[Segment], list[threading.Event], bool]:
        """Sleep until something is due; returns (aged out, taken for export, flush waiters to
        release, shutting down)."""
        buffer = self._buffer
        with buffer.cond:
            while True:
                now = time.monotonic()
                stopping = self._shutdown_requested
                flushing = bool(self._flush_waiters)
                aged = buffer.promote_locked(now, everything=stopping or flushing, include_open=stopping)
                due = buffer.ready and (
                    buffer.ready_spans >= self._limits.max_export_batch_size or (buffer.ready_deadline is not None and now >= buffer.ready_deadline)
                )
                next_due = self._next_due()
                if aged or due or stopping or flushing or now >= next_due:
                    break
                buffer.cond.wait(buffer.next_wake_locked(now, next_due))
            taken = buffer.take_locked() if buffer.ready else []
            waiters: list[threading.Event] = []
            if not taken and not buffer.ready:
                waiters, self._flush_waiters = self._flush_waiters, []
        return aged, taken, waiters, stopping

    def _next_due(self) -> float:
        """The earlier of the next loss report and the next time-based checkpoint."""
        checkpoints = self.checkpoints
        return self._reporter.next_due if checkpoints is None else min(self._reporter.next_due, checkpoints.next_due)

    def _iteration(self) -> bool:
        """One wait-and-export round; False once shut down and drained."""
        aged, taken, waiters, stopping = self._wait_for_work()
        if aged:
            self._buffer.account_dropped(aged, REASON_ROOT_NEVER_ENDED)
        if taken:
            self._export_segments(taken)
        if not stopping and time.monotonic() >= self._reporter.next_due:
            self._reporter.report()  # at shutdown, the final record is sent by shutdown() itself
        if self.checkpoints is not None:
            self.checkpoints.pump()
        for waiter in waiters:
            waiter.set()
        if stopping and not taken:
            with self._buffer.lock:
                if not self._buffer.ready:
                    self._stopped = True
                    return False
        return True

    def _export_segments(self, segments: list[Segment]) -> None:
        """Send the segments (one request, or several for one oversized segment) and settle each."""
        groups: list[list[ReadableSpan]] = []
        try:
            groups = [segment.export_spans() for segment in segments]
            oversized = len(segments) == 1 and (
                len(groups[0]) > self._limits.max_export_batch_size or segments[0].bytes > self._sender.max_request_bytes
            )
            failed = self._sender.deliver(groups, oversized)
        except Exception:
            _logger.exception("ragtrail: exporting %d trace segments failed", len(segments))
            failed = set(range(len(segments)))
        checkpoints = self.checkpoints
        for index, segment in enumerate(segments):
            settled = self._buffer.settle(segment, delivered=index not in failed)
            if checkpoints is not None and settled and index not in failed:
                checkpoints.exported(segment.trace_id, groups[index])

    # --- SpanProcessor lifecycle -------------------------------------------------------------------
    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export every segment whose local root has ended, ignoring the grace period."""
        if self._stopped:
            return True
        waiter = threading.Event()
        with self._buffer.cond:
            self._flush_waiters.append(waiter)
            self._buffer.cond.notify_all()
        done = waiter.wait(timeout_millis / 1000.0)
        return done and self._exporter.force_flush(timeout_millis) is not False

    def shutdown(self, timeout_millis: int = 30000) -> None:
        """Export everything still buffered, count what could not be delivered (in flight included),
        then send the final loss record (or write it to the local store) and shut the exporter down.

        Returns within about ``timeout_millis`` (+ 2 s for a worker stuck inside a request): once
        shutdown has begun, a failed request is not retried and everything left is counted lost.
        """
        with self._buffer.cond:
            if self._shutdown_requested:
                return
            self._shutdown_requested = True
            self._buffer.closed = True
            deadline = time.monotonic() + timeout_millis / 1000.0
            self._buffer.cond.notify_all()
        self._sender.begin_shutdown(deadline)
        stuck = self._join_worker(deadline)
        self._buffer.abandon_all()  # every trace is now delivered or counted
        self._reporter.final(backend_usable=not stuck and not self._exporter_shut)
        if self.checkpoints is not None:
            self.checkpoints.close()
        self._shutdown_exporter()

    def _shutdown_exporter(self) -> None:
        if self._exporter_shut:
            return
        self._exporter_shut = True
        try:
            self._exporter.shutdown()
        except Exception:  # pragma: no cover - a broken exporter must not break shutdown
            _logger.exception("ragtrail: exporter shutdown failed")

    def _join_worker(self, deadline: float) -> bool:
        """Wait for the worker to drain; True when it is still inside a request afterwards."""
        worker = self._worker
        if not worker.is_alive() or threading.current_thread() is worker:
            return False
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            self._sender.give_up()
            self._shutdown_exporter()  # cuts the SDK exporter's own retry sleeps short
            worker.join(_STUCK_GRACE)
        return worker.is_alive()


def whole_trace_processor_factory(**options: Any) -> Callable[[SpanExporter], WholeTraceSpanProcessor]:
    """``export_span_processor`` for the SDK configurator: wraps each configured exporter."""

    def build(exporter: SpanExporter, *args: Any, **kwargs: Any) -> WholeTraceSpanProcessor:
        return WholeTraceSpanProcessor(exporter, **options)

    return build


__all__ = ["WholeTraceSpanProcessor", "any_live", "estimate_span_bytes", "whole_trace_processor_factory"]
