"""The gate measures what reached the model only where a stage defined it (issue 24): an unknown
context is not measured, never counted as an empty one (a share of 0 would fail a floor falsely)."""

from __future__ import annotations

from ragtrail.gate import metrics as m
from ragtrail.gate.evaluate import movement
from ragtrail.gate.model import EvalCase
from ragtrail.gate.observation import Observation


def _observation(in_context: list[str] | None) -> Observation:
    return Observation(
        trace_id="t",
        stages=[],
        retrieved=["a", "b"],
        in_context=in_context,
        cited=[],
        cites=False,
        refused=None,
        answer_claim=None,
        corpus_size=None,
        stores=None,
        index=["app.Retriever"],
    )


def test_an_unknown_context_is_not_measured() -> None:
    case = EvalCase(id="c", query="q?", relevant=("a",))
    values = m.case_values(case, _observation(None), baseline_top=["a"])
    assert values[m.IN_CONTEXT] is None and values[m.RBO] is None
    assert values[m.RECALL] == 1.0
    assert movement(_observation(None), ["a"]).rbo is None
    known = m.case_values(case, _observation([]), baseline_top=["a"])
    assert known[m.IN_CONTEXT] == 0.0  # a context known to be empty is measured as such


def test_an_unknown_context_survives_the_baseline_file() -> None:
    obs = _observation(None)
    assert Observation.from_dict(obs.to_dict()).in_context is None
