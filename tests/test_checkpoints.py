"""Issue 28, items 1 and 2: producer checkpoints and ``ragtrail verify --checkpoints``.

A real export (the recorder, the whole-trace processor, the local store) writes 50 traces and its
checkpoints; the store is then tampered with as a backend operator could: 3 whole traces deleted, one
score changed in a 4th, a re-stamped copy of a 5th added under a new trace id. ``verify --checkpoints``
names each, exits 1; the intact store exits 0; traces the head sampler dropped and segments the
exporter counted lost are reported as such, never as missing."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from fixtures.ragtrail_traces import rag_run
from ragtrail.contract import checkpoints as cp
from ragtrail.contract import semconv as sc
from ragtrail.export.local_store import LocalStoreSpanExporter
from ragtrail.export.whole_trace import WholeTraceSpanProcessor
from ragtrail.inspect.sources import TempoSource
from ragtrail.sampling import RagtrailSampler
from test_cli_errors import assert_one_line_error
from test_cli_errors import ragtrail as cli


def export_runs(store: Path, checkpoints: Path, runs: int, *, probability: float = 1.0, **options: Any) -> list[str]:
    """``runs`` rag_run traces through the real export path with checkpoints; the ids of every run
    (sampled out ones too: the sampler's decision is the test's to read from the store)."""
    sampler = RagtrailSampler(probability)
    provider = TracerProvider(sampler=sampler)
    processor = WholeTraceSpanProcessor(
        LocalStoreSpanExporter(store), schedule_delay_millis=10, grace_millis=10, checkpoint_path=checkpoints, sampler=sampler, **options
    )
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("tests.checkpoints")
    try:
        return [rag_run(tracer) for _ in range(runs)]
    finally:
        provider.shutdown()


def checkpoint_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def where(path: Path, trace_id: str) -> tuple[str, int]:
    """(producer, checkpoint seq) of the exported record of ``trace_id``."""
    for line in checkpoint_lines(path):
        if any(r[0] == "exported" and r[1] == trace_id for r in line["records"]):
            return line["producer"], line["seq"]
    raise AssertionError(f"{trace_id} in no checkpoint")


def span_time(path: Path) -> str:
    lines = checkpoint_lines(path)
    lo, hi = min(x["from_ns"] for x in lines), max(x["to_ns"] for x in lines)
    return " .. ".join(dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") for ns in (lo, hi))


def rewrite_store(store: Path, drop: set[str], rescore: str, copy: str, new_id: str) -> None:
    """Delete the spans of ``drop``, change the first retrieval score of ``rescore``, and append a copy
    of ``copy``'s spans under ``new_id`` (its receipts still match its content: a re-stamped copy)."""
    copies = []
    for path in sorted(store.glob("traces-*.jsonl")):
        out = []
        for line in path.read_text().splitlines():
            doc = json.loads(line)
            for rs in doc["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    ss["spans"] = [s for s in ss["spans"] if s["traceId"] not in drop]
                    for span in ss["spans"]:
                        if span["traceId"] == copy:
                            copies.append({**span, "traceId": new_id})
                        if span["traceId"] == rescore and span["name"].startswith("retrieve"):
                            for attribute in span["attributes"]:
                                if attribute["key"] == sc.COLUMN_SCORES:
                                    attribute["value"]["arrayValue"]["values"][0] = {"doubleValue": 0.99}
            out.append(json.dumps(doc))
        path.write_text("\n".join(out) + "\n")
    forged = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {"name": "ragtrail"}, "spans": copies}]}]}
    (store / "traces-99990101T000000000000Z-1.jsonl").write_text(json.dumps(forged) + "\n")


class StoreAsTempo:
    """A loopback server answering Tempo's ``/api/search`` and ``/api/v2/traces/{id}`` from a local store's
    files (there is no Tempo binary here: Grafana Tempo is AGPL), as the Tempo source's tests do."""

    def __init__(self, store: Path) -> None:
        self.spans: dict[str, list[Any]] = {}
        for path in sorted(store.glob("traces-*.jsonl")):
            for line in path.read_text().splitlines():
                for rs in json.loads(line)["resourceSpans"]:
                    for ss in rs["scopeSpans"]:
                        for span in ss["spans"]:
                            self.spans.setdefault(span["traceId"], []).append({"resource": rs["resource"], "scopeSpans": [{**ss, "spans": [span]}]})
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                status, body = fake.answer(self.path)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def start(self, trace_id: str) -> int:
        return min(int(rs["scopeSpans"][0]["spans"][0]["startTimeUnixNano"]) for rs in self.spans[trace_id])

    def answer(self, raw: str) -> tuple[int, Any]:
        url = urlsplit(raw)
        params = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/api/search":
            lo, hi = int(params.get("start", 0)) * 10**9, (int(params.get("end", 2**33)) + 1) * 10**9
            hits = [t for t in self.spans if lo <= self.start(t) < hi][: int(params.get("limit", 20))]
            return 200, {"traces": [{"traceID": t, "startTimeUnixNano": str(self.start(t))} for t in hits]}
        trace_id = url.path.rsplit("/", 1)[1]
        if url.path.startswith("/api/v2/traces/") and trace_id in self.spans:
            return 200, {"trace": {"resourceSpans": self.spans[trace_id]}, "status": "COMPLETE"}
        return 404, {"error": "trace not found"}

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def tampered_lines(checkpoints: Path, source: str, dropped: list[str], rescored: str, new_id: str) -> list[str]:
    """What ``verify --checkpoints`` prints for the tampered source (whatever backend holds it)."""
    missing = [
        f"MISSING trace={t}: checkpointed (producer {where(checkpoints, t)[0]}, checkpoint {where(checkpoints, t)[1]}), not in {source}"
        for t in dropped
    ]
    return [
        *missing,
        f"ALTERED trace={rescored}: 1 of 6 stage receipts differ from the checkpointed ones",
        f"NOT CHECKPOINTED trace={new_id}: in {source} within the checkpointed time, in no checkpoint",
        f"FAIL 50 traces checkpointed by 1 producer in 3 checkpoints ({span_time(checkpoints)}): 47 present, 3 missing, 1 altered, "
        "1 not checkpointed; 0 counted lost, 0 sampled out at the head",
    ]


def test_verify_checkpoints_names_the_missing_the_altered_and_the_never_checkpointed(tmp_path: Path) -> None:
    store, checkpoints = tmp_path / "store", tmp_path / "checkpoints.jsonl"
    ids = export_runs(store, checkpoints, 50, checkpoint_every_segments=20)
    assert [len(line["records"]) for line in checkpoint_lines(checkpoints)] == [20, 20, 10]
    source = str(store)

    intact = cli("verify", "--checkpoints", str(checkpoints), "--source", source)
    assert intact.returncode == 0, intact.stdout + intact.stderr
    assert intact.stdout.splitlines() == [
        f"ok 50 traces checkpointed by 1 producer in 3 checkpoints ({span_time(checkpoints)}): 50 present, 0 missing, 0 altered, "
        "0 not checkpointed; 0 counted lost, 0 sampled out at the head"
    ]

    dropped, rescored, copied, new_id = sorted(ids[3:6]), ids[10], ids[20], "f" * 32
    rewrite_store(store, set(dropped), rescored, copied, new_id)
    tampered = cli("verify", "--checkpoints", str(checkpoints), "--source", source)
    assert tampered.returncode == 1, tampered.stdout + tampered.stderr
    missing = [
        f"MISSING trace={t}: checkpointed (producer {where(checkpoints, t)[0]}, checkpoint {where(checkpoints, t)[1]}), not in {source}"
        for t in dropped
    ]
    assert tampered.stdout.splitlines() == [
        *missing,
        f"ALTERED trace={rescored}: 1 of 6 stage receipts differ from the checkpointed ones",
        f"NOT CHECKPOINTED trace={new_id}: in {source} within the checkpointed time, in no checkpoint",
        f"FAIL 50 traces checkpointed by 1 producer in 3 checkpoints ({span_time(checkpoints)}): 47 present, 3 missing, 1 altered, "
        "1 not checkpointed; 0 counted lost, 0 sampled out at the head",
    ]
    as_json = json.loads(cli("verify", "--checkpoints", str(checkpoints), "--source", source, "--json").stdout)
    assert [f["trace_id"] for f in as_json["missing"]] == dropped
    assert [f["trace_id"] for f in as_json["altered"]] == [rescored]
    assert [f["trace_id"] for f in as_json["not_checkpointed"]] == [new_id]

    # the same store read through the Tempo source
    tempo = StoreAsTempo(store)
    try:
        through_tempo = cli("verify", "--checkpoints", str(checkpoints), "--source", f"tempo+{tempo.url}")
        description = TempoSource(tempo.url).description
        assert through_tempo.returncode == 1, through_tempo.stdout + through_tempo.stderr
        assert through_tempo.stdout.splitlines() == [
            *tampered_lines(checkpoints, description, dropped, rescored, new_id)[:-1],
            f"note: {description} lists traces with ragtrail spans only: others are not compared",
            tampered_lines(checkpoints, description, dropped, rescored, new_id)[-1],
        ]
    finally:
        tempo.close()


def big_run(tracer: trace.Tracer, spans: int) -> str | None:
    """A trace of ``spans`` spans, or ``None`` when the sampler dropped it."""
    with tracer.start_as_current_span("big") as root:
        for i in range(spans - 1):
            with tracer.start_as_current_span(f"child {i}"):
                pass
        return format(root.get_span_context().trace_id, "032x") if root.is_recording() else None


def test_head_sampling_and_counted_losses_are_reported_as_such_never_as_missing(tmp_path: Path) -> None:
    store, checkpoints = tmp_path / "store", tmp_path / "checkpoints.jsonl"
    sampler = RagtrailSampler(0.5)
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(
        WholeTraceSpanProcessor(
            LocalStoreSpanExporter(store),
            schedule_delay_millis=10,
            grace_millis=10,
            checkpoint_path=checkpoints,
            sampler=sampler,
            max_spans_per_trace=20,
        )
    )
    tracer = provider.get_tracer("tests.checkpoints")
    runs = [rag_run(tracer) for _ in range(30)]
    big = next(t for t in (big_run(tracer, 30) for _ in range(50)) if t is not None)  # dropped whole: trace_too_large
    provider.shutdown()
    kept = {r[1] for line in checkpoint_lines(checkpoints) for r in line["records"] if r[0] == "exported"}
    sampled_out = {r[1] for line in checkpoint_lines(checkpoints) for r in line["records"] if r[0] == "sampled_out"}
    assert kept | sampled_out >= set(runs) and not kept & sampled_out and kept and sampled_out
    assert kept <= set(runs)  # every kept run, and nothing else (the big trace was lost)

    result = cli("verify", "--checkpoints", str(checkpoints), "--source", str(store))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        f"LOST trace={big}: counted lost by the producer (trace_too_large), not missing",
        f"ok {len(kept)} traces checkpointed by 1 producer in 1 checkpoints ({span_time(checkpoints)}): {len(kept)} present, 0 missing, "
        f"0 altered, 0 not checkpointed; 1 counted lost, {len(sampled_out)} sampled out at the head",
    ]
    assert checkpoint_lines(checkpoints)[-1]["lost_traces"] == 1


def test_a_checkpoint_file_that_does_not_hold_is_one_line_and_exit_9(tmp_path: Path) -> None:
    store, checkpoints = tmp_path / "store", tmp_path / "checkpoints.jsonl"
    ids = export_runs(store, checkpoints, 4, checkpoint_every_segments=2)
    lines = checkpoints.read_text().splitlines()
    first = json.loads(lines[0])
    producer = first["producer"]
    # a record removed: the head no longer holds
    first["records"] = first["records"][1:]
    edited = tmp_path / "edited.jsonl"
    edited.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    assert_one_line_error(
        cli("verify", "--checkpoints", str(edited), "--source", str(store)),
        9,
        f"producer {producer} checkpoint 0: the records do not hash to its head (edited, or records removed)",
    )
    # a whole checkpoint removed: the chain says so
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join([lines[0], lines[2]]) + "\n")
    assert_one_line_error(
        cli("verify", "--checkpoints", str(cut), "--source", str(store)),
        9,
        f"producer {producer} checkpoint 2: follows checkpoint 0 (a checkpoint is missing)",
    )
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("not json\n")
    assert_one_line_error(cli("verify", "--checkpoints", str(garbage), "--source", str(store)), 9, f"{garbage} line 1 is not a checkpoint: not JSON")
    assert_one_line_error(
        cli("verify", ids[0], "--checkpoints", str(checkpoints), "--source", str(store)), 2, "--checkpoints compares a whole source"
    )


def test_keyed_checkpoints_carry_a_mac_that_only_the_key_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, checkpoints = tmp_path / "store", tmp_path / "checkpoints.jsonl"
    monkeypatch.setenv(sc.ENV_RECEIPT_KEY, "the key")
    export_runs(store, checkpoints, 3)
    monkeypatch.delenv(sc.ENV_RECEIPT_KEY)
    (line,) = checkpoint_lines(checkpoints)
    assert line["key_id"] == cp.key_id(b"the key") and line["mac"].startswith("hmac-sha256:")
    (tmp_path / "key").write_text("the key\n")
    (tmp_path / "other").write_text("another key\n")
    ok = cli("verify", "--checkpoints", str(checkpoints), "--source", str(store), "--key-file", str(tmp_path / "key"))
    assert ok.returncode == 0 and ok.stdout.startswith("ok 3 traces checkpointed"), ok.stdout + ok.stderr
    unchecked = cli("verify", "--checkpoints", str(checkpoints), "--source", str(store))
    assert unchecked.returncode == 0, unchecked.stdout + unchecked.stderr
    assert unchecked.stdout.splitlines()[0] == "note: the checkpoints carry MACs that were not checked: pass --key-file to check them"
    assert_one_line_error(
        cli("verify", "--checkpoints", str(checkpoints), "--source", str(store), "--key-file", str(tmp_path / "other")),
        9,
        f"producer {line['producer']} checkpoint 0: the MAC does not match (another key, or the checkpoint was edited)",
    )


class _Sink(http.server.BaseHTTPRequestHandler):
    received: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self.received.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def sink() -> Iterator[str]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Sink)
    _Sink.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/checkpoints"
    server.shutdown()
    server.server_close()


def test_checkpoints_are_posted_to_the_endpoint_and_a_dead_one_is_counted_never_raised(tmp_path: Path, sink: str) -> None:
    provider = TracerProvider()
    processor = WholeTraceSpanProcessor(
        LocalStoreSpanExporter(tmp_path / "store"), schedule_delay_millis=10, grace_millis=10, checkpoint_endpoint=sink
    )
    provider.add_span_processor(processor)
    ids = [rag_run(provider.get_tracer("t")) for _ in range(2)]
    provider.shutdown()
    assert processor.checkpoints is not None and processor.checkpoints.failures == 0
    (posted,) = _Sink.received
    assert [r[1] for r in json.loads(posted)["records"]] == ids

    dead = TracerProvider()
    processor = WholeTraceSpanProcessor(
        LocalStoreSpanExporter(tmp_path / "store2"), schedule_delay_millis=10, grace_millis=10, checkpoint_endpoint="http://127.0.0.1:9/nothing"
    )
    dead.add_span_processor(processor)
    rag_run(dead.get_tracer("t"))
    dead.shutdown()
    assert processor.checkpoints is not None and processor.checkpoints.failures == 1 and processor.checkpoints.written == 1


def test_the_chain_is_the_contract_s_encode_and_decode() -> None:
    records = [
        cp.Record(cp.KIND_EXPORTED, "a" * 32, 6, "0011223344556677"),
        cp.Record(cp.KIND_LOST, "b" * 32, 3, "queue_full"),
        cp.Record(cp.KIND_SAMPLED_OUT, "c" * 32),
    ]
    head = cp.GENESIS
    for record in records:
        head = cp.next_head(head, cp.record_json(record))
    checkpoint = cp.Checkpoint("p", 0, 3, cp.GENESIS, head, 1, 2, records)
    parsed, body = cp.parse_checkpoint(cp.checkpoint_line(checkpoint, b"k"))
    assert parsed.records == records and parsed.head == head and parsed.mac == cp.mac_of(body, b"k")
    cp.replay([parsed], [body], b"k")
    assert cp.record_json(records[2]) == '["sampled_out","cccccccccccccccccccccccccccccccc"]'
    # the direct text is the encoder's, and what needs escaping goes through the encoder
    for record in [*records, cp.Record(cp.KIND_LOST, 'a"b\\c', 1, "é\n"), cp.Record(cp.KIND_SAMPLED_OUT, "\u2028")]:
        assert cp.record_json(record) == json.dumps(list(record)[: 2 if record.kind == cp.KIND_SAMPLED_OUT else 4], separators=(",", ":"))
    assert cp.receipt_part("hmac-sha256:" + "ab" * 32) == "abababababababab" and cp.receipt_part("short") is None


def test_configure_hands_its_sampler_over_and_checkpoints_come_by_time_and_per_producer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ragtrail.export.configurator import configure

    checkpoints = tmp_path / "checkpoints.jsonl"
    monkeypatch.setenv(sc.ENV_CHECKPOINT_PATH, str(checkpoints))
    monkeypatch.setenv(sc.ENV_CHECKPOINT_EVERY_MILLIS, "50")
    options = {"schedule_delay_millis": 10, "grace_millis": 10}
    first = configure(local_store_dir=tmp_path / "store", sampling_probability=0.0, set_global=False, processor_options=options)
    second = configure(local_store_dir=tmp_path / "store", set_global=False, processor_options=options)
    dropped = rag_run(first.get_tracer("t"))  # p = 0: the root is dropped at the head
    kept = rag_run(second.get_tracer("t"))
    second.force_flush()

    def records() -> list[list[Any]]:
        return [r for line in checkpoint_lines(checkpoints) for r in line["records"]] if checkpoints.exists() else []

    deadline = time.monotonic() + 10
    while len(records()) < 2 and time.monotonic() < deadline:  # written by time, before any shutdown
        time.sleep(0.05)
    assert sorted(r[:2] for r in records()) == [["exported", kept], ["sampled_out", dropped]]
    first.shutdown()
    second.shutdown()
    lines = checkpoint_lines(checkpoints)
    assert len({line["producer"] for line in lines}) == 2 and sum(line["final"] for line in lines) == 2
    result = cli("verify", "--checkpoints", str(checkpoints), "--source", str(tmp_path / "store"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ok 1 traces checkpointed by 2 producers in 4 checkpoints (")
    assert result.stdout.rstrip().endswith(": 1 present, 0 missing, 0 altered, 0 not checkpointed; 0 counted lost, 1 sampled out at the head")
