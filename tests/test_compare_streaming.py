"""``compare`` streams side B past side A (issue 26): B's latest trace per question is paired as it is
read and its record is not kept; the result is the one a side read whole gives."""

from __future__ import annotations

import gc
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.inspect.compare import SideSummary, StreamedSide, compare
from ragtrail.inspect.manifest_model import ExcludedId
from ragtrail.inspect.records import StageRecord, TraceRecord


def _record(trace_id: str, question: str, start_ns: int, *, degraded: bool = False, cited: tuple[str, ...] = ("d1",)) -> TraceRecord:
    rerank_out = ("d2", "d1") if degraded else ("d1", "d2")
    stages = [
        StageRecord(sc.KIND_RETRIEVE, "app.search", sc.STATUS_OK, None, None, 0, 3, 0, ("d1", "d2", "d3"), ()),
        StageRecord(
            sc.KIND_RERANK,
            "app.rerank",
            sc.STATUS_DEGRADED if degraded else sc.STATUS_OK,
            "timeout" if degraded else None,
            "input_order" if degraded else None,
            3,
            2,
            1,
            rerank_out,
            (ExcludedId("d3", sc.REASON_BELOW_RANK_CUTOFF),),
        ),
    ]
    return TraceRecord(
        trace_id=trace_id, start_ns=start_ns, end_ns=start_ns + 1, service="svc", service_version=None, pipeline="app.answer",
        run_status=sc.RUN_DEGRADED if degraded else sc.RUN_AVAILABLE, query_sha256=question, answer_sha256="answer", refused=degraded,
        weight=1.0, basis="no_record", tail_stamped=False, stages=stages, cited=cited, in_context=cited, corpus_size=None,
        findings=[], insights=[], alarms=0,
    )  # fmt: skip


def _records_in(obj: Any) -> list[Any]:
    """Every TraceRecord or StageRecord reachable from ``obj``."""
    seen: set[int] = set()
    found, todo = [], [obj]
    while todo:
        item = todo.pop()
        if id(item) in seen or isinstance(item, (str, int, float, type)):
            continue
        seen.add(id(item))
        if isinstance(item, (TraceRecord, StageRecord)):
            found.append(item)
            continue
        todo.extend(gc.get_referents(item))
    return found


def test_side_b_streams_its_latest_trace_per_question_and_keeps_no_record() -> None:
    a = SideSummary("A")
    for r in (_record("a1", "q1", 10), _record("a2", "q2", 10), _record("a4", "q4", 10)):
        a.add(r)
    b_stream = [
        _record("b1-old", "q1", 20),
        _record("b1-new", "q1", 30, degraded=True),
        _record("b1-older", "q1", 5),
        _record("b3", "q3", 20),
        _record("b2", "q2", 20, cited=("d2",)),
        _record("b2-again", "q2", 20),  # same start: the first one read stays
    ]
    b = StreamedSide("B", against=a)
    whole = SideSummary("B")
    for r in b_stream:
        b.add(r)
        whole.add(r)
    assert _records_in(b.questions) == []  # no record of B is kept, only what the result needs
    assert len(_records_in(whole.by_query)) == 3  # a side read whole keeps one per question (the walk finds them)

    result = compare(a, b)
    assert result == compare(a, whole)  # a side read whole is streamed the same way
    assert [(p["a"], p["b"], p["verdict"]) for p in result["questions"]] == [
        ("a1", "b1-new", "different evidence"),
        ("a2", "b2", "same evidence, same answer"),
    ]
    assert result["only_in_a"] == [{"query_sha256": "q4", "trace_id": "a4"}]
    assert result["only_in_b"] == [{"query_sha256": "q3", "trace_id": "b3"}]
    totals_b = result["b"]
    assert (totals_b["traces"], totals_b["questions"], totals_b["repeats"], totals_b["degraded"], totals_b["refused"]) == (6, 3, 3, 1, 1)
    survival_b = {s["stage"]: s for s in totals_b["survival"]}
    # A cited d1 on q1 and q2; B's reranker handed d1 on in both (degraded on q1: other order)
    assert survival_b["rerank app.rerank"] == {"stage": "rerank app.rerank", "traces": 2, "other_cited_present": 1.0, "other_in_context_present": 1.0}
    survival_a = {s["stage"]: s for s in result["a"]["survival"]}
    # B cited d1 (q1) and d2 (q2): A's stages handed both on
    assert survival_a["retrieve app.search"]["other_cited_present"] == 1.0
