"""Write a local store of N traces (default 100,000) for the many-trace commands (ls, stats, compare).

A few hundred template runs are recorded by the real recorder (decorated retriever, reranker and
budgeter under ``ragtrail.pipeline``, ``ragtrail.answer``) and written by the real whole-trace
processor and local-store exporter; the store is then filled by copying those lines with fresh trace
ids and a fresh query receipt per copy (capture mode ``hash``, so no query text contradicts the
receipt). Recording 100,000 runs would take minutes of recorder time that is not what is measured.
With ``--fallback-every K`` every K-th question's reranker falls back to input order (degraded), so
two stores made with and without it are an experiment for ``ragtrail compare``.

    .venv/bin/python benchmarks/make_many_store.py /tmp/many-a --traces 100000
    .venv/bin/python benchmarks/make_many_store.py /tmp/many-b --traces 100000 --fallback-every 5
"""

from __future__ import annotations

import argparse
import hashlib
import re
import tempfile
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

import ragtrail as rt
from ragtrail.export.local_store import LocalStoreSpanExporter
from ragtrail.export.whole_trace import WholeTraceSpanProcessor

TEMPLATES = 50


def _templates(directory: Path, fallback_every: int) -> list[tuple[bytes, list[bytes]]]:
    """(line, [its trace id, its query sha256]) for TEMPLATES recorded runs per kind (falls back or not)."""
    rt.set_capture(query="hash")
    provider = TracerProvider()
    provider.add_span_processor(WholeTraceSpanProcessor(LocalStoreSpanExporter(directory), schedule_delay_millis=5, grace_millis=5))
    tracer = provider.get_tracer("bench.many")

    @rt.retriever(component="bench.hybrid", score_kind="similarity", tracer=tracer)
    def search(query: str, i: int) -> list[dict[str, Any]]:
        return [{"id": f"doc-{i}-{k}", "content": f"document {k} about {i}", "score": 0.9 - 0.05 * k} for k in range(8)]

    @rt.reranker(component="bench.rerank", top_k=6, tracer=tracer)
    def rerank(query: str, candidates: list[dict[str, Any]], fallback: bool) -> list[dict[str, Any]]:
        if fallback:
            rt.current_stage().set_status("degraded", failure_class="parse_error", fallback="input_order")
            return candidates[:6]
        return [{**d, "score": 1.0 - 0.1 * n} for n, d in enumerate(reversed(candidates))][:6]

    @rt.budgeter(component="bench.budget", limit=3, unit="documents", tracer=tracer)
    def budget(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return candidates[:3]

    @rt.pipeline(component="bench.answer", tracer=tracer)
    def answer(query: str, i: int, fallback: bool) -> None:
        context = budget(rerank(query, search(query, i), fallback))
        if fallback:
            rt.answer("I don't know.", refused=True)
            return
        rt.cite([context[0]["id"]], tracer=tracer)
        rt.answer(f"answer {i}")

    for i in range(TEMPLATES):
        answer(f"question {i}", i, False)
        provider.force_flush()  # one trace per line, so each line is a template of its own
        if fallback_every:
            answer(f"question {i}", i, True)
            provider.force_flush()
    provider.shutdown()
    out = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_bytes().splitlines(keepends=True):
            ids = sorted(set(re.findall(rb'"traceId":\s*"([0-9a-f]{32})"', line)))
            shas = sorted(set(re.findall(rb'"ragtrail\.query\.sha256",\s*"value":\s*\{"stringValue":\s*"([0-9a-f]{64})"', line)))
            if len(ids) == 1 and len(shas) == 1:
                out.append((line, [ids[0], shas[0]]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store", type=Path)
    parser.add_argument("--traces", type=int, default=100_000)
    parser.add_argument("--fallback-every", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        templates = _templates(Path(tmp), args.fallback_every)
    ok = [t for t in templates if b'"input_order"' not in t[0]]
    fell = [t for t in templates if b'"input_order"' in t[0]] or ok
    args.store.mkdir(parents=True, exist_ok=True)
    written = 0
    part = 0
    while written < args.traces:
        with (args.store / f"traces-{part:04d}.jsonl").open("wb") as fh:
            for _ in range(min(10_000, args.traces - written)):
                q = written  # question number: the same in both stores, so compare pairs them
                pool = fell if args.fallback_every and q % args.fallback_every == 0 else ok
                line, (trace_id, sha) = pool[q % len(pool)]
                new_id = hashlib.sha256(f"{args.store.name}-{q}".encode()).hexdigest()[:32].encode()
                new_sha = hashlib.sha256(f"question {q}".encode()).hexdigest().encode()
                fh.write(line.replace(trace_id, new_id).replace(sha, new_sha))
                written += 1
        part += 1
    print(f"{written} traces in {args.store}")


if __name__ == "__main__":
    main()
