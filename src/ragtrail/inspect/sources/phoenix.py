"""Arize Phoenix as a trace source: ``phoenix+http://HOST:6006`` (every project) or
``phoenix+http://HOST:6006/projects/NAME`` (one project).

Phoenix's REST API (``GET /v1/projects``, ``GET /v1/projects/{project}/spans?trace_id=...``, cursor
pages) returns each span with its attributes and events as JSON values. What Phoenix does not keep
is said rather than guessed: it stores no dropped attribute/event counts (so SDK evictions cannot be
seen from it: ``keeps_dropped_counts=False`` and a note in the verdict), no resource and no trace
state, and its timestamps are microseconds.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from ragtrail.contract import semconv as sc

from ..errors import MalformedInput, TraceNotFound, UsageError
from ..model import Event, Span, Trace, normalize_trace_id
from .base import lookback_seconds
from .http import HttpSource
from .paging import SearchResult

PAGE = 1000  # Phoenix's largest page
NOTE_NO_DROPPED_COUNTS = (
    "Phoenix keeps no dropped attribute or event counts: SDK evictions cannot be seen "
    "from this source (read the same trace from the local store, Jaeger v3 or Tempo to check them)"
)


def split_project(url: str) -> tuple[str, str | None]:
    """``http://h:6006/projects/NAME`` -> (``http://h:6006``, ``NAME``); no project -> ``None``."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    project = None
    if path.endswith("/projects"):
        raise UsageError(f"bad Phoenix source {url!r}: no project name", "use phoenix+http://HOST:PORT[/projects/NAME]")
    if "/projects/" in path:
        path, _, project = path.partition("/projects/")
        if not project or "/" in project:
            raise UsageError(f"bad Phoenix source {url!r}", "use phoenix+http://HOST:PORT[/projects/NAME]")
    return urlunsplit((parts.scheme, parts.netloc, path, "", "")), project


def _time_ns(value: Any, where: str) -> int:
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise MalformedInput(f"{where}: bad timestamp {str(value)[:40]!r}", "check the Phoenix version") from None
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def decode_span(raw: dict[str, Any], where: str) -> Span:
    """One span of Phoenix's REST answer as the inspector's model."""
    try:
        context = raw["context"]
        events = [
            Event(
                name=str(e.get("name", "")),
                time_ns=_time_ns(e.get("timestamp"), where),
                attributes=dict(e.get("attributes") or {}),
                dropped_attributes=None,
            )
            for e in raw.get("events") or ()
        ]
        parent = raw.get("parent_id") or None
        return Span(
            trace_id=normalize_trace_id(str(context["trace_id"])),
            span_id=str(context["span_id"]).lower().rjust(16, "0"),
            parent_span_id=str(parent).lower().rjust(16, "0") if parent else None,
            name=str(raw.get("name", "")),
            start_ns=_time_ns(raw.get("start_time"), where),
            end_ns=_time_ns(raw.get("end_time"), where),
            attributes=dict(raw.get("attributes") or {}),
            events=events,
            dropped_attributes=None,
            dropped_events=None,
            dropped_links=None,
            status_code=str(raw["status_code"]).upper() if raw.get("status_code") else None,
            status_message=raw.get("status_message") or None,
        )
    except (AttributeError, KeyError, TypeError) as exc:
        raise MalformedInput(
            f"{where}: not a Phoenix span ({type(exc).__name__}: {exc})", "expected the body of Phoenix's GET /v1/projects/{project}/spans"
        ) from None


class PhoenixSource(HttpSource):
    """Arize Phoenix (REST API v1)."""

    name = "Phoenix"

    def __init__(self, url: str, **kwargs: Any) -> None:
        base, self.project = split_project(url)
        super().__init__(base, **kwargs)
        if self.project:
            self.description += f" (project {self.project})"

    def _pages(self, path: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        cursor = None
        while True:
            query = dict(params, **({"cursor": cursor} if cursor else {}))
            response = self.fetch(path, params=query, allow_404=True)
            if response is None:
                return
            body = self.json_body(response, self.description)
            if not isinstance(body, dict) or not isinstance(body.get("data"), list):
                raise MalformedInput(f"{self.description} answered {path} with no data list", "check that --source points at Phoenix")
            yield from body["data"]
            cursor = body.get("next_cursor")
            if not cursor:
                return

    def projects(self) -> list[str]:
        if self.project:
            return [self.project]
        return [str(p["name"]) for p in self._pages("/v1/projects", {"limit": 100}) if p.get("name")]

    def _spans_path(self, project: str) -> str:
        return f"/v1/projects/{quote(project, safe='')}/spans"

    def get(self, trace_id: str) -> Trace:
        trace_id = normalize_trace_id(trace_id)
        for project in self.projects():
            raws = list(self._pages(self._spans_path(project), {"trace_id": trace_id, "limit": PAGE}))
            if raws:
                spans = [decode_span(r, self.description) for r in raws]
                return Trace(
                    trace_id=trace_id,
                    spans=[s for s in spans if s.trace_id == trace_id],
                    source=self.description,
                    keeps_dropped_counts=False,
                    notes=[NOTE_NO_DROPPED_COUNTS],
                )
        raise TraceNotFound(f"trace {trace_id} not found in {self.description}", "check the id, or that the trace has reached Phoenix (export delay)")

    def latest(self) -> str:
        found = self.search(1, None, "")
        if not found:
            raise TraceNotFound(f"no ragtrail traces found in {self.description}", "run your app with OTLP export to this Phoenix")
        return found[0]

    def search_all(self, limit: int | None, query: str | None = None, lookback: str | None = "") -> SearchResult:
        """Every matching trace (up to ``limit``): Phoenix has a cursor, so its answer is never cut."""
        return SearchResult(self.search(sys.maxsize if limit is None else limit, query, lookback))

    def search(self, limit: int, query: str | None = None, lookback: str | None = "") -> list[str]:
        """Recent traces with ragtrail spans (or spans whose attribute ``key=value`` from ``query``),
        most recent first, from the spans of each project that started within ``lookback`` (e.g.
        ``1h``; empty: any time), read page by page (Phoenix's cursor) until ``limit`` traces are in."""
        key, value = sc.SCHEMA, None
        if query:
            key, _, value = query.partition("=")
            if not value:
                raise UsageError(f"Phoenix search wants key=value, got {query!r}", "e.g. --query ragtrail.stage.status=degraded")
            key, value = key.strip(), value.strip()
        params: dict[str, Any] = {"limit": PAGE, "sort": "start_time", "order": "desc"}
        seconds = lookback_seconds(lookback)
        if seconds:
            params["start_time"] = datetime.fromtimestamp(time.time() - seconds, timezone.utc).isoformat()
        found: dict[str, int] = {}
        for project in self.projects():
            seen: set[str] = set()
            for raw in self._pages(self._spans_path(project), params):  # every cursor page, newest spans first
                attributes = raw.get("attributes") or {}
                if key not in attributes or (value is not None and str(attributes[key]) != value):
                    continue
                span = decode_span(raw, self.description)
                found[span.trace_id] = max(found.get(span.trace_id, 0), span.start_ns)
                seen.add(span.trace_id)
                if len(seen) >= limit:  # the newest LIMIT traces of this project are all in
                    break
        return sorted(found, key=found.get, reverse=True)[:limit]  # type: ignore[arg-type]
