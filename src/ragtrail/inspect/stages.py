"""Stitch spans back into stages: a stage span plus its continuation spans, events in emission order.

The recorder spills a large stage's events into continuation child spans
(``ragtrail.stage.continuation=true``, numbered by ``ragtrail.stage.continuation.index``) so the
SDK never evicts candidates. The reader undoes that here, and keeps what it needs to check the
stitching (which continuations were announced by ``ragtrail.events.spans`` and which arrived).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ragtrail.contract import semconv as sc

from . import columns
from .errors import NoRagtrailSpans
from .model import Event, Span, Trace

RAGTRAIL_EVENTS = frozenset({sc.EVENT_CANDIDATE, sc.EVENT_EXCLUSION, sc.EVENT_QUERY})


@dataclass
class StageView:
    """One stage as the reader sees it: its span, its continuations, and all its ragtrail events."""

    span: Span
    continuations: list[Span] = field(default_factory=list)
    _events: list[tuple[Span, Event]] | None = field(default=None, repr=False)
    _wire: list[tuple[Span, Event]] | None = field(default=None, repr=False)
    # schema 4: the trace's content receipts by stage span id, for rows that point upstream (set by stitch)
    source_of: Callable[[str], dict[str, dict[str, Any]] | None] | None = field(default=None, repr=False)
    _content: dict[str, dict[str, Any]] | None = field(default=None, repr=False)

    def content_by_id(self) -> dict[str, dict[str, Any]]:
        """This stage's output content receipts by candidate id (what a later stage may point to)."""
        if self._content is None:
            schema = schema_of(self.span)
            self._content = columns.content_by_id(self.span.attributes, schema) if schema >= sc.SCHEMA_COLUMNS else {}
        return self._content

    @property
    def attributes(self) -> dict[str, Any]:
        return self.span.attributes

    @property
    def kind(self) -> str:
        return str(self.span.attributes.get(sc.STAGE_KIND, ""))

    @property
    def component(self) -> str:
        return str(self.span.attributes.get(sc.STAGE_COMPONENT, self.span.name))

    @property
    def label(self) -> str:
        """``kind component`` as alarms and tables name a stage."""
        return f"{self.kind} {self.component}"

    def spans(self) -> list[Span]:
        return [self.span, *self.continuations]

    def wire_events(self) -> list[tuple[Span, Event]]:
        """The ragtrail events as they arrived (the stage span's, then each continuation's by index):
        what the stage receipt covers. Schema 3 candidates are columns, not among them."""
        if self._wire is None:
            self._wire = [(span, e) for span in self.spans() for e in span.events if e.name in RAGTRAIL_EVENTS]
        return self._wire

    def events(self) -> list[tuple[Span, Event]]:
        """Every record of the stage in emission order, one per produced query, output and exclusion
        (schema 3's columns read back as such, :mod:`columns`); schema 2 on restores that order
        whatever order the backend returned them in (:func:`emission_order`)."""
        if self._events is None:
            wire = self.wire_events()
            schema = schema_of(self.span)
            if schema >= sc.SCHEMA_COLUMNS:
                head = self.span
                # each record keeps the time of the event that carried it (outputs: the stage span's end)
                expanded = columns.expand(
                    head.attributes, [((s, e), e.name, e.attributes) for s, e in wire], (head, Event(sc.EVENT_CANDIDATE, head.end_ns, {})), schema
                )
                if schema >= sc.SCHEMA_CONTENT_FROM:
                    columns.resolve_content((a for _, _, a in expanded), self.source_of or _no_sources)
                wire = [(where[0], where[1] if name == sc.EVENT_QUERY else Event(name, where[1].time_ns, a)) for where, name, a in expanded]
            self._events = emission_order(wire) if schema >= 2 else wire
        return self._events


def _no_sources(span_id: str) -> None:
    return None


def schema_of(span: Span) -> int:
    """The span's ``ragtrail.schema`` (1 when absent or not a whole number: the oldest rules)."""
    value = span.attributes.get(sc.SCHEMA)
    return value if type(value) is int else 1


_NAME_ORDER = {sc.EVENT_QUERY: 0, sc.EVENT_CANDIDATE: 1, sc.EVENT_EXCLUSION: 2}
_LAST = float("inf")


def _rank(value: Any) -> float:
    return value if type(value) is int else _LAST


def emission_order(events: list[tuple[Span, Event]]) -> list[tuple[Span, Event]]:
    """Events in the order the recorder emits them: produced queries by hop, then candidates by
    output rank, then exclusions by input rank (those without a rank last), ties as received.
    Backends reorder a span's events (Jaeger v2 sorts them by name); this order is on the wire."""

    def key(item: tuple[Span, Event]) -> tuple[int, float]:
        _, event = item
        group = _NAME_ORDER.get(event.name, 3)
        field = sc.QUERY_HOP if group == 0 else sc.CANDIDATE_RANK
        return group, _rank(event.attributes.get(field))

    return sorted(events, key=key)


@dataclass
class Stitched:
    """The stages of a trace in start order, plus continuation spans whose stage span never arrived."""

    stages: list[StageView]
    orphans: list[Span]
    pipelines: list[StageView]


def continuation_index(span: Span) -> int | None:
    """A continuation span's index when the trace holds a whole number there (it is untrusted input)."""
    value = span.attributes.get(sc.STAGE_CONTINUATION_INDEX)
    return value if type(value) is int else None


def is_ragtrail(span: Span) -> bool:
    return sc.STAGE_KIND in span.attributes


@dataclass
class StageTree:
    """Each stage's enclosing stages, outermost first: the branch of the run it is on. A stage's
    upstream is on its branch (its ancestors and what ran before it under them), never another
    branch's latest copy (two questions of one pipeline, a fuse's inputs)."""

    ancestors: dict[str, tuple[str, ...]]
    kinds: dict[str, str]

    def path(self, span_id: str) -> tuple[str, ...]:
        return self.ancestors.get(span_id, ())

    def question(self, span_id: str) -> str:
        """The span whose run numbers this stage's query hops, by the recorder's rule: the nearest
        pipeline at or above it, else its outermost stage (a stage outside any pipeline opens a run
        of its own). Two retrievals under one span of the app's (a web request asking two questions)
        are two runs, each with its own hop 0."""
        path = (*self.path(span_id), span_id)
        return next((s for s in reversed(path) if self.kinds.get(s) == sc.KIND_PIPELINE), path[0])


def stage_tree(spans: Iterable[Span], heads: Iterable[StageView]) -> StageTree:
    """The stage tree of a trace: each head's nearest stage ancestor through any spans between them
    (a framework's own spans), untrusted input, so a parent cycle or a missing span ends the walk."""
    parent_of = {s.span_id: s.parent_span_id for s in spans}
    kinds = {v.span.span_id: v.kind for v in heads}
    parents: dict[str, str | None] = {}
    for sid in kinds:
        seen = {sid}
        up = parent_of.get(sid)
        while up is not None and up not in kinds and up not in seen:
            seen.add(up)
            up = parent_of.get(up)
        parents[sid] = up if up in kinds and up not in seen else None
    ancestors: dict[str, tuple[str, ...]] = {}
    for sid in kinds:
        chain: list[str] = []
        up = parents[sid]
        while up is not None and up != sid and up not in chain:
            chain.append(up)
            up = parents[up]
        ancestors[sid] = tuple(reversed(chain))
    return StageTree(ancestors, kinds)


def stitch(trace: Trace) -> Stitched:
    """Group continuation spans under their stage span; raise when the trace has no ragtrail span."""
    ragtrail_spans = [s for s in trace.spans if is_ragtrail(s)]
    if not ragtrail_spans:
        raise NoRagtrailSpans(
            f"trace {trace.trace_id} has {len(trace.spans)} spans but none from ragtrail",
            "instrument the pipeline (ragtrail decorators or opentelemetry-instrument) or pick another trace",
        )
    heads: dict[str, StageView] = {}
    continuations: list[Span] = []
    for span in ragtrail_spans:
        if schema_of(span) >= sc.SCHEMA_COLUMNS:
            columns.normalize(span.attributes)
            for event in span.events:
                if event.name == sc.EVENT_EXCLUSION:
                    columns.normalize(event.attributes)
        if span.attributes.get(sc.STAGE_CONTINUATION) is True:
            continuations.append(span)
        else:
            heads[span.span_id] = StageView(span)
    orphans: list[Span] = []
    for span in continuations:
        head = heads.get(span.parent_span_id or "")
        if head is None:
            orphans.append(span)
        else:
            head.continuations.append(span)

    def source_of(span_id: str) -> dict[str, dict[str, Any]] | None:
        view = heads.get(span_id)
        return view.content_by_id() if view is not None else None

    for head in heads.values():
        head.continuations.sort(key=lambda s: continuation_index(s) or 0)
        head.source_of = source_of
    ordered = sorted(heads.values(), key=lambda v: (v.span.start_ns, v.span.end_ns))
    pipelines = [v for v in ordered if v.kind == sc.KIND_PIPELINE]
    stages = [v for v in ordered if v.kind != sc.KIND_PIPELINE]
    return Stitched(stages=stages, orphans=orphans, pipelines=pipelines)
