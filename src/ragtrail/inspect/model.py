"""The normalized span model every reader produces and everything downstream consumes.

Jaeger, Tempo, the OpenTelemetry Collector's file exporter and ragtrail's local store each spell a
trace differently (hex or base64 ids, tags or attributes, logs or events, microseconds or
nanoseconds). Readers translate once into these plain dataclasses; the manifest, verify, diff and
report code never sees a wire format. What a source cannot carry is recorded explicitly (``None``
dropped counts, ``partial``) so that "not known" is never read as "zero".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Event:
    """A span event: ``attributes`` already decoded to Python values. (Slots: a big trace holds 100,000.)"""

    name: str
    time_ns: int
    attributes: dict[str, Any]
    dropped_attributes: int | None = 0


@dataclass(slots=True)
class Span:
    """One span. ``dropped_*`` is ``None`` when the source does not carry the count (Jaeger v1)."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    dropped_attributes: int | None = 0
    dropped_events: int | None = 0
    dropped_links: int | None = 0
    trace_state: str | None = None
    resource: dict[str, Any] = field(default_factory=dict)
    scope_name: str | None = None
    status_code: str | None = None
    # the instrumentation scope's attributes (shared by the scope's spans): a tail sampler's
    # ``tailsampling.policy`` travels there
    scope_attributes: dict[str, Any] = field(default_factory=dict)
    status_message: str | None = None


@dataclass
class Trace:
    """All spans of one trace as one source returned them, plus what the source said about them."""

    trace_id: str
    spans: list[Span]
    source: str
    partial: bool = False
    partial_message: str | None = None
    keeps_dropped_counts: bool = True
    notes: list[str] = field(default_factory=list)


def normalize_trace_id(value: str) -> str:
    """Lowercase hex, left-padded to 32 digits (Jaeger v1 drops leading zeros)."""
    text = value.strip().lower()
    if text.startswith("0x"):
        text = text[2:]
    return text.rjust(32, "0")


def is_trace_id(value: str) -> bool:
    """True for 1-32 hex digits that are not all zero (what an id on the command line looks like)."""
    text = value.strip().lower()
    return 0 < len(text) <= 32 and all(c in "0123456789abcdef" for c in text) and set(text) != {"0"}
