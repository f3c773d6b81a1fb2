"""Find traces: one filter, pushed down to the backend where it can be, always checked locally.

``ragtrail ls`` filters by time, run status and stage status, finding, exclusion reason, component,
document id, and query receipt (the sha256 of a query the user types, computed with the contract's
receipt function, so the raw query never needs to be on the wire). Tempo gets a TraceQL query and
Jaeger a tag query that narrow what is fetched; the full filter is then applied to every trace read,
so a backend's looser match (or a local store, which has no index) gives the same answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ragtrail.contract import receipts
from ragtrail.contract import semconv as sc

from .errors import UsageError
from .records import TraceRecord


def query_receipt(query: str, key: bytes | None = None) -> str:
    """The ``ragtrail.query.sha256`` the recorder stamps for this query text: its sha256, or with the
    producer's receipt key (``hash`` mode under ``RAGTRAIL_RECEIPT_KEY``) ``hmac-sha256:<64 hex>``."""
    return receipts.receipt(query).sha256 if key is None else receipts.keyed_receipt(query, key).sha256


def parse_time(text: str | None, *, now: datetime | None = None) -> int | None:
    """Unix nanoseconds from an ISO date/time or a duration back from now (``30m``, ``2h``, ``7d``)."""
    if not text:
        return None
    now = now or datetime.now(timezone.utc)
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if text[-1] in units and text[:-1].replace(".", "", 1).isdigit():
        return int((now.timestamp() - float(text[:-1]) * units[text[-1]]) * 1e9)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"bad time {text!r}", "use an ISO time (2026-12-01T10:00) or a duration (30m, 2h, 7d)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1e9)


@dataclass(frozen=True)
class Filter:
    """Every condition must hold; ``None`` means "any"."""

    since_ns: int | None = None
    until_ns: int | None = None
    run_status: str | None = None
    stage_status: str | None = None
    finding: str | None = None
    reason: str | None = None
    component: str | None = None
    doc: str | None = None
    query_sha256: str | None = None
    service_version: str | None = None
    tag: tuple[str, str] | None = None  # a resource or pipeline-span attribute key=value

    def __post_init__(self) -> None:
        if self.run_status is not None and self.run_status not in sc.RUN_STATUSES:
            raise UsageError(f"unknown run status {self.run_status!r}", f"use one of {', '.join(sc.RUN_STATUSES)}")
        if self.stage_status is not None and self.stage_status not in sc.STATUSES:
            raise UsageError(f"unknown stage status {self.stage_status!r}", f"use one of {', '.join(sc.STATUSES)}")
        if self.reason is not None and not sc.is_valid_reason(self.reason):
            raise UsageError(f"unknown exclusion reason {self.reason!r}", f"use one of {', '.join(sc.REASONS)} or custom:NAME")

    def matches(self, r: TraceRecord) -> bool:
        if self.since_ns is not None and r.end_ns < self.since_ns:
            return False
        if self.until_ns is not None and r.start_ns > self.until_ns:
            return False
        if self.run_status is not None and r.run_status != self.run_status:
            return False
        if self.stage_status is not None and self.stage_status not in r.stage_statuses():
            return False
        if self.finding is not None:
            needle = self.finding.lower()
            if not any(needle in f.lower() for f in r.findings) and not any(
                needle == i["insight"] or needle in i["said"].lower() for i in r.insights
            ):
                return False
        if self.reason is not None and not any(reason == self.reason for s in r.stages for _, reason in s.excluded):
            return False
        if self.component is not None and not any(self.component in (s.component, s.label) for s in r.stages) and r.pipeline != self.component:
            return False
        if self.doc is not None and self.doc not in r.doc_ids():
            return False
        if self.query_sha256 is not None and r.query_sha256 != self.query_sha256:
            return False
        if self.service_version is not None and r.service_version != self.service_version:
            return False
        return self.tag is None or str(r.resource.get(self.tag[0])) == self.tag[1]

    # --- push-down ---------------------------------------------------------------------------------
    def _span_filters(self) -> list[tuple[str, str]]:
        """The filters a backend can match on span attributes, as (attribute, value): the part of the
        search that both Tempo's TraceQL and Jaeger's tag search can carry."""
        pairs = (
            (sc.RUN_STATUS, self.run_status),
            (sc.STAGE_STATUS, self.stage_status),
            (sc.STAGE_COMPONENT, self.component),
            (sc.QUERY_SHA256, self.query_sha256),
        )
        return [(key, value) for key, value in pairs if value]

    def traceql(self) -> str:
        """The TraceQL that narrows a Tempo search to traces that can match (finding and doc id are
        event-level or free text: those are checked after reading)."""
        parts = [f"{{ span.{key} = {json.dumps(value)} }}" for key, value in self._span_filters()]
        if self.service_version:
            parts.append(f"{{ resource.service.version = {json.dumps(self.service_version)} }}")
        if self.tag:
            parts.append(f"{{ resource.{self.tag[0]} = {json.dumps(self.tag[1])} }}")
        if self.reason:
            parts.append(f"{{ event.{sc.EXCLUSION_REASON} = {json.dumps(self.reason)} }}")
        if self.doc:
            parts.append(f"{{ event.{sc.CANDIDATE_ID} = {json.dumps(self.doc)} }}")
        if not parts:
            return f"{{ span.{sc.SCHEMA} >= 1 }}"  # schema 1 and 2 traces alike
        return " && ".join(parts)

    def jaeger_tags(self) -> str | None:
        """Jaeger's tag search (span attributes, AND-ed) as ``--query`` would take it, or ``None``."""
        tags = dict(self._span_filters())
        return json.dumps(tags) if tags else None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def summary_line(r: TraceRecord) -> str:
    """One line per trace: id, time, run status, stage statuses, counts, answer, findings (data escaped by the caller)."""
    when = datetime.fromtimestamp(r.start_ns / 1e9, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if r.start_ns else "-"
    bad = [f"{s.label}={s.status_text()}" for s in r.stages if s.status in (sc.STATUS_DEGRADED, sc.STATUS_FAILED)]
    answer = "refused" if r.refused else ("answered" if r.refused is False else "answer ?")
    extra = f" findings {len(r.findings) + len(r.insights)}" if (r.findings or r.insights) else ""
    alarms = f" ALARMS {r.alarms}" if r.alarms else ""
    return (
        f"{r.trace_id} {when} {r.pipeline or '-'} run={r.run_status or '?'} stages={len(r.stages)} "
        f"cited={len(r.cited)} {answer}{' ' + ' '.join(bad) if bad else ''}{extra}{alarms}"
    )
