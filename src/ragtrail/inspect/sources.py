"""Where traces come from: files and the local store, Jaeger (v3 then v1 API) and Grafana Tempo.

A source is named by one string (``--source`` or ``RAGTRAIL_SOURCE``): a file or directory path,
``jaeger+http://127.0.0.1:16686`` or ``tempo+http://127.0.0.1:3200`` (``+https`` works too). Each
source returns :class:`~ragtrail.inspect.model.Trace` objects and can list recent ragtrail traces
for ``verify --search``. Every failure is an :class:`~ragtrail.inspect.errors.InspectError` with a
one-line message and a hint: the CLI never shows a traceback for bad input or a dead server.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, Protocol, overload

from ragtrail.contract import semconv as sc

from ._gc import gc_paused
from .errors import (HttpStatusError, InspectError, MalformedInput, SourceUnreachable, TraceNotFound,
                     TruncatedInput, UsageError)
from .jaeger import decode_jaeger_trace
from .model import Span, Trace, is_trace_id, normalize_trace_id
from .otlp import DECODE_ERRORS, decode_document, id_forms, uint64
from .otlp_fast import decode_line

if TYPE_CHECKING:  # httpx is imported only when a server is read: it costs ~60 ms of every CLI start
    import httpx

ENV_SOURCE = "RAGTRAIL_SOURCE"
DEFAULT_STORE = ".ragtrail"
DEFAULT_TIMEOUT = 10.0

Progress = Callable[[int, int], None]
"""``progress(done, total)``: called while reading large inputs (bytes) or many traces (count)."""


class Source(Protocol):
    description: str

    def get(self, trace_id: str) -> Trace: ...

    def latest(self) -> str: ...

    def search(self, limit: int, query: str | None, lookback: str | None) -> list[str]: ...


# --- parsing documents -----------------------------------------------------------------------------
def _looks_truncated(text: str, exc: Exception) -> bool:
    """A JSON document that failed in its last token (or in a string never closed) was cut short."""
    stripped = text.rstrip()
    if not stripped or stripped.lstrip()[:1] not in ("{", "["):
        return False
    if isinstance(exc, json.JSONDecodeError):
        if exc.msg.startswith("Unterminated string"):
            return True
        if exc.msg.startswith("Extra data"):
            return False
        rest = stripped[exc.pos:]
        return len(rest) < 16 and "\n" not in rest and not any(c in rest for c in "{}[]")
    return False


try:  # several times faster on large traces; the standard library is the fallback
    import msgspec.json as _fast_json
except ImportError:  # pragma: no cover - msgspec is a runtime dependency
    _fast_json = None  # type: ignore[assignment]  # mypy's idiom for an optional module


def _too_deep(where: str) -> MalformedInput:
    return MalformedInput(f"{where} nests JSON too deeply to be a trace (hundreds of levels)",
                          "pass OTLP JSON (lines), Jaeger or Tempo JSON")


def loads(text: str | bytes, where: str) -> Any:
    """Parse JSON; a failure says malformed, truncated or nested too deeply, and where it happened.

    Both parsers refuse nesting past the interpreter's recursion limit with a ``RecursionError``
    (msgspec after ~1,000 levels, at once even for 100 MB of brackets): that is malformed input here."""
    if _fast_json is not None:
        try:
            return _fast_json.decode(text)
        except RecursionError:
            raise _too_deep(where) from None
        except Exception:  # msgspec.DecodeError and friends
            pass  # re-parse with the standard library for a precise diagnosis
    try:
        return json.loads(text)
    except RecursionError:
        raise _too_deep(where) from None
    except (ValueError, UnicodeDecodeError) as exc:
        as_text = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        if _looks_truncated(as_text, exc):
            raise TruncatedInput(f"{where} ends in the middle of a JSON record",
                                 "the file was cut (disk full, or copied while being written): "
                                 "re-export it or point --source at a complete copy") from None
        raise MalformedInput(f"{where} is not valid JSON ({str(exc).split(':')[0]})",
                             "pass OTLP JSON (lines), Jaeger or Tempo JSON") from None


def spans_from_document(doc: Any, source: str, trace_id: str | None = None) -> tuple[list[Span], dict[str, Any]]:
    """Spans of any supported JSON shape, plus what the shape said about completeness.

    Shapes: OTLP JSON (``resourceSpans``/``batches``), Jaeger v3 ``{"result": ...}``, Tempo v2
    ``{"trace": ..., "status": ...}``, Jaeger v1 ``{"data": [...]}``."""
    if not isinstance(doc, dict):
        raise MalformedInput(f"{source} is JSON but not a trace document", "pass OTLP JSON, Jaeger or Tempo JSON")
    info: dict[str, Any] = {}
    if "result" in doc and isinstance(doc["result"], dict):
        doc = doc["result"]
    if "trace" in doc and isinstance(doc["trace"], dict):
        status = doc.get("status")
        if status is not None and str(status).upper() != "COMPLETE":
            info["partial"] = True
            info["partial_message"] = f"Tempo returned status {status}: {doc.get('message') or 'no message'}"
        doc = doc["trace"]
        if not doc:  # Tempo returns an empty trace object when nothing matched
            return [], info
    if "data" in doc and isinstance(doc["data"], list):
        info["jaeger_v1"] = True
        spans: list[Span] = []
        notes: list[str] = []
        for item in doc["data"]:
            t = decode_jaeger_trace(item, source)
            notes = t.notes
            spans.extend(s for s in t.spans if trace_id is None or s.trace_id == trace_id)
        info["notes"] = notes
        return spans, info
    if "error" in doc and "resourceSpans" not in doc:
        raise MalformedInput(f"{source} holds an error, not a trace: {str(doc['error'])[:200]}",
                             "check the trace id and the source")
    return list(decode_document(doc, trace_id)), info


def group_traces(spans: list[Span], source: str, info: dict[str, Any] | None = None) -> dict[str, Trace]:
    """Spans grouped by trace id, duplicates (same span id twice) dropped with a note."""
    info = info or {}
    traces: dict[str, Trace] = {}
    seen: set[tuple[str, str]] = set()
    for span in spans:
        trace = traces.get(span.trace_id)
        if trace is None:
            trace = traces[span.trace_id] = Trace(
                trace_id=span.trace_id, spans=[], source=source,
                partial=bool(info.get("partial")), partial_message=info.get("partial_message"),
                keeps_dropped_counts=not info.get("jaeger_v1"), notes=list(info.get("notes", ())))
        key = (span.trace_id, span.span_id)
        if key in seen:
            if not any(n.startswith("duplicate spans") for n in trace.notes):
                trace.notes.append("duplicate spans in the source (same span id twice): kept the first")
            continue
        seen.add(key)
        trace.spans.append(span)
    return traces


# --- files and the local store ---------------------------------------------------------------------
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
        if not _exists(self.path):
            if self.path.name == DEFAULT_STORE or str(path) == DEFAULT_STORE:
                raise TraceNotFound(f"no local store at {self.path.resolve()}",
                                    "run `ragtrail demo` or your app first, or pass --source")
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

    def _is_single_document(self, path: Path) -> bool:
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
            raise TraceNotFound(f"no trace files (*.jsonl, *.json) under {self.path}",
                                "run your app with ragtrail's local store or pass --source")
        spans: list[Span] = []
        info: dict[str, Any] = {}
        forms = tuple(f.encode() for f in id_forms(trace_id)) if trace_id else ()
        lines_read = skipped = 0
        single = self.path.is_file()
        for path in files:
            if path.stat().st_size == 0:
                continue
            if self._is_single_document(path):
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
                        raise TruncatedInput(f"{line.path} ends in the middle of a record (line {line.number})",
                                             "the file was cut: re-export it or use a complete copy") from None
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
            raise TraceNotFound(f"trace {trace_id} not found in {self.description}{extra}",
                                "check the id (ragtrail verify --search lists recent traces) or the --source")
        trace = traces[trace_id]
        if skipped:
            trace.notes.append(f"{skipped} unreadable lines in {self.description} were skipped")
        return trace

    def all_traces(self) -> list[Trace]:
        """Every trace in the source, most recent first."""
        spans, info, _, skipped = self._read_documents(None)
        traces = list(group_traces(spans, self.description, info).values())
        if not traces and skipped:
            raise MalformedInput(f"no readable trace in {self.description} ({skipped} unreadable lines)",
                                 "pass OTLP JSON lines, Jaeger or Tempo JSON")
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
                raise MalformedInput(f"no readable trace in {self.description} ({skipped} unreadable files or lines)",
                                     "pass OTLP JSON lines, Jaeger or Tempo JSON")
            raise TraceNotFound(f"no traces in {self.description}", "run your app or `ragtrail demo` first")
        return max(spans, key=lambda s: s.end_ns).trace_id

    def search(self, limit: int, query: str | None = None, lookback: str | None = "") -> list[str]:
        """The most recent traces; ``lookback`` keeps those that ended within it. A local store has no
        query language: ``query`` is refused, never ignored (``ragtrail ls`` filters local stores)."""
        if query:
            raise UsageError(f"--query is a Jaeger or Tempo search; {self.description} is a local store",
                             "use `ragtrail ls` filters (--status, --reason, --doc, --query-text, ...) instead")
        traces = self.all_traces()
        seconds = _lookback_seconds(lookback or "")
        if seconds:
            import time

            since = (time.time() - seconds) * 1e9
            traces = [t for t in traces if max((s.end_ns for s in t.spans), default=0) >= since]
        return [t.trace_id for t in traces[:limit]]


# --- HTTP backends ---------------------------------------------------------------------------------
class _HttpSource:
    name = "server"

    def __init__(self, base_url: str, timeout: float = DEFAULT_TIMEOUT,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.description = f"{self.name} at {self.base_url}"
        import httpx

        self.client = httpx.Client(base_url=self.base_url, timeout=timeout, transport=transport)

    @overload
    def _get(self, path: str, params: dict[str, Any] | None = None, allow_404: Literal[False] = False) -> httpx.Response: ...

    @overload
    def _get(self, path: str, params: dict[str, Any] | None = None, *, allow_404: bool) -> httpx.Response | None: ...

    def _get(self, path: str, params: dict[str, Any] | None = None, allow_404: bool = False) -> httpx.Response | None:
        """The response; ``None`` only for a 404 when ``allow_404``. Other failures raise."""
        import httpx

        try:
            response = self.client.get(path, params=params)
        except httpx.TimeoutException:
            raise SourceUnreachable(f"{self.description} timed out on {path}",
                                    "check the server is up and not overloaded, or raise --timeout") from None
        except httpx.TransportError as exc:
            raise SourceUnreachable(f"cannot reach {self.description} ({type(exc).__name__})",
                                    "start the server or fix --source / RAGTRAIL_SOURCE") from None
        if response.status_code == 404 and allow_404:
            return None
        if response.status_code >= 400:
            body = " ".join(response.text.split())[:160]
            raise HttpStatusError(f"{self.description} answered HTTP {response.status_code} on {path}: {body}",
                                  "check the URL in --source and the server's logs")
        return response

    @gc_paused()
    def _json(self, response: httpx.Response, where: str) -> Any:
        text = response.text
        try:
            return json.loads(text)
        except RecursionError:
            raise _too_deep(where) from None
        except ValueError:
            # streamed gRPC-gateway answers are several JSON objects, one per line
            docs = [loads(line, where) for line in text.splitlines() if line.strip()]
            if not docs:
                raise MalformedInput(f"{where} returned an empty body", "check the server version") from None
            return docs

    @gc_paused()
    def _trace_from(self, body: Any, trace_id: str, where: str) -> Trace | None:
        docs = body if isinstance(body, list) else [body]
        spans: list[Span] = []
        info: dict[str, Any] = {}
        for doc in docs:
            got, got_info = spans_from_document(doc, where, trace_id)
            spans.extend(got)
            info.update(got_info)
        traces = group_traces(spans, self.description, info)
        return traces.get(trace_id)

    def close(self) -> None:
        self.client.close()


class JaegerSource(_HttpSource):
    """Jaeger: ``/api/v3/traces/{id}`` (OTLP JSON, dropped counts kept), falling back to v1 ``/api/traces/{id}``."""

    name = "Jaeger"

    def get(self, trace_id: str) -> Trace:
        trace_id = normalize_trace_id(trace_id)
        response = self._get(f"/api/v3/traces/{trace_id}", allow_404=True)
        if response is not None:
            trace = self._trace_from(self._json(response, self.description), trace_id, self.description)
            if trace is not None:
                return trace
        response = self._get(f"/api/traces/{trace_id}", allow_404=True)
        if response is not None:
            trace = self._trace_from(self._json(response, self.description), trace_id, self.description)
            if trace is not None:
                return trace
        raise TraceNotFound(f"trace {trace_id} not found in {self.description}",
                            "check the id, or that the trace has reached Jaeger (export delay, retention)")

    def latest(self) -> str:
        found = self.search(1, None, "24h")
        if not found:
            raise TraceNotFound(f"no ragtrail traces in the last 24h in {self.description}",
                                "run your app with OTLP export to this Jaeger")
        return found[0]

    def search(self, limit: int, query: str | None = None, lookback: str | None = "1h") -> list[str]:
        """Recent traces carrying ragtrail spans (tag ``ragtrail.schema``, or ``key=value`` from ``query``)."""
        # Jaeger matches tags exactly: with no query, one search per schema version this reader knows
        searches = [{sc.SCHEMA: str(v)} for v in reversed(sc.SCHEMA_VERSIONS)]
        tags = searches[0]
        if query and query.lstrip().startswith("{"):  # several tags, AND-ed, as Jaeger's API takes them
            try:
                tags = {str(k): str(v) for k, v in json.loads(query).items()}
            except (ValueError, AttributeError):
                raise UsageError(f"Jaeger tags must be a JSON object, got {query!r}",
                                 'e.g. --query \'{"ragtrail.stage.status": "degraded"}\'') from None
        elif query:
            key, _, value = query.partition("=")
            if not value:
                raise UsageError(f"Jaeger search wants key=value, got {query!r}",
                                 "e.g. --query ragtrail.stage.status=degraded")
            tags = {key.strip(): value.strip()}
        if query:
            searches = [tags]
        services_body = self._json(self._get("/api/services"), self.description)
        services = [s for s in (services_body.get("data") or []) if isinstance(s, str) and s != "jaeger-all-in-one"] \
            if isinstance(services_body, dict) else []
        found: dict[str, int] = {}
        for service, tags in ((svc, t) for svc in services for t in searches):
            response = self._get("/api/traces", params={"service": service, "tags": json.dumps(tags),
                                                        "limit": limit, "lookback": lookback or "1h"})
            body = self._json(response, self.description)
            try:
                for item in (body.get("data") or []) if isinstance(body, dict) else []:
                    start = max((uint64(s.get("startTime", 0)) for s in item.get("spans") or ()), default=0)
                    tid = normalize_trace_id(item.get("traceID", ""))
                    found[tid] = max(found.get(tid, 0), start)
            except DECODE_ERRORS as exc:
                raise MalformedInput(f"{self.description} answered a search with something else than Jaeger JSON "
                                     f"({type(exc).__name__})", "check the server version") from None
        return sorted(found, key=found.get, reverse=True)[:limit]  # type: ignore[arg-type]


class TempoSource(_HttpSource):
    """Grafana Tempo: ``/api/v2/traces/{id}`` (PARTIAL status kept), falling back to ``/api/traces/{id}``."""

    name = "Tempo"

    def get(self, trace_id: str) -> Trace:
        trace_id = normalize_trace_id(trace_id)
        for path in (f"/api/v2/traces/{trace_id}", f"/api/traces/{trace_id}"):
            response = self._get(path, allow_404=True)
            if response is None:
                continue
            trace = self._trace_from(self._json(response, self.description), trace_id, self.description)
            if trace is not None:
                return trace
        raise TraceNotFound(f"trace {trace_id} not found in {self.description}",
                            "check the id, or wait for Tempo to flush (it can take a few seconds)")

    def latest(self) -> str:
        found = self.search(1, None, "24h")
        if not found:
            raise TraceNotFound(f"no ragtrail traces found in {self.description}",
                                "run your app with OTLP export to this Tempo")
        return found[0]

    def search(self, limit: int, query: str | None = None, lookback: str | None = "1h") -> list[str]:
        """TraceQL search (default: every trace with ragtrail spans), most recent first."""
        q = query or f"{{ span.{sc.SCHEMA} >= 1 }}"  # schema 1 and 2 traces alike
        params: dict[str, Any] = {"q": q, "limit": limit}
        seconds = _lookback_seconds(lookback or "1h")
        if seconds:
            import time

            now = int(time.time())
            params.update(start=now - seconds, end=now)
        body = self._json(self._get("/api/search", params=params), self.description)
        try:
            items = body.get("traces") or [] if isinstance(body, dict) else []
            items = sorted(items, key=lambda t: uint64(t.get("startTimeUnixNano", 0) or 0), reverse=True)
            return [normalize_trace_id(t["traceID"]) for t in items if t.get("traceID")][:limit]
        except DECODE_ERRORS as exc:
            raise MalformedInput(f"{self.description} answered a search with something else than Tempo JSON "
                                 f"({type(exc).__name__})", "check the server version") from None


def _lookback_seconds(text: str | None) -> int:
    if not text:
        return 0
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)
    except ValueError:
        raise UsageError(f"bad lookback {text!r}", "use e.g. 30m, 1h, 2d") from None


def open_source(spec: str | None, *, timeout: float = DEFAULT_TIMEOUT, progress: Progress | None = None,
                transport: httpx.BaseTransport | None = None) -> Source:
    """A source from its name; ``None`` means ``$RAGTRAIL_SOURCE`` or the local store ``./.ragtrail``."""
    spec = spec or os.environ.get(ENV_SOURCE) or DEFAULT_STORE
    from .phoenix import PhoenixSource  # its own module (it builds on _HttpSource)

    for prefix, cls in (("jaeger+", JaegerSource), ("tempo+", TempoSource), ("phoenix+", PhoenixSource)):
        if spec.startswith(prefix):
            url = spec[len(prefix):]
            if not url.startswith(("http://", "https://")):
                raise UsageError(f"bad source {spec!r}", f"use {prefix}http://HOST:PORT")
            return cls(url, timeout=timeout, transport=transport)
    if spec.startswith(("http://", "https://")):
        raise UsageError(f"source {spec!r} does not say which backend it is",
                         f"use jaeger+{spec} or tempo+{spec}")
    return FileSource(spec, progress=progress)


def _exists(path: Path) -> bool:
    """``path.exists()``, False for a name the OS refuses (too long, a NUL byte) rather than an OSError."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


MAX_PATH_ARGUMENT = 4096  # PATH_MAX on Linux: a longer TRACE is neither an id nor a file


def resolve(ref: str, source_spec: str | None, *, timeout: float = DEFAULT_TIMEOUT,
            progress: Progress | None = None, transport: httpx.BaseTransport | None = None) -> Trace:
    """A trace from what the user typed: a trace id, ``last``, or a path to a file holding one trace."""
    if not ref.strip():
        # Path("") is the current folder: reading every *.json under it is never what was meant
        raise UsageError("the TRACE argument is empty", "pass a 32-digit hex trace id, `last`, or a path")
    if len(ref) > MAX_PATH_ARGUMENT:
        raise UsageError(f"the TRACE argument is {len(ref)} characters long: neither a trace id nor a path",
                         "pass a 32-digit hex trace id, `last`, or a path")
    path = Path(ref)
    if not is_trace_id(ref) and ref != "last" and (_exists(path) or "/" in ref or ref.endswith((".json", ".jsonl"))):
        traces = FileSource(path, progress=progress).all_traces()
        if not traces:
            raise TraceNotFound(f"no traces in {path}", "pass a file that holds OTLP JSON, Jaeger or Tempo JSON")
        with_ragtrail = [t for t in traces if any(sc.STAGE_KIND in s.attributes for s in t.spans)]
        if len(with_ragtrail) > 1:
            raise UsageError(f"{path} holds {len(with_ragtrail)} ragtrail traces",
                             f"pick one: ragtrail show TRACE_ID --source {path} (or `last`)")
        return (with_ragtrail or traces)[0]
    source = open_source(source_spec, timeout=timeout, progress=progress, transport=transport)
    try:
        if ref == "last":
            ref = source.latest()
        if not is_trace_id(ref):
            raise UsageError(f"{ref[:80]!r}{'…' if len(ref) > 80 else ''} is neither a trace id (hex), `last`, "
                             "nor an existing file",
                             "pass a 32-digit hex trace id, `last`, or a path")
        return source.get(ref)
    finally:
        close = getattr(source, "close", None)
        if close:
            close()
