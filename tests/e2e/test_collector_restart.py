"""A gateway collector restart in the middle of a run: every trace either arrives whole or is
counted lost by ragtrail's own ``ragtrail.loss`` records (read back from Jaeger), and no trace
arrives with a hole that `ragtrail verify` does not flag."""

from __future__ import annotations

import threading
import time

import ragtrail_backends as rb
from e2e_pipelines import App

from ragtrail.contract import semconv


def _loss_counts(jaeger: rb.Jaeger, service: str) -> tuple[int, int]:
    """(whole traces lost, loss records) summed over the ragtrail.loss records in Jaeger."""
    lost = records = 0
    for trace in jaeger.traces_of_service(service):
        for span in trace["spans"]:
            if span["operationName"] != semconv.LOSS_SPAN_NAME:
                continue
            tags = {t["key"]: t["value"] for t in span["tags"]}
            lost += int(tags.get(semconv.LOSS_TRACES_DROPPED, 0)) + int(tags.get(semconv.LOSS_TRACES_EXPORT_FAILED, 0))
            records += 1
    return lost, records


def test_collector_restart_mid_run_loses_only_counted_whole_traces(start_jaeger, start_collector) -> None:
    jaeger = start_jaeger("jaeger")
    tempo = start_jaeger("tempo-standin")
    gateway = start_collector("gateway.yaml", rb.gateway_env(jaeger, tempo), name="gateway")
    app = App(gateway.traces_url, exporter_timeout=1.0, processor_options={"retry_timeout_millis": 1000, "loss_report_interval_millis": 500})

    sampled: list[str] = []
    stop = threading.Event()

    def traffic() -> None:  # the application keeps serving requests throughout
        while not stop.is_set():
            sampled.extend(app.run_many(1))
            time.sleep(0.08)

    worker = threading.Thread(target=traffic)
    worker.start()
    try:
        time.sleep(2)
        gateway.stop()  # SIGTERM: the collector drains what it accepted, then refuses connections
        gateway.wait_ports_free()
        time.sleep(8)  # well past the retry budget (1 s + one SDK attempt + a probe): requests fail for good
        gateway.start()
        time.sleep(2)
    finally:
        stop.set()
        worker.join()
    app.flush()
    time.sleep(1)  # a loss-report interval
    app.shutdown()  # exports everything still buffered and a final loss record

    arrived: set[str] = set()
    # wait for the tail of the run (decision wait + batch) before counting what is missing
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        arrived = {t["traceID"] for t in jaeger.traces_of_service(app.service)} & set(sampled)
        lost, records = _loss_counts(jaeger, app.service)
        if len(arrived) + lost >= len(sampled):
            break
        time.sleep(0.5)
    missing = set(sampled) - arrived
    lost, records = _loss_counts(jaeger, app.service)
    assert missing, "the restart lost nothing: the test did not exercise loss"
    assert arrived, "nothing arrived"
    assert records >= 1
    assert lost == len(missing), (lost, len(missing), len(sampled))
    print(f"restart: {len(sampled)} traces, {len(arrived)} arrived whole, {lost} counted lost in {records} records")

    # whatever arrived is whole, or flagged: never a silent hole
    results = rb.verify_json(jaeger.source, *sorted(arrived))
    for result in results:
        tid = result["trace_id"]
        got = len(jaeger.v3_spans(tid))
        complete = got == app.recorder.spans_per_trace[tid]
        assert complete or result["fidelity"]["missing_spans"] > 0 or result["fidelity"]["alarms"], tid
        assert complete, f"{tid}: {got} of {app.recorder.spans_per_trace[tid]} spans"
