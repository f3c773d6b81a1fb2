"""The gate on the LangChain tutorial app (tests/gate/langchain_app.py): no ragtrail code in the app, the
installed LangChain instrumentation switched on by the gate's runner, the real InMemoryVectorStore."""

from __future__ import annotations

import json

from ragtrail.gate import baseline as baseline_mod
from ragtrail.gate import evalset as evalset_mod
from ragtrail.gate import runner
from ragtrail.gate.evaluate import evaluate

from . import langchain_app as app

RETRIEVER = "retrieve langchain_core.vectorstores.base.VectorStoreRetriever"


def test_langchain_app_gate() -> None:
    evalset = evalset_mod.parse("".join(json.dumps(r) + "\n" for r in app.eval_lines()))
    runs = [runner.run_in_process(app.build(), evalset.cases) for _ in range(2)]
    frozen = json.loads(baseline_mod.dumps(baseline_mod.freeze(evalset, runs)))
    assert frozen["stages"] == [RETRIEVER]
    # no answer receipt and no citations recorded by this app: those metrics are not frozen, not faked
    assert {s: sorted(rows) for s, rows in frozen["thresholds"].items()} == {
        s: ["in_context", "rbo", "recall@retrieve"] for s in ("(all)", "agent", "infra")
    }
    case = frozen["cases"]["agent-0"]["observation"]
    assert (case["corpus_size"], case["index"], case["stages"][0]["ids"][0]) == (
        12,
        ["langchain_core.vectorstores.base.VectorStoreRetriever"],
        "agent-0",
    )

    same = evaluate(evalset, runner.run_in_process(app.build(), evalset.cases), frozen)
    assert (same.verdict, same.problems, same.failed_checks()) == ("PASS", [], [])

    # a cheaper embedding (4 dimensions: words collide) rebuilt into the same store
    rebuilt = evaluate(evalset, runner.run_in_process(app.build(dims=4), evalset.cases), frozen)
    assert rebuilt.verdict == "REGRESSION" and rebuilt.problems == []
    assert {(c.slice, c.metric) for c in rebuilt.failed_checks()} == {
        (s, m) for s in ("(all)", "agent", "infra") for m in ("recall@retrieve", "in_context", "rbo")
    }
    agent = next(c for c in rebuilt.failed_checks() if c.slice == "agent" and c.metric == "recall@retrieve")
    assert agent.message == (
        "recall@retrieve fell to 0.500 (floor 1.000, baseline 1.000); relevant ids retrieved in "
        "the baseline and not now in 3 cases (agent-1, agent-2, agent-5)"
    )
