"""What verify concludes about one trace: its alarms and verdict counts, and the ledger the checks write to.

Kept apart from the checks (:mod:`ragtrail.inspect.verify`) so that the manifest, the terminal view and
the gate can hold a :class:`Fidelity` without importing how it was reached.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .model import Span, Trace


@dataclass
class Alarm:
    """One fidelity problem, precise enough to find the byte that changed."""

    trace_id: str
    span_id: str
    stage: str
    candidate: str
    field: str
    problem: str
    detail: str = ""

    def line(self) -> str:
        """The one line ``ragtrail verify`` prints per alarm."""
        cand = self.candidate or "-"
        detail = f" ({self.detail})" if self.detail else ""
        return (
            f"ALARM trace={self.trace_id} span={self.span_id} stage={self.stage or '-'} candidate={cand} field={self.field}: {self.problem}{detail}"
        )

    def as_dict(self) -> dict[str, str]:
        return {
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "stage": self.stage,
            "candidate": self.candidate,
            "field": self.field,
            "problem": self.problem,
            "detail": self.detail,
        }


@dataclass
class Fidelity:
    """Verdict counts over every receipt, the events and spans missing or evicted, and the alarms."""

    intact: int = 0
    changed_cited: int = 0
    changed_uncited: int = 0
    unverifiable: int = 0
    not_captured: int = 0
    missing_events: int = 0
    missing_spans: int = 0
    dropped_attributes: int | None = 0
    dropped_events: int | None = 0
    partial: bool = False
    alarms: list[Alarm] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def count(self, verdict: str) -> None:
        setattr(self, verdict, getattr(self, verdict) + 1)

    def damaged_rows(self) -> dict[tuple[str, str], str]:
        """``(span id, candidate id)`` → what is wrong with that row, for every alarm that names a
        candidate: the readers mark a damaged row where they print it, not only in the fidelity
        footer. The first alarm of a row names it; the footer lists every one."""
        out: dict[tuple[str, str], str] = {}
        for a in self.alarms:
            if a.candidate:
                out.setdefault((a.span_id, a.candidate), f"{a.problem}: {a.field}")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "intact": self.intact,
            "changed_cited": self.changed_cited,
            "changed_uncited": self.changed_uncited,
            "unverifiable": self.unverifiable,
            "not_captured": self.not_captured,
            "missing_events": self.missing_events,
            "missing_spans": self.missing_spans,
            "dropped_attributes": self.dropped_attributes,
            "dropped_events": self.dropped_events,
            "partial": self.partial,
            "alarms": [a.as_dict() for a in self.alarms],
            "notes": list(self.notes),
        }


class Where(NamedTuple):
    """Where an alarm points: the span, the stage's label, the candidate id (``""`` for the stage itself)."""

    span: Span
    stage: str
    candidate: str = ""


class Ledger:
    """The fidelity of one trace, as the checks write to it."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.f = Fidelity(partial=trace.partial)

    def alarm(self, where: Where, field_name: str, problem: str, detail: str = "") -> None:
        self.f.alarms.append(Alarm(self.trace.trace_id, where.span.span_id, where.stage, where.candidate, field_name, problem, detail))


__all__ = ["Alarm", "Fidelity", "Ledger", "Where"]
