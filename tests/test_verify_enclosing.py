"""verify on nested stages: a retrieval that encloses other stages (a compression retriever around its
base retriever and an extractor) hands on what the stages inside it produced, so its outputs are
checked against theirs when it ends, not used as the upstream of the stages inside it."""

from __future__ import annotations

import ragtrail as rt
from fixtures.ragtrail_traces import record
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import receipt
from ragtrail.inspect.manifest import build
from ragtrail.inspect.sources import resolve

ORIGINAL = "I nominated Judge Ketanji Brown Jackson. She will continue Justice Breyer's legacy."
EXTRACT = "I nominated Judge Ketanji Brown Jackson."


def compression(handed_on: str):
    def run(tracer):
        with rt.stage("retrieve", "tests.compression", tracer=tracer) as outer:
            outer.query("Ketanji")
            with rt.stage("retrieve", "tests.base", tracer=tracer) as base:
                base.query("Ketanji")
                base.outputs([{"id": "k", "content": ORIGINAL}])
            with rt.stage("filter", "tests.extractor", tracer=tracer) as extractor:
                extractor.inputs([{"id": "k", "content": ORIGINAL}])
                extractor.outputs([rt.Candidate(id="k", content=EXTRACT, transform_rule=sc.RULE_LLM_EXTRACT, derived_from=receipt(ORIGINAL).sha256)])
            outer.outputs([{"id": "k", "content": handed_on}])

    return run


def fidelity(tmp_path, handed_on: str):
    record(tmp_path, compression(handed_on))
    return build(resolve(str(tmp_path), None)).as_dict()["fidelity"]


def test_the_enclosing_retrievals_output_is_checked_against_the_extract(tmp_path):
    f = fidelity(tmp_path, EXTRACT)
    assert f["alarms"] == []
    # the two query texts (intact against their receipts), the base's hit (first seen: not captured),
    # the extract (cited against the base's text), the outer stage's output (intact against the extract)
    assert (f["intact"], f["changed_cited"], f["changed_uncited"], f["not_captured"]) == (3, 1, 0, 1)


def test_an_enclosing_retrieval_that_changed_the_extract_alarms(tmp_path):
    f = fidelity(tmp_path, EXTRACT[:-1])
    assert f["changed_uncited"] == 1
    [alarm] = f["alarms"]
    assert (alarm["stage"], alarm["candidate"], alarm["field"]) == ("retrieve tests.compression", "k", "ragtrail.candidate.content.sha256")
