"""The column codec round trip (docs/semconv.md §3, ``ragtrail.contract.columns``), for every schema the
reader accepts (3, 4, 5): candidate rows drawn with odd values (ids in any Unicode, lone surrogates
included; scores -0.0, NaN, inf, None, text, bools; mixed kinds and hops; content of any length;
details; metadata of every JSON shape) are encoded by the recorder's path (``EventBuilder`` writing
that schema's rules) and decoded by the inspector's (``inspect.columns``), and come back as the rows
that went in, as the reader defines a row: the wire's forms of its values, blanks left out.

And the said-once rule: a value a rule gives for every row is said once (schema 5's rank_first,
detail and ascii encoding only on schema 5; score kind and hop on every schema), else the column is
written, never both.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import finite_or_none, preview
from ragtrail.inspect import columns
from ragtrail.recorder.candidates import Candidate
from ragtrail.recorder.events import Columns, EventBuilder
from ragtrail.recorder.exclusions import Exclusion
from ragtrail.recorder.pipeline import PipelineState
from ragtrail.recorder.values import attribute_value
from ragtrail.settings import CaptureSettings

SCHEMAS = (3, 4, 5)
KEYS = ("lang", "n", "tags")
KINDS = (None, "", *sc.SCORE_KINDS)
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=6)  # lone surrogates, NUL, RTL marks ...
PLAIN_TEXT = st.text(max_size=6)
META_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    PLAIN_TEXT,
    st.lists(PLAIN_TEXT, max_size=3),
    st.lists(st.integers(), max_size=3),
    st.lists(st.one_of(st.integers(), PLAIN_TEXT), max_size=3),
    st.dictionaries(PLAIN_TEXT, st.integers(), max_size=2),
)
CANDIDATE = st.builds(
    Candidate,
    id=ANY_TEXT,
    content=st.one_of(st.none(), st.text(max_size=300), st.text("ab ", max_size=4)),
    score=st.one_of(st.none(), st.floats(), st.just(-0.0), st.integers(-3, 3), st.booleans(), st.sampled_from(["0.5", "x"])),
    score_kind=st.sampled_from(KINDS),
    hop=st.one_of(st.none(), st.integers(-1, 3)),
    metadata=st.one_of(st.none(), st.dictionaries(st.sampled_from((*KEYS, "other")), META_VALUE, max_size=3)),
    transform_rule=st.one_of(st.none(), st.just(""), st.sampled_from(["budget_trim@1", "truncate@1:5"]), PLAIN_TEXT),
    derived_from=st.one_of(st.none(), st.just(""), st.just("f" * 64), PLAIN_TEXT),
)


@st.composite
def exclusions(draw: st.DrawFn) -> list[Exclusion]:
    """One or two reasons' excluded rows: ranks a consecutive run or any (-1: none), details shared or not."""
    rows = draw(st.lists(CANDIDATE, max_size=6))
    if draw(st.booleans()):
        start = draw(st.integers(0, 20))
        ranks = [start + i for i in range(len(rows))]
    else:
        ranks = draw(st.lists(st.integers(-1, 20), min_size=len(rows), max_size=len(rows)))
    shared = draw(st.one_of(st.none(), st.just(""), st.just("top_k=3"), ANY_TEXT))
    details = [shared if draw(st.booleans()) else draw(st.one_of(st.none(), ANY_TEXT)) for _ in rows]
    reasons = [draw(st.sampled_from(("stale", "custom:odd"))) for _ in rows]
    return [Exclusion(rank, c, reason, detail) for rank, c, reason, detail in zip(ranks, rows, reasons, details, strict=True)]


# --- what a row is, as the reader defines it (the documented rules, restated) -------------------------
def _wire(text: str) -> str:
    """A string as the wire carries it: lone surrogates backslash-escaped (docs/semconv.md §4)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _score_text(value: Any) -> str:
    try:
        return repr(float(value))
    except (TypeError, ValueError):
        return type(value).__name__


def _expected(
    c: Candidate, rank: int | None, default_kind: str | None, config: CaptureSettings, reason: str | None = None, detail: str | None = None
) -> dict[str, Any]:
    row: dict[str, Any] = {sc.CANDIDATE_ID: _wire(c.id)}
    if rank is not None and rank >= 0:
        row[sc.CANDIDATE_RANK] = rank
    number = None if c.score is None else finite_or_none(c.score)
    if number is not None:
        row[sc.CANDIDATE_SCORE] = number
    elif c.score is not None:
        row[sc.CANDIDATE_SCORE_RAW] = _score_text(c.score)
    row[sc.CANDIDATE_SCORE_KIND] = c.score_kind or default_kind or sc.SCORE_NONE
    if c.hop is not None and c.hop != -1:
        row[sc.CANDIDATE_HOP] = c.hop
    r = c.receipt
    if r is not None:
        row.update({sc.CANDIDATE_CONTENT_CHARS: r.chars, sc.CANDIDATE_CONTENT_BYTES: r.bytes, sc.CANDIDATE_CONTENT_SHA256: r.sha256})
        if config.content == "preview":
            row[sc.CANDIDATE_CONTENT_PREVIEW] = preview(c.content)
        elif config.content == "full":
            row[sc.CANDIDATE_CONTENT_TEXT] = c.content
    if c.transform_rule:
        row[sc.CANDIDATE_TRANSFORM_RULE] = c.transform_rule
    if c.derived_from:
        row[sc.CANDIDATE_TRANSFORM_DERIVED_FROM] = c.derived_from
    if detail:
        row[sc.EXCLUSION_DETAIL] = _wire(detail)
    for key in config.metadata:
        if c.metadata and key in c.metadata:
            row[sc.CANDIDATE_META_PREFIX + key] = attribute_value(c.metadata[key])  # OTel's form of the value
    if reason is not None:
        row[sc.EXCLUSION_REASON] = reason
    return row


def _same(rows: list[dict[str, Any]]) -> list[list[tuple[str, str]]]:
    """Rows compared field by field by repr: -0.0 is not 0.0, NaN is NaN, a tuple is not a list."""
    return [sorted((k, repr(v)) for k, v in row.items()) for row in rows]


def _build(
    schema: int,
    config: CaptureSettings,
    default_kind: str | None,
    outputs: list[Candidate],
    excluded: list[Exclusion],
    state: PipelineState | None = None,
    span_id: str | None = None,
) -> Columns:
    return EventBuilder(config, default_kind, state, span_id, schema=schema).build([], outputs, excluded)


def _decoded(schema: int, built: Columns) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    outputs = columns.records(built.span_attributes, None, schema)
    by_reason = {a[sc.EXCLUSION_REASON]: columns.records(a, a[sc.EXCLUSION_REASON], schema) for name, a in built.events if name == sc.EVENT_EXCLUSION}
    return outputs, by_reason


CONFIG = st.builds(CaptureSettings, content=st.sampled_from(sc.CAPTURE_CONTENT_MODES), metadata=st.sampled_from(((), KEYS, ("tags",))))


@pytest.mark.parametrize("schema", SCHEMAS)
@settings(max_examples=150, deadline=None)
@given(config=CONFIG, default_kind=st.sampled_from(KINDS), outputs=st.lists(CANDIDATE, max_size=6), excluded=exclusions())
def test_rows_round_trip(schema: int, config: CaptureSettings, default_kind: str | None, outputs: list[Candidate], excluded: list[Exclusion]) -> None:
    built = _build(schema, config, default_kind, outputs, excluded)
    got_outputs, got_excluded = _decoded(schema, built)
    assert _same(got_outputs) == _same([_expected(c, i, default_kind, config) for i, c in enumerate(outputs)])
    expected: dict[str, list[dict[str, Any]]] = {}
    for e in excluded:  # exclusions say no default kind: theirs is their own or none
        expected.setdefault(e.reason, []).append(_expected(e.candidate, e.rank, None, config, e.reason, e.detail))
    assert {k: _same(v) for k, v in got_excluded.items()} == {k: _same(v) for k, v in expected.items()}


@pytest.mark.parametrize("schema", SCHEMAS)
@settings(max_examples=100, deadline=None)
@given(rows=st.lists(CANDIDATE, min_size=1, max_size=6), excluded=exclusions())
def test_rows_pointing_to_an_upstream_stage_read_back_its_receipts(schema: int, rows: list[Candidate], excluded: list[Exclusion]) -> None:
    """Schema 4 on, a later stage whose rows carry exactly an earlier stage's content points to it
    (``content.from``); its rows, resolved by the reader, are the rows that went in. Schema 3 never
    points: its rows state their receipts."""
    config = CaptureSettings(content="off")
    state = PipelineState()
    upstream = _build(schema, config, None, [*rows, *(e.candidate for e in excluded)], [], state, "00000000000000aa")
    built = _build(schema, config, None, rows, excluded, state, "00000000000000bb")
    pointers = [a.get(sc.COLUMN_CONTENT_FROM) for a in (built.span_attributes, *(a for _, a in built.events))]
    if schema < sc.SCHEMA_CONTENT_FROM:
        assert pointers == [None] * len(pointers)
    got_outputs, got_excluded = _decoded(schema, built)
    upstream_receipts = columns.content_by_id(upstream.span_attributes, schema)
    for decoded in (got_outputs, *got_excluded.values()):
        columns.resolve_content(decoded, {"00000000000000aa": upstream_receipts}.get)
        for row in decoded:
            assert row.pop(sc.CANDIDATE_CONTENT_FROM, "00000000000000aa") == "00000000000000aa"
    assert _same(got_outputs) == _same([_expected(c, i, None, config) for i, c in enumerate(rows)])
    expected: dict[str, list[dict[str, Any]]] = {}
    for e in excluded:
        expected.setdefault(e.reason, []).append(_expected(e.candidate, e.rank, None, config, e.reason, e.detail))
    assert {k: _same(v) for k, v in got_excluded.items()} == {k: _same(v) for k, v in expected.items()}


def _one_form(attributes: dict[str, Any], single: str, column: str, said_once: bool | None) -> None:
    """``said_once``: True the single value, False the column, None neither."""
    assert (single in attributes, column in attributes) == {True: (True, False), False: (False, True), None: (False, False)}[said_once]


@pytest.mark.parametrize("schema", SCHEMAS)
@settings(max_examples=150, deadline=None)
@given(outputs=st.lists(CANDIDATE, min_size=1, max_size=6), excluded=exclusions())
def test_a_rule_that_holds_for_every_row_is_said_once_else_the_column_is_written(
    schema: int, outputs: list[Candidate], excluded: list[Exclusion]
) -> None:
    once = schema >= sc.SCHEMA_SAID_ONCE
    config = CaptureSettings(content="off")
    built = _build(schema, config, None, outputs, excluded)
    events = [a for name, a in built.events if name == sc.EVENT_EXCLUSION]
    groups: dict[str, list[Exclusion]] = {}
    for e in excluded:
        groups.setdefault(e.reason, []).append(e)
    for attributes, rows in [(built.span_attributes, outputs), *zip(events, [[e.candidate for e in g] for g in groups.values()], strict=True)]:
        kinds = [c.score_kind or sc.SCORE_NONE for c in rows]
        _one_form(attributes, sc.COLUMN_SCORE_KIND, sc.COLUMN_SCORE_KINDS, len(set(kinds)) == 1)
        hops = [-1 if c.hop is None else c.hop for c in rows]
        _one_form(attributes, sc.COLUMN_HOP, sc.COLUMN_HOPS, None if set(hops) == {-1} else len(set(hops)) == 1)
        receipts = [c.receipt for c in rows]
        ascii_rows = all(r is None or r.bytes == r.chars for r in receipts)
        _one_form(
            attributes, sc.COLUMN_CONTENT_ENCODING, sc.COLUMN_CONTENT_BYTES, None if receipts.count(None) == len(receipts) else once and ascii_rows
        )
    for attributes, group in zip(events, groups.values(), strict=True):
        ranks = [max(e.rank, -1) for e in group]
        run = ranks[0] >= 0 and ranks == list(range(ranks[0], ranks[0] + len(ranks)))
        _one_form(attributes, sc.COLUMN_RANK_FIRST, sc.COLUMN_RANKS, once and run)
        details = [_wire(e.detail) if e.detail is not None else "" for e in group]
        _one_form(attributes, sc.EXCLUSION_DETAIL, sc.COLUMN_EXCLUSION_DETAILS, None if not any(details) else once and len(set(details)) == 1)
