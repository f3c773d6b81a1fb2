"""The recorder's public surface for hooks: lookups that never create, explicit creating calls,
candidate copies that carry their receipt."""

from __future__ import annotations

import pytest

import ragtrail
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import receipt
from ragtrail.recorder.candidates import CONTENT_KEYS, Candidate, adapt
from ragtrail.recorder.pipeline import Hop, PipelineState, current_pipeline


def test_lookups_never_create_a_hop():
    state = PipelineState()
    sha = receipt("q").sha256
    assert state.lookup_hop(sha) is None
    assert not state.has_hops() and state.hop_count() == 0
    assert state.untracked_hop(sha) == Hop(0, None, sc.TRANSFORM_NONE)
    assert state.lookup_hop(sha) == Hop(0, None, sc.TRANSFORM_NONE)
    assert state.has_hops() and state.hop_count() == 1
    other = receipt("changed q").sha256
    assert state.lookup_hop(other) is None and state.hop_count() == 1
    # issue 12: an untracked hop's parent is not known (never "the previous hop")
    assert state.untracked_hop(other) == Hop(1, None, sc.TRANSFORM_UNTRACKED)
    assert state.untracked_hop(other) == Hop(1, None, sc.TRANSFORM_UNTRACKED)  # known: not created twice
    assert state.hop_count() == 2


def test_given_hops_are_roots_of_their_own():
    state = PipelineState()
    first, second = receipt("solar").sha256, receipt("coal").sha256
    assert state.given_hop(first) == Hop(0, None, sc.TRANSFORM_NONE)
    assert state.given_hop(second) == Hop(1, None, sc.TRANSFORM_NONE)
    assert state.given_hop(second) == Hop(1, None, sc.TRANSFORM_NONE)  # known: not created twice
    # a stage that later runs with one of them finds its hop: nothing untracked
    assert state.claim_untracked(second) == (Hop(1, None, sc.TRANSFORM_NONE), False)
    assert state.hop_count() == 2


def test_new_hop_keeps_a_known_text():
    state = PipelineState()
    first, created = state.new_hop(receipt("a").sha256, None, sc.TRANSFORM_REWRITE)
    assert (first, created) == (Hop(0, None, sc.TRANSFORM_REWRITE), True)
    assert state.new_hop(receipt("a").sha256, 5, sc.TRANSFORM_EXPAND) == (first, False)


def test_current_pipeline_is_shared_by_the_stages_of_a_run(span_exporter):
    assert current_pipeline() is None
    with ragtrail.stage("pipeline", "app"):
        state = current_pipeline()
        with ragtrail.stage("retrieve", "r") as s:
            assert current_pipeline() is state
            assert s.query("q") == 0
            s.outputs([{"id": "a", "content": "x", "score": 1.0}])
        assert state.candidate_hop("a") == 0
        assert state.candidate_score_kind("a") is None
        assert state.lookup_hop(receipt("q").sha256) == Hop(0, None, sc.TRANSFORM_NONE)
    assert current_pipeline() is None


def test_stage_adapt_inherits_hop_and_kind(span_exporter):
    with ragtrail.stage("pipeline", "app"):
        with ragtrail.stage("retrieve", "r", score_kind="bm25") as s:
            s.query("q")
            s.outputs([{"id": "a", "content": "x", "score": 1.0}])
        with ragtrail.stage("rerank", "k") as s:
            got = s.adapt([{"id": "a", "content": "x", "score": 0.3}], inherit=True)
            plain = s.adapt([{"id": "a", "content": "x"}], score_kind="rerank")
    assert [(c.id, c.hop, c.score_kind) for c in got] == [("a", 0, "bm25")]
    assert [(c.id, c.hop, c.score_kind) for c in plain] == [("a", None, "rerank")]


def test_adapt_when_sampled_out_adapts_nothing():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    with ragtrail.stage("retrieve", "r", tracer=TracerProvider(sampler=ALWAYS_OFF).get_tracer("t")) as s:
        assert s.adapt([{"id": "a"}]) == []


def test_copy_carries_the_receipt_unless_the_content_changes():
    source = adapt({"id": "a", "content": "the text", "score": 0.5})
    stamped = source.receipt
    copy = source.copy(score=0.9, score_kind=sc.SCORE_RERANK)
    assert (copy.id, copy.content, copy.score, copy.score_kind) == ("a", "the text", 0.9, sc.SCORE_RERANK)
    assert copy.receipt is stamped and source.score == 0.5
    changed = source.copy(content="other text")
    assert changed.receipt == receipt("other text")
    with pytest.raises(TypeError):
        source.copy(_receipt=None)


def test_with_receipt_is_not_hashed_again():
    rec = receipt("the text")
    candidate = Candidate(id="a", content="the text").with_receipt(rec)
    assert candidate.receipt is rec


def test_one_content_key_order():
    # a payload with both keys gets the same content on every path (adapters and vector stores)
    assert CONTENT_KEYS.index("content") < CONTENT_KEYS.index("text")
    assert adapt({"id": "a", "text": "t", "content": "c"}).content == "c"
    from ragtrail.instrumentation._vectorstore import text_of

    assert text_of({"text": "t", "content": "c"}) == "c"


def test_filter_is_an_attribute_but_not_star_exported():
    assert callable(ragtrail.filter)
    assert "filter" not in ragtrail.__all__
    namespace: dict = {}
    exec("from ragtrail import *", namespace)
    assert "filter" not in namespace and "answer" in namespace


def test_stage_module_and_function_do_not_collide():
    import importlib

    module = importlib.import_module("ragtrail.recorder.stage")
    assert module.Stage is ragtrail.Stage and callable(ragtrail.stage)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("ragtrail.stage")
