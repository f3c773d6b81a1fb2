"""The buffer of trace segments: the spans one process produced under one local root, held until the
segment is whole (root ended, open children ended or a grace period passed), within bounds.

Memory is bounded by trace count and estimated bytes; on overflow the oldest *whole* segment is
dropped, never a single span, and every drop is counted in the :class:`~ragtrail.export.loss.LossLedger`.
The application thread only appends under one short lock; the export worker takes ready segments.
Every segment taken for export is *settled* exactly once (delivered, or counted lost), by the worker
or, when the worker is stuck at shutdown, by :meth:`SegmentBuffer.abandon_all`.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span
from opentelemetry.trace import get_current_span

from ragtrail.export.loss import (
    REASON_AFTER_SHUTDOWN,
    REASON_EXPORT_FAILED,
    REASON_QUEUE_FULL,
    REASON_ROOT_NEVER_ENDED,
    REASON_TRACE_TOO_LARGE,
    LossLedger,
)
from ragtrail.export.sizing import SEGMENT_BOOKKEEPING, SPAN_BOOKKEEPING, estimate_span_bytes
from ragtrail.export.stamping import stamp_segment

# segment states, in order: buffered (<= READY), taken by the worker, settled
OPEN, WAITING, READY, TAKEN, DONE, DROPPED = range(6)
_SEGMENT_ATTR = "_ragtrail_segment"


class Segment:
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
        self.state = OPEN
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
        return stamp_segment([span for span, _size in self.spans], self.root_span_id, count, late=self.late, incomplete=self.incomplete)


class SegmentBuffer:
    """Segments by local root, the ready queue and the grace heap, under one lock (``cond``)."""

    def __init__(self, limits: BufferLimits, loss: LossLedger, owner_id: int) -> None:
        self.limits = limits
        self.loss = loss
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.segments: OrderedDict[int, Segment] = OrderedDict()  # seq -> buffered segment
        self._by_span: dict[int, Segment] = {}  # span_id of a started, not ended span -> segment
        # per processor: two processors on one provider must not take each other's segments
        self._segment_attr = f"{_SEGMENT_ATTR}_{owner_id:x}"
        self.ready: deque[Segment] = deque()
        self.ready_spans = 0
        self.ready_deadline: float | None = None
        self.waiting: list[tuple[float, int, Segment]] = []
        self.bytes = 0
        self._seq = itertools.count()
        self.in_flight: set[Segment] = set()  # taken, not settled
        self.closed = False  # set by the application thread at shutdown: nothing new is buffered
        # told of every segment given up, by trace id (the checkpoint chain's lost records); one append
        self.lost: Callable[[int, int, str], None] | None = None

    # --- application thread -------------------------------------------------------------------------
    def start(self, span: Span, parent_context: Context | None) -> None:
        """A span started: find (or open) its segment and count it open there."""
        context = span.context
        segment: Segment | None = None
        parent = span.parent
        if parent is not None and not parent.is_remote:
            # fast path: the parent is still open; else it ended but its Span object is in the context
            segment = self._by_span.get(parent.span_id)
            if segment is None:
                parent_span = get_current_span(parent_context)
                if parent_span.get_span_context().span_id == parent.span_id:
                    segment = getattr(parent_span, self._segment_attr, None)
        dropped_now: list[Segment] = []
        with self.lock:
            if segment is None:
                segment = self._new_segment_locked(context.trace_id, context.span_id, dropped_now)
            segment.open += 1
            self._by_span[context.span_id] = segment
        try:  # noqa: SIM105 - every span start passes here: a try costs nothing when nothing is raised, suppress() a call
            setattr(span, self._segment_attr, segment)
        except AttributeError:  # pragma: no cover - a Span subclass with __slots__
            pass
        if dropped_now:
            self.account_dropped(dropped_now, REASON_QUEUE_FULL)

    def end(self, span: ReadableSpan) -> None:
        """A span ended: append it to its segment (or count it, if that segment was dropped)."""
        context = span.context
        span_id = context.span_id
        if self.closed:
            self._by_span.pop(span_id, None)
            self.loss.dropped(0, 1, REASON_AFTER_SHUTDOWN)
            return
        size = estimate_span_bytes(span) + SPAN_BOOKKEEPING
        evicted: list[Segment] = []
        with self.lock:
            segment = self._by_span.pop(span_id, None)
            if self.closed:  # shutdown began after the check above: nothing new may be buffered
                outcome: str | None = REASON_AFTER_SHUTDOWN
            else:
                if segment is None:  # started before this processor was added: a segment of its own
                    segment = self._new_segment_locked(context.trace_id, span_id, evicted)
                    segment.open = 1
                outcome = self._place_locked(segment, span, span_id, size, evicted)
                if self.bytes > self.limits.max_bytes or len(self.segments) > self.limits.max_traces:
                    evicted.extend(self._evict_locked())
                if self.ready_spans >= self.limits.max_export_batch_size:
                    self.cond.notify()
        if outcome == REASON_AFTER_SHUTDOWN:
            self.loss.dropped(0, 1, REASON_AFTER_SHUTDOWN)
        elif outcome == "late_dropped":
            self.loss.dropped(0, 1, segment.reason)
        elif outcome == REASON_TRACE_TOO_LARGE:
            self.loss.dropped(1, len(segment.spans), REASON_TRACE_TOO_LARGE)
            self._lost(segment, len(segment.spans), REASON_TRACE_TOO_LARGE)
            segment.spans = []
        if evicted:
            self.account_dropped(evicted, REASON_QUEUE_FULL)

    def _place_locked(self, segment: Segment, span: ReadableSpan, span_id: int, size: int, evicted: list[Segment]) -> str | None:
        state = segment.state
        if state <= READY:  # still buffered: the common case
            return self._add_ended_locked(segment, span, span_id, size)
        if state == DROPPED:
            return "late_dropped"
        self._add_late_locked(span, span_id, size, evicted)  # taken or exported already: sent on its own
        return None

    def _add_ended_locked(self, segment: Segment, span: ReadableSpan, span_id: int, size: int) -> str | None:
        state = segment.state
        segment.spans.append((span, size))
        segment.bytes += size
        self.bytes += size
        segment.open -= 1
        if state == READY:
            self.ready_spans += 1
        elif span_id == segment.root_span_id or segment.root_ended:
            segment.root_ended = True
            if segment.open <= 0:
                self._make_ready_locked(segment)
            elif state == OPEN:
                segment.state = WAITING
                heapq.heappush(self.waiting, (time.monotonic() + self.limits.grace, segment.seq, segment))
                if self.waiting[0][2] is segment:  # earlier than what the worker sleeps until
                    self.cond.notify()
        if len(segment.spans) > self.limits.max_spans_per_trace:
            self._drop_locked(segment, REASON_TRACE_TOO_LARGE)
            return REASON_TRACE_TOO_LARGE
        return None

    def _add_late_locked(self, span: ReadableSpan, span_id: int, size: int, evicted: list[Segment]) -> None:
        late = self._new_segment_locked(span.context.trace_id, span_id, evicted)
        late.late = True
        late.root_span_id = -1  # never stamped with a span count
        late.spans.append((span, size))
        late.bytes += size
        self.bytes += size
        self._make_ready_locked(late)

    # --- bookkeeping (lock held) -----------------------------------------------------------------------
    def _new_segment_locked(self, trace_id: int, root_span_id: int, dropped_now: list[Segment]) -> Segment:
        segment = Segment(trace_id, root_span_id, next(self._seq), time.monotonic())
        segment.bytes = SEGMENT_BOOKKEEPING
        self.bytes += SEGMENT_BOOKKEEPING
        self.segments[segment.seq] = segment
        if len(self.segments) > self.limits.max_traces:
            dropped_now.extend(self._evict_locked(keep=segment))
        return segment

    def _make_ready_locked(self, segment: Segment) -> None:
        segment.state = READY
        if self.ready_deadline is None:
            self.ready_deadline = time.monotonic() + self.limits.delay
            self.cond.notify()  # the worker may be asleep until a later grace deadline
        self.ready.append(segment)
        self.ready_spans += len(segment.spans)

    def _forget_locked(self, segment: Segment) -> None:
        """Remove a segment from the buffer accounting (taken for export or dropped)."""
        if self.segments.pop(segment.seq, None) is not None:
            self.bytes -= segment.bytes
        if segment.state == READY:
            self.ready_spans -= len(segment.spans)

    def _drop_locked(self, segment: Segment, reason: str = REASON_QUEUE_FULL) -> None:
        self._forget_locked(segment)
        segment.state = DROPPED
        segment.reason = reason
        # spans still open keep pointing at the segment and are counted when they end

    def _evict_locked(self, keep: Segment | None = None) -> list[Segment]:
        """Drop oldest whole segments until the buffer is within its bounds."""
        victims: list[Segment] = []
        limits = self.limits
        while self.segments and (self.bytes > limits.max_bytes or len(self.segments) > limits.max_traces):
            oldest = next(iter(self.segments.values()))
            if oldest is keep:
                if len(self.segments) == 1:
                    break
                self.segments.move_to_end(oldest.seq)
                continue
            self._drop_locked(oldest)
            victims.append(oldest)
        # the oldest are usually at the head of the ready queue: do not keep their tombstones
        # there while a stuck exporter keeps the worker away
        while self.ready and self.ready[0].state != READY:
            self.ready.popleft()
        while self.waiting and self.waiting[0][2].state != WAITING:
            heapq.heappop(self.waiting)
        return victims

    def account_dropped(self, victims: Sequence[Segment], reason: str) -> None:
        for victim in victims:
            # spans still open will be counted one by one when they end
            self.loss.dropped(1, victim.exported_spans + len(victim.spans), reason)
            self._lost(victim, victim.exported_spans + len(victim.spans), reason)
            victim.spans = []

    def _lost(self, segment: Segment, spans: int, reason: str) -> None:
        lost = self.lost
        if lost is not None:
            lost(segment.trace_id, spans, reason)

    # --- worker thread (lock held unless said otherwise) ----------------------------------------------
    def promote_locked(self, now: float, everything: bool, include_open: bool) -> list[Segment]:
        """Move segments whose grace expired (or all, on flush) to the ready queue; age out the rest."""
        while self.waiting and (everything or self.waiting[0][0] <= now):
            _, _, segment = heapq.heappop(self.waiting)
            if segment.state == WAITING:
                self._make_ready_locked(segment)
        aged: list[Segment] = []
        if include_open:
            for segment in list(self.segments.values()):
                if segment.state == OPEN and segment.spans:
                    segment.incomplete = True
                    self._make_ready_locked(segment)
        else:
            for segment in self.segments.values():  # oldest first: stop at the first young one
                if now - segment.created < self.limits.max_age:
                    break
                if segment.state == OPEN:
                    aged.append(segment)
            for segment in aged:
                self._drop_locked(segment, REASON_ROOT_NEVER_ENDED)
        return aged

    def take_locked(self) -> list[Segment]:
        """Pop one request's worth of ready segments (a single oversized segment goes alone)."""
        taken: list[Segment] = []
        spans = 0
        size = 0
        limits = self.limits
        while self.ready:
            segment = self.ready[0]
            if segment.state != READY:
                self.ready.popleft()
                continue
            n = len(segment.spans)
            if taken and (spans + n > limits.max_export_batch_size or size + segment.bytes > limits.max_request_bytes()):
                break
            self.ready.popleft()
            self._forget_locked(segment)
            segment.state = TAKEN
            self.in_flight.add(segment)
            taken.append(segment)
            spans += n
            size += segment.bytes
        self.ready_deadline = time.monotonic() + limits.delay if self.ready else None
        return taken

    def next_wake_locked(self, now: float, next_loss_report: float) -> float:
        """Seconds the worker may sleep before something is due."""
        # a segment created while asleep is aged out within 1.5 x max_age at the latest
        timeout = min(next_loss_report - now, self.limits.max_age / 2)
        if self.ready_deadline is not None:
            timeout = min(timeout, self.ready_deadline - now)
        if self.waiting:
            timeout = min(timeout, self.waiting[0][0] - now)
        if self.segments:  # the oldest may reach max_age (if it is not open, nothing is due)
            oldest = next(iter(self.segments.values()))
            age_due = oldest.created + self.limits.max_age - now
            timeout = min(timeout, age_due if age_due > 0 else 1.0)
        return max(timeout, 0.001)

    def settle(self, segment: Segment, delivered: bool) -> bool:
        """A taken segment was delivered or given up (counted lost); a no-op returning False when it
        was already settled (abandoned at shutdown while the worker was stuck). Takes the lock."""
        with self.lock:
            if segment.state != TAKEN:
                return False
            segment.state = DONE
            self.in_flight.discard(segment)
        count = len(segment.spans)
        segment.exported_spans += count
        segment.spans = []
        segment.bytes = 0
        if not delivered:
            self.loss.export_failed(1, count)
            self._lost(segment, count, REASON_EXPORT_FAILED)
        return True

    def abandon_all(self) -> None:
        """At shutdown, after the worker stopped or gave up: every segment still buffered or in flight
        is counted lost, and a worker that returns later finds them settled. Takes the lock."""
        with self.lock:
            left = [s for s in self.segments.values() if s.spans] + list(self.in_flight)
            for segment in self.segments.values():
                segment.state = DROPPED
            for segment in self.in_flight:
                segment.state = DROPPED
            self.segments.clear()
            self.in_flight.clear()
            self.ready.clear()
            self.bytes = self.ready_spans = 0
        for segment in left:
            self.loss.export_failed(1, len(segment.spans))
            self._lost(segment, len(segment.spans), REASON_EXPORT_FAILED)
            segment.spans = []


@dataclass
class BufferLimits:
    """The bounds the buffer and the batcher read (``max_request_bytes`` asks the sender, which may
    lower it when a receiver refuses by size)."""

    max_traces: int
    max_spans_per_trace: int
    max_bytes: int
    grace: float
    delay: float
    max_export_batch_size: int
    max_age: float
    max_request_bytes: Callable[[], int]


__all__ = ["Segment", "SegmentBuffer", "BufferLimits"]
