"""Capture configuration: what the recorder may put on the wire (SPEC §6).

Read from the environment once, on first use, and settable in code with :func:`set_capture`.
Privacy is decided here and nowhere else: in ``hash`` query mode the query text is written to no
attribute, event, span name or exception message; in ``off`` content mode only receipts, ids and
scores leave the process.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field, replace

from ragtrail import semconv

_log = logging.getLogger("ragtrail")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class CaptureConfig:
    """What the recorder captures. ``events_per_span`` caps ragtrail events on one span before they
    spill into continuation spans (``None``: derived from the SDK's own event limit)."""

    query: str = "text"
    content: str = "off"
    metadata: tuple[str, ...] = ()
    mirror_genai: bool = True
    mirror_openinference: bool = True
    events_per_span: int | None = None
    invalid: tuple[str, ...] = field(default=(), compare=False)


def _flag(name: str, default: bool, invalid: list[str]) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    invalid.append(f"{name}={raw!r}")
    return default


def _choice(name: str, allowed: tuple[str, ...], default: str, invalid: list[str]) -> str:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in allowed:
        return value
    invalid.append(f"{name}={raw!r}")
    # an unknown query mode must not leak text: fall back to the most private mode
    return "hash" if name == semconv.ENV_CAPTURE_QUERY else default


def from_environment() -> CaptureConfig:
    """Build the configuration from ``RAGTRAIL_CAPTURE_*`` and friends; bad values are logged once
    and replaced by a safe default (never raised into the app)."""
    invalid: list[str] = []
    query = _choice(semconv.ENV_CAPTURE_QUERY, semconv.CAPTURE_QUERY_MODES, "text", invalid)
    content = _choice(semconv.ENV_CAPTURE_CONTENT, semconv.CAPTURE_CONTENT_MODES, "off", invalid)
    metadata = tuple(k.strip() for k in os.environ.get(semconv.ENV_CAPTURE_METADATA, "").split(",") if k.strip())
    events_raw = os.environ.get(semconv.ENV_EVENTS_PER_SPAN, "").strip()
    events_per_span = None
    if events_raw:
        try:
            events_per_span = max(1, int(events_raw))
        except ValueError:
            invalid.append(f"{semconv.ENV_EVENTS_PER_SPAN}={events_raw!r}")
    config = CaptureConfig(
        query=query,
        content=content,
        metadata=metadata,
        mirror_genai=_flag(semconv.ENV_MIRROR_GENAI, True, invalid),
        mirror_openinference=_flag(semconv.ENV_MIRROR_OPENINFERENCE, True, invalid),
        events_per_span=events_per_span,
        invalid=tuple(invalid),
    )
    if invalid:
        _log.warning("ragtrail: ignoring invalid settings %s", ", ".join(invalid))
    return config


_lock = threading.Lock()
_current: CaptureConfig | None = None


def get() -> CaptureConfig:
    """The configuration in force (read from the environment on first use)."""
    global _current
    config = _current
    if config is None:
        with _lock:
            if _current is None:
                _current = from_environment()
            config = _current
    return config


def set_capture(
    *,
    query: str | None = None,
    content: str | None = None,
    metadata: "list[str] | tuple[str, ...] | None" = None,
    mirror_genai: bool | None = None,
    mirror_openinference: bool | None = None,
    events_per_span: int | None = None,
) -> CaptureConfig:
    """Change capture settings in code; unspecified settings keep their value. Raises ``ValueError``
    on an unknown mode: this is the app's own configuration call, not an instrumented path."""
    global _current
    if query is not None and query not in semconv.CAPTURE_QUERY_MODES:
        raise ValueError(f"query capture must be one of {semconv.CAPTURE_QUERY_MODES}, not {query!r}")
    if content is not None and content not in semconv.CAPTURE_CONTENT_MODES:
        raise ValueError(f"content capture must be one of {semconv.CAPTURE_CONTENT_MODES}, not {content!r}")
    changes: dict[str, object] = {}
    for key, value in (("query", query), ("content", content), ("mirror_genai", mirror_genai),
                       ("mirror_openinference", mirror_openinference), ("events_per_span", events_per_span)):
        if value is not None:
            changes[key] = value
    if metadata is not None:
        changes["metadata"] = tuple(metadata)
    with _lock:
        _current = replace(get_unlocked(), **changes)
        return _current


def get_unlocked() -> CaptureConfig:
    return _current if _current is not None else from_environment()


def reset() -> None:
    """Forget settings made in code and re-read the environment on next use (tests use this)."""
    global _current
    with _lock:
        _current = None
