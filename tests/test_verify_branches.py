"""verify follows the run's branches (issue 24, principle 2): a candidate's content is checked against
its own upstream on its branch of the stage tree (its enclosing stages and what ran before it under
them), never against the copy another branch handed on last; a change on a branch is still caught."""

from __future__ import annotations

import ragtrail as rt
from fixtures.ragtrail_traces import record
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import receipt
from ragtrail.inspect.manifest import build
from ragtrail.inspect.sources import resolve

TEXT = "Refunds take 30 days."
HEADER = "name: refund policy\n\n" + TEXT
EXTRACT = "Refunds take 30 days"
HEADER_RULE = f"{sc.RULE_METADATA_HEADER_PREFIX}{len(HEADER) - len(TEXT)}"


def question(tracer, query: str, second_hit: str = TEXT, packed: str = HEADER, rule: str | None = HEADER_RULE) -> None:
    """One ``query()`` of a LlamaIndex query engine: retrieve, then generate around its prompt budget,
    which adds a metadata header under its rule."""
    with rt.stage("retrieve", "tests.retriever", tracer=tracer) as s:
        s.query(query)
        s.outputs([{"id": "a", "content": second_hit}])
    with rt.stage("generate", "tests.synth", tracer=tracer) as g:
        g.inputs([{"id": "a", "content": second_hit}])
        with rt.stage("budget", "tests.prompt_helper", tracer=tracer) as b:
            b.inputs([{"id": "a", "content": second_hit}])
            b.outputs([rt.Candidate(id="a", content=packed, transform_rule=rule, derived_from=receipt(second_hit).sha256 if rule else None)])
        g.outputs([{"id": "a", "content": second_hit}])


def fidelity(tmp_path, run) -> dict:
    record(tmp_path, run)
    return build(resolve(str(tmp_path), None)).as_dict()["fidelity"]


def alarms(f: dict) -> list[tuple[str, str, str]]:
    return [(a["stage"], a["candidate"], a["problem"]) for a in f["alarms"]]


def two_questions(second_hit: str = TEXT, packed: str = HEADER, rule: str | None = HEADER_RULE):
    def run(tracer):
        with rt.stage("pipeline", "tests.two_questions", tracer=tracer):
            question(tracer, "refund window?")
            question(tracer, "support hours?", second_hit=second_hit, packed=packed, rule=rule)

    return run


def test_the_second_question_is_not_checked_against_the_first_ones_prompt(tmp_path):
    """The first question's budget stage added a header inside its generate stage: the second
    question's retrieval is not downstream of that prompt."""
    f = fidelity(tmp_path, two_questions())
    assert f["alarms"] == []
    assert (f["changed_cited"], f["changed_uncited"], f["unverifiable"]) == (2, 0, 0)


def test_a_change_on_the_second_branch_still_alarms(tmp_path):
    f = fidelity(tmp_path, two_questions(second_hit=TEXT + " (edited)", packed=HEADER + " (edited)"))
    # the second retrieval's copy differs from what the run went on with (the first generate's)
    assert alarms(f) == [("retrieve tests.retriever", "a", "changed_uncited")]


def test_a_budget_change_without_a_rule_on_the_second_branch_still_alarms(tmp_path):
    f = fidelity(tmp_path, two_questions(rule=None))
    assert alarms(f) == [("budget tests.prompt_helper", "a", "changed_uncited")]


def fused(handed_on: str):
    """A fuse of two branches reading the same id: one a compression retrieval (base, then an
    extractor), the other a plain retrieval of the original text."""

    def run(tracer):
        with rt.stage("fuse", "tests.ensemble", tracer=tracer) as fuse:
            with rt.stage("retrieve", "tests.compression", tracer=tracer) as outer:
                outer.query("refunds")
                with rt.stage("retrieve", "tests.base", tracer=tracer) as base:
                    base.query("refunds")
                    base.outputs([{"id": "a", "content": TEXT}])
                with rt.stage("filter", "tests.extractor", tracer=tracer) as extractor:
                    extractor.inputs([{"id": "a", "content": TEXT}])
                    extractor.outputs([rt.Candidate(id="a", content=EXTRACT, transform_rule=sc.RULE_LLM_EXTRACT, derived_from=receipt(TEXT).sha256)])
                outer.outputs([{"id": "a", "content": EXTRACT}])
            with rt.stage("retrieve", "tests.plain", tracer=tracer) as plain:
                plain.query("refunds")
                plain.outputs([{"id": "a", "content": TEXT}])
            fuse.inputs([{"id": "a", "content": EXTRACT}, {"id": "a", "content": TEXT}])
            fuse.outputs([{"id": "a", "content": handed_on}])

    return run


def test_each_input_of_a_fuse_is_checked_on_its_own_branch(tmp_path):
    for name, handed_on in (("extract", EXTRACT), ("original", TEXT)):
        f = fidelity(tmp_path / name, fused(handed_on))
        assert f["alarms"] == [], name
        assert f["changed_cited"] == 1, name


def test_a_fuse_that_hands_on_neither_inputs_copy_alarms(tmp_path):
    f = fidelity(tmp_path, fused(TEXT + " (edited)"))
    assert ("fuse tests.ensemble", "a", "changed_uncited") in alarms(f)


def test_the_stage_tree_walks_through_foreign_spans_and_survives_a_parent_cycle():
    """Parents are untrusted input: a framework's own span between two stages is walked through; a
    cycle or a missing parent ends the walk (the stage is then a root)."""
    from ragtrail.inspect.model import Span
    from ragtrail.inspect.stages import StageView, stage_tree

    def span(sid: str, parent: str | None, kind: str | None = None) -> Span:
        return Span("t", sid, parent, sid, 0, 1, {sc.STAGE_KIND: kind} if kind else {})

    spans = [
        span("p", None, "pipeline"),
        span("engine", "p"),  # a LlamaIndex span, not a stage
        span("r", "engine", "retrieve"),
        span("a", "b", "filter"),
        span("b", "a", "budget"),  # a cycle between two stages
        span("x", "y"),
        span("y", "x"),
        span("c", "x", "generate"),  # above it: a cycle of foreign spans
        span("d", "gone", "cite"),  # its parent never arrived
    ]
    heads = [StageView(s) for s in spans if s.attributes]
    tree = stage_tree(spans, heads)
    assert tree.path("r") == ("p",)
    assert tree.path("p") == () and tree.path("c") == () and tree.path("d") == ()
    assert tree.path("a") == ("b",) and tree.path("b") == ("a",)
