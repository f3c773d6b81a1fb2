"""A span processor that exports whole trace segments or counts them lost: never a trace with holes.

``BatchSpanProcessor`` drops single spans when its queue overflows, so the backend holds traces that
look complete and are not. This processor buffers the spans of each *trace segment* (the spans this
process produced under one local root) until the local root has ended and its open children have
ended too, or a short grace period has passed, then hands the segment to the exporter as a unit:

* the exported copy of the local root carries ``ragtrail.trace.span_count``, so a reader can check
  by arithmetic that every span of the segment arrived;
* memory is bounded (``max_traces``, ``max_spans_per_trace``, ``max_bytes``); on overflow the oldest
  whole segment is dropped, never a single span, and every dropped trace and span is counted;
* spans that end after their segment left are exported on their own, marked
  ``ragtrail.trace.late=true``; spans of a dropped segment are counted as dropped;
* a segment whose local root has not ended after ``max_trace_age_millis`` is dropped and counted
  (reason ``root_never_ended``) rather than held forever;
* exports run on one worker thread: the application thread only appends under a short lock;
* failed exports (endpoint down, 5xx, payload too large) are retried with exponential backoff; a
  segment given up is counted as a lost whole trace; segments larger than ``max_request_bytes`` are
  split across requests (root last) and a receiver with a smaller limit than configured is found by
  halving the request;
* losses reach the backend as periodic ``ragtrail.loss`` records (see :mod:`ragtrail.export.loss`)
  and as metrics;
* ``force_flush`` exports every segment whose root has ended (grace ignored); ``shutdown`` exports
  everything, marking spans of segments whose root never ended ``ragtrail.trace.incomplete=true``.

Every limit has a keyword argument and an environment variable (``RAGTRAIL_EXPORT_*``, listed in
:mod:`ragtrail.contract.semconv`), keyword first.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import logging
import os
import threading
import time
import weakref
from collections import OrderedDict, deque
from typing import Any, Callable, Optional, Sequence

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import get_current_span

from ragtrail import settings
from ragtrail.contract import semconv
from ragtrail.export.loss import (
    REASON_AFTER_SHUTDOWN,
    REASON_QUEUE_FULL,
    REASON_ROOT_NEVER_ENDED,
    REASON_TRACE_TOO_LARGE,
    LossLedger,
    loss_record,
)

_logger = logging.getLogger(__name__)

_MIN_REQUEST_BYTES = 16 * 1024
_MAX_PROBE_DEPTH = 5  # halving a refused request at most 5 times: 1/32 of it
_PROBE_IF_FAILED_WITHIN = 2.0  # seconds
_INITIAL_BACKOFF = 0.25
_MAX_BACKOFF = 5.0

# segment states
_OPEN, _WAITING, _READY, _TAKEN, _DONE, _DROPPED = range(6)
_SEGMENT_ATTR = "_ragtrail_segment"

# size estimate (bytes of Python memory, which also bounds the OTLP wire size): calibrated with
# tracemalloc in benchmarks/bench_export.py
_SPAN_BASE = 2700
_ATTR_BASE = 90
_EVENT_BASE = 500
_LINK_BASE = 300
_KEY_CHARS = 40  # typical attribute key plus a short value
# the processor's own bookkeeping, counted against max_bytes too
_SPAN_BOOKKEEPING = 120  # the (span, size) tuple and its list slot
_SEGMENT_BOOKKEEPING = 900  # the segment object, its list and its OrderedDict entry


def _value_size(value: Any) -> int:
    if value.__class__ is str:
        n = len(value)
        # UTF-8 on the wire takes up to 3 bytes per code point where Python memory takes 1-4
        return n if n < 64 or value.isascii() else 3 * n
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if isinstance(value, (list, tuple)):
        return 56 + sum(8 + _value_size(v) for v in value)
    return 16


def _plain(attributes: Any) -> Any:
    """The dict inside the SDK's BoundedAttributes (iterating the Mapping wrapper is several times
    slower, and this runs on the application thread for every span); any mapping works."""
    return getattr(attributes, "_dict", attributes)


def _attributes_size(attributes: Any) -> int:
    if not attributes:
        return 0
    attributes = _plain(attributes)
    total = (_ATTR_BASE + _KEY_CHARS) * len(attributes)  # keys are mostly shared constants
    for value in attributes.values():
        if value.__class__ is str:
            n = len(value)
            if n > 32:
                total += n if value.isascii() else 3 * n  # UTF-8 may take 3 bytes per code point
        elif value.__class__ is not int and value.__class__ is not float and value.__class__ is not bool:
            total += _value_size(value)
    return total


def estimate_span_bytes(span: ReadableSpan) -> int:
    """A cheap estimate of a finished span's Python memory, calibrated with tracemalloc (within a
    few percent); it also bounds the span's OTLP encoded size."""
    # the public properties copy (MappingProxyType, tuple(events)): read the fields when present
    try:
        attributes, events, links = span._attributes, span._events, span._links
    except AttributeError:  # not the SDK's ReadableSpan
        attributes, events, links = span.attributes, span.events, span.links
    total = _SPAN_BASE + len(span.name) + _attributes_size(attributes)
    if events:
        for event in events:
            total += _EVENT_BASE + len(event.name) + _attributes_size(event.attributes)
    if links:
        for link in links:
            total += _LINK_BASE + _attributes_size(link.attributes)
    return total


class _StampedAttributes(BoundedAttributes):
    """The exported copy's attributes: the SDK-cleaned originals plus ragtrail's stamps, with the
    original's dropped count (which OTLP carries as ``droppedAttributesCount``)."""

    def __init__(self, original: Any, extra: dict[str, Any], dropped: int) -> None:  # noqa: D107
        # BoundedAttributes' own __init__ re-cleans every value, which the SDK did when they were set
        self.maxlen = None
        self.max_value_len = None
        self._lock = threading.Lock()
        self._dict = {**_plain(original or {}), **extra}
        self.dropped = dropped
        self._immutable = True


def _with_attributes(span: ReadableSpan, extra: dict[str, Any]) -> ReadableSpan:
    """A shallow copy of ``span`` with ``extra`` attributes added; dropped counts preserved."""
    try:
        clone = object.__new__(span.__class__)
        clone.__dict__.update(span.__dict__)
        original = span._attributes
    except (AttributeError, TypeError):  # pragma: no cover - not the SDK's ReadableSpan
        clone = copy.copy(span)
        original = span.attributes
    clone._attributes = _StampedAttributes(original, extra, span.dropped_attributes)  # there is no setter
    return clone


class _Segment:
    """The spans one process produced for one local root of a trace."""

    __slots__ = (
        "trace_id",
        "root_span_id",
        "spans",
        "open",
        "root_ended",
        "state",
        "bytes",
        "created",
        "late",
        "incomplete",
        "exported_spans",
        "seq",
        "reason",
    )

    def __init__(self, trace_id: int, root_span_id: int, seq: int, now: float) -> None:
        self.trace_id = trace_id
        self.root_span_id = root_span_id
        self.spans: list[tuple[ReadableSpan, int]] = []
        self.open = 0
        self.root_ended = False
        self.state = _OPEN
        self.bytes = 0
        self.created = now
        self.late = False
        self.incomplete = False
        self.exported_spans = 0
        self.seq = seq
        self.reason = REASON_QUEUE_FULL

    def export_spans(self) -> list[ReadableSpan]:
        """Spans to send, local root last and stamped with the segment's span count."""
        count = self.exported_spans + len(self.spans)
        root_id = self.root_span_id
        if not self.late and not self.incomplete:  # the common case, kept cheap
            out = [span for span, _size in self.spans if span.context.span_id != root_id]
            if len(out) < len(self.spans):
                root = next(span for span, _size in self.spans if span.context.span_id == root_id)
                out.append(_with_attributes(root, {semconv.TRACE_SPAN_COUNT: count}))
            return out
        out = []
        root: Optional[ReadableSpan] = None
        for span, _size in self.spans:
            extra: dict[str, Any] = {}
            if self.late:
                extra[semconv.TRACE_LATE] = True
            if self.incomplete:
                extra[semconv.TRACE_INCOMPLETE] = True
            if span.context.span_id == self.root_span_id:
                extra[semconv.TRACE_SPAN_COUNT] = count
                root = _with_attributes(span, extra)
                continue
            out.append(_with_attributes(span, extra) if extra else span)
        if root is not None:
            out.append(root)
        return out


class WholeTraceSpanProcessor(SpanProcessor):
    """Exports whole trace segments (or counts them lost); see the module docstring."""

    def __init__(
        self,
        span_exporter: SpanExporter,
        *,
        max_traces: Optional[int] = None,
        max_spans_per_trace: Optional[int] = None,
        max_bytes: Optional[int] = None,
        grace_millis: Optional[float] = None,
        schedule_delay_millis: Optional[float] = None,
        max_export_batch_size: Optional[int] = None,
        max_request_bytes: Optional[int] = None,
        retry_timeout_millis: Optional[float] = None,
        max_trace_age_millis: Optional[float] = None,
        loss_report_interval_millis: Optional[float] = None,
        loss_ledger: Optional[LossLedger] = None,
        meter_provider: Optional[MeterProvider] = None,
    ) -> None:
        self._exporter = span_exporter
        self.max_traces = settings.export_limit(semconv.ENV_EXPORT_MAX_TRACES, max_traces)
        self.max_spans_per_trace = settings.export_limit(semconv.ENV_EXPORT_MAX_SPANS_PER_TRACE, max_spans_per_trace)
        self.max_bytes = settings.export_limit(semconv.ENV_EXPORT_MAX_BYTES, max_bytes)
        self._grace = settings.export_limit(semconv.ENV_EXPORT_GRACE_MILLIS, grace_millis) / 1000.0
        self._delay = (
            settings.export_limit(semconv.ENV_EXPORT_SCHEDULE_DELAY_MILLIS, schedule_delay_millis)
            / 1000.0
        )
        self.max_export_batch_size = settings.export_limit(semconv.ENV_EXPORT_MAX_BATCH_SPANS, max_export_batch_size)
        self.max_request_bytes = max(
            _MIN_REQUEST_BYTES,
            settings.export_limit(semconv.ENV_EXPORT_MAX_REQUEST_BYTES, max_request_bytes),
        )
        self._retry_timeout = (
            settings.export_limit(semconv.ENV_EXPORT_RETRY_TIMEOUT_MILLIS, retry_timeout_millis) / 1000.0
        )
        self._max_age = (
            settings.export_limit(semconv.ENV_EXPORT_MAX_TRACE_AGE_MILLIS, max_trace_age_millis)
            / 1000.0
        )
        self._loss_interval = (
            settings.export_limit(semconv.ENV_LOSS_REPORT_INTERVAL_MILLIS, loss_report_interval_millis)
            / 1000.0
        )
        self.loss = loss_ledger or LossLedger(meter_provider)
        self._init_state()
        if hasattr(os, "register_at_fork"):
            weak_reinit = weakref.WeakMethod(self._at_fork_reinit)

            def _after_in_child() -> None:
                reinit = weak_reinit()
                if reinit is not None:
                    reinit()

            os.register_at_fork(after_in_child=_after_in_child)

    # --- state ------------------------------------------------------------------------------------
    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._segments: "OrderedDict[int, _Segment]" = OrderedDict()  # seq -> buffered segment
        self._by_span: dict[int, _Segment] = {}  # span_id of a started, not ended span -> segment
        # per processor: two processors on one provider must not take each other's segments
        self._segment_attr = f"{_SEGMENT_ATTR}_{id(self):x}"
        self._ready: deque[_Segment] = deque()
        self._ready_spans = 0
        self._ready_deadline: Optional[float] = None
        self._waiting: list[tuple[float, int, _Segment]] = []
        self._bytes = 0
        self._seq = itertools.count()
        self._flush_waiters: list[threading.Event] = []
        self._shutdown_requested = False
        self._shutdown_deadline: Optional[float] = None
        self._stopped = False
        self._wake = threading.Event()  # interrupts retry backoff at shutdown
        self._resource: Optional[Resource] = None
        self._next_loss_report = time.monotonic() + self._loss_interval
        self._worker = threading.Thread(target=self._run, name="ragtrail-whole-trace-export", daemon=True)
        self._worker.start()

    def _at_fork_reinit(self) -> None:
        self._init_state()

    @property
    def buffered_bytes(self) -> int:
        """Estimated bytes of finished spans held right now (bounded by ``max_bytes``)."""
        return self._bytes

    @property
    def buffered_traces(self) -> int:
        return len(self._segments)

    # --- application thread -------------------------------------------------------------------------
    def on_start(self, span: Span, parent_context: Optional[Context] = None) -> None:
        context = span.context
        if context is None or not context.trace_flags.sampled or self._shutdown_requested:
            return
        segment: Optional[_Segment] = None
        parent = span.parent
        if parent is not None and not parent.is_remote:
            # fast path: the parent is still open; else it ended but its Span object is in the context
            segment = self._by_span.get(parent.span_id)
            if segment is None:
                parent_span = get_current_span(parent_context)
                if parent_span.get_span_context().span_id == parent.span_id:
                    segment = getattr(parent_span, self._segment_attr, None)
        dropped_now: list[_Segment] = []
        with self._lock:
            if segment is None:
                segment = self._new_segment_locked(context.trace_id, context.span_id, dropped_now)
            segment.open += 1
            self._by_span[context.span_id] = segment
        try:
            setattr(span, self._segment_attr, segment)
        except AttributeError:  # pragma: no cover - a Span subclass with __slots__
            pass
        if dropped_now:
            self._account_dropped(dropped_now, REASON_QUEUE_FULL)

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context
        if context is None or not context.trace_flags.sampled:
            return
        span_id = context.span_id
        if self._shutdown_requested:
            self._by_span.pop(span_id, None)
            self.loss.dropped(0, 1, REASON_AFTER_SHUTDOWN)
            return
        if self._resource is None:
            self._resource = span.resource
        size = estimate_span_bytes(span) + _SPAN_BOOKKEEPING
        evicted: list[_Segment] = []
        too_large: Optional[_Segment] = None
        late_dropped_reason: Optional[str] = None
        with self._lock:
            segment = self._by_span.pop(span_id, None)
            if segment is None:  # started before this processor was added: a segment of its own
                segment = self._new_segment_locked(context.trace_id, span_id, evicted)
                segment.open = 1
            state = segment.state
            if state <= _READY:  # still buffered: the common case
                segment.spans.append((span, size))
                segment.bytes += size
                self._bytes += size
                segment.open -= 1
                if state == _READY:
                    self._ready_spans += 1
                elif span_id == segment.root_span_id or segment.root_ended:
                    segment.root_ended = True
                    if segment.open <= 0:
                        self._make_ready_locked(segment)
                    elif state == _OPEN:
                        segment.state = _WAITING
                        heapq.heappush(self._waiting, (time.monotonic() + self._grace, segment.seq, segment))
                        if self._waiting[0][2] is segment:  # earlier than what the worker sleeps until
                            self._cond.notify()
                if len(segment.spans) > self.max_spans_per_trace:
                    self._drop_locked(segment, REASON_TRACE_TOO_LARGE)
                    too_large = segment
            elif state == _DROPPED:
                late_dropped_reason = segment.reason
            else:  # taken or exported already: a late span, sent on its own
                late = self._new_segment_locked(context.trace_id, span_id, evicted)
                late.late = True
                late.root_span_id = -1  # never stamped with a span count
                self._append_locked(late, span, size)
                self._make_ready_locked(late)
            if self._bytes > self.max_bytes or len(self._segments) > self.max_traces:
                evicted.extend(self._evict_locked())
            if self._ready_spans >= self.max_export_batch_size:
                self._cond.notify()
        if late_dropped_reason is not None:
            self.loss.dropped(0, 1, late_dropped_reason)
        if too_large is not None:
            self.loss.dropped(1, len(too_large.spans), REASON_TRACE_TOO_LARGE)
            too_large.spans = []
        if evicted:
            self._account_dropped(evicted, REASON_QUEUE_FULL)

    # --- buffer bookkeeping (lock held) ---------------------------------------------------------------
    def _new_segment_locked(self, trace_id: int, root_span_id: int, dropped_now: list[_Segment]) -> _Segment:
        segment = _Segment(trace_id, root_span_id, next(self._seq), time.monotonic())
        segment.bytes = _SEGMENT_BOOKKEEPING
        self._bytes += _SEGMENT_BOOKKEEPING
        self._segments[segment.seq] = segment
        if len(self._segments) > self.max_traces:
            dropped_now.extend(self._evict_locked(keep=segment))
        return segment

    def _append_locked(self, segment: _Segment, span: ReadableSpan, size: int) -> None:
        segment.spans.append((span, size))
        segment.bytes += size
        self._bytes += size
        if segment.state == _READY:
            self._ready_spans += 1

    def _make_ready_locked(self, segment: _Segment) -> None:
        segment.state = _READY
        if self._ready_deadline is None:
            self._ready_deadline = time.monotonic() + self._delay
            self._cond.notify()  # the worker may be asleep until a later grace deadline
        self._ready.append(segment)
        self._ready_spans += len(segment.spans)

    def _forget_locked(self, segment: _Segment) -> None:
        """Remove a segment from the buffer accounting (taken for export or dropped)."""
        if self._segments.pop(segment.seq, None) is not None:
            self._bytes -= segment.bytes
        if segment.state == _READY:
            self._ready_spans -= len(segment.spans)

    def _drop_locked(self, segment: _Segment, reason: str = REASON_QUEUE_FULL) -> None:
        self._forget_locked(segment)
        segment.state = _DROPPED
        segment.reason = reason
        # spans still open keep pointing at the segment and are counted when they end

    def _evict_locked(self, keep: Optional[_Segment] = None) -> list[_Segment]:
        """Drop oldest whole segments until the buffer is within its bounds."""
        victims: list[_Segment] = []
        while self._segments and (self._bytes > self.max_bytes or len(self._segments) > self.max_traces):
            oldest = next(iter(self._segments.values()))
            if oldest is keep:
                if len(self._segments) == 1:
                    break
                self._segments.move_to_end(oldest.seq)
                continue
            self._drop_locked(oldest)
            victims.append(oldest)
        # the oldest are usually at the head of the ready queue: do not keep their tombstones
        # there while a stuck exporter keeps the worker away
        ready = self._ready
        while ready and ready[0].state != _READY:
            ready.popleft()
        waiting = self._waiting
        while waiting and waiting[0][2].state != _WAITING:
            heapq.heappop(waiting)
        return victims

    def _account_dropped(self, victims: Sequence[_Segment], reason: str) -> None:
        for victim in victims:
            # spans still open will be counted one by one when they end
            self.loss.dropped(1, victim.exported_spans + len(victim.spans), reason)
            victim.spans = []

    def _promote_locked(self, now: float, everything: bool, include_open: bool) -> list[_Segment]:
        """Move segments whose grace expired (or all, on flush) to the ready queue; age out the rest."""
        while self._waiting and (everything or self._waiting[0][0] <= now):
            _, _, segment = heapq.heappop(self._waiting)
            if segment.state == _WAITING:
                self._make_ready_locked(segment)
        aged: list[_Segment] = []
        if include_open:
            for segment in list(self._segments.values()):
                if segment.state == _OPEN and segment.spans:
                    segment.incomplete = True
                    self._make_ready_locked(segment)
        else:
            for segment in self._segments.values():  # oldest first: stop at the first young one
                if now - segment.created < self._max_age:
                    break
                if segment.state == _OPEN:
                    aged.append(segment)
            for segment in aged:
                self._drop_locked(segment, REASON_ROOT_NEVER_ENDED)
        return aged

    def _take_locked(self) -> list[_Segment]:
        """Pop one request's worth of ready segments (a single oversized segment goes alone)."""
        taken: list[_Segment] = []
        spans = 0
        size = 0
        while self._ready:
            segment = self._ready[0]
            if segment.state != _READY:
                self._ready.popleft()
                continue
            n = len(segment.spans)
            if taken and (spans + n > self.max_export_batch_size or size + segment.bytes > self.max_request_bytes):
                break
            self._ready.popleft()
            self._forget_locked(segment)
            segment.state = _TAKEN
            taken.append(segment)
            spans += n
            size += segment.bytes
        if self._ready:
            self._ready_deadline = time.monotonic() + self._delay
        else:
            self._ready_deadline = None
        return taken

    # --- worker thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            try:
                if not self._iteration():
                    return
            except Exception:  # never let the worker die: spans would pile up unexported
                _logger.exception("ragtrail: whole-trace export worker error (continuing)")
                time.sleep(0.1)

    def _iteration(self) -> bool:
        """One wait-and-export round; False once shut down and drained."""
        flush_waiters: list[threading.Event] = []
        with self._cond:
            while True:
                now = time.monotonic()
                stopping = self._shutdown_requested
                flushing = bool(self._flush_waiters)
                aged = self._promote_locked(now, everything=stopping or flushing, include_open=stopping)
                if aged:
                    break
                if self._ready and (
                    stopping
                    or flushing
                    or self._ready_spans >= self.max_export_batch_size
                    or (self._ready_deadline is not None and now >= self._ready_deadline)
                ):
                    break
                if stopping or flushing:
                    break
                if now >= self._next_loss_report:
                    break
                # a segment created while asleep is aged out within 1.5 x max_age at the latest
                timeout = min(self._next_loss_report - now, self._max_age / 2)
                if self._ready_deadline is not None:
                    timeout = min(timeout, self._ready_deadline - now)
                if self._waiting:
                    timeout = min(timeout, self._waiting[0][0] - now)
                if self._segments:  # the oldest may reach max_age (if it is not open, nothing is due)
                    oldest = next(iter(self._segments.values()))
                    age_due = oldest.created + self._max_age - now
                    timeout = min(timeout, age_due if age_due > 0 else 1.0)
                self._cond.wait(max(timeout, 0.001))
            taken = self._take_locked() if self._ready else []
            if not taken and not self._ready:
                flush_waiters, self._flush_waiters = self._flush_waiters, []
        if aged:
            self._account_dropped(aged, REASON_ROOT_NEVER_ENDED)
        if taken:
            try:
                self._export_segments(taken)
            except Exception:
                _logger.exception("ragtrail: exporting %d trace segments failed", len(taken))
                for segment in taken:
                    if segment.state != _DONE:
                        self._finish(segment, failed=True)
        if time.monotonic() >= self._next_loss_report or (stopping and not taken and not self._ready):
            self._report_loss()
        for waiter in flush_waiters:
            waiter.set()
        if stopping and not taken:
            with self._lock:
                if not self._ready:
                    self._stopped = True
                    return False
        return True

    def _export_segments(self, segments: list[_Segment]) -> None:
        """Send the segments (one request, or several for one oversized segment) and account."""
        spans: list[ReadableSpan] = []
        owners: list[int] = []
        for index, segment in enumerate(segments):
            exported = segment.export_spans()
            spans.extend(exported)
            owners.extend([index] * len(exported))
        if len(segments) == 1 and (
            len(spans) > self.max_export_batch_size or segments[0].bytes > self.max_request_bytes
        ):
            failed: set[int] = set()
            rest = spans  # the root is last, so it leaves only if everything before it did
            while rest and not failed:
                chunk = self._next_chunk(rest)  # re-read the limit: a refused request may lower it
                rest = rest[len(chunk) :]
                failed = self._send(chunk, [0] * len(chunk))
        else:
            failed = self._send(spans, owners)
        for index, segment in enumerate(segments):
            self._finish(segment, index in failed)

    def _finish(self, segment: _Segment, failed: bool) -> None:
        count = len(segment.spans)
        segment.exported_spans += count
        segment.spans = []
        segment.bytes = 0
        segment.state = _DONE
        if failed:
            self.loss.export_failed(1, count)

    def _next_chunk(self, spans: list[ReadableSpan]) -> list[ReadableSpan]:
        chunk: list[ReadableSpan] = []
        size = 0
        for span in spans:
            span_size = estimate_span_bytes(span)
            if chunk and (len(chunk) >= self.max_export_batch_size or size + span_size > self.max_request_bytes):
                break
            chunk.append(span)
            size += span_size
        return chunk

    def _export_once(self, spans: Sequence[ReadableSpan]) -> bool:
        try:
            return self._exporter.export(spans) == SpanExportResult.SUCCESS
        except Exception:  # an exporter must not kill the worker
            _logger.exception("ragtrail: span exporter raised")
            return False

    def _send(self, spans: list[ReadableSpan], owners: list[int], depth: int = 0) -> set[int]:
        """Deliver ``spans``; returns the owners (segment indexes) that were not delivered.

        A request refused at once may be too large for the receiver (HTTP 413, gRPC's 4 MiB): probe
        with halves (one attempt each); if a half goes through, the size was the problem and
        ``max_request_bytes`` is lowered for good. Otherwise (endpoint down, 5xx) retry the whole
        request with exponential backoff until ``retry_timeout_millis``.
        """
        if not spans:
            return set()
        started = time.monotonic()
        if self._export_once(spans):
            return set()
        # a refusal by size comes back at once; a slow failure (the exporter's own retries against
        # an endpoint that is down or overloaded) is not worth probing with smaller requests
        quick = time.monotonic() - started < _PROBE_IF_FAILED_WITHIN
        if quick and self._splittable(spans, depth):
            half = len(spans) // 2
            first_owners = set(owners[:half])
            first_failed = self._probe(spans[:half], owners[:half], depth + 1)
            if first_failed != first_owners:
                return first_failed | self._send(spans[half:], owners[half:], depth + 1)
        deadline = time.monotonic() + self._retry_timeout
        backoff = _INITIAL_BACKOFF
        while True:
            limit = deadline if self._shutdown_deadline is None else min(deadline, self._shutdown_deadline)
            if time.monotonic() + backoff > limit:
                return set(owners)
            if self._shutdown_requested:
                time.sleep(backoff)
            else:
                self._wake.wait(backoff)  # returns early when shutdown begins
            backoff = min(backoff * 2, _MAX_BACKOFF)
            if self._export_once(spans):
                return set()

    def _splittable(self, spans: list[ReadableSpan], depth: int) -> bool:
        return (
            len(spans) >= 2
            and depth < _MAX_PROBE_DEPTH
            and not self._past_shutdown_deadline()
            and sum(estimate_span_bytes(s) for s in spans) > _MIN_REQUEST_BYTES
        )

    def _probe(self, spans: list[ReadableSpan], owners: list[int], depth: int) -> set[int]:
        """One attempt, then halves while large: a receiver that refuses by size accepts a smaller
        request; one that refuses everything fails the first half too, and the rest is not tried."""
        if self._export_once(spans):
            self._lower_request_limit(spans)
            return set()
        if not self._splittable(spans, depth):
            return set(owners)
        half = len(spans) // 2
        first_failed = self._probe(spans[:half], owners[:half], depth + 1)
        if first_failed == set(owners[:half]):
            return set(owners)
        return first_failed | self._probe(spans[half:], owners[half:], depth + 1)

    def _lower_request_limit(self, accepted: list[ReadableSpan]) -> None:
        size = max(_MIN_REQUEST_BYTES, sum(estimate_span_bytes(s) for s in accepted))
        if size < self.max_request_bytes:
            _logger.warning(
                "ragtrail: the receiver refused a larger export and accepted %d bytes; max_request_bytes %d -> %d",
                size,
                self.max_request_bytes,
                size,
            )
            self.max_request_bytes = size

    def _past_shutdown_deadline(self) -> bool:
        return self._shutdown_deadline is not None and time.monotonic() >= self._shutdown_deadline

    def _report_loss(self) -> None:
        self._next_loss_report = time.monotonic() + self._loss_interval
        window = self.loss.open_window()
        if window.empty:
            return
        end_ns = time.time_ns()
        record = loss_record(window, self._resource, end_ns)
        if self._export_once([record]):
            self.loss.commit(window, end_ns)

    # --- SpanProcessor lifecycle -------------------------------------------------------------------
    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export every segment whose local root has ended, ignoring the grace period."""
        if self._stopped:
            return True
        waiter = threading.Event()
        with self._cond:
            self._flush_waiters.append(waiter)
            self._cond.notify_all()
        done = waiter.wait(timeout_millis / 1000.0)
        return done and self._exporter.force_flush(timeout_millis) is not False

    def shutdown(self, timeout_millis: int = 30000) -> None:
        """Export everything still buffered (then a final loss record), and shut the exporter down."""
        with self._cond:
            if self._shutdown_requested:
                return
            self._shutdown_requested = True
            self._shutdown_deadline = time.monotonic() + timeout_millis / 1000.0
            self._cond.notify_all()
        self._wake.set()  # cut retry backoff short: only the shutdown deadline counts now
        if self._worker.is_alive() and threading.current_thread() is not self._worker:
            self._worker.join(timeout_millis / 1000.0 + 1.0)
        with self._lock:
            leftovers = [s for s in self._segments.values() if s.spans]
            for segment in leftovers:
                self._drop_locked(segment)
        if leftovers:
            for segment in leftovers:
                self.loss.export_failed(1, len(segment.spans))
                segment.spans = []
        self._exporter.shutdown()


def whole_trace_processor_factory(**options: Any) -> Callable[[SpanExporter], WholeTraceSpanProcessor]:
    """``export_span_processor`` for the SDK configurator: wraps each configured exporter."""

    def build(exporter: SpanExporter, *args: Any, **kwargs: Any) -> WholeTraceSpanProcessor:
        return WholeTraceSpanProcessor(exporter, **options)

    return build


__all__ = ["WholeTraceSpanProcessor", "estimate_span_bytes", "whole_trace_processor_factory"]
