"""Grafana Tempo as a trace source: ``tempo+http://HOST:3200`` (API v2, falling back to v1)."""

from __future__ import annotations

from typing import Any

from ragtrail.contract import semconv as sc

from ..errors import HttpStatusError, MalformedInput, TraceNotFound
from ..model import Trace, normalize_trace_id
from ..otlp import DECODE_ERRORS, uint64
from .base import lookback_seconds
from .http import HttpSource
from .paging import Hit, PageTooLarge, SearchResult, newest_first, page_windows


class TempoSource(HttpSource):
    """Grafana Tempo: ``/api/v2/traces/{id}`` (PARTIAL status kept), falling back to ``/api/traces/{id}``."""

    name = "Tempo"
    page_size = 500

    def get(self, trace_id: str) -> Trace:
        trace_id = normalize_trace_id(trace_id)
        for path in (f"/api/v2/traces/{trace_id}", f"/api/traces/{trace_id}"):
            response = self.fetch(path, allow_404=True)
            if response is None:
                continue
            trace = self.trace_from(self.json_body(response, self.description), trace_id, self.description)
            if trace is not None:
                return trace
        raise TraceNotFound(
            f"trace {trace_id} not found in {self.description}", "check the id, or wait for Tempo to flush (it can take a few seconds)"
        )

    def latest(self) -> str:
        found = self.search(1, None, "24h")
        if not found:
            raise TraceNotFound(f"no ragtrail traces found in {self.description}", "run your app with OTLP export to this Tempo")
        return found[0]

    def search(self, limit: int, query: str | None = None, lookback: str | None = "1h") -> list[str]:
        """TraceQL search (default: every trace with ragtrail spans), most recent first."""
        return self.search_all(limit, query, lookback).trace_ids

    def search_all(self, limit: int | None, query: str | None = None, lookback: str | None = "1h") -> SearchResult:
        """Every matching trace in the lookback (up to ``limit``), most recent first: Tempo's search has no
        cursor, so the range is read in windows of whole seconds (``start``/``end``), halved while full."""
        q = query or f"{{ span.{sc.SCHEMA} >= 1 }}"  # schema 1 and 2 traces alike
        seconds = lookback_seconds(lookback or "1h")
        if not seconds:  # no time range: one request, and a full answer is said to be capped
            want = self.page_size if limit is None else limit
            hits = self._search_page(q, None, want)
            found = {h.trace_id: h.start_ns for h in hits}
            return SearchResult(newest_first(found, limit), capped=len(hits) >= want and limit is None, requests=1)
        import time

        now = int(time.time())

        def fetch(lo: int, hi: int, want: int) -> list[Hit]:
            return self._search_page(q, (lo, hi), want)

        found, capped, requests = page_windows(fetch, now - seconds, now, limit=limit, page=self.page_size, unit_ns=1_000_000_000)
        return SearchResult(newest_first(found, limit), capped=capped, requests=requests)

    def _search_page(self, q: str, window: tuple[int, int] | None, limit: int) -> list[Hit]:
        """One ``/api/search`` request (``window`` in unix seconds); a refused page size raises :class:`PageTooLarge`."""
        params: dict[str, Any] = {"q": q, "limit": limit}
        if window is not None:
            params.update(start=window[0], end=window[1])
        try:
            response = self.fetch("/api/search", params=params)
        except HttpStatusError as exc:  # Tempo answers 400 when limit exceeds its max_result_limit
            if "HTTP 400" in str(exc) and "limit" in str(exc).lower() and limit > 1:
                raise PageTooLarge(str(exc)) from None
            raise
        body = self.json_body(response, self.description)
        try:
            items = body.get("traces") or [] if isinstance(body, dict) else []
            return [Hit(normalize_trace_id(t["traceID"]), uint64(t.get("startTimeUnixNano", 0) or 0)) for t in items if t.get("traceID")]
        except DECODE_ERRORS as exc:
            raise MalformedInput(
                f"{self.description} answered a search with something else than Tempo JSON ({type(exc).__name__})", "check the server version"
            ) from None
