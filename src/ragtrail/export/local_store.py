"""The embedded local store: OTLP JSON lines on disk, so tracing works with no server at all.

Format (the contract readers rely on; keep it exactly OTLP JSON)
-----------------------------------------------------------------
* Directory: ``RAGTRAIL_LOCAL_STORE_DIR`` or the ``directory`` argument, default ``./.ragtrail/``.
* Files: ``traces-<UTC timestamp YYYYmmddTHHMMSSffffffZ>-<pid>.jsonl``. One process writes one file at
  a time; the lexical order of names is the order they were started in. Read every
  ``traces-*.jsonl`` file in the directory (a file being written may end in a partial last line:
  skip a last line that does not parse).
* Lines: UTF-8, one JSON object per line, ``\\n``-terminated. Each object is one OTLP
  ``ExportTraceServiceRequest`` in OTLP JSON, exactly as the OpenTelemetry Collector's ``file``
  exporter writes it::

      {"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"app"}}]},
        "scopeSpans":[{"scope":{"name":"ragtrail"},"spans":[{"traceId":"5b8efff798038103d269b633813fc60c",
        "spanId":"eee19b7ec3c1b174","parentSpanId":"eee19b7ec3c1b173","name":"retrieve BM25Retriever",
        "kind":1,"startTimeUnixNano":"1544712660000000000","endTimeUnixNano":"1544712661000000000",
        "attributes":[{"key":"ragtrail.candidates.out","value":{"intValue":"5"}}],
        "events":[{"timeUnixNano":"…","name":"ragtrail.candidate","attributes":[…]}],
        "status":{},"traceState":"ot=th:e6666666666666","flags":256}]}]}]}

  Ids are lowercase hex (``traceId`` 32 digits, ``spanId``/``parentSpanId`` 16); field names are
  camelCase; enums are integers; 64-bit integers (``intValue``, ``*UnixNano``) are JSON strings;
  fields at their default value are omitted (so ``droppedAttributesCount`` appears only when > 0).
  Attribute values are ``{"stringValue"|"boolValue"|"intValue"|"doubleValue"|"arrayValue"|
  "kvlistValue"|"bytesValue": …}``.
* A line holds the spans of one export request: whole trace segments (see
  :mod:`ragtrail.export.whole_trace`), or part of one very large segment, or one ``ragtrail.loss``
  record. A trace may span several lines and files.
* ``ragtrail.export.otlp_json.parse_request(line)`` turns a line back into the protobuf request.

Rotation and size cap: a file is closed when the next line would take it over ``max_file_bytes``
(``RAGTRAIL_LOCAL_STORE_MAX_FILE_BYTES``, default 16 MiB); when all ``traces-*.jsonl`` files together
exceed ``max_total_bytes`` (``RAGTRAIL_LOCAL_STORE_MAX_TOTAL_BYTES``, default 256 MiB) when a new file
is opened, the oldest closed files are deleted, with a warning naming them.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ragtrail import settings
from ragtrail.contract import semconv
from ragtrail.export.otlp_json import spans_to_json_line

_logger = logging.getLogger(__name__)

FILE_GLOB = "traces-*.jsonl"


def default_directory() -> Path:
    """``RAGTRAIL_LOCAL_STORE_DIR`` or ``./.ragtrail``."""
    return settings.local_store_directory()


class LocalStoreSpanExporter(SpanExporter):
    """Append each export request as one OTLP JSON line to a rotating file under ``directory``."""

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        max_file_bytes: int | None = None,
        max_total_bytes: int | None = None,
    ) -> None:
        self.directory = Path(directory) if directory is not None else default_directory()
        self.max_file_bytes = settings.local_store_bytes(semconv.ENV_LOCAL_STORE_MAX_FILE_BYTES, max_file_bytes)
        self.max_total_bytes = settings.local_store_bytes(semconv.ENV_LOCAL_STORE_MAX_TOTAL_BYTES, max_total_bytes)
        self._lock = threading.Lock()
        self._file: IO[bytes] | None = None
        self._path: Path | None = None
        self._size = 0
        self._shutdown = False
        self._pid = os.getpid()

    @property
    def current_path(self) -> Path | None:
        """The file being written, if any."""
        return self._path

    def files(self) -> list[Path]:
        """Every store file in the directory, oldest first."""
        return sorted(self.directory.glob(FILE_GLOB))

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            return SpanExportResult.FAILURE
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            data = (spans_to_json_line(spans) + "\n").encode("utf-8", "backslashreplace")
        except Exception:
            _logger.exception("ragtrail: could not encode %d spans as OTLP JSON", len(spans))
            return SpanExportResult.FAILURE
        with self._lock:
            if self._pid != os.getpid():  # a forked child writes a file of its own
                self._file, self._path, self._size, self._pid = None, None, 0, os.getpid()
            try:
                if self._file is not None and self._size and self._size + len(data) > self.max_file_bytes:
                    self._close_locked()
                if self._file is None:
                    self._open_locked()
                assert self._file is not None
                self._file.write(data)
                self._file.flush()
                self._size += len(data)
            except OSError as exc:
                _logger.error("ragtrail: local store write to %s failed: %s", self._path, exc)
                self._close_locked()
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def _open_locked(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        path = self.directory / f"traces-{stamp}-{os.getpid()}.jsonl"
        suffix = 1
        while path.exists():  # two rotations within one microsecond
            path = self.directory / f"traces-{stamp}-{os.getpid()}-{suffix}.jsonl"
            suffix += 1
        self._file = open(path, "ab")  # noqa: SIM115 - held open across exports, closed on rotation and shutdown
        self._path = path
        self._size = 0
        self._enforce_cap_locked()

    def _close_locked(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
        self._file = None

    def _enforce_cap_locked(self) -> None:
        files = self.files()
        sizes = {}
        for path in files:
            try:
                sizes[path] = path.stat().st_size
            except OSError:
                continue
        total = sum(sizes.values())
        removed = []
        for path in files:
            if total <= self.max_total_bytes:
                break
            if path == self._path or path not in sizes:
                continue
            try:
                path.unlink()
            except OSError:
                continue
            total -= sizes[path]
            removed.append(path.name)
        if removed:
            _logger.warning(
                "ragtrail: local store over %d bytes; deleted the oldest files: %s",
                self.max_total_bytes,
                ", ".join(removed),
            )

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        with self._lock:
            if self._file is not None:
                try:
                    self._file.flush()
                    os.fsync(self._file.fileno())
                except OSError:
                    return False
        return True

    def shutdown(self) -> None:
        with self._lock:
            self._shutdown = True
            self._close_locked()


__all__ = ["LocalStoreSpanExporter", "default_directory", "FILE_GLOB"]
