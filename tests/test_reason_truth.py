"""Issue 12: derived reasons consistent with the kept outputs, and scores a reranker did not produce
never relabelled ``rerank`` (seed 002's silent fallback), on the real SDK through the public
decorators and ``ragtrail.stage``."""

from __future__ import annotations

from typing import Any

import ragtrail
from ragtrail.contract import semconv as sc
from spanutil import attrs, by_name, events, pop_all


def _doc(ident: str, score: float) -> dict[str, Any]:
    return {"id": ident, "content": f"text of {ident}", "score": score}


def _exclusions(span: Any) -> list[tuple]:
    return [(e[sc.CANDIDATE_ID], e[sc.EXCLUSION_REASON], e.get(sc.EXCLUSION_DETAIL)) for e in events(span, sc.EVENT_EXCLUSION)]


def _candidates(span: Any) -> list[tuple]:
    return [(e[sc.CANDIDATE_ID], e.get(sc.CANDIDATE_SCORE), e[sc.CANDIDATE_SCORE_KIND]) for e in events(span, sc.EVENT_CANDIDATE)]


GATE_INPUTS = [_doc("a", 0.74), _doc("b", 0.42), _doc("c", 0.39), _doc("d", 0.388), _doc("e", 0.2)]


def test_gate_that_kept_past_its_threshold_cut_by_rank(span_exporter):
    """threshold=0.5, top_n=3, kept 0.74/0.42/0.39: the rest were cut by the top 3, not by the
    threshold (0.388 < 0.5 is true and explains nothing: 0.42 < 0.5 was kept too)."""

    @ragtrail.filter(threshold=0.5)
    def gate(candidates):
        ragtrail.current_stage().set(top_k=3)
        return sorted(candidates, key=lambda d: -d["score"])[:3]

    kept = gate(GATE_INPUTS)
    assert [d["id"] for d in kept] == ["a", "b", "c"]
    (span,) = span_exporter.get_finished_spans()
    a = attrs(span)
    pop_all(
        a,
        {
            sc.STAGE_THRESHOLD: 0.5,
            sc.STAGE_TOP_K: 3,
            sc.CANDIDATES_IN: 5,
            sc.CANDIDATES_OUT: 3,
            sc.CANDIDATES_EXCLUDED: 2,
            sc.STAGE_STATUS: "ok",
            sc.STAGE_FINDINGS: [
                "kept_past_threshold: 2 kept output(s) score < threshold=0.5 (b=0.42, c=0.39): "
                "the threshold did not decide what was kept, so no exclusion is explained by it"
            ],
        },
    )
    assert _exclusions(span) == [("d", "below_rank_cutoff", "top_k=3"), ("e", "below_rank_cutoff", "top_k=3")]


def test_threshold_that_held_explains_its_drops(span_exporter):
    with ragtrail.stage("filter", "gate", threshold=0.5, top_k=3) as s:
        s.inputs(GATE_INPUTS)
        s.outputs(GATE_INPUTS[:1])  # only 0.74 passes: fewer than top_k kept, the threshold cut
    (span,) = span_exporter.get_finished_spans()
    assert sc.STAGE_FINDINGS not in attrs(span)
    assert _exclusions(span) == [
        ("b", "below_score_threshold", "score=0.42 < threshold=0.5"),
        ("c", "below_score_threshold", "score=0.39 < threshold=0.5"),
        ("d", "below_score_threshold", "score=0.388 < threshold=0.5"),
        ("e", "below_score_threshold", "score=0.2 < threshold=0.5"),
    ]


def test_no_knob_explains_a_drop_the_kept_outputs_contradict(span_exporter):
    """top_k=2 kept two, but the dropped 0.6 outscores the kept 0.3 and came before it: neither a
    cut by score nor by position explains it. Fewer kept than top_k: no rank cut at all."""
    docs = [_doc("x", 0.9), _doc("y", 0.6), _doc("z", 0.3)]
    with ragtrail.stage("filter", "pick", top_k=2) as s:
        s.inputs(docs)
        s.outputs([docs[0], docs[2]])
    with ragtrail.stage("filter", "few", top_k=3) as s:
        s.inputs(docs)
        s.outputs([docs[0]])
    pick, few = span_exporter.get_finished_spans()
    assert _exclusions(pick) == [("y", "unexplained", None)]
    assert _exclusions(few) == [("y", "unexplained", None), ("z", "unexplained", None)]


def test_cut_by_input_position_is_a_rank_cut(span_exporter):
    """A stage that keeps the first k of its input (not by score) cut by rank too."""
    docs = [_doc("x", 0.2), _doc("y", 0.9), _doc("z", 0.5)]
    with ragtrail.stage("filter", "first", top_k=2) as s:
        s.inputs(docs)
        s.outputs(docs[:2])
    (span,) = span_exporter.get_finished_spans()
    assert _exclusions(span) == [("z", "below_rank_cutoff", "top_k=2")]


def test_reranker_threshold_is_not_applied_to_upstream_scores(span_exporter):
    """A reranker's dropped inputs carry the retriever's similarities: compared with a rerank
    threshold they would say ``below_score_threshold`` for a cut made by rank."""

    @ragtrail.retriever(score_kind="similarity")
    def search(query):
        return [dict(d) for d in GATE_INPUTS]

    @ragtrail.reranker(top_k=3, threshold=0.5)
    def rerank(query, candidates):
        rescored = {"a": 0.91, "b": 0.47, "c": 0.44, "d": 0.05, "e": 0.01}
        return [{**d, "score": rescored[d["id"]]} for d in candidates][:3]

    @ragtrail.pipeline
    def app(query):
        return rerank(query, search(query))

    app("refund window?")
    span = by_name(span_exporter.get_finished_spans(), "rerank rerank")
    assert _candidates(span) == [("a", 0.91, "rerank"), ("b", 0.47, "rerank"), ("c", 0.44, "rerank")]
    assert _exclusions(span) == [("d", "below_rank_cutoff", "top_k=3"), ("e", "below_rank_cutoff", "top_k=3")]
    assert [e[sc.CANDIDATE_SCORE_KIND] for e in events(span, sc.EVENT_EXCLUSION)] == ["similarity", "similarity"]
    assert attrs(span)[sc.STAGE_FINDINGS] == [
        "kept_past_threshold: 2 kept output(s) score < threshold=0.5 (b=0.47, c=0.44): the threshold did not "
        "decide what was kept, so no exclusion is explained by it"
    ]


def test_reranker_that_returns_its_inputs_is_a_finding_and_keeps_their_kind(span_exporter):
    """Seed 002: the rerank did not parse, the code kept the input order; the RRF values it hands
    on are not rerank scores."""

    @ragtrail.retriever(score_kind="rrf")
    def hybrid(query):
        return [_doc("p", 0.0328), _doc("q", 0.0323), _doc("r", 0.0161)]

    @ragtrail.reranker(top_k=2)
    def rerank(query, candidates):
        return candidates[:2]  # fallback: the model's answer did not parse

    @ragtrail.pipeline
    def app(query):
        return rerank(query, hybrid(query))

    app("why did the messages survive?")
    spans = span_exporter.get_finished_spans()
    span = by_name(spans, "rerank rerank")
    a = attrs(span)
    pop_all(
        a,
        {
            sc.STAGE_STATUS: "ok",
            sc.CANDIDATES_IN: 3,
            sc.CANDIDATES_OUT: 2,
            sc.CANDIDATES_EXCLUDED: 1,
            sc.STAGE_FINDINGS: [
                "rerank_is_identity: the stage handed on 2 of its 3 inputs in their input order with their input "
                "scores: nothing was reranked (a silent fallback?); the scores keep their upstream kind (rrf)"
            ],
        },
    )
    assert _candidates(span) == [("p", 0.0328, "rrf"), ("q", 0.0323, "rrf")]
    assert _exclusions(span) == [("r", "below_rank_cutoff", "top_k=2")]


def test_reordered_pass_through_scores_keep_their_kind_without_identity(span_exporter):
    docs = [_doc("p", 0.8), _doc("q", 0.7)]
    with ragtrail.stage("rerank", "order_only", score_kind="rerank") as s:
        s.inputs(docs, score_kind="similarity")
        s.outputs([docs[1], docs[0]])
    (span,) = span_exporter.get_finished_spans()
    assert _candidates(span) == [("q", 0.7, "similarity"), ("p", 0.8, "similarity")]
    assert attrs(span)[sc.STAGE_FINDINGS] == [
        "2 output score(s) are the inputs' own scores, not produced by this stage: recorded with their upstream kind (similarity)"
    ]


def test_a_real_rerank_is_no_finding(span_exporter):
    docs = [_doc("p", 0.8), _doc("q", 0.7)]
    with ragtrail.stage("rerank", "model", score_kind="rerank") as s:
        s.inputs(docs, score_kind="similarity")
        s.outputs([{**docs[0], "score": 3.1}, {**docs[1], "score": -1.2}])  # same order, own scores
    (span,) = span_exporter.get_finished_spans()
    assert _candidates(span) == [("p", 3.1, "rerank"), ("q", -1.2, "rerank")]
    assert sc.STAGE_FINDINGS not in attrs(span)


def test_a_rerank_score_handed_on_by_a_later_stage_is_no_identity_rerank(span_exporter):
    """Probe h74 (LlamaIndex ``TimeWeightedPostprocessor`` then the response synthesizer): the
    reranker's own scores reach the next stage under their kind ``rerank``; that stage (a generate, a
    filter) claims no rerank of its own, so handing them on in order is no silent fallback."""
    docs = [_doc("p", 0.8), _doc("q", 0.7)]
    with ragtrail.stage("rerank", "time_weighted", score_kind="rerank") as s:
        s.inputs(docs, score_kind="similarity")
        s.outputs([{**docs[1], "score": 1.7}])
    with ragtrail.stage("generate", "synthesizer") as s:
        s.inputs([{**docs[1], "score": 1.7}], score_kind="rerank")
        s.outputs([{**docs[1], "score": 1.7}], score_kind="rerank")
    rerank, generate = span_exporter.get_finished_spans()
    assert _candidates(rerank) == [("q", 1.7, "rerank")]
    assert sc.STAGE_FINDINGS not in attrs(rerank) or attrs(rerank)[sc.STAGE_FINDINGS] == []
    assert _candidates(generate) == [("q", 1.7, "rerank")]
    assert sc.STAGE_FINDINGS not in attrs(generate)
