"""canonical_json with bounded work (issue 13): its cost on ordinary values against plain json.dumps
(the floor, and what the unbounded version was), and on the values that used to stall the host.

    .venv/bin/python benchmarks/bench_canonical.py
"""

from __future__ import annotations

import json
import timeit
from unittest.mock import MagicMock

from ragtrail.contract.receipts import canonical_json, canonical_json_bounded


def _floor(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _nested(depth):
    value = {"leaf": 1}
    for _ in range(depth):
        value = {"k": value}
    return value


ORDINARY = {
    "metadata dict (4 keys)": {"updated_at": "2024-11-04", "status": "active", "tags": ["a", "b"], "page": 3},
    "filter (4 levels)": {"$and": [{"status": {"$eq": "active"}}, {"year": {"$gte": 2024}}]},
    "embedding (1,536 floats)": [i / 1536 for i in range(1536)],
    "dict with int keys (20)": {i: str(i) for i in range(20)},
}
HOSTILE = {
    "MagicMock": MagicMock(),
    "dict nested 100,000 deep": _nested(100_000),
    "list of 1,000,000 ints": list(range(1_000_000)),
}


def main() -> None:
    print("| value | json.dumps µs | canonical_json µs |")
    print("|---|---:|---:|")
    for name, value in ORDINARY.items():
        n = 2000
        floor = min(timeit.repeat(lambda value=value: _floor(value), number=n, repeat=5)) / n * 1e6
        ours = min(timeit.repeat(lambda value=value: canonical_json(value), number=n, repeat=5)) / n * 1e6
        print(f"| {name} | {floor:.1f} | {ours:.1f} |")
    print()
    print("| value | canonical_json ms | cut |")
    print("|---|---:|---|")
    for name, value in HOSTILE.items():
        ms = min(timeit.repeat(lambda value=value: canonical_json_bounded(value), number=1, repeat=3)) * 1e3
        print(f"| {name} | {ms:.1f} | {', '.join(canonical_json_bounded(value).cuts)} |")


if __name__ == "__main__":
    main()
