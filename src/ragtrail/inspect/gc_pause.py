"""Pause Python's cyclic garbage collector while a large trace is parsed and turned into a manifest.

Parsing 35-85 MB of OTLP JSON allocates millions of dicts, lists and strings that all stay alive:
every few hundred allocations the collector walks the young objects, and each full collection walks
the whole growing heap, for nothing (a decoded trace holds no reference cycles). Measured on the
5,000-span benchmark (benchmarks/bench_inspect.py), this was most of the parsing time: orjson took
3.8 s with the collector on and 0.7 s with it paused for the same 85 MB. Reference counting still frees
everything as usual; only the cycle search waits until the pause ends.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic collector inside the block; nested pauses keep it off until the outermost ends."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
