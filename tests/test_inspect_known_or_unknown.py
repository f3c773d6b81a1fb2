"""Issue 24: what the inspector derives is known, or it says unknown; ``show`` tells the story.

Each test here failed on the code before issue 24: the fallback that read "every retrieved id" as
what reached the model, ``show`` without the insights, cut lines that put an input rank next to an
output cut, and ``compare``'s survival above 100% when a component runs several times per question."""

from __future__ import annotations

import re
import warnings
from typing import Any

import pytest
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rich.console import Console

import ragtrail
from ragtrail.export.otlp_json import spans_to_dict
from ragtrail.inspect.compare import SideSummary, totals
from ragtrail.inspect.doc_fate import fate
from ragtrail.inspect.manifest import build
from ragtrail.inspect.manifest_model import Manifest
from ragtrail.inspect.model import Trace
from ragtrail.inspect.otlp import decode_document
from ragtrail.inspect.records import TraceRecord, from_manifest
from ragtrail.inspect.render import show
from ragtrail.recorder import corpus as corpus_registry
from test_cli_errors import ragtrail as cli

UNKNOWN = "what reached the model is unknown: no budget, context or generate stage recorded it"
CHUNKS = {
    "kb-1": "refund window for enterprise customers is 14 days",
    "kb-2": "refund window for consumers is 30 days",
    "kb-3": "office hours are nine to five",
}


def manifest_of(exporter: Any) -> Manifest:
    spans = list(decode_document(spans_to_dict(exporter.get_finished_spans())))
    [trace_id] = {s.trace_id for s in spans}
    return build(Trace(trace_id=trace_id, spans=spans, source="memory"))


def search(query: str) -> list[dict[str, Any]]:
    words = set(re.findall(r"\w+", query.lower()))
    scored = sorted(((len(words & set(text.split())), ident, text) for ident, text in CHUNKS.items()), key=lambda r: (-r[0], r[1]))
    return [{"id": ident, "text": text, "score": float(score)} for score, ident, text in scored]


@pytest.fixture(autouse=True)
def _no_user_sizes():
    corpus_registry.clear()
    yield
    corpus_registry.clear()


def test_a_retrieval_with_no_context_stage_says_what_reached_the_model_is_unknown(span_exporter):
    """Principle 1: no budget, context or generate stage and nothing returned: the retrieved ids are
    not "in context", the coverage statement says unknown, and each fate says so."""

    @ragtrail.retriever(component="kb.search", top_k=2)
    def retrieve(query: str) -> list[dict[str, Any]]:
        ragtrail.current_stage().corpus_size(len(CHUNKS), store="kb")
        return search(query)[:2]

    @ragtrail.pipeline
    def ask(query: str) -> str:
        retrieve(query)
        text = "Enterprise customers have 14 days."
        ragtrail.answer(text, claim="absence")
        return text

    ask("refund window for enterprise customers")
    m = manifest_of(span_exporter)
    assert m.in_context is None
    c = m.coverage
    assert (c.corpus_size, c.retrieved, c.in_context, c.exhaustive) == (3, 2, None, False)
    assert c.statement == (f"the answer claims absence: not supported (2 retrieved of 3; {UNKNOWN})")
    assert {x.claim: x.supported for x in c.claims} == {"quote": False, "absence": False, "universal": False, "latest": False, "count": False}
    assert m.as_dict()["in_context"] is None and m.as_dict()["coverage"]["in_context"] is None
    f = fate(m, "kb-1")
    assert (f["in_context"], f["verdict"]) == (
        None,
        "last handed on by retrieve kb.search; what reached the model is unknown: no budget, context or generate stage recorded it",
    )


def test_without_a_claim_the_statement_names_what_was_retrieved(span_exporter):
    @ragtrail.retriever(component="kb.search", top_k=3)
    def retrieve(query: str) -> list[dict[str, Any]]:
        ragtrail.current_stage().corpus_size(len(CHUNKS), store="kb")
        return search(query)

    @ragtrail.pipeline
    def ask(query: str) -> str:
        retrieve(query)
        return "answer"

    ask("refund window")
    c = manifest_of(span_exporter).coverage
    # all 3 of 3 retrieved: on the old code "all 3 of 3 read: absence ... supported"
    assert (c.in_context, c.exhaustive) == (None, False)
    assert c.statement == (
        "what reached the model is unknown: no budget, context or generate stage recorded it (3 retrieved of 3): an absence claim is not supported"
    )


def test_a_budget_stage_defines_the_context(span_exporter):
    @ragtrail.retriever(component="kb.search", top_k=3)
    def retrieve(query: str) -> list[dict[str, Any]]:
        ragtrail.current_stage().corpus_size(len(CHUNKS), store="kb")
        return search(query)

    @ragtrail.budgeter(component="kb.budget", limit=1, unit="chunks")
    def fit(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return docs[:1]

    @ragtrail.pipeline
    def ask(query: str) -> str:
        fit(retrieve(query))
        return "answer"

    ask("refund window for enterprise customers")
    m = manifest_of(span_exporter)
    assert m.in_context == ["kb-1"]
    assert m.coverage.statement == "1 of 3 read: an absence claim is not supported"
    assert fate(m, "kb-1")["verdict"] == "reached the context, not cited"


def test_the_demo_show_ends_with_the_stale_citation_and_where_the_current_policy_was_cut(tmp_path):
    """Principle 6 (show): the demo's ``show`` tells its story: policy-2024-11 cited over policy-2026-01,
    which got as far as the reranker and was cut by the budget (not the superseded draft)."""
    result = cli("demo", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    shown = cli("show", "last", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[-3:] == [
        "Insights:",
        "  • stale_citation: cited policy-2024-11 (updated_at 2024-11-04, rank 0) outranked the newer policy-2026-01 "
        "(updated_at 2026-01-12, rank 4) at retrieve demo.bm25, which was not cited",
        "    policy-2026-01 got as far as rerank demo.overlap_reranker (output rank 3), then was cut at budget "
        "demo.context_budget from input rank 3: budget_exceeded (limit=90 words used=90)",
    ]
    # the demo's own output tells the same story
    assert lines[-1] in result.stdout.splitlines()
    # a date key no candidate carries finds nothing, and says what it looked for
    other = cli("show", "last", "--date-key", "reviewed_at", cwd=tmp_path).stdout.splitlines()
    assert other[-1] == (
        "Insights: none found (looked for stale_citation (by meta.reviewed_at), echo, silent_fallback; self_citation not checked (no author given))"
    )


def test_cut_lines_say_which_rank_is_which(tmp_path):
    """Principle 6 (cut lines): an exclusion shows the candidate's input rank and the cut, never a bare
    "rank 3 below_rank_cutoff top_k=4" that reads as a contradiction."""
    assert cli("demo", cwd=tmp_path).returncode == 0
    lines = cli("show", "last", cwd=tmp_path).stdout.splitlines()
    assert [line.split() for line in lines if "below_rank_cutoff" in line] == [["exceptions-annual-2026", "3", "below_rank_cutoff", "(top_k=4)"]]
    assert [line.split() for line in lines if line.startswith("excluded ")][-2:] == [["excluded", "input", "rank", "cut"]] * 2
    fate = cli("show", "last", "--doc", "policy-2026-01", cwd=tmp_path).stdout.splitlines()
    assert fate[-4:] == [
        "   7 rerank demo.overlap_reranker  kept, output rank 3 of 4, score 0.6909",
        "   8 budget demo.context_budget  EXCLUDED from input rank 3, cut: budget_exceeded (limit=90 words used=90)",
        "   9 cite cite  not present",
        "fate: excluded at budget demo.context_budget (budget_exceeded)",
    ]


def _record(exporter: Any) -> TraceRecord:
    return from_manifest(manifest_of(exporter))


def test_compare_survival_is_a_share_of_a_s_evidence_never_above_one(span_exporter):
    """Principle 6 (compare): a component that runs once per hop hands A's evidence on once, not once
    per run: on the old code this read 200%."""

    @ragtrail.retriever(component="kb.search", top_k=3)
    def retrieve(query: str) -> list[dict[str, Any]]:
        return search(query)

    @ragtrail.budgeter(component="kb.budget", limit=1, unit="chunks")
    def fit(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return docs[:1]

    @ragtrail.pipeline(component="kb.answer")
    def ask(query: str, hops: int) -> None:
        found: list[dict[str, Any]] = []
        for _ in range(hops):
            found = retrieve(query)
        ragtrail.cite([fit(found)[0]["id"]])

    a, b = SideSummary("a"), SideSummary("b")
    ask("refund window for enterprise customers", 1)
    a.add(_record(span_exporter))
    span_exporter.clear()
    ask("refund window for enterprise customers", 2)
    b.add(_record(span_exporter))
    survival = {s["stage"]: s for s in totals(b, a)["survival"]}
    assert survival["retrieve kb.search"] == {"stage": "retrieve kb.search", "traces": 1, "other_cited_present": 1.0, "other_in_context_present": 1.0}
    assert survival["budget kb.budget"]["other_in_context_present"] == 1.0


def test_compare_in_context_share_is_unknown_when_no_stage_defined_the_context(span_exporter):
    @ragtrail.retriever(component="kb.search", top_k=3)
    def retrieve(query: str) -> list[dict[str, Any]]:
        return search(query)

    @ragtrail.pipeline(component="kb.answer")
    def ask(query: str) -> None:
        ragtrail.cite([retrieve(query)[0]["id"]])

    a, b = SideSummary("a"), SideSummary("b")
    for side in (a, b):
        span_exporter.clear()
        ask("refund window")
        side.add(_record(span_exporter))
    (row,) = totals(b, a)["survival"]
    assert (row["other_cited_present"], row["other_in_context_present"]) == (1.0, None)


def test_generated_nodes_in_the_context_are_not_corpus_units(span_exporter):
    """Principle 1: a node no recorded stage read (here a sub-answer the run generated; as easily a
    unit an unrecorded component fetched) is of unknown origin: 2 chunks and 1 such node in the
    context of a 3-chunk corpus are neither "all 3 of 3 read" nor "1 never read"."""

    @ragtrail.retriever(component="kb.search", top_k=2)
    def retrieve(query: str) -> list[dict[str, Any]]:
        ragtrail.current_stage().corpus_size(len(CHUNKS), store="kb")
        return search(query)[:2]

    @ragtrail.budgeter(component="kb.budget", limit=3, unit="chunks")
    def fit(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [*docs, {"id": "sub-answer-0", "text": "Enterprise refunds: 14 days.", "score": 1.0}]

    @ragtrail.pipeline
    def ask(query: str) -> str:
        fit(retrieve(query))
        ragtrail.answer("There is no other refund policy.", claim="absence")
        return "answer"

    ask("refund window for enterprise customers")
    m = manifest_of(span_exporter)
    assert m.in_context == ["kb-1", "kb-2", "sub-answer-0"]
    c = m.coverage
    assert (c.corpus_size, c.in_context, c.exhaustive) == (3, 2, False)
    assert c.unknown_origin == 1
    assert c.statement == "the answer claims absence: not supported (2 of 3 read, up to 1 never read; 1 in the context of unknown origin)"
    assert [(v.claim, v.supported, v.why) for v in c.claims][1] == (
        "absence",
        False,
        "asserts something about up to 1 units never read (1 in the context of unknown origin)",
    )
    assert m.findings[0] == (
        "1 in the context of unknown origin (sub-answer-0): no recorded stage read them (text made in the run, "
        "or a component ragtrail does not record read them); coverage counts them apart"
    )


def test_a_query_of_one_space_is_not_shown_as_empty(span_exporter):
    """Principle 6 (display): a query of one space read as ``""`` on the old code."""

    @ragtrail.retriever(component="kb.search", top_k=1)
    def retrieve(query: str) -> list[dict[str, Any]]:
        return search(query)[:1]

    @ragtrail.pipeline
    def ask(query: str) -> None:
        retrieve(query)

    ask(" ")
    console = Console(record=True, width=200)
    show(console, manifest_of(span_exporter))
    assert "  hop 0  none  (whitespace only, 1 chars) → index" in console.export_text().splitlines()


def test_show_doc_lists_the_inner_stages_before_the_outer_one_that_ran_them(span_exporter):
    """Principle 6 (display): the outer retriever starts first but hands on last; on the old code its
    step came first."""

    @ragtrail.retriever(component="kb.inner", top_k=3)
    def inner(query: str) -> list[dict[str, Any]]:
        return search(query)

    @ragtrail.retriever(component="kb.outer", top_k=2)
    def outer(query: str) -> list[dict[str, Any]]:
        return inner(query)[:2]

    @ragtrail.pipeline
    def ask(query: str) -> None:
        outer(query)

    ask("refund window for enterprise customers")
    m = manifest_of(span_exporter)
    assert [s.label for s in m.stages] == ["retrieve kb.outer", "retrieve kb.inner"]
    assert [step["stage"] for step in fate(m, "kb-1")["steps"]] == ["retrieve kb.inner", "retrieve kb.outer"]


def test_a_hop_cut_on_the_way_is_marked_where_it_is_printed():
    """Principle 6 (display): the SDK's attribute limit cut the query; on the old code ``show`` printed
    the 12 characters that arrived as if they were the whole question."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_attribute_length=12))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests.cut")

    @ragtrail.retriever(component="kb.search", top_k=1, tracer=tracer)
    def retrieve(query: str) -> list[dict[str, Any]]:
        return search(query)[:1]

    @ragtrail.pipeline(tracer=tracer)
    def ask(query: str) -> None:
        retrieve(query)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the SDK warns that it truncates: that is the point
        ask("refund window for enterprise customers")
    console = Console(record=True, width=200)
    show(console, manifest_of(exporter))
    assert '  hop 0  none  "refund windo" → index  [cut on the way: 12 of 38 chars arrived]' in console.export_text().splitlines()


def test_sub_answers_are_no_corpus_units_and_the_chunk_the_sub_questions_read_is(span_exporter):
    """Principle 1: sub-questions each answered from one chunk, then the final answer from their
    generated sub-answers: 1 of 3 read and 3 of unknown origin (on the old code the sub-answers made
    it "all 3 of 3"; then "2 never read", a guess: the trace does not say the sub-answers are no units)."""

    @ragtrail.retriever(component="kb.search", top_k=1)
    def retrieve(query: str) -> list[dict[str, Any]]:
        ragtrail.current_stage().corpus_size(len(CHUNKS), store="kb")
        return search(query)[:1]

    def generate(component: str, docs: list[dict[str, Any]]) -> None:
        with ragtrail.stage("generate", component) as s:
            s.inputs(docs)
            s.outputs(docs)

    @ragtrail.pipeline
    def ask(query: str) -> None:
        answers = []
        for i in range(3):
            generate("sub_question.answer", retrieve(query))
            answers.append({"id": f"sub-answer-{i}", "text": f"answer {i}: 14 days", "score": 1.0})
        generate("final.answer", answers)
        ragtrail.answer("Only 14 days, nothing else.", claim="absence")

    ask("refund window for enterprise customers")
    m = manifest_of(span_exporter)
    assert m.in_context == ["sub-answer-0", "sub-answer-1", "sub-answer-2", "kb-1"]
    c = m.coverage
    assert (c.corpus_size, c.in_context, c.exhaustive) == (3, 1, False)
    assert (c.unknown_origin, c.statement) == (
        3,
        "the answer claims absence: not supported (1 of 3 read, up to 2 never read; 3 in the context of unknown origin)",
    )
