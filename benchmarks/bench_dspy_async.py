"""What DSPy's async hooks (``Module.acall``, ``Predict.aforward``, ``BaseLM.acall``) cost a call that
records nothing: ``await dspy.Predict(...).acall(...)`` with ``DummyLM``, no retriever, timed inside one
event loop (``asyncio.run`` per call varies by more than the hooks cost). Rounds alternate
instrumented and not; medians in microseconds. Usage::

    OMP_NUM_THREADS=1 LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python benchmarks/bench_dspy_async.py [--repeat 300 --rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any


async def series(predict: Any, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        await predict.acall(question="q")
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


async def main(repeat: int, rounds: int) -> None:
    import dspy
    from dspy.utils import DummyLM
    from opentelemetry.sdk.trace import TracerProvider

    from ragtrail.instrumentation.dspy import DSPyInstrumentor

    predict = dspy.Predict("question -> answer")
    inst = DSPyInstrumentor()
    plain, instrumented = [], []
    with dspy.context(lm=DummyLM([{"answer": "x"}] * 1_000_000)):
        await series(predict, 50)  # warm-up
        for _ in range(rounds):
            inst.instrument(tracer_provider=TracerProvider())
            instrumented.append(await series(predict, repeat))
            inst.uninstrument()
            plain.append(await series(predict, repeat))
    print("plain      ", [round(v) for v in plain])
    print("instrumented", [round(v) for v in instrumented])
    print("added (median of rounds)", round(statistics.median(instrumented) - statistics.median(plain)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=4)
    ns = parser.parse_args()
    asyncio.run(main(ns.repeat, ns.rounds))
