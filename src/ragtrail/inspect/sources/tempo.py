"""Grafana Tempo as a trace source: ``tempo+http://HOST:3200`` (API v2, falling back to v1)."""

from __future__ import annotations

from typing import Any

from ragtrail.contract import semconv as sc

from ..errors import MalformedInput, TraceNotFound
from ..model import Trace, normalize_trace_id
from ..otlp import DECODE_ERRORS, uint64
from .base import lookback_seconds
from .http import HttpSource


class TempoSource(HttpSource):
    """Grafana Tempo: ``/api/v2/traces/{id}`` (PARTIAL status kept), falling back to ``/api/traces/{id}``."""

    name = "Tempo"

    def get(self, trace_id: str) -> Trace:
        trace_id = normalize_trace_id(trace_id)
        for path in (f"/api/v2/traces/{trace_id}", f"/api/traces/{trace_id}"):
            response = self.fetch(path, allow_404=True)
            if response is None:
                continue
            trace = self.trace_from(self.json_body(response, self.description), trace_id, self.description)
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
        seconds = lookback_seconds(lookback or "1h")
        if seconds:
            import time

            now = int(time.time())
            params.update(start=now - seconds, end=now)
        body = self.json_body(self.fetch("/api/search", params=params), self.description)
        try:
            items = body.get("traces") or [] if isinstance(body, dict) else []
            items = sorted(items, key=lambda t: uint64(t.get("startTimeUnixNano", 0) or 0), reverse=True)
            return [normalize_trace_id(t["traceID"]) for t in items if t.get("traceID")][:limit]
        except DECODE_ERRORS as exc:
            raise MalformedInput(f"{self.description} answered a search with something else than Tempo JSON "
                                 f"({type(exc).__name__})", "check the server version") from None
