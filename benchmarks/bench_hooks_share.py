"""The framework hooks' share of the host thread on the users' pipeline (issue 11), and a dump of what
they export, to check that two source trees export exactly the same.

The pipeline is ``bench_users_pipeline``'s (BM25 top 100 -> cutoff -> rerank to 10 -> word budget), with a
``SimpleSpanProcessor`` into an exporter that keeps nothing, so everything runs on the measured thread.
The hooks' share is the thread CPU time spent in the hook skeleton's ``_begin`` (open the stage, adapt
its inputs) plus ``_end`` (adapt its outputs, reasons, end the stage) minus the writer
(``recorder.writer.write``, another engineer's part). Rounds of ``--queries`` queries; the round with the
smallest hooks' share is printed (a shared machine only ever adds time).

    PYTHONPATH=$PWD/src .venv-bench/bin/python benchmarks/bench_hooks_share.py langchain --rounds 6
    PYTHONPATH=$PWD/src .venv-bench/bin/python benchmarks/bench_hooks_share.py llama_index --dump > spans.jsonl

``--dump`` runs 40 queries with sequential span and trace ids and prints every exported span (name,
parent, attributes, events, status) as one sorted JSON line: two trees whose dumps are byte-identical
export the same spans, attributes and values.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))

import bench_users_pipeline as users  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402
from opentelemetry.sdk.trace.id_generator import IdGenerator  # noqa: E402
from wire_snapshot import SequentialIds  # noqa: E402  (the same ids as the wire snapshot's)


class _Keep(SpanExporter):
    def __init__(self, keep: bool) -> None:
        self.keep = keep
        self.spans: list[Any] = []

    def export(self, spans: Any) -> SpanExportResult:
        if self.keep:
            self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def _build(framework: str, keep: bool, ids: IdGenerator | None) -> tuple[Callable[[str], Any], list[str], _Keep]:
    exporter = _Keep(keep)
    provider = TracerProvider(id_generator=ids) if ids is not None else TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    users.instrument(framework, "ragtrail", provider)
    texts, pool = users.corpus(users.N_CHUNKS)
    run = users.build_langchain(texts) if framework == "langchain" else users.build_llama_index(texts)
    return run, pool, exporter


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def dump(framework: str) -> None:
    run, pool, exporter = _build(framework, True, SequentialIds())
    for query in pool[:40]:
        run(query)
    for span in exporter.spans:
        print(
            json.dumps(
                {
                    "name": span.name,
                    "id": span.context.span_id,
                    "parent": span.parent.span_id if span.parent else None,
                    "attributes": {k: _plain(v) for k, v in span.attributes.items()},
                    "events": [[e.name, {k: _plain(v) for k, v in e.attributes.items()}] for e in span.events],
                    "status": str(span.status.status_code),
                },
                sort_keys=True,
            )
        )


def measure(framework: str, queries: int, rounds: int) -> None:
    run, pool, _ = _build(framework, False, None)
    from ragtrail import hooks as skeleton
    from ragtrail.recorder import stage, writer

    spent: dict[str, float] = {}

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.thread_time() - started

        return wrapper

    stage.write = timed("write", writer.write)  # type: ignore[attr-defined]
    skeleton._begin = timed("begin", skeleton._begin)  # type: ignore[attr-defined]
    skeleton._end = timed("end", skeleton._end)  # type: ignore[attr-defined]
    for query in pool[:30]:
        run(query)
    best: tuple[float, float, float] | None = None
    for _ in range(rounds):
        spent.clear()
        started = time.thread_time()
        for query in pool[30 : 30 + queries]:
            run(query)
        host = time.thread_time() - started
        hooks = spent.get("begin", 0.0) + spent.get("end", 0.0) - spent.get("write", 0.0)
        if best is None or hooks < best[1]:
            best = (host, hooks, spent.get("write", 0.0))
    assert best is not None
    host, hooks, write = (x / queries * 1e3 for x in best)
    print(f"{framework}: hooks {hooks:.2f} ms/query (host thread CPU {host:.2f}, of which write {write:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("framework", choices=users.FRAMEWORKS)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--dump", action="store_true", help="print the exported spans of 40 queries instead")
    args = parser.parse_args()
    if args.dump:
        dump(args.framework)
    else:
        measure(args.framework, args.queries, args.rounds)


if __name__ == "__main__":
    main()
