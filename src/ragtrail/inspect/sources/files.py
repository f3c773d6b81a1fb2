"""A trace file (OTLP JSON lines, OTLP JSON, Jaeger or Tempo JSON) or a directory of them: the local store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InspectError, MalformedInput, TraceNotFound, TruncatedInput, UsageError
from ..gc_pause import gc_paused
from ..model import Span, Trace, normalize_trace_id
from ..otlp import id_forms
from ..otlp_fast import decode_line
from .base import DEFAULT_STORE, Progress, lookback_seconds
from .documents import group_traces, loads, spans_from_document


@dataclass
class _Line:
    path: Path
    number: int
    data: bytes
    complete: bool


class FileSource:
    """A trace file (OTLP JSON lines, OTLP JSON, Jaeger or Tempo JSON) or a directory of them (the local store)."""

    def __init__(self, path: str | Path, progress: Progress | None = None) -> None:
        self.path = Path(path)
        self.description = str(self.path)
        self.progress = progress
        if not path_exists(self.path):
            if self.path.name == DEFAULT_STORE or str(path) == DEFAULT_STORE:
                raise TraceNotFound(f"no local store at {self.path.resolve()}", "run `ragtrail demo` or your app first, or pass --source")
            raise TraceNotFound(f"no such file or directory: {self.path}", "check the path given to --source")

    def files(self) -> list[Path]:
        """Trace files, oldest first (so the last one holds the most recent traces)."""
        if self.path.is_file():
            return [self.path]
        found = [p for p in self.path.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json")]
        return sorted(found, key=lambda p: (p.stat().st_mtime, str(p)))

    def _total_bytes(self, files: list[Path]) -> int:
        return sum(p.stat().st_size for p in files)

    def _lines(self, files: list[Path]) -> Iterator[_Line]:
        total = self._total_bytes(files)
        done = reported = 0
        for path in files:
            with path.open("rb") as fh:
                for number, data in enumerate(fh, 1):
                    done += len(data)
                    if self.progress is not None and done - reported >= 1 << 20:
                        self.progress(done, total)
                        reported = done
                    if data.strip():
                        yield _Line(path, number, data, data.endswith(b"\n"))
        if self.progress is not None:
            self.progress(total, total)

    def is_single_document(self, path: Path) -> bool:
        """A pretty-printed JSON file is one document; OTLP JSON lines hold one document per line."""
        if path.suffix == ".jsonl":
            return False
        with path.open("rb") as fh:
            first = fh.readline()
        try:
            json.loads(first)
            return False
        except RecursionError:  # a whole JSON value on the first line: read as lines, where it is reported
            return False
        except ValueError:
            return True

    @gc_paused()
    def _read_documents(self, trace_id: str | None) -> tuple[list[Span], dict[str, Any], int, int]:
        """All spans (of ``trace_id`` when given), info, lines read, unreadable lines skipped."""
        files = self.files()
        if not files:
            raise TraceNotFound(f"no trace files (*.jsonl, *.json) under {self.path}", "run your app with ragtrail's local store or pass --source")
        spans: list[Span] = []
        info: dict[str, Any] = {}
        forms = tuple(f.encode() for f in id_forms(trace_id)) if trace_id else ()
        lines_read = skipped = 0
        single = self.path.is_file()
        for path in files:
            if path.stat().st_size == 0:
                continue
            if self.is_single_document(path):
                try:
                    doc = loads(path.read_bytes(), str(path))
                    got, got_info = spans_from_document(doc, str(path), trace_id)
                except InspectError:
                    if single:
                        raise
                    skipped += 1  # another JSON file in the directory: not a trace
                    continue
                spans.extend(got)
                info.update(got_info)
                lines_read += 1
                continue
            for line in self._lines([path]):
                if forms and not any(f in line.data for f in forms):
                    continue
                lines_read += 1
                fast = decode_line(line.data, trace_id)
                if fast is not None:  # a camelCase OTLP JSON line (the local store's): see otlp_fast
                    spans.extend(fast)
                    continue
                try:
                    doc = loads(line.data, f"{line.path}:{line.number}")
                    got, got_info = spans_from_document(doc, str(line.path), trace_id)
                except TruncatedInput:
                    if single and not line.complete:
                        raise TruncatedInput(
                            f"{line.path} ends in the middle of a record (line {line.number})",
                            "the file was cut: re-export it or use a complete copy",
                        ) from None
                    skipped += 1
                    continue
                except InspectError:
                    if single:
                        raise
                    skipped += 1
                    continue
                spans.extend(got)
                info.update(got_info)
        return spans, info, lines_read, skipped

    def get(self, trace_id: str) -> Trace:
        trace_id = normalize_trace_id(trace_id)
        spans, info, _, skipped = self._read_documents(trace_id)
        traces = group_traces(spans, self.description, info)
        if trace_id not in traces:
            extra = f" ({skipped} unreadable lines skipped)" if skipped else ""
            raise TraceNotFound(
                f"trace {trace_id} not found in {self.description}{extra}",
                "check the id (ragtrail verify --search lists recent traces) or the --source",
            )
        trace = traces[trace_id]
        if skipped:
            trace.notes.append(f"{skipped} unreadable lines in {self.description} were skipped")
        return trace

    def all_traces(self) -> list[Trace]:
        """Every trace in the source, most recent first."""
        spans, info, _, skipped = self._read_documents(None)
        traces = list(group_traces(spans, self.description, info).values())
        if not traces and skipped:
            raise MalformedInput(
                f"no readable trace in {self.description} ({skipped} unreadable lines)", "pass OTLP JSON lines, Jaeger or Tempo JSON"
            )
        traces.sort(key=lambda t: max((s.end_ns for s in t.spans), default=0), reverse=True)
        return traces

    def latest(self) -> str:
        """The trace that ended last in the newest trace file (files that hold no trace are passed over)."""
        files = self.files()
        if not files:
            raise TraceNotFound(f"no trace files under {self.path}", "run your app or `ragtrail demo` first")
        if self.path.is_file():
            spans, _, _, skipped = self._read_documents(None)
        else:
            spans, skipped = [], 0
            for path in reversed(files):
                try:
                    spans, _, _, bad = FileSource(path)._read_documents(None)
                except InspectError:
                    bad = 1
                skipped += bad
                if spans:
                    break
        if not spans:
            if skipped:
                raise MalformedInput(
                    f"no readable trace in {self.description} ({skipped} unreadable files or lines)", "pass OTLP JSON lines, Jaeger or Tempo JSON"
                )
            raise TraceNotFound(f"no traces in {self.description}", "run your app or `ragtrail demo` first")
        return max(spans, key=lambda s: s.end_ns).trace_id

    def search(self, limit: int, query: str | None = None, lookback: str | None = "") -> list[str]:
        """The most recent traces; ``lookback`` keeps those that ended within it. A local store has no
        query language: ``query`` is refused, never ignored (``ragtrail ls`` filters local stores)."""
        if query:
            raise UsageError(
                f"--query is a Jaeger or Tempo search; {self.description} is a local store",
                "use `ragtrail ls` filters (--status, --reason, --doc, --query-text, ...) instead",
            )
        traces = self.all_traces()
        seconds = lookback_seconds(lookback or "")
        if seconds:
            import time

            since = (time.time() - seconds) * 1e9
            traces = [t for t in traces if max((s.end_ns for s in t.spans), default=0) >= since]
        return [t.trace_id for t in traces[:limit]]


def path_exists(path: Path) -> bool:
    """``path.exists()``, False for a name the OS refuses (too long, a NUL byte) rather than an OSError."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False
