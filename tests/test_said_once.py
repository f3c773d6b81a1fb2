"""Schema 5 (docs/semconv.md §3): a column that a rule gives for every row is said once, and only
when the rule holds for every row: consecutive input ranks as ``rank_first``, one shared detail as
``ragtrail.exclusion.detail``, ASCII content's byte counts as ``content.encoding = ascii``. Recorded
on the real SDK and read back from the local store: the single forms read back as the exact rows
the columns held, a rule that does not hold keeps its column, changing a single form after the
producer is named, and each schema is read by its own rules."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import trace

import ragtrail
from fixtures.ragtrail_traces import event_attr, record, rewrite_store, trace_id_now
from fixtures.ragtrail_traces import manifest_stage as _stage
from fixtures.ragtrail_traces import spans_by_name as _spans
from ragtrail.contract import semconv as sc
from ragtrail.inspect import columns
from ragtrail.inspect.manifest import build
from ragtrail.inspect.sources import FileSource

_DOCS = [{"id": f"d{i}", "content": f"chunk {i} about refunds. " * 3, "score": round(1.0 - i / 10, 2)} for i in range(6)]


def _run(tracer: trace.Tracer, docs: list[dict[str, Any]] = _DOCS) -> str:
    """retrieve 6 -> a filter that excludes two non-adjacent inputs with their own details -> a budget
    that cuts the tail of its inputs (consecutive ranks, one detail)."""
    with ragtrail.stage("pipeline", "tests.once", tracer=tracer):
        with ragtrail.stage("retrieve", "tests.r", score_kind="bm25", tracer=tracer) as s:
            s.query("refund window")
            s.outputs(docs)
        with ragtrail.stage("filter", "tests.f", tracer=tracer) as s:
            s.inputs(docs)
            s.exclude(docs[1], sc.REASON_SUPERSEDED, "replaced by d0")
            s.exclude(docs[3], sc.REASON_SUPERSEDED, "replaced by d2")
            kept = [docs[0], docs[2], docs[4], docs[5]]
            s.outputs(kept)
        with ragtrail.stage("budget", "tests.b", tracer=tracer) as s:
            s.inputs(kept)
            for d in kept[1:]:
                s.exclude(d, sc.REASON_BUDGET_EXCEEDED, "budget=60 words")
            s.outputs(kept[:1])
        return trace_id_now()


def _exclusion(span: Any) -> dict[str, Any]:
    (event,) = [e for e in span.events if e.name == sc.EVENT_EXCLUSION]
    return dict(event.attributes)


def test_rules_that_hold_for_every_row_are_said_once_and_read_back_as_the_rows(tmp_path) -> None:
    ragtrail.set_capture(content="off")
    trace_id = record(tmp_path, _run)
    spans = _spans(tmp_path, trace_id)
    retrieve, filt, budget = spans["retrieve r"], spans["filter f"], spans["budget b"]
    assert retrieve.attributes[sc.SCHEMA] == 5
    # ASCII content: the byte counts are the character counts, said once
    assert retrieve.attributes[sc.COLUMN_CONTENT_ENCODING] == sc.CONTENT_ASCII
    assert sc.COLUMN_CONTENT_BYTES not in retrieve.attributes
    assert list(retrieve.attributes[sc.COLUMN_CONTENT_CHARS]) == [len(d["content"]) for d in _DOCS]
    # the filter's exclusions: ranks 1 and 3 are not a run, the details differ: both stay columns
    excluded = _exclusion(filt)
    assert list(excluded.pop(sc.COLUMN_RANKS)) == [1, 3]
    assert list(excluded.pop(sc.COLUMN_EXCLUSION_DETAILS)) == ["replaced by d0", "replaced by d2"]
    assert sc.COLUMN_RANK_FIRST not in excluded and sc.EXCLUSION_DETAIL not in excluded
    # the budget's: input ranks 1, 2, 3 and one detail, each said once
    excluded = _exclusion(budget)
    assert excluded.pop(sc.COLUMN_RANK_FIRST) == 1 and excluded.pop(sc.EXCLUSION_DETAIL) == "budget=60 words"
    assert sc.COLUMN_RANKS not in excluded and sc.COLUMN_EXCLUSION_DETAILS not in excluded
    assert list(excluded.pop(sc.COLUMN_IDS)) == ["d2", "d4", "d5"]

    m = build(FileSource(tmp_path).get(trace_id)).as_dict()
    rows = [(r["id"], r["rank"], r["reason"], r["detail"]) for r in _stage(m, "budget tests.b")["excluded"]]
    assert rows == [
        ("d2", 1, "budget_exceeded", "budget=60 words"),
        ("d4", 2, "budget_exceeded", "budget=60 words"),
        ("d5", 3, "budget_exceeded", "budget=60 words"),
    ]
    rows = [(r["id"], r["rank"], r["detail"]) for r in _stage(m, "filter tests.f")["excluded"]]
    assert rows == [("d1", 1, "replaced by d0"), ("d3", 3, "replaced by d2")]
    # every row's bytes read back as its chars (the reader's records, what verify checks receipts on)
    decoded = columns.records(dict(retrieve.attributes), None, retrieve.attributes[sc.SCHEMA])
    assert [(r[sc.CANDIDATE_CONTENT_CHARS], r[sc.CANDIDATE_CONTENT_BYTES]) for r in decoded] == [
        (len(d["content"]), len(d["content"])) for d in _DOCS
    ]
    f = m["fidelity"]
    assert f["alarms"] == [] and f["notes"] == []
    # 1 query receipt, the 6 retrieved first seen (not captured), then the filter's 4 outputs and 2
    # exclusions and the budget's 1 output and 3 exclusions as intact handoffs of the retrieval's receipts
    assert (f["intact"], f["changed_cited"], f["changed_uncited"], f["unverifiable"], f["not_captured"]) == (11, 0, 0, 0, 6)


def test_content_that_is_not_ascii_keeps_its_bytes_column(tmp_path) -> None:
    ragtrail.set_capture(content="off")
    docs = [dict(d) for d in _DOCS]
    docs[2]["content"] = "Rückerstattung innerhalb von 30 Tagen."
    trace_id = record(tmp_path, lambda tracer: _run(tracer, docs))
    retrieve = _spans(tmp_path, trace_id)["retrieve r"]
    assert sc.COLUMN_CONTENT_ENCODING not in retrieve.attributes
    expected = [len(d["content"].encode("utf-8")) for d in docs]
    assert list(retrieve.attributes[sc.COLUMN_CONTENT_BYTES]) == expected and expected[2] == len(docs[2]["content"]) + 1
    decoded = columns.records(dict(retrieve.attributes), None, 5)
    assert [r[sc.CANDIDATE_CONTENT_BYTES] for r in decoded] == expected
    assert build(FileSource(tmp_path).get(trace_id)).as_dict()["fidelity"]["alarms"] == []


def _tampered(tmp_path: Any, edit: Any) -> list[tuple[str, str, str]]:
    ragtrail.set_capture(content="off")
    trace_id = record(tmp_path, _run)
    m = build(FileSource(rewrite_store(tmp_path, edit)).get(trace_id)).as_dict()
    return sorted({(a["stage"], a["field"], a["problem"]) for a in m["fidelity"]["alarms"]})


def _budget_exclusion(span: dict[str, Any]) -> dict[str, Any] | None:
    if span["name"] != "budget b":
        return None
    (event,) = [e for e in span["events"] if e["name"] == sc.EVENT_EXCLUSION]
    return event


@pytest.mark.parametrize(
    "key, kind, value",
    [(sc.COLUMN_RANK_FIRST, "intValue", "2"), (sc.EXCLUSION_DETAIL, "stringValue", "budget=6000 words")],
    ids=["first rank", "shared detail"],
)
def test_a_changed_single_form_on_an_exclusion_event_is_named(tmp_path, key: str, kind: str, value: str) -> None:
    def edit(span: dict[str, Any]) -> None:
        event = _budget_exclusion(span)
        if event is not None:
            event_attr(event, key)[kind] = value

    assert _tampered(tmp_path, edit) == [("budget tests.b", key, "changed_uncited")]


def test_a_removed_encoding_is_named(tmp_path) -> None:
    def edit(span: dict[str, Any]) -> None:
        if span["name"] == "retrieve r":
            span["attributes"] = [kv for kv in span["attributes"] if kv["key"] != sc.COLUMN_CONTENT_ENCODING]

    # the stage receipt names the field; the rows then have no bytes to read back, and nothing guesses
    # them: the retrieval's rows and every row that hands its receipts on are unverifiable, never a match
    assert _tampered(tmp_path, edit) == [
        ("budget tests.b", sc.CANDIDATE_CONTENT_SHA256, "unverifiable"),
        ("filter tests.f", sc.CANDIDATE_CONTENT_SHA256, "unverifiable"),
        ("retrieve tests.r", sc.CANDIDATE_CONTENT_SHA256, "unverifiable"),
        ("retrieve tests.r", sc.COLUMN_CONTENT_ENCODING, "changed_uncited"),
    ]


_EVENT = {
    sc.COLUMN_IDS: ["a", "b"],
    sc.COLUMN_RANK_FIRST: 4,
    sc.EXCLUSION_DETAIL: "top_k=3",
    sc.COLUMN_CONTENT_CHARS: [5, 6],
    sc.COLUMN_CONTENT_ENCODING: sc.CONTENT_ASCII,
    sc.COLUMN_CONTENT_SHA256: ["0" * 64, "1" * 64],
}


def test_each_schema_is_read_by_its_own_rules() -> None:
    five = columns.records(_EVENT, "below_rank_cutoff", 5)
    assert [(r[sc.CANDIDATE_RANK], r[sc.EXCLUSION_DETAIL], r[sc.CANDIDATE_CONTENT_BYTES]) for r in five] == [(4, "top_k=3", 5), (5, "top_k=3", 6)]
    # a schema 4 event never said these once: its single forms are not read (and with no ranks column,
    # which a schema 4 writer always wrote on an exclusion event, its rows have no rank)
    four = columns.records(_EVENT, "below_rank_cutoff", 4)
    assert [(sc.CANDIDATE_RANK in r, sc.EXCLUSION_DETAIL in r, sc.CANDIDATE_CONTENT_BYTES in r) for r in four] == [
        (False, False, False),
        (False, False, False),
    ]


def test_an_exclusion_event_without_ranks_gives_no_rank() -> None:
    event = {k: v for k, v in _EVENT.items() if k != sc.COLUMN_RANK_FIRST}
    for schema in (3, 4, 5):
        assert [sc.CANDIDATE_RANK in r for r in columns.records(event, "below_rank_cutoff", schema)] == [False, False]
    # a stage span's outputs have no ranks column: a row's rank is its position
    assert [r[sc.CANDIDATE_RANK] for r in columns.records(event, None, 5)] == [0, 1]
