"""The exporter's checkpoint writer: a hash chain over every segment, written outside the backend.

The rules of the chain and of a checkpoint line are the contract's (:mod:`ragtrail.contract.checkpoints`);
this module keeps the chain and writes the lines. Who runs where, so that the host pays nothing:

* the export worker (:mod:`~ragtrail.export.whole_trace`) hands every delivered segment's spans to
  :meth:`CheckpointWriter.exported`, which reads their stage receipts and advances the chain;
* a segment given up (dropped on overflow, too large, root never ended, export failed) and a root the
  head sampler dropped are *noted* by :meth:`CheckpointWriter.note_lost` / :meth:`note_sampled_out`,
  one ``deque.append`` of a small tuple, from whichever thread saw it; the worker folds the notes
  into the chain at its next :meth:`pump`;
* a checkpoint is written every ``every_segments`` records, or ``every_seconds`` after the first
  pending record, and at shutdown (:meth:`close`): appended to ``path`` (``O_APPEND``, then
  ``fsync``), and POSTed to ``endpoint`` when set. A failure is counted (:attr:`failures`) and logged
  once, never raised into the export path.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan

from ragtrail import settings
from ragtrail.contract import checkpoints as cp
from ragtrail.contract import semconv
from ragtrail.export.loss import LossLedger

_logger = logging.getLogger(__name__)
_POST_TIMEOUT = 2.0  # seconds: the worker must not wait long on a checkpoint sink


class CheckpointWriter:
    """The chain of one producer (one processor in one process) and where its checkpoints go."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        endpoint: str | None,
        *,
        every_segments: int,
        every_seconds: float,
        loss: LossLedger,
    ) -> None:
        self.path = os.fspath(path) if path is not None else None
        self.endpoint = endpoint
        self.every_segments = every_segments
        self.every_seconds = every_seconds
        self.producer = secrets.token_hex(8)
        self.failures = 0
        self.written = 0
        self._loss = loss
        self._lost: deque[tuple[int, int, str]] = deque()
        self._sampled: deque[int] = deque()  # trace ids as ints: formatting waits for the worker
        self._pending: list[cp.Record] = []
        self._head = cp.GENESIS
        self._prev = cp.GENESIS
        self._seq = 0
        self._count = 0
        self._from_ns = 0
        self._to_ns = 0
        self._due: float | None = None
        self._checked = time.monotonic()  # the worker's last pump: notes are due T after it
        self._lock = threading.Lock()  # the worker and shutdown() may both write the last checkpoint
        self._closed = False

    # --- any thread: one append ------------------------------------------------------------------------
    def note_lost(self, trace_id: int, spans: int, reason: str) -> None:
        """A segment the exporter gave up (and counted in the loss ledger)."""
        self._lost.append((trace_id, spans, reason))

    def note_sampled_out(self, trace_id: int) -> None:
        """A root the head sampler dropped (``RagtrailSampler.watch_drops``)."""
        self._sampled.append(trace_id)

    # --- the export worker -----------------------------------------------------------------------------
    def exported(self, trace_id: int, spans: Sequence[ReadableSpan]) -> None:
        """A delivered segment: its trace id, span count and stage receipts become one record."""
        parts = []
        start = end = 0
        for span in spans:
            attributes = span.attributes
            if attributes is not None:
                part = cp.receipt_part(attributes.get(semconv.STAGE_RECEIPT))
                if part is not None:
                    parts.append(part)
            if span.start_time and (not start or span.start_time < start):
                start = span.start_time
            if span.end_time and span.end_time > end:
                end = span.end_time
        with self._lock:
            self._add_locked(cp.Record(cp.KIND_EXPORTED, f"{trace_id:032x}", len(spans), cp.receipts_text(parts)), start, end)

    @property
    def next_due(self) -> float:
        """Monotonic time the worker must next :meth:`pump`: a time-based checkpoint is due, or notes
        (which wake nobody) may be waiting, at most ``every_seconds`` after the last pump."""
        due = self._due
        check = self._checked + self.every_seconds
        return check if due is None else min(due, check)

    def pump(self, now: float | None = None) -> None:
        """Fold the notes into the chain; write a checkpoint when one is due."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._drain_locked(self._checked + self.every_seconds)
            self._checked = now
            if self._pending and (len(self._pending) >= self.every_segments or (self._due is not None and now >= self._due)):
                self._write_locked(final=False)

    def close(self) -> None:
        """At shutdown, after every segment was settled: the last checkpoint (written even when empty)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._drain_locked(time.monotonic())
            self._write_locked(final=True)

    # --- lock held -------------------------------------------------------------------------------------
    def _drain_locked(self, due: float) -> None:
        """Fold the notes in; each may have come just after the last pump, so it is due ``due``."""
        now_ns = time.time_ns()
        lost, sampled = self._lost, self._sampled
        while lost:
            trace_id, spans, reason = lost.popleft()
            self._add_locked(cp.Record(cp.KIND_LOST, f"{trace_id:032x}", spans, reason), now_ns, now_ns, due)
        while sampled:
            self._add_locked(cp.Record(cp.KIND_SAMPLED_OUT, f"{sampled.popleft():032x}"), now_ns, now_ns, due)

    def _add_locked(self, record: cp.Record, start_ns: int, end_ns: int, due: float | None = None) -> None:
        self._head = cp.next_head(self._head, cp.record_json(record))
        self._pending.append(record)
        if start_ns and (not self._from_ns or start_ns < self._from_ns):
            self._from_ns = start_ns
        self._to_ns = max(self._to_ns, end_ns)
        due = time.monotonic() + self.every_seconds if due is None else due
        self._due = due if self._due is None else min(self._due, due)
        if len(self._pending) >= self.every_segments and not self._closed:
            self._write_locked(final=False)

    def _write_locked(self, final: bool) -> None:
        records, self._pending = self._pending, []
        self._count += len(records)
        now_ns = time.time_ns()
        checkpoint = cp.Checkpoint(
            producer=self.producer,
            seq=self._seq,
            count=self._count,
            prev=self._prev,
            head=self._head,
            from_ns=self._from_ns or now_ns,
            to_ns=self._to_ns or now_ns,
            records=records,
            lost_traces=self._loss.total_traces_dropped + self._loss.total_traces_export_failed,
            lost_spans=self._loss.total_spans_dropped + self._loss.total_spans_export_failed,
            final=final,
        )
        line = cp.checkpoint_line(checkpoint, settings.receipt_key()).encode("ascii")
        self._seq += 1
        self._prev = self._head
        self._from_ns = self._to_ns = 0
        self._due = None
        self.written += 1
        self._append(line)
        self._post(line)

    def _append(self, line: bytes) -> None:
        if self.path is None:
            return
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            self._failed(f"could not append a checkpoint to {self.path}: {exc}")

    def _post(self, line: bytes) -> None:
        if not self.endpoint:
            return
        request = urllib.request.Request(self.endpoint, data=line, method="POST", headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=_POST_TIMEOUT) as response:  # noqa: S310 - the operator's own endpoint
                response.read()
        except Exception as exc:  # any failure of the sink is counted, never raised into the exporter
            self._failed(f"could not POST a checkpoint to {self.endpoint}: {exc}")

    def _failed(self, message: str) -> None:
        self.failures += 1
        if self.failures == 1:
            _logger.warning("ragtrail: %s (checkpoint failures are counted, only the first is logged)", message)


def checkpoint_writer(
    loss: LossLedger, path: str | os.PathLike[str] | None, endpoint: str | None, every_segments: int | None, every_millis: float | None
) -> CheckpointWriter | None:
    """The writer the arguments or the environment ask for (``RAGTRAIL_CHECKPOINT_*``), or ``None``."""
    path = path if path is not None else (os.environ.get(semconv.ENV_CHECKPOINT_PATH) or None)
    endpoint = endpoint if endpoint is not None else (os.environ.get(semconv.ENV_CHECKPOINT_ENDPOINT) or None)
    if path is None and endpoint is None:
        return None
    return CheckpointWriter(
        path,
        endpoint,
        every_segments=settings.export_limit(semconv.ENV_CHECKPOINT_EVERY_SEGMENTS, every_segments),
        every_seconds=settings.export_limit(semconv.ENV_CHECKPOINT_EVERY_MILLIS, every_millis) / 1000.0,
        loss=loss,
    )


__all__ = ["CheckpointWriter", "checkpoint_writer"]
