"""Read many traces one at a time, in bounded memory: ``ls``, ``stats`` and ``compare`` over 100,000 traces.

:class:`~ragtrail.inspect.sources.FileSource` reads a whole store into memory to answer for one trace.
Here the store is read line by line: the local store writes whole trace segments per line
(``WholeTraceSpanProcessor``), so a trace is complete once no line mentions it for a while. Spans
wait in a window of the last ``window`` lines; a trace that has left the window is handed on and
forgotten. A trace seen again after it left the window (a segment exported much later) is not
silently merged or dropped: it is handed on as a second part with a note, and counted in
:attr:`TraceStream.split_traces`.

Servers (Jaeger, Tempo, Phoenix, ClickHouse) are read as their whole search answers (paged through, up to
``limit``; :mod:`ragtrail.inspect.sources.paging`), one trace fetched at a time (ClickHouse: in batches); a search the server
cut is said in :attr:`TraceStream.incomplete`, never passed off as the whole range.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InspectError, TruncatedInput
from .gc_pause import gc_paused
from .model import Span, Trace
from .otlp_fast import decode_line
from .sources import FileSource, HttpSource, Progress, group_traces, loads, open_source, spans_from_document

DEFAULT_WINDOW = 64
"""Lines a trace's spans may be spread over (the whole-trace exporter writes a segment in one line)."""


@dataclass
class TraceStream:
    """Traces of one source, one at a time; what could not be read is counted, never hidden."""

    spec: str | None
    server_query: str | None = None
    lookback: str = "1h"
    limit: int | None = None
    timeout: float = 10.0
    window: int = DEFAULT_WINDOW
    progress: Progress | None = None
    skipped_lines: int = 0
    split_traces: int = 0
    description: str = ""
    read_from_server: int | None = None
    incomplete: str | None = None
    _emitted: set[str] = field(default_factory=set, repr=False)

    def __iter__(self) -> Iterator[Trace]:
        source = open_source(self.spec, timeout=self.timeout)
        self.description = source.description
        try:
            if isinstance(source, FileSource):
                yield from self._files(source)
            elif isinstance(source, HttpSource):
                found = source.search_all(self.limit, self.server_query, self.lookback)
                ids = found.trace_ids
                self.read_from_server = len(ids)
                self.incomplete = found.note(self.description)
                for i, trace in enumerate(source.traces(ids)):
                    yield trace
                    if self.progress is not None:
                        self.progress(i + 1, len(ids))
        finally:
            close = getattr(source, "close", None)
            if close:
                close()

    def _decode(self, data: bytes, where: str, last_line_of_file: bool) -> list[Span]:
        fast = decode_line(data)
        if fast is not None:
            return fast
        try:
            spans, _ = spans_from_document(loads(data, where), where)
            return spans
        except TruncatedInput:
            self.skipped_lines += 1  # a line being written (the store's last one) or a cut file
            return []
        except InspectError:
            self.skipped_lines += 1
            return []

    def _files(self, source: FileSource) -> Iterator[Trace]:
        files = source.files()
        total = sum(p.stat().st_size for p in files) or 1
        done = reported = 0
        pending: dict[str, tuple[int, list[Span]]] = {}  # trace id -> (last line seen, spans), insertion ordered
        line_no = 0
        with gc_paused():
            for path in files:
                if path.stat().st_size == 0:
                    continue
                if source.is_single_document(path):  # a pretty-printed export: one document
                    yield from self._whole_file(path)
                    continue
                with path.open("rb") as fh:
                    for number, data in enumerate(fh, 1):
                        done += len(data)
                        if not data.strip():
                            continue
                        line_no += 1
                        for span in self._decode(data, f"{path}:{number}", not data.endswith(b"\n")):
                            entry = pending.get(span.trace_id)
                            if entry is None:
                                pending[span.trace_id] = (line_no, [span])
                            else:
                                if entry[0] != line_no:
                                    pending[span.trace_id] = (line_no, entry[1])
                                entry[1].append(span)
                        yield from self._flush(pending, line_no - self.window)
                        if self.progress is not None and done - reported >= 1 << 20:
                            self.progress(done, total)
                            reported = done
            yield from self._flush(pending, None)
        if self.progress is not None:
            self.progress(total, total)

    def _whole_file(self, path: Path) -> Iterator[Trace]:
        try:
            spans, info = spans_from_document(loads(path.read_bytes(), str(path)), str(path))
        except InspectError:
            self.skipped_lines += 1
            return
        for trace in group_traces(spans, str(path), info).values():
            yield self._mark(trace)

    def _flush(self, pending: dict[str, tuple[int, list[Span]]], before: int | None) -> Iterator[Trace]:
        """Hand on the traces last seen at or before line ``before`` (all of them when ``None``), in first-seen order."""
        done = list(pending) if before is None else [t for t, (seen, _) in pending.items() if seen <= before]
        for trace_id in done:
            _, spans = pending.pop(trace_id)
            yield self._mark(group_traces(spans, self.description)[trace_id])

    def _mark(self, trace: Trace) -> Trace:
        if trace.trace_id in self._emitted:
            self.split_traces += 1
            trace.notes.append("a later part of a trace already read (its spans were exported far apart): read as a separate part")
        else:
            self._emitted.add(trace.trace_id)
        return trace

    def notes(self) -> list[str]:
        """What the reader could not read, in words (empty when everything was read)."""
        out = []
        if self.incomplete:
            out.append(self.incomplete)
        if self.skipped_lines:
            out.append(f"{self.skipped_lines} unreadable lines skipped in {self.description}")
        if self.split_traces:
            out.append(f"{self.split_traces} traces arrived in parts far apart and were read as separate parts")
        return out


def each(stream: TraceStream, fn: Callable[[Trace], Any]) -> Iterator[Any]:
    """``fn(trace)`` for every trace; a trace with no ragtrail span is passed over (``None`` results dropped)."""
    from .errors import NoRagtrailSpans

    for trace in stream:
        try:
            out = fn(trace)
        except NoRagtrailSpans:
            continue
        if out is not None:
            yield out
