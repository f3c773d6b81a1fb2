"""Jaeger as a trace source: ``jaeger+http://HOST:16686`` (API v3, falling back to v1)."""

from __future__ import annotations

import json
import time

from ragtrail.contract import semconv as sc

from ..errors import MalformedInput, TraceNotFound, UsageError
from ..model import Trace, normalize_trace_id
from ..otlp import DECODE_ERRORS, uint64
from .base import lookback_seconds
from .http import HttpSource
from .paging import Hit, SearchResult, newest_first, page_windows


class JaegerSource(HttpSource):
    """Jaeger: ``/api/v3/traces/{id}`` (OTLP JSON, dropped counts kept), falling back to v1 ``/api/traces/{id}``."""

    name = "Jaeger"
    page_size = 1000

    def get(self, trace_id: str) -> Trace:
        trace_id = normalize_trace_id(trace_id)
        response = self.fetch(f"/api/v3/traces/{trace_id}", allow_404=True)
        if response is not None:
            trace = self.trace_from(self.json_body(response, self.description), trace_id, self.description)
            if trace is not None:
                return trace
        response = self.fetch(f"/api/traces/{trace_id}", allow_404=True)
        if response is not None:
            trace = self.trace_from(self.json_body(response, self.description), trace_id, self.description)
            if trace is not None:
                return trace
        raise TraceNotFound(
            f"trace {trace_id} not found in {self.description}", "check the id, or that the trace has reached Jaeger (export delay, retention)"
        )

    def latest(self) -> str:
        found = self.search(1, None, "24h")
        if not found:
            raise TraceNotFound(f"no ragtrail traces in the last 24h in {self.description}", "run your app with OTLP export to this Jaeger")
        return found[0]

    def search(self, limit: int, query: str | None = None, lookback: str | None = "1h") -> list[str]:
        """Recent traces carrying ragtrail spans (tag ``ragtrail.schema``, or ``key=value`` from ``query``)."""
        return self.search_all(limit, query, lookback).trace_ids

    def search_all(self, limit: int | None, query: str | None = None, lookback: str | None = "1h") -> SearchResult:
        """Every matching trace in the lookback (up to ``limit``), most recent first, read in time windows
        (Jaeger's search has no cursor); ``capped`` when a window Jaeger cannot narrow answered a full page."""
        searches = self._tag_searches(query)
        services_body = self.json_body(self.fetch("/api/services"), self.description)
        services = (
            [s for s in (services_body.get("data") or []) if isinstance(s, str) and s != "jaeger-all-in-one"]
            if isinstance(services_body, dict)
            else []
        )
        end_us = int(time.time() * 1_000_000)
        start_us = end_us - lookback_seconds(lookback or "1h") * 1_000_000
        found: dict[str, int] = {}
        capped = False
        requests = 0
        for service, tags in ((svc, t) for svc in services for t in searches):

            def fetch(lo: int, hi: int, want: int, service: str = service, tags: dict[str, str] = tags) -> list[Hit]:
                return self._search_page(service, tags, lookback, lo, hi, want)

            got, cut, asked = page_windows(fetch, start_us, end_us, limit=limit, page=self.page_size, unit_ns=1000)
            for tid, start in got.items():
                found[tid] = max(found.get(tid, 0), start)
            capped, requests = capped or cut, requests + asked
        return SearchResult(newest_first(found, limit), capped=capped, requests=requests)

    def _tag_searches(self, query: str | None) -> list[dict[str, str]]:
        """The tag sets to search for: one per schema version without a query (Jaeger matches tags exactly)."""
        if not query:
            return [{sc.SCHEMA: str(v)} for v in reversed(sc.SCHEMA_VERSIONS)]
        if query.lstrip().startswith("{"):  # several tags, AND-ed, as Jaeger's API takes them
            try:
                return [{str(k): str(v) for k, v in json.loads(query).items()}]
            except (ValueError, AttributeError):
                raise UsageError(
                    f"Jaeger tags must be a JSON object, got {query!r}", 'e.g. --query \'{"ragtrail.stage.status": "degraded"}\''
                ) from None
        key, _, value = query.partition("=")
        if not value:
            raise UsageError(f"Jaeger search wants key=value, got {query!r}", "e.g. --query ragtrail.stage.status=degraded")
        return [{key.strip(): value.strip()}]

    def _search_page(self, service: str, tags: dict[str, str], lookback: str | None, start_us: int, end_us: int, limit: int) -> list[Hit]:
        """One v1 search request: the traces of ``service`` with ``tags`` that started in ``[start_us, end_us]``."""
        response = self.fetch(
            "/api/traces",
            params={"service": service, "tags": json.dumps(tags), "limit": limit, "lookback": lookback or "1h", "start": start_us, "end": end_us},
        )
        body = self.json_body(response, self.description)
        try:
            return [
                Hit(
                    normalize_trace_id(item.get("traceID", "")),
                    max((uint64(s.get("startTime", 0)) for s in item.get("spans") or ()), default=0) * 1000,
                )
                for item in ((body.get("data") or []) if isinstance(body, dict) else [])
            ]
        except DECODE_ERRORS as exc:
            raise MalformedInput(
                f"{self.description} answered a search with something else than Jaeger JSON ({type(exc).__name__})", "check the server version"
            ) from None
