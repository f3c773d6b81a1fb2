"""loadbalancer.yaml in front of two gateway.yaml collectors (the standard scale-out): every trace
is decided, whole, on ONE gateway, even when its spans come from two services in separate requests.

The finding (a degraded rerank) lives in the front service's part of each trace; the back
service's part (a remote retrieve) has none. The gateways keep 0% of finding-free traces, so a
back part routed to the other gateway than its front part would be dropped there and the trace
would arrive with a hole. Each gateway's second exporter goes to its own Jaeger, which shows
which gateway decided each trace.
"""

from __future__ import annotations

import time

import ragtrail_backends as rb
from e2e_pipelines import App, build_pipeline, remote_search_service


def test_two_gateways_behind_the_load_balancer_keep_traces_whole(start_jaeger, start_collector) -> None:
    jaeger = start_jaeger("jaeger")
    per_gateway = [start_jaeger("tempo-standin-1"), start_jaeger("tempo-standin-2")]
    gateways = [
        start_collector("gateway.yaml", rb.gateway_env(jaeger, standin, percentage="0", decision_wait="2s"), name=f"gateway-{i + 1}")
        for i, standin in enumerate(per_gateway)
    ]
    lb = start_collector(
        "loadbalancer.yaml",
        {
            "RAGTRAIL_GATEWAY_1": gateways[0].otlp_grpc_endpoint,
            "RAGTRAIL_GATEWAY_2": gateways[1].otlp_grpc_endpoint,
        },
        record_policy=False,
        name="loadbalancer",
    )

    front = App(lb.traces_url)
    back = App(lb.traces_url)
    front.run = build_pipeline(front.tracer, remote_retriever=remote_search_service(back))
    kept: list[str] = []
    dropped: list[str] = []
    for i in range(30):
        kept.extend(front.run_many(1, finding="degraded"))
        if i % 3 == 0:
            dropped.extend(front.run_many(1))
    # the back service exports first, the front part arrives later in another request
    back.flush()
    time.sleep(0.5)
    front.flush()

    def total(tid: str) -> int:
        return front.recorder.spans_per_trace[tid] + back.recorder.spans_per_trace[tid]

    on_gateway = [0, 0]
    for tid in kept:
        assert back.recorder.spans_per_trace[tid] >= 1 and front.recorder.spans_per_trace[tid] >= 1
        spans = jaeger.wait_for_spans(tid, total(tid))
        assert len(spans) == total(tid)  # whole: both services' parts, decided together
        assert {rb.otlp_attributes(scope.get("attributes")).get("tailsampling.policy") for _, scope, _ in spans} == {"finding-stage-status"}
        counts = rb.wait_until(
            lambda tid=tid: (lambda c: c if sum(c) >= total(tid) else None)([len(j.v3_spans(tid)) for j in per_gateway]),
            30,
            what=f"trace {tid} on the gateways' own backends",
        )
        assert sorted(counts) == [0, total(tid)], counts  # all spans on exactly one gateway
        on_gateway[counts.index(total(tid))] += 1
    assert all(on_gateway), on_gateway  # the ring used both gateways

    time.sleep(3)  # past both gateways' decision wait for the finding-free traces
    arrived = {t["traceID"] for t in jaeger.traces_of_service(front.service)}
    arrived |= {t["traceID"] for t in jaeger.traces_of_service(back.service)}
    assert arrived == set(kept)  # finding-free traces dropped whole: no stray back parts

    for result in rb.verify_json(jaeger.source, *kept[:5]):
        assert result["fidelity"]["alarms"] == []
        assert result["fidelity"]["missing_spans"] == 0
    front.shutdown()
    back.shutdown()
