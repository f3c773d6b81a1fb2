"""canonical_json does bounded work per value: depth, items, size (and a time budget as a last resort).

A host can hand the recorder anything as a candidate: a ``MagicMock`` (it answers every attribute, so
``tolist()`` returns another mock, whose ``tolist()``... : 8-27 s of recursion before a RecursionError on
the host's thread), a dict nested thousands deep, a list of millions. What does not fit is replaced by a
``<cut:REASON>`` marker and reported, and the stage that met it records a finding. Ordinary values keep
the canonical form they always had (tests/test_receipts.py pins those).
"""

from __future__ import annotations

from unittest.mock import MagicMock

import ragtrail
from ragtrail.contract import receipts
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import Canonical, canonical_json, canonical_json_bounded
from spanutil import attrs, events

MOCK_CUT = "opaque unittest.mock.MagicMock (its tolist() returned a unittest.mock.MagicMock)"


def _nested(depth: int) -> dict:
    value: dict = {"leaf": 1}
    for _ in range(depth):
        value = {"k": value}
    return value


def test_a_mock_is_its_type_name_and_a_cut_without_recursing():
    calls = []
    mock = MagicMock()
    mock.tolist.side_effect = lambda: (calls.append("tolist"), MagicMock())[1]
    assert canonical_json_bounded(mock) == Canonical('"<cut:opaque:unittest.mock.MagicMock>"', (MOCK_CUT,))
    assert calls == ["tolist"]  # asked once, its answer refused: no chain of mocks


def test_deep_nesting_is_cut_at_max_depth():
    text, cuts = canonical_json_bounded(_nested(5_000))
    assert cuts == ("depth",)
    assert text == '{"k":' * receipts.MAX_DEPTH + '"<cut:depth>"' + "}" * receipts.MAX_DEPTH
    within = _nested(receipts.MAX_DEPTH - 1)
    assert canonical_json_bounded(within) == Canonical('{"k":' * (receipts.MAX_DEPTH - 1) + '{"leaf":1}' + "}" * (receipts.MAX_DEPTH - 1), ())


def test_a_cycle_is_cut_by_depth_not_an_error():
    loop: list = []
    loop.append(loop)
    text, cuts = canonical_json_bounded(loop)
    assert cuts == ("depth",) and text == "[" * receipts.MAX_DEPTH + '"<cut:depth>"' + "]" * receipts.MAX_DEPTH
    fan: list = []
    fan.extend([fan, fan])  # 2**64 paths: the item bound stops it
    assert canonical_json_bounded(fan).cuts[-1] == "items"


def test_items_and_size_are_bounded():
    text, cuts = canonical_json_bounded(list(range(receipts.MAX_ITEMS + 10)))
    assert cuts == ("items",)
    assert text.endswith(f',{receipts.MAX_ITEMS - 2},"<cut:items>"]')
    big = ["x" * (receipts.MAX_CHARS // 2)] * 3
    text, cuts = canonical_json_bounded(big)
    assert cuts == ("size",) and text.endswith(',"<cut:size>"]') and text.count('"<cut:size>"') == 1


def test_ordinary_values_are_unchanged_and_report_nothing():
    seen = []
    recorder_observer = receipts.cut_observer()
    receipts.set_cut_observer(seen.append)
    try:
        assert canonical_json({"b": [1, 2.5, None], "a": "é", 3: None} | {}) == '{"3":null,"a":"é","b":[1,2.5,null]}'
        assert canonical_json({10: "a", 9: "b"}) == '{"9":"b","10":"a"}'  # numeric keys sort as numbers, as json does
        assert canonical_json({1: "a", "b": 2}) == '{"1":"a","b":2}'
        assert canonical_json({"x": {"y", "z"}, "o": object()}) == '{"o":"<builtins.object>","x":["\\"y\\"","\\"z\\""]}'
        assert seen == []
        canonical_json(_nested(100))
        assert seen == [("depth",)]
    finally:
        receipts.set_cut_observer(recorder_observer)


def test_mock_candidates_through_a_decorated_stage(span_exporter):
    @ragtrail.retriever(component="tests.mocks")
    def retrieve(query):
        return [MagicMock(), {"id": "real", "content": "text"}, MagicMock()]

    result = retrieve("q")
    assert len(result) == 3  # the host's own objects, untouched
    (span,) = span_exporter.get_finished_spans()
    a = attrs(span)
    assert a[sc.STAGE_FINDINGS] == [f"canonical form cut ({MOCK_CUT}): the id or receipt covers only what was kept"]
    ids = [e[sc.CANDIDATE_ID] for e in events(span, sc.EVENT_CANDIDATE)]
    assert ids[1] == "real" and ids[0] == ids[2] == "sha256:" + receipts.sha256_hex(b'"<cut:opaque:unittest.mock.MagicMock>"')
    assert a[sc.CANDIDATES_OUT] == 3
    assert sc.STAGE_INSTRUMENTATION_ERRORS not in a


def test_deeply_nested_candidate_and_metadata_through_a_stage(span_exporter):
    ragtrail.set_capture(metadata=["deep"])
    deep = _nested(3_000)
    with ragtrail.stage("retrieve", "tests.deep") as s:
        s.query("q")
        s.outputs([deep, {"id": "m", "content": "c", "metadata": {"deep": _nested(200)}}])
    (span,) = span_exporter.get_finished_spans()
    a = attrs(span)
    assert a[sc.STAGE_FINDINGS] == ["canonical form cut (depth): the id or receipt covers only what was kept"]
    got = events(span, sc.EVENT_CANDIDATE)
    assert got[0][sc.CANDIDATE_ID] == "sha256:" + receipts.sha256_hex(canonical_json_bounded(deep).text.encode())
    assert got[1]["ragtrail.candidate.meta.deep"].endswith('"<cut:depth>"' + "}" * receipts.MAX_DEPTH)
    assert sc.STAGE_INSTRUMENTATION_ERRORS not in a


def test_a_cut_met_while_writing_the_events_is_still_a_finding(span_exporter):
    ragtrail.set_capture(metadata=["deep"])
    with ragtrail.stage("retrieve", "tests.meta") as s:
        s.query("q")
        s.outputs([{"id": "m", "content": "c", "metadata": {"deep": _nested(200)}}])
    (span,) = span_exporter.get_finished_spans()
    assert attrs(span)[sc.STAGE_FINDINGS] == ["canonical form cut (depth): the id or receipt covers only what was kept"]
