"""Issue 26 item 1: one rule weighs each kept trace by head x tail (ragtrail.inspect.weight), and the
gateway's stamp is what ``stats`` / ``compare`` / ``ls`` read. The real Collector and Jaeger run the
issue's scenario in tests/e2e/test_tail_weights.py; here the stamp is set by a span processor the way
gateway.yaml's transform sets it, on traces recorded by the real recorder into a local store."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

import ragtrail as rt
from ragtrail.contract import semconv as sc
from ragtrail.export.local_store import LocalStoreSpanExporter
from ragtrail.export.whole_trace import WholeTraceSpanProcessor
from ragtrail.inspect.weight import TraceWeight, WeightTally, trace_weight
from ragtrail.sampling import RagtrailSampler
from test_cli_errors import ragtrail

GATEWAY = Path(__file__).resolve().parents[1] / "collector-config" / "gateway.yaml"


@pytest.mark.parametrize(
    ("head", "policy", "tail", "expected"),
    [
        (2.0, None, None, TraceWeight(2.0, "sampled", 2.0)),
        (1.0, "baseline-probabilistic", 0.1, TraceWeight(10.0, "sampled", 1.0, "baseline-probabilistic", 0.1)),
        (2.0, "baseline-probabilistic", 0.1, TraceWeight(20.0, "sampled", 2.0, "baseline-probabilistic", 0.1)),
        (2.0, "finding-stage-status", 1.0, TraceWeight(2.0, "sampled", 2.0, "finding-stage-status", 1.0)),
        (None, "baseline-probabilistic", 0.25, TraceWeight(4.0, "tail_only", None, "baseline-probabilistic", 0.25)),
        (1.0, "my-own-policy", None, TraceWeight(1.0, "unknown_policy", 1.0, "my-own-policy", None)),
        (1.0, "unrecorded", 0.0, TraceWeight(1.0, "unknown_policy", 1.0, "unrecorded", None)),
        (None, None, None, TraceWeight(1.0, "no_record")),
        (True, None, True, TraceWeight(1.0, "no_record")),  # a bool is not a count nor a probability
    ],
)
def test_the_rule(head: Any, policy: Any, tail: Any, expected: TraceWeight) -> None:
    assert trace_weight(head, policy, tail) == expected


def test_the_tally_says_what_it_could_not_weigh() -> None:
    tally = WeightTally()
    for _ in range(42):
        tally.add(1.0, "unknown_policy", True)
    assert tally.statement() == "42 traces kept by an unknown policy: rates below are of the kept traces, not of the requests"
    tally.add(10.0, "sampled", True)
    tally.add(1.0, "no_record")
    assert tally.statement() == (
        "44 traces standing for 53 requests: weighted by head x tail adjusted count "
        "(ragtrail.sampling.adjusted_count x 1 / ragtrail.sampling.tail.probability) (1 traces carry it; 1 carry no sampling record and count once). "
        "42 traces kept by an unknown policy: rates below are of the kept traces, not of the requests"
    )


class Stamp(SpanProcessor):
    """What gateway.yaml's transform/tail_weight sets on every span of a kept trace."""

    def __init__(self) -> None:
        self.policy: str | None = None
        self.probability: float | None = None

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if self.policy is not None:
            span.set_attribute(sc.SAMPLING_TAIL_POLICY, self.policy)
        if self.probability is not None:
            span.set_attribute(sc.SAMPLING_TAIL_PROBABILITY, self.probability)


def _run(tracer: Any, i: int, degraded: bool) -> None:
    with rt.stage("pipeline", "t.answer", tracer=tracer):
        with rt.stage("retrieve", "t.search", tracer=tracer) as s:
            s.query(f"question {i}")
            hits = [{"id": f"d{i}", "content": "x", "score": 1.0}]
            s.inputs(hits)
            s.outputs(hits)
        with rt.stage("rerank", "t.rerank", tracer=tracer) as r:
            r.inputs(hits)
            if degraded:
                r.set_status("degraded", failure_class="parse_error", fallback="input_order")
            r.outputs(hits)


def _record(store: Path) -> None:
    """10 clean traces kept by the baseline at p=0.1, 5 degraded kept by a finding policy, 3 kept by a
    policy the gateway gave no probability (head p=1 on all)."""
    stamp = Stamp()
    provider = TracerProvider(sampler=RagtrailSampler(1.0))
    provider.add_span_processor(stamp)
    provider.add_span_processor(WholeTraceSpanProcessor(LocalStoreSpanExporter(store), schedule_delay_millis=10, grace_millis=10))
    tracer = provider.get_tracer("tests.weight")
    plan = [("baseline-probabilistic", 0.1, False)] * 10 + [("finding-stage-status", 1.0, True)] * 5 + [("my-own-policy", None, False)] * 3
    for i, (stamp.policy, stamp.probability, degraded) in enumerate(plan):
        _run(tracer, i, degraded)
    provider.force_flush()
    provider.shutdown()


def test_stats_compare_and_ls_weigh_by_head_times_tail_and_say_the_unknown(tmp_path: Path) -> None:
    _record(tmp_path)
    stats = json.loads(ragtrail("stats", "--source", str(tmp_path), "--json").stdout)
    assert (stats["traces"], stats["requests"], stats["weighted_traces"], stats["unknown_policy_traces"]) == (18, 108, 15, 3)
    assert stats["run_statuses"] == {"available": 103, "degraded": 5}
    assert stats["sampling"] == (
        "18 traces standing for 108 requests: weighted by head x tail adjusted count "
        "(ragtrail.sampling.adjusted_count x 1 / ragtrail.sampling.tail.probability) (15 traces carry it). "
        "3 traces kept by an unknown policy: rates below are of the kept traces, not of the requests"
    )
    compared = json.loads(ragtrail("compare", str(tmp_path), str(tmp_path), "--json").stdout)
    assert (compared["a"]["requests"], compared["a"]["degraded"], compared["a"]["degraded_rate"]) == (108, 5, round(5 / 108, 4))
    assert compared["a"]["sampling"] == stats["sampling"]
    listed = ragtrail("ls", "--source", str(tmp_path))
    assert f"ragtrail: {stats['sampling']}" in listed.stderr.splitlines()
    shown = json.loads(ragtrail("ls", "--source", str(tmp_path), "--json").stdout)
    assert Counter((r["adjusted_count"], r["sampling_basis"]) for r in shown) == {
        (10.0, "sampled"): 10,
        (1.0, "sampled"): 5,
        (None, "unknown_policy"): 3,
    }


def test_the_gateway_gives_every_policy_but_the_baseline_probability_one() -> None:
    cfg = yaml.safe_load(GATEWAY.read_text())
    statements = cfg["processors"]["transform/tail_weight"]["trace_statements"][0]["statements"]
    ones = [s for s in statements if sc.SAMPLING_TAIL_PROBABILITY in s and ", 1.0)" in s]
    (pattern,) = re.findall(r'IsMatch\(span\.attributes\["ragtrail\.sampling\.tail\.policy"\], "([^"]+)"\)', ones[0])
    names = [p["name"] for p in cfg["processors"]["tail_sampling"]["policies"]]
    assert [n for n in names if not re.fullmatch(pattern, n)] == ["baseline-probabilistic"]
    (share,) = [s for s in statements if '== "baseline-probabilistic"' in s and sc.SAMPLING_TAIL_PROBABILITY in s]
    assert 'Double("${env:RAGTRAIL_TAIL_SAMPLING_PERCENTAGE:-10}") / 100.0' in share
    # the share is the probabilistic policy's own setting, read from the same variable
    assert names[-1] == "baseline-probabilistic"
    baseline = cfg["processors"]["tail_sampling"]["policies"][-1]["probabilistic"]
    assert baseline["sampling_percentage"] == "${env:RAGTRAIL_TAIL_SAMPLING_PERCENTAGE:-10}"


def test_a_gateway_that_names_the_policy_but_not_its_probability_is_said(tmp_path: Path) -> None:
    """The issue's gateway: the record-policy gate names the policy on the scope, nothing gives its
    probability. Before, stats said "57 traces standing for 57 requests"; now it says it cannot weigh them."""
    store = tmp_path / "store"
    _record(store)
    plain = tmp_path / "plain"
    plain.mkdir()
    for path in store.glob("*.jsonl"):
        docs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for doc in docs:
            for rs in doc["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    ss["scope"]["attributes"] = [{"key": "tailsampling.policy", "value": {"stringValue": "baseline-probabilistic"}}]
                    for span in ss["spans"]:  # no gateway stamp: only the tail sampler's own record
                        span["attributes"] = [a for a in span["attributes"] if not a["key"].startswith("ragtrail.sampling.tail.")]
        (plain / path.name).write_text("".join(json.dumps(d) + "\n" for d in docs))
    stats = json.loads(ragtrail("stats", "--source", str(plain), "--json").stdout)
    assert (stats["traces"], stats["requests"], stats["unknown_policy_traces"]) == (18, 18, 18)
    assert stats["sampling"] == "18 traces kept by an unknown policy: rates below are of the kept traces, not of the requests"


def test_the_gate_says_what_its_sampled_traces_stand_for() -> None:
    from ragtrail.gate.model import EvalCase
    from ragtrail.gate.runner import CaseRun, sampling_warning

    case = EvalCase("c", "q", ())
    plain = [CaseRun(case, trace_id=f"t{i}", basis="sampled") for i in range(3)]
    assert sampling_warning(plain) is None  # every trace stands for itself: nothing to say
    runs = [
        *plain,
        CaseRun(case, trace_id="b", weight=10.0, basis="sampled", tail_stamped=True),
        CaseRun(case, trace_id="d", weight=1.0, basis="sampled", tail_stamped=True, degraded=True),
        CaseRun(case),  # missing: no trace, not counted
    ]
    assert sampling_warning(runs) == (
        "sampled traces: 5 traces standing for 14 requests: weighted by head x tail adjusted count "
        "(ragtrail.sampling.adjusted_count x 1 / ragtrail.sampling.tail.probability) (5 traces carry it); "
        "degraded runs: 1 of 14 requests (7.1%)"
    )
