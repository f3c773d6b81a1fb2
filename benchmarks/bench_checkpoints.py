"""Producer checkpoints (issue 28): what the chain costs per segment, on the export worker, and what a
checkpoint costs to write (append + fsync), against the segments of a real recorded pipeline.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_checkpoints.py

Measured: ``CheckpointWriter.exported`` per segment (read the stage receipts, one sha256 chain step),
with a checkpoint every 1,000 records written to a file (its append and fsync amortised); the same
with ``RAGTRAIL_RECEIPT_KEY`` set (one HMAC per checkpoint); what a checkpoint line costs to write;
the file's bytes per segment; and the host thread's share: one ``note_sampled_out`` append.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import timeit
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fixtures.ragtrail_traces import rag_run  # noqa: E402 - the tests' pipeline: 6 stages, 6 receipts
from ragtrail.contract import semconv  # noqa: E402
from ragtrail.export.checkpoints import CheckpointWriter  # noqa: E402
from ragtrail.export.loss import LossLedger  # noqa: E402

SEGMENTS = 20_000


def segment() -> list:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    rag_run(provider.get_tracer("bench"))
    provider.shutdown()
    return list(exporter.get_finished_spans())


def per_segment(spans: list, directory: Path, keyed: bool) -> tuple[float, int, int]:
    """µs per segment (checkpoints every 1,000 included), bytes per segment, checkpoints written."""
    if keyed:
        os.environ[semconv.ENV_RECEIPT_KEY] = "a benchmark key"
    path = directory / f"checkpoints-{keyed}.jsonl"
    path.unlink(missing_ok=True)
    writer = CheckpointWriter(path, None, every_segments=1000, every_seconds=3600.0, loss=LossLedger())
    ids = [(i + 1) << 64 for i in range(SEGMENTS)]
    start = time.perf_counter()
    for trace_id in ids:
        writer.exported(trace_id, spans)
    writer.close()
    elapsed = time.perf_counter() - start
    os.environ.pop(semconv.ENV_RECEIPT_KEY, None)
    return elapsed / SEGMENTS * 1e6, path.stat().st_size // SEGMENTS, writer.written


def main() -> None:
    spans = segment()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        receipts = sum(1 for s in spans if semconv.STAGE_RECEIPT in (s.attributes or {}))
        print(f"segment: {len(spans)} spans, {receipts} stage receipts; {SEGMENTS:,} segments")
        print()
        print("| | µs per segment (worker) | bytes per segment in the file | checkpoints written |")
        print("|---|---:|---:|---:|")
        for keyed in (False, True):
            best = min((per_segment(spans, directory, keyed) for _ in range(3)), key=lambda r: r[0])
            print(f"| {'keyed (HMAC)' if keyed else 'unkeyed'} | {best[0]:.1f} | {best[1]} | {best[2]} |")
        writer = CheckpointWriter(directory / "one.jsonl", None, every_segments=10**9, every_seconds=3600.0, loss=LossLedger())
        for i in range(1000):
            writer.exported(i + 1, spans)
        start = time.perf_counter()
        writer.pump(time.monotonic() + 7200.0)  # one checkpoint of 1,000 records: encode, append, fsync
        print()
        print(f"one checkpoint of 1,000 records (encode + O_APPEND write + fsync): {(time.perf_counter() - start) * 1e3:.2f} ms")
        n = 100_000
        times = []
        for _ in range(5):
            times.append(timeit.timeit(lambda: writer.note_sampled_out(12345), number=n))
            writer.pump()  # the worker drains the notes between rounds, as it does at every iteration
        note = min(times) / n * 1e9
        print(f"host thread, a root the sampler dropped (note_sampled_out): {note:.0f} ns")


if __name__ == "__main__":
    main()
