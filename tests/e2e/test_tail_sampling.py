"""gateway.yaml's tail sampling on the real collector: every trace with a finding is kept, a share
of the rest, and each kept trace records the policy that kept it (record-policy feature gate,
instrumentation-scope attribute ``tailsampling.policy``, read from Jaeger's v3 API)."""

from __future__ import annotations

import time

import ragtrail_backends as rb
from e2e_pipelines import FINDINGS, POLICY_FOR, App

PERCENTAGE = 25
CLEAN_TRACES = 200
PER_FINDING = 5


def _policies(spans: list[tuple[dict, dict, dict]]) -> set[str]:
    return {rb.otlp_attributes(scope.get("attributes")).get("tailsampling.policy") for _, scope, _ in spans}


def test_tail_sampling_keeps_every_finding_and_a_share_of_the_rest(start_jaeger, start_collector) -> None:
    jaeger = start_jaeger("jaeger")
    tempo = start_jaeger("tempo-standin")
    gateway = start_collector("gateway.yaml", rb.gateway_env(jaeger, tempo, str(PERCENTAGE)), name="gateway")
    app = App(gateway.traces_url, probability=1.0)

    with_finding: dict[str, str] = {}
    for finding in FINDINGS:
        for tid in app.run_many(PER_FINDING, finding=finding):
            with_finding[tid] = finding
    clean = app.run_many(CLEAN_TRACES)
    # a last finding trace: once it is decided, every earlier trace has been decided too
    sentinel = app.run_many(1, finding="degraded")[0]
    with_finding[sentinel] = "degraded"
    app.flush()
    assert len(with_finding) == len(FINDINGS) * PER_FINDING + 1 and len(clean) == CLEAN_TRACES

    # 100% of the traces with findings, whole, each saying which policy kept it
    for tid, finding in with_finding.items():
        spans = jaeger.wait_for_spans(tid, app.recorder.spans_per_trace[tid])
        assert len(spans) == app.recorder.spans_per_trace[tid]
        assert _policies(spans) == {POLICY_FOR[finding]}, (finding, _policies(spans))
    time.sleep(2.5)  # past the batch timeout of the sentinel's batch

    arrived = {t["traceID"] for t in jaeger.traces_of_service(app.service)}
    assert set(with_finding) <= arrived
    kept_clean = arrived & set(clean)
    assert arrived == set(with_finding) | kept_clean  # nothing unknown
    # roughly the configured share of the rest: 50 expected, binomial sd ~6.1, allow 4 sd
    expected = CLEAN_TRACES * PERCENTAGE / 100
    assert abs(len(kept_clean) - expected) <= 4 * (CLEAN_TRACES * 0.25 * 0.75) ** 0.5, len(kept_clean)
    for tid in kept_clean:
        spans = jaeger.v3_spans(tid)
        assert len(spans) == app.recorder.spans_per_trace[tid]  # kept whole, never a part
        assert _policies(spans) == {"baseline-probabilistic"}

    # ragtrail reads the kept traces back without alarms; the findings are the ones we caused
    finding_ids = sorted(with_finding)
    for result in rb.verify_json(jaeger.source, *finding_ids):
        assert result["fidelity"]["alarms"] == []
        kind = with_finding[result["trace_id"]]
        if kind in ("degraded", "failed", "unexplained", "untracked"):
            assert result["findings"], (kind, result)
    rb.record_fixture("tail_sampled_degraded", jaeger, sentinel)
    app.shutdown()
