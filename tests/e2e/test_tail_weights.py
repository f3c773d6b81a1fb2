"""Issue 26's scenario on the REAL Collector and Jaeger: fleet numbers that survive tail sampling.

An app runs 300 questions; 30 (10%) have the reranker fall back (``degraded``). The traces go through
collector-config/gateway.yaml (every trace with a finding kept, plus a 10% baseline) into Jaeger. The
gateway stamps each kept trace with the policy that kept it and that policy's probability
(``ragtrail.sampling.tail.policy`` / ``.probability``), and ``stats``, ``compare`` and ``ls`` weight
each trace by head x tail: they report about 300 requests and a 10% degraded rate, not "57 traces,
52.6% degraded".

Trace ids come from a seeded generator, so the baseline's hash keeps the same traces every run and
the figures below are the same every run; the bands are the issue's (300 +- 15%, 10% +- 3 points).
"""

from __future__ import annotations

import json
import random
import time

import ragtrail_backends as rb
from e2e_pipelines import App
from opentelemetry.sdk.trace.id_generator import IdGenerator

from ragtrail.gate.model import EvalCase
from ragtrail.gate.runner import from_traces, sampling_warning

QUESTIONS = 300
DEGRADED = set(range(0, QUESTIONS, 10))  # 30 of 300
PERCENTAGE = 10


class SeededIds(IdGenerator):
    """The same trace and span ids every run (the tail sampler's hash then decides the same way)."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)

    def generate_span_id(self) -> int:
        return self.random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self.random.getrandbits(128) or 1


def _degraded_rate(stats: dict) -> float:
    return stats["run_statuses"].get("degraded", 0) / stats["requests"]


def test_stats_compare_and_ls_weight_tail_sampled_traces_by_head_times_tail(start_jaeger, start_collector) -> None:
    began = time.monotonic()
    jaeger = start_jaeger("jaeger")
    tempo = start_jaeger("tempo-standin")
    gateway = start_collector("gateway.yaml", rb.gateway_env(jaeger, tempo, str(PERCENTAGE), decision_wait="1s"), name="gateway")
    app = App(gateway.traces_url, probability=1.0, id_generator=SeededIds(26))
    queries = [f"question {i}: what changed in report {i}?" for i in range(QUESTIONS)]
    sent = [app.run(q, finding="degraded" if i in DEGRADED else None) for i, q in enumerate(queries)]
    assert all(sent)
    app.flush()
    degraded_ids = {sent[i] for i in DEGRADED}
    rb.wait_until(lambda: degraded_ids <= {t["traceID"] for t in jaeger.traces_of_service(app.service)}, 30, what="every degraded trace in Jaeger")
    time.sleep(2.5)  # past the batch timeout of the last batch
    arrived = {t["traceID"] for t in jaeger.traces_of_service(app.service)}
    kept_clean = len(arrived - degraded_ids)
    assert arrived <= set(sent) and degraded_ids <= arrived
    # the gateway stamps every span of a kept trace; a clean trace stands for 1 / 0.1 = 10 requests
    for tid in sorted(arrived)[:5] + sorted(degraded_ids)[:5]:
        stamps = {
            (
                rb.otlp_attributes(s["attributes"]).get("ragtrail.sampling.tail.policy"),
                rb.otlp_attributes(s["attributes"]).get("ragtrail.sampling.tail.probability"),
            )
            for _, _, s in jaeger.v3_spans(tid)
        }
        assert stamps == ({("finding-stage-status", 1.0)} if tid in degraded_ids else {("baseline-probabilistic", 0.1)}), (tid, stamps)

    # the stamp comes after the producer: the stage receipts do not cover it, so no alarm
    for result in rb.verify_json(jaeger.source, *sorted(arrived)[:2], *sorted(degraded_ids)[:2]):
        assert result["fidelity"]["alarms"] == []

    stats_run = rb.ragtrail_cli("stats", "--source", jaeger.source, "--json")
    assert stats_run.returncode == 0, stats_run.stderr
    stats = json.loads(stats_run.stdout)
    assert stats["traces"] == len(arrived) == 30 + kept_clean
    assert stats["requests"] == 30 + 10 * kept_clean  # exactly: head 1 x tail 1 for a finding, x 10 for the baseline
    assert abs(stats["requests"] - QUESTIONS) <= 0.15 * QUESTIONS, stats["requests"]
    assert abs(_degraded_rate(stats) - 0.10) <= 0.03, _degraded_rate(stats)
    assert stats["sampling"] == (
        f"{len(arrived)} traces standing for {stats['requests']:g} requests: weighted by head x tail adjusted count "
        f"(ragtrail.sampling.adjusted_count x 1 / ragtrail.sampling.tail.probability) ({len(arrived)} traces carry it)"
    )
    assert stats["unknown_policy_traces"] == 0 and stats["no_sampling_record_traces"] == 0
    rerank = next(s for s in stats["stages"] if s["kind"] == "rerank")
    assert rerank["statuses"]["degraded"] == 30 and rerank["traces"] == stats["requests"]

    compared = rb.ragtrail_cli("compare", jaeger.source, jaeger.source, "--json")
    assert compared.returncode == 0, compared.stderr
    for side in ("a", "b"):
        totals = json.loads(compared.stdout)[side]
        assert (totals["traces"], totals["requests"], totals["degraded"]) == (len(arrived), stats["requests"], 30)
        assert totals["degraded_rate"] == round(30 / stats["requests"], 4)
        assert totals["sampling"] == stats["sampling"]

    listed = rb.ragtrail_cli("ls", "--source", jaeger.source)
    assert listed.returncode == 0, listed.stderr
    assert f"ragtrail: {stats['sampling']}" in listed.stderr.splitlines()
    # the gate's --traces: each case paired with its trace, the set's sampled reading said as a warning
    runs = from_traces(jaeger.source, [EvalCase(f"q{i}", q, ("doc-00",)) for i, q in enumerate(queries)], lookback="1h")
    assert sum(r.trace_id is not None for r in runs) == len(arrived)
    assert sum(r.weight for r in runs if r.trace_id) == stats["requests"]
    requests = stats["requests"]
    assert sampling_warning(runs) == f"sampled traces: {stats['sampling']}; degraded runs: 30 of {requests:g} requests ({30 / requests:.1%})"
    app.shutdown()
    rate, took = _degraded_rate(stats), time.monotonic() - began
    print(f"\n{len(arrived)} traces kept ({kept_clean} by the baseline), {stats['requests']:g} requests, degraded {rate:.1%}; {took:.1f}s")


def test_the_issues_gateway_without_the_stamp_is_said_not_weighted_as_one(start_jaeger, start_collector, tmp_path) -> None:
    """gateway.yaml as it was when the issue was filed (no transform/tail_weight): the record-policy gate
    names the policy on the scope, nothing gives its probability. stats no longer says "57 traces
    standing for 57 requests": it says it cannot weigh them."""
    import yaml

    cfg = yaml.safe_load((rb.CONFIG_DIR / "gateway.yaml").read_text())
    del cfg["processors"]["transform/tail_weight"]
    cfg["service"]["pipelines"]["traces"]["processors"].remove("transform/tail_weight")
    old = tmp_path / "gateway-without-stamp.yaml"
    old.write_text(yaml.safe_dump(cfg))
    jaeger = start_jaeger("jaeger")
    tempo = start_jaeger("tempo-standin")
    gateway = start_collector(str(old), rb.gateway_env(jaeger, tempo, str(PERCENTAGE), decision_wait="1s"), name="gateway")
    app = App(gateway.traces_url, probability=1.0, id_generator=SeededIds(26))
    sent = [app.run(f"question {i}", finding="degraded" if i in DEGRADED else None) for i in range(100)]
    app.flush()
    degraded_ids = {sent[i] for i in DEGRADED if i < 100}
    rb.wait_until(lambda: degraded_ids <= {t["traceID"] for t in jaeger.traces_of_service(app.service)}, 30, what="every degraded trace in Jaeger")
    time.sleep(2.5)
    arrived = len(jaeger.traces_of_service(app.service))
    stats = json.loads(rb.ragtrail_cli("stats", "--source", jaeger.source, "--json").stdout)
    assert (stats["traces"], stats["requests"], stats["unknown_policy_traces"]) == (arrived, arrived, arrived)
    assert stats["sampling"] == f"{arrived} traces kept by an unknown policy: rates below are of the kept traces, not of the requests"
    app.shutdown()
