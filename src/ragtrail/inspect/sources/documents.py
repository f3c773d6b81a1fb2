"""Trace documents of every supported JSON shape, parsed into spans and grouped into traces.

Shared by the file source and the HTTP sources: OTLP JSON (``resourceSpans``/``batches``), Jaeger v3
``{"result": ...}``, Tempo v2 ``{"trace": ..., "status": ...}`` and Jaeger v1 ``{"data": [...]}``.
Every failure is a one-line :class:`~ragtrail.inspect.errors.InspectError`.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import MalformedInput, TruncatedInput
from ..jaeger import decode_jaeger_trace
from ..model import Span, Trace
from ..otlp import decode_document


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
        rest = stripped[exc.pos :]
        return len(rest) < 16 and "\n" not in rest and not any(c in rest for c in "{}[]")
    return False


try:  # several times faster on large traces; the standard library is the fallback
    import msgspec.json as _fast_json
except ImportError:  # pragma: no cover - msgspec is a runtime dependency
    _fast_json = None  # type: ignore[assignment]  # mypy's idiom for an optional module


def too_deep(where: str) -> MalformedInput:
    """The error for JSON nested past the parser's recursion limit: malformed input, not a bug."""
    return MalformedInput(f"{where} nests JSON too deeply to be a trace (hundreds of levels)", "pass OTLP JSON (lines), Jaeger or Tempo JSON")


def loads(text: str | bytes, where: str) -> Any:
    """Parse JSON; a failure says malformed, truncated or nested too deeply, and where it happened.

    Both parsers refuse nesting past the interpreter's recursion limit with a ``RecursionError``
    (msgspec after ~1,000 levels, at once even for 100 MB of brackets): that is malformed input here."""
    if _fast_json is not None:
        try:
            return _fast_json.decode(text)
        except RecursionError:
            raise too_deep(where) from None
        except Exception:  # msgspec.DecodeError and friends
            pass  # re-parse with the standard library for a precise diagnosis
    try:
        return json.loads(text)
    except RecursionError:
        raise too_deep(where) from None
    except (ValueError, UnicodeDecodeError) as exc:
        as_text = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        if _looks_truncated(as_text, exc):
            raise TruncatedInput(
                f"{where} ends in the middle of a JSON record",
                "the file was cut (disk full, or copied while being written): re-export it or point --source at a complete copy",
            ) from None
        raise MalformedInput(f"{where} is not valid JSON ({str(exc).split(':')[0]})", "pass OTLP JSON (lines), Jaeger or Tempo JSON") from None


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
        raise MalformedInput(f"{source} holds an error, not a trace: {str(doc['error'])[:200]}", "check the trace id and the source")
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
                trace_id=span.trace_id,
                spans=[],
                source=source,
                partial=bool(info.get("partial")),
                partial_message=info.get("partial_message"),
                keeps_dropped_counts=not info.get("jaeger_v1"),
                notes=list(info.get("notes", ())),
            )
        key = (span.trace_id, span.span_id)
        if key in seen:
            if not any(n.startswith("duplicate spans") for n in trace.notes):
                trace.notes.append("duplicate spans in the source (same span id twice): kept the first")
            continue
        seen.add(key)
        trace.spans.append(span)
    return traces
