"""Inspector speed: ``show`` and ``verify`` on a 5,000-span trace, ``diff`` on two 1,000-candidate traces.

Target: under 2 seconds each on the development machine. The traces are produced by the real
recorder and written by the real local store exporter (setup, not timed); each command is then
timed end to end as a user runs it (``ragtrail ...`` in a fresh process, Python start-up included),
as wall-clock time and as CPU time (user+sys of the process: the figure that does not depend on what
else the machine is running). Two 5,000-span shapes:

* ``batch``: one trace holding 1,250 RAG requests (rewrite, retrieve 10, rerank 10 -> 5, cite): 32,500 events;
* ``stress``: 125 retrievers of 400 candidates and 125 rerankers cutting to 100, spilled 20 events per
  span into continuation spans: 100,000 events, 85 MB of OTLP JSON.

Run from the repository root::

    .venv/bin/python benchmarks/bench_inspect.py
"""

from __future__ import annotations

import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

import ragtrail
from ragtrail.export.local_store import LocalStoreSpanExporter
from ragtrail.export.whole_trace import WholeTraceSpanProcessor
from ragtrail.inspect.sources import FileSource

RAGTRAIL = str(Path(sys.executable).with_name("ragtrail"))


def _provider(store: Path) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(
        WholeTraceSpanProcessor(LocalStoreSpanExporter(store), max_bytes=1 << 31, max_spans_per_trace=100_000, schedule_delay_millis=10)
    )
    return provider


def make_big_trace(store: Path, stages: int = 125, candidates: int = 400, per_span: int = 20) -> str:
    """pipeline + ``stages`` x (retrieve of ``candidates``, rerank cutting to a quarter), ``per_span`` events a span."""
    ragtrail.set_capture(events_per_span=per_span, metadata=["source"])
    provider = _provider(store)
    tracer = provider.get_tracer("bench")
    with ragtrail.stage("pipeline", "bench.pipeline", tracer=tracer):
        trace_id = format(trace.get_current_span().get_span_context().trace_id, "032x")
        for n in range(stages):
            docs = [
                {
                    "id": f"s{n}-d{i}",
                    "content": f"document {i} of stage {n} " * 8,
                    "score": 1 - i / candidates,
                    "metadata": {"source": f"shard-{i % 7}"},
                }
                for i in range(candidates)
            ]
            with ragtrail.stage("retrieve", f"bench.retriever{n}", tracer=tracer) as s:
                s.query(f"query {n}")
                s.outputs(docs)
            with ragtrail.stage("rerank", f"bench.rerank{n}", top_k=candidates // 4, tracer=tracer) as s:
                s.query(f"query {n}")
                s.inputs(docs)
                s.outputs(docs[: candidates // 4])
    provider.force_flush()
    provider.shutdown()
    return trace_id


def make_batch_trace(store: Path, requests: int = 1250) -> str:
    """One trace holding ``requests`` small RAG requests: 1 + 4 x ``requests`` spans."""
    ragtrail.set_capture(events_per_span=None, metadata=[])
    provider = _provider(store)
    tracer = provider.get_tracer("bench")
    with ragtrail.stage("pipeline", "bench.batch", tracer=tracer):
        trace_id = format(trace.get_current_span().get_span_context().trace_id, "032x")
        for n in range(requests):
            docs = [{"id": f"r{n}-d{i}", "content": f"passage {i} for request {n}", "score": 1 - i / 10} for i in range(10)]
            with ragtrail.stage("query_transform", "bench.rewrite", tracer=tracer) as s:
                s.query(f"question {n}")
                s.add_query_variant(f"rewritten question {n}", transform="rewrite")
            with ragtrail.stage("retrieve", "bench.retriever", top_k=10, tracer=tracer) as s:
                s.query(f"rewritten question {n}")
                s.outputs(docs)
            with ragtrail.stage("rerank", "bench.rerank", top_k=5, tracer=tracer) as s:
                s.query(f"rewritten question {n}")
                s.inputs(docs)
                s.outputs(docs[:5])
            with ragtrail.stage("cite", "bench.cite", tracer=tracer) as s:
                s.inputs(docs[:5])
                s.outputs(docs[:1])
    provider.force_flush()
    provider.shutdown()
    return trace_id


def make_pair(store: Path, candidates: int = 1000) -> tuple[str, str]:
    """Two runs over the same 1,000 candidates whose reranker orders differ."""
    ragtrail.set_capture(events_per_span=None)
    provider = _provider(store)
    tracer = provider.get_tracer("bench")
    ids = []
    rng = random.Random(7)
    docs = [{"id": f"d{i}", "content": f"text {i}", "score": 1 - i / candidates} for i in range(candidates)]
    for run in range(2):
        order = docs[:] if run == 0 else rng.sample(docs, len(docs))
        with ragtrail.stage("pipeline", "bench.pair", tracer=tracer):
            ids.append(format(trace.get_current_span().get_span_context().trace_id, "032x"))
            with ragtrail.stage("retrieve", "bench.retriever", tracer=tracer) as s:
                s.query("q")
                s.outputs(docs)
            with ragtrail.stage("rerank", "bench.rerank", top_k=candidates, tracer=tracer) as s:
                s.query("q")
                s.inputs(docs)
                s.outputs(order)
    provider.force_flush()
    provider.shutdown()
    return ids[0], ids[1]


def _cli(*args: str, repeat: int = 3) -> tuple[float, float]:
    """Best wall-clock and best CPU seconds of ``ragtrail *args`` in a fresh process."""
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        result = subprocess.run([RAGTRAIL, *args], capture_output=True, text=True)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        assert result.returncode in (0, 1), result.stderr
    return min(walls), min(cpus)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        batch, stress, pair = Path(tmp) / "batch", Path(tmp) / "stress", Path(tmp) / "pair"
        t0 = time.perf_counter()
        batch_id = make_batch_trace(batch)
        stress_id = make_big_trace(stress)
        a, b = make_pair(pair)
        print(f"setup (recording, not timed): {time.perf_counter() - t0:.0f} s; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        for name, store, tid in (("batch", batch, batch_id), ("stress", stress, stress_id)):
            t = FileSource(store).get(tid)
            size = sum(p.stat().st_size for p in store.glob("*.jsonl"))
            print(f"  {name}: {len(t.spans)} spans, {sum(len(s.events) for s in t.spans)} events, {size / 1e6:.1f} MB of OTLP JSON")
        rows = [
            ("show   batch  (5,001 spans)", _cli("show", batch_id, "--source", str(batch))),
            ("verify batch  (5,001 spans)", _cli("verify", batch_id, "--source", str(batch))),
            ("show   stress (5,001 spans)", _cli("show", stress_id, "--source", str(stress))),
            ("verify stress (5,001 spans)", _cli("verify", stress_id, "--source", str(stress))),
            ("diff   2 x 1,000 candidates", _cli("diff", a, b, "--source", str(pair))),
            ("--help (start-up alone)", _cli("--help")),
        ]
        print(f"{'ragtrail command':30} {'wall':>7} {'CPU':>7}   target < 2 s")
        for name, (wall, cpu) in rows:
            print(f"{name:30} {wall:6.2f}s {cpu:6.2f}s   {'ok' if cpu < 2 else 'over'}")


if __name__ == "__main__":
    main()
