"""Jaeger as a trace source: ``jaeger+http://HOST:16686`` (API v3, falling back to v1)."""

from __future__ import annotations

import json

from ragtrail.contract import semconv as sc

from ..errors import MalformedInput, TraceNotFound, UsageError
from ..model import Trace, normalize_trace_id
from ..otlp import DECODE_ERRORS, uint64
from .http import HttpSource


class JaegerSource(HttpSource):
    """Jaeger: ``/api/v3/traces/{id}`` (OTLP JSON, dropped counts kept), falling back to v1 ``/api/traces/{id}``."""

    name = "Jaeger"

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
        services_body = self.json_body(self.fetch("/api/services"), self.description)
        services = [s for s in (services_body.get("data") or []) if isinstance(s, str) and s != "jaeger-all-in-one"] \
            if isinstance(services_body, dict) else []
        found: dict[str, int] = {}
        for service, tags in ((svc, t) for svc in services for t in searches):
            response = self.fetch("/api/traces", params={"service": service, "tags": json.dumps(tags),
                                                        "limit": limit, "lookback": lookback or "1h"})
            body = self.json_body(response, self.description)
            try:
                for item in (body.get("data") or []) if isinstance(body, dict) else []:
                    start = max((uint64(s.get("startTime", 0)) for s in item.get("spans") or ()), default=0)
                    tid = normalize_trace_id(item.get("traceID", ""))
                    found[tid] = max(found.get(tid, 0), start)
            except DECODE_ERRORS as exc:
                raise MalformedInput(f"{self.description} answered a search with something else than Jaeger JSON "
                                     f"({type(exc).__name__})", "check the server version") from None
        return sorted(found, key=found.get, reverse=True)[:limit]  # type: ignore[arg-type]
