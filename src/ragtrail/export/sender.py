"""Delivering one export request: retries with exponential backoff, splitting a segment too large for
one request, and finding a receiver's smaller size limit by halving a refused request.

The sender never decides what is lost: it answers which *owners* (segments of the request) were not
delivered, and the processor settles and counts them. At shutdown it stops retrying: once shutdown
has begun, one failed attempt means the backend is not taking anything now, and every further request
is refused at once (so shutdown ends within its deadline, and what is left is counted, not silently
abandoned).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ragtrail.export.otlp_exporters import with_ragtrail_encoder
from ragtrail.export.sizing import estimate_span_bytes
from ragtrail.export.stamping import root_first

_logger = logging.getLogger(__name__)

MIN_REQUEST_BYTES = 16 * 1024
_MAX_PROBE_DEPTH = 5  # halving a refused request at most 5 times: 1/32 of it
_PROBE_IF_FAILED_WITHIN = 2.0  # seconds
_INITIAL_BACKOFF = 0.25
_MAX_BACKOFF = 5.0


class Sender:
    """Sends span lists through one exporter; see the module docstring."""

    def __init__(self, exporter: SpanExporter, *, max_request_bytes: int, max_export_batch_size: int, retry_timeout: float) -> None:
        self.exporter = with_ragtrail_encoder(exporter)  # a stock OTLP exporter encodes with ragtrail's encoder
        self.max_request_bytes = max(MIN_REQUEST_BYTES, max_request_bytes)
        self.max_export_batch_size = max_export_batch_size
        self.retry_timeout = retry_timeout
        self.last_ok: bool | None = None  # the outcome of the last attempt (None: none yet)
        self.last_seconds = 0.0  # how long the last attempt took
        self._shutdown_deadline: float | None = None
        self._given_up = False
        self._wake = threading.Event()  # interrupts retry backoff at shutdown

    # --- shutdown ------------------------------------------------------------------------------------
    def begin_shutdown(self, deadline: float) -> None:
        """From now on: no backoff longer than the deadline, and no retry after a failure."""
        self._shutdown_deadline = deadline
        self._wake.set()

    def give_up(self) -> None:
        """Send nothing more (a stuck worker that comes back finds every request refused)."""
        self._given_up = True
        self._wake.set()

    @property
    def shutting_down(self) -> bool:
        return self._shutdown_deadline is not None

    def _closed(self) -> bool:
        return self._given_up or not self.fits_before_deadline()

    def fits_before_deadline(self) -> bool:
        """Whether a request, taking as long as the last one did, would end before the shutdown
        deadline (always, before shutdown): one that would not is not started, so that shutdown
        does not end with a request whose outcome nobody knows."""
        if self._shutdown_deadline is None:
            return True
        return time.monotonic() + self.last_seconds < self._shutdown_deadline

    # --- requests -------------------------------------------------------------------------------------
    def export_once(self, spans: Sequence[ReadableSpan]) -> bool:
        """One attempt; False (without trying) once given up."""
        if self._given_up:
            return False
        started = time.monotonic()
        try:
            ok = self.exporter.export(spans) == SpanExportResult.SUCCESS
        except Exception:  # an exporter must not kill the worker
            _logger.exception("ragtrail: span exporter raised")
            ok = False
        self.last_ok = ok
        self.last_seconds = time.monotonic() - started
        return ok

    def deliver(self, groups: list[list[ReadableSpan]], oversized: bool) -> set[int]:
        """Send the groups (whole segments) in one request, or one oversized group in several, root
        part first; returns the indexes of the groups not delivered whole."""
        if oversized:
            rest = root_first(groups[0])
            while rest:
                chunk = self._next_chunk(rest)  # re-read the limit: a refused request may lower it
                rest = rest[len(chunk) :]
                if self._send(chunk, [0] * len(chunk)):
                    return {0}
            return set()
        spans = [span for group in groups for span in group]
        owners = [index for index, group in enumerate(groups) for _ in group]
        return self._send(spans, owners)

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

    def _send(self, spans: list[ReadableSpan], owners: list[int], depth: int = 0) -> set[int]:
        """Deliver ``spans``; returns the owners that were not delivered.

        A request refused at once may be too large for the receiver (HTTP 413, gRPC's 4 MiB): probe
        with halves (one attempt each); if a half goes through, the size was the problem and
        ``max_request_bytes`` is lowered for good. Otherwise (endpoint down, 5xx) retry the whole
        request with exponential backoff until ``retry_timeout``.
        """
        if not spans:
            return set()
        if self._closed():
            return set(owners)
        started = time.monotonic()
        if self.export_once(spans):
            return set()
        # a refusal by size comes back at once; a slow failure (the exporter's own retries against
        # an endpoint that is down or overloaded) is not worth probing with smaller requests
        if time.monotonic() - started < _PROBE_IF_FAILED_WITHIN and self._splittable(spans, depth):
            first, second = _halves(spans, owners)
            cut = len(first)
            first_failed = self._probe(first, owners[:cut], depth + 1)
            if first_failed != set(owners[:cut]):
                return first_failed | self._send(second, owners[cut:], depth + 1)
        return set() if self._retry(spans) else set(owners)

    def _retry(self, spans: list[ReadableSpan]) -> bool:
        """Retry with backoff until ``retry_timeout``; once shutdown has begun, no retry."""
        deadline = time.monotonic() + self.retry_timeout
        backoff = _INITIAL_BACKOFF
        while not self._given_up:
            if self.shutting_down:  # an attempt failed during shutdown: the backend takes nothing now
                self.give_up()  # count the rest lost and let shutdown end
                return False
            if time.monotonic() + backoff > deadline:
                return False
            self._wake.wait(backoff)  # returns early when shutdown begins
            backoff = min(backoff * 2, _MAX_BACKOFF)
            if self.export_once(spans):
                return True
        return False

    def _splittable(self, spans: list[ReadableSpan], depth: int) -> bool:
        return len(spans) >= 2 and depth < _MAX_PROBE_DEPTH and not self._closed() and sum(estimate_span_bytes(s) for s in spans) > MIN_REQUEST_BYTES

    def _probe(self, spans: list[ReadableSpan], owners: list[int], depth: int) -> set[int]:
        """One attempt, then halves while large: a receiver that refuses by size accepts a smaller
        request; one that refuses everything fails the first half too, and the rest is not tried."""
        if self.export_once(spans):
            self._lower_request_limit(spans)
            return set()
        if not self._splittable(spans, depth):
            return set(owners)
        first, second = _halves(spans, owners)
        first_failed = self._probe(first, owners[: len(first)], depth + 1)
        if first_failed == set(owners[: len(first)]):
            return set(owners)
        return first_failed | self._probe(second, owners[len(first) :], depth + 1)

    def _lower_request_limit(self, accepted: list[ReadableSpan]) -> None:
        size = max(MIN_REQUEST_BYTES, sum(estimate_span_bytes(s) for s in accepted))
        if size < self.max_request_bytes:
            _logger.warning(
                "ragtrail: the receiver refused a larger export and accepted %d bytes; max_request_bytes %d -> %d",
                size,
                self.max_request_bytes,
                size,
            )
            self.max_request_bytes = size


def _halves(spans: list[ReadableSpan], owners: list[int]) -> tuple[list[ReadableSpan], list[ReadableSpan]]:
    """Two halves of a request: at the segment boundary nearest the middle (every trace stays in one
    request), or, for a single segment, root part first."""
    middle = len(spans) // 2
    cuts = [i for i in range(1, len(owners)) if owners[i] != owners[i - 1]]
    if cuts:
        cut = min(cuts, key=lambda i: abs(i - middle))
        return spans[:cut], spans[cut:]
    ordered = root_first(spans)
    return ordered[:middle], ordered[middle:]


__all__ = ["Sender", "MIN_REQUEST_BYTES"]
