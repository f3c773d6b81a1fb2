"""Where the counts of lost traces go: periodic ``ragtrail.loss`` records through the trace
exporter, and one final record at shutdown, sent after the last trace was settled.

The final record goes to the backend when the backend took the last request and a request as slow
as that one still fits before the shutdown deadline; otherwise (the backend is down, failing, too
slow or hanging at shutdown, or the export worker is stuck in a request) it is
written to the local store: one OTLP JSON line in ``traces-*.jsonl`` under the local store directory
(``RAGTRAIL_LOCAL_STORE_DIR``, default ``./.ragtrail``; see docs/semconv.md §5), where ``ragtrail``
reads it. A count that comes after the final record (a span ending after shutdown) is written there
too, as a record of its own.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from opentelemetry.sdk.resources import Resource

from ragtrail import settings
from ragtrail.export.local_store import LocalStoreSpanExporter
from ragtrail.export.loss import LossLedger, LossWindow, loss_record
from ragtrail.export.sender import Sender

_logger = logging.getLogger(__name__)


class LossReporter:
    """Sends the ledger's windows as ``ragtrail.loss`` records (see the module docstring)."""

    def __init__(self, ledger: LossLedger, sender: Sender, interval: float, store_dir: str | os.PathLike[str] | None = None) -> None:
        self.ledger = ledger
        self.sender = sender
        self.interval = interval
        self.resource: Resource | None = None
        self.next_due = time.monotonic() + interval
        self._store_dir = store_dir
        self._store_lock = threading.Lock()
        self.local_records = 0  # final or late records written to the local store

    @property
    def store_directory(self) -> Path:
        """Where records that cannot reach the backend are written."""
        return Path(self._store_dir) if self._store_dir is not None else settings.local_store_directory()

    def report(self) -> None:
        """A periodic record (worker thread); a window whose record fails is folded into the next."""
        self.next_due = time.monotonic() + self.interval
        window = self.ledger.open_window()
        if window.empty:
            return
        end_ns = time.time_ns()
        if self.sender.export_once([loss_record(window, self.resource, end_ns)]):
            self.ledger.commit(window, end_ns)

    def final(self, backend_usable: bool) -> None:
        """Close the ledger and send its last window: to the backend if ``backend_usable`` and it
        takes it, else to the local store. Called once, after every trace was settled."""
        window = self.ledger.close(self._write_late)
        if window.empty:
            return
        record = loss_record(window, self.resource, time.time_ns())
        if backend_usable and self.sender.last_ok is not False and self.sender.fits_before_deadline() and self.sender.export_once([record]):
            return
        self._write_local(window)

    def _write_late(self, window: LossWindow) -> None:
        self._write_local(window)

    def _write_local(self, window: LossWindow) -> None:
        record = loss_record(window, self.resource, time.time_ns())
        with self._store_lock:
            store = LocalStoreSpanExporter(self.store_directory)
            try:
                ok = store.export([record]).name == "SUCCESS"
            finally:
                store.shutdown()
            if ok:
                self.local_records += 1
        if not ok:
            _logger.error("ragtrail: could not write the loss record to %s: %s", self.store_directory, window)


__all__ = ["LossReporter"]
