"""The host application is never broken: results, exceptions and side effects are the undecorated
function's; bad input is recorded as a finding; internal errors are counted, never raised."""

from __future__ import annotations

import asyncio
import math
import uuid

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ragtrail
import spanutil
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import receipt, sorted_events_digest
from ragtrail.recorder.candidates import Candidate, register_adapter, unregister_adapter
from spanutil import attrs, events, records


def _one(exporter):
    spans = exporter.get_finished_spans()
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


def test_result_object_and_exception_are_untouched(span_exporter):
    docs = [{"id": "a", "content": "x", "score": 0.3}, {"id": "b", "content": "y", "score": 0.2}]

    @ragtrail.reranker(top_k=1)
    def rerank(query, candidates):
        candidates.sort(key=lambda d: d["id"], reverse=True)  # mutates in place, as flashrank does
        return candidates[:1]

    snapshot = [dict(d) for d in docs]
    result = rerank("q", docs)
    assert result == [snapshot[1]] and docs[0]["id"] == "b"  # the side effect happened as undecorated
    span = _one(span_exporter)
    # the recorder saw the input order from before the call
    assert [e[sc.CANDIDATE_ID] for e in events(span, sc.EVENT_EXCLUSION)] == ["a"]
    assert events(span, sc.EVENT_EXCLUSION)[0][sc.CANDIDATE_RANK] == 0

    class Boom(Exception):
        pass

    error = Boom("exact")

    @ragtrail.retriever
    def fails(query):
        raise error

    with pytest.raises(Boom) as raised:
        fails("q")
    assert raised.value is error


def test_same_result_identity_sync_and_async(span_exporter):
    marker = [{"id": "a"}]

    @ragtrail.retriever
    def sync(query):
        return marker

    @ragtrail.retriever
    async def asynchronous(query):
        await asyncio.sleep(0)
        return marker

    assert sync("q") is marker
    assert asyncio.run(asynchronous("q")) is marker
    assert asyncio.iscoroutinefunction(asynchronous)
    assert sync.__name__ == "sync" and asynchronous.__wrapped__.__name__ == "asynchronous"


def test_an_adapter_that_raises_is_counted_not_raised(span_exporter, caplog):
    class Weird:
        pass

    def bad_adapter(obj):
        raise RuntimeError("adapter bug")

    register_adapter(Weird, bad_adapter)
    try:
        before = ragtrail.internal_error_count()
        item = Weird()

        @ragtrail.retriever
        def search(query):
            return [item]

        assert search("q")[0] is item
        assert search("q")[0] is item
    finally:
        unregister_adapter(Weird)
    assert ragtrail.internal_error_count() == before + 2
    assert len([r for r in caplog.records if "adapter bug" in r.getMessage()]) == 1  # logged once
    first, second = span_exporter.get_finished_spans()
    assert first.attributes[sc.STAGE_INSTRUMENTATION_ERRORS] == 1
    assert first.attributes[sc.STAGE_STATUS] == "ok"


def test_generators_are_never_consumed(span_exporter):
    def gen():
        yield {"id": "a"}
        yield {"id": "b"}

    @ragtrail.reranker
    def rerank(query, candidates):
        return list(candidates)[:1]

    @ragtrail.retriever
    def lazy(query):
        return (d for d in [{"id": "z"}])

    assert rerank("q", gen()) == [{"id": "a"}]
    out = lazy("q")
    assert list(out) == [{"id": "z"}]  # the host still gets every item
    first, second = span_exporter.get_finished_spans()
    assert first.attributes[sc.STAGE_FINDINGS] == (
        "inputs are a generator, not a list: not snapshotted",
        "inputs not recorded: candidates.in is out + excluded",
    )
    assert first.attributes[sc.CANDIDATES_IN] == 1
    assert second.attributes[sc.STAGE_FINDINGS] == ("stage returned a generator, not a candidate list: outputs not recorded",)
    # the manual API materialises an iterator the user hands it explicitly
    with ragtrail.stage("filter", "f") as s:
        s.inputs(iter([{"id": "a"}, {"id": "b"}]))
        s.outputs(iter([{"id": "a"}]))
    assert attrs(span_exporter.get_finished_spans()[-1])[sc.CANDIDATES_EXCLUDED] == 1


@pytest.mark.parametrize(
    "returned, finding",
    [
        ("a string", "stage returned a str, not a candidate list: outputs not recorded"),
        ({"id": "a"}, "stage returned a dict, not a candidate list: outputs not recorded"),
        (None, "stage returned None"),
        (42, "stage returned a int, not a candidate list: outputs not recorded"),
    ],
)
def test_a_stage_that_returns_a_non_list_is_a_finding(span_exporter, returned, finding):
    @ragtrail.retriever
    def search(query):
        return returned

    assert search("q") is returned
    span = _one(span_exporter)
    assert span.attributes[sc.STAGE_FINDINGS] == (finding,)


def test_odd_scores_ids_and_contents(span_exporter):
    big = "é" * (10 * 1024 * 1024)  # 20 MB of UTF-8
    uid = uuid.UUID(int=7)
    items = [
        {"content": "no id"},
        {"id": 3, "content": b"\xffbytes", "score": np.float32(0.5)},
        {"id": uid, "content": "lone \udc80 surrogate", "score": math.nan},
        {"id": "inf", "content": big, "score": math.inf},
        {"id": "neg", "content": None, "score": -math.inf},
        {"id": "meta", "content": "m", "metadata": {"nested": {"a": [1, {"b": object()}]}, "arr": np.arange(2)}},
        ("tuple doc", 0.25),
        Candidate(id="explicit", content="c", score=None),
        None,
    ]
    ragtrail.set_capture(metadata=["nested", "arr"])
    with ragtrail.stage("retrieve", "odd") as s:
        s.outputs(items)
    span = _one(span_exporter)
    got = events(span, sc.EVENT_CANDIDATE)
    assert [e[sc.CANDIDATE_ID] for e in got] == [
        receipt("no id").sha256 and "sha256:" + receipt("no id").sha256,
        "3",
        str(uid),
        "inf",
        "neg",
        "meta",
        "sha256:" + receipt("tuple doc").sha256,
        "explicit",
        "sha256:" + receipt(None).sha256,
    ]
    assert got[1][sc.CANDIDATE_SCORE] == 0.5 and got[1][sc.CANDIDATE_CONTENT_BYTES] == 6
    assert got[2][sc.CANDIDATE_SCORE_RAW] == "nan" and sc.CANDIDATE_SCORE not in got[2]
    assert got[3][sc.CANDIDATE_SCORE_RAW] == "inf" and got[3][sc.CANDIDATE_CONTENT_BYTES] == 20 * 1024 * 1024
    assert got[4][sc.CANDIDATE_SCORE_RAW] == "-inf" and sc.CANDIDATE_CONTENT_SHA256 not in got[4]
    assert got[5]["ragtrail.candidate.meta.nested"] == '{"a":[1,{"b":"<builtins.object>"}]}'
    assert got[5]["ragtrail.candidate.meta.arr"] == "[0,1]"
    assert got[6][sc.CANDIDATE_SCORE] == 0.25
    assert sc.CANDIDATE_SCORE not in got[7] and sc.CANDIDATE_SCORE_RAW not in got[7]
    assert span.attributes[sc.EVENTS_COUNT] == len(items)


def test_empty_lists_and_none_inputs(span_exporter):
    with ragtrail.stage("rerank", "r") as s:
        s.inputs([])
        s.outputs([])
    with ragtrail.stage("rerank", "r") as s:
        s.inputs(None)
        s.outputs(None)
    for span in span_exporter.get_finished_spans():
        a = attrs(span)
        assert (a[sc.CANDIDATES_IN], a[sc.CANDIDATES_OUT], a[sc.CANDIDATES_EXCLUDED], a[sc.STAGE_STATUS]) == (0, 0, 0, "empty")
        assert a[sc.EVENTS_COUNT] == 0


def test_unknown_reason_and_status_are_findings(span_exporter):
    with ragtrail.stage("filter", "f") as s:
        s.inputs([{"id": "a"}])
        s.exclude({"id": "a"}, "because")
        s.set_status("weird")
        s.outputs([])
    span = _one(span_exporter)
    assert events(span, sc.EVENT_EXCLUSION)[0][sc.EXCLUSION_REASON] == "custom:invalid"
    assert span.attributes[sc.STAGE_FINDINGS] == ("invalid reason code 'because' replaced by custom:invalid", "invalid status 'weird'")
    assert span.attributes[sc.STAGE_STATUS] == "empty"


ids = st.sampled_from(["a", "b", "c", "d", "e", "f"]) | st.integers(0, 5)
docs = st.lists(
    st.fixed_dictionaries({"id": ids, "content": st.text(max_size=8), "score": st.floats(allow_nan=True, allow_infinity=True) | st.none()}),
    max_size=12,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs, st.data())
def test_manifest_invariants_hold_for_any_subset(span_exporter, inputs, data):
    span_exporter.clear()
    keep = data.draw(st.lists(st.sampled_from(range(len(inputs))), unique=True) if inputs else st.just([]))
    outputs = [inputs[i] for i in keep]
    with ragtrail.stage("filter", "prop", top_k=data.draw(st.none() | st.integers(0, 12))) as s:
        s.inputs(inputs)
        s.outputs(outputs)
    span = _one(span_exporter)
    a = span.attributes
    assert a[sc.CANDIDATES_IN] == len(inputs) == a[sc.CANDIDATES_OUT] + a[sc.CANDIDATES_EXCLUDED]
    received = records(span)  # schema 3: outputs as columns, exclusions one event per reason, read back
    assert a[sc.EVENTS_COUNT] == len(received) == len(inputs) == len(outputs) + len(events(span, sc.EVENT_EXCLUSION))
    assert len({e.attributes[sc.EXCLUSION_REASON] for e in span.events}) == len(span.events)  # one per reason
    assert a[sc.EVENTS_DIGEST] == sorted_events_digest((name, e[sc.CANDIDATE_ID], spanutil.content_part(e)) for name, e in received)
    for e in events(span, sc.EVENT_EXCLUSION):
        assert sc.is_valid_reason(e[sc.EXCLUSION_REASON])


def test_a_narrowing_stage_with_unknown_outputs_derives_no_exclusions(span_exporter):
    @ragtrail.reranker(top_k=2)
    def rerank(query, candidates):
        return iter(candidates[:2])

    docs = [{"id": i} for i in "abc"]
    assert list(rerank("q", docs)) == docs[:2]
    span = _one(span_exporter)
    a = attrs(span)
    assert (a[sc.CANDIDATES_IN], a[sc.CANDIDATES_OUT], a[sc.CANDIDATES_EXCLUDED]) == (3, 0, 0)
    assert events(span, sc.EVENT_EXCLUSION) == []
    assert a[sc.STAGE_FINDINGS] == [
        "stage returned a list_iterator, not a candidate list: outputs not recorded",
        "outputs not recorded: no exclusions derived",
    ]


def test_strings_on_the_wire_survive_otlp_encoding(span_exporter):
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from ragtrail.contract.receipts import INTACT, Receipt, classify

    text = "lone \udc80 surrogate"
    ragtrail.set_capture(content="full")
    with ragtrail.stage("retrieve", "r") as s:
        s.query(text)
        s.outputs([{"id": "id\udc81", "content": text}])
    span = _one(span_exporter)
    encode_spans([span]).SerializeToString()  # raises on a string that is not valid UTF-8
    assert span.attributes[sc.QUERY_TEXT] == "lone \\udc80 surrogate"
    (e,) = events(span, sc.EVENT_CANDIDATE)
    assert e[sc.CANDIDATE_ID] == "id\\udc81"
    # the escaped text is exactly the receipt's canonical text: it verifies as intact
    assert classify(e[sc.CANDIDATE_CONTENT_TEXT], Receipt.from_attributes(e, sc.CANDIDATE_CONTENT_PREFIX)) == INTACT


def test_exclude_by_string_finds_a_string_candidate_by_content(span_exporter):
    with ragtrail.stage("filter", "f") as s:
        s.inputs(["keep me", "drop me"])
        s.exclude("drop me", "not_permitted")
        s.outputs(["keep me"])
    span = _one(span_exporter)
    a = attrs(span)
    assert (a[sc.CANDIDATES_IN], a[sc.CANDIDATES_OUT], a[sc.CANDIDATES_EXCLUDED]) == (2, 1, 1)
    (e,) = events(span, sc.EVENT_EXCLUSION)
    assert (e[sc.CANDIDATE_ID], e[sc.EXCLUSION_REASON]) == ("sha256:" + receipt("drop me").sha256, "not_permitted")
    assert sc.STAGE_FINDINGS not in a  # nothing quoted the content


def test_only_a_query_like_argument_is_read_as_the_query(span_exporter):
    @ragtrail.filter
    def permitted(candidates, api_key):
        return candidates

    @ragtrail.retriever
    def search(text_in, k=3):
        return []

    permitted([{"id": "a"}], "sk-secret-123")
    search("the query")
    first, second = span_exporter.get_finished_spans()
    assert not any(k.startswith("ragtrail.query") for k in first.attributes)
    assert b"sk-secret" not in str(dict(first.attributes)).encode()
    assert second.attributes[sc.QUERY_TEXT] == "the query"
