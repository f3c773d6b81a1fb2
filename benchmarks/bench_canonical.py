"""canonical_json with bounded work (issue 13): its cost on ordinary values against plain json.dumps
(the floor, and what the unbounded version was), and on the values that used to stall the host.
Issue 28, item 5: a minimal RFC 8785 (JCS) encoder beside it, what following JCS would cost and
where its text differs (docs/semconv.md §4, "Canonical JSON and RFC 8785").

    .venv/bin/python benchmarks/bench_canonical.py
"""

from __future__ import annotations

import json
import math
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


_JCS_STR = json.JSONEncoder(ensure_ascii=False).encode  # JCS escapes strings as Python does (valid Unicode)


def _jcs_number(x):
    """ECMAScript Number.prototype.toString, as RFC 8785 writes numbers."""
    if isinstance(x, int) and abs(x) <= 2**53:
        return str(x)
    x = float(x)
    if not math.isfinite(x):
        raise ValueError("JCS has no NaN or Infinity")
    if x.is_integer() and abs(x) < 1e21:
        return str(int(x))
    text = repr(x)
    if "e" in text:
        mantissa, exponent = text.split("e")
        return f"{mantissa}e{'+' if int(exponent) > 0 else '-'}{abs(int(exponent))}"
    return text


def jcs(value):
    """A minimal RFC 8785 encoder for plain JSON values (keys sorted by UTF-16 code units)."""
    if isinstance(value, str):
        return _JCS_STR(value)
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return _jcs_number(value)
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: k.encode("utf-16-be"))
        return "{" + ",".join(_JCS_STR(k) + ":" + jcs(value[k]) for k in keys) + "}"
    return "[" + ",".join(jcs(x) for x in value) + "]"


JCS_VALUES = {
    "metadata dict (4 keys)": ORDINARY["metadata dict (4 keys)"],
    "filter (4 levels)": ORDINARY["filter (4 levels)"],
    "embedding (1,536 floats)": ORDINARY["embedding (1,536 floats)"],
    "rerank scores [1.0, 0.9]": [1.0, 0.9],
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
    print("| value | canonical_json µs | JCS (pure Python) µs | same text |")
    print("|---|---:|---:|---|")
    for name, value in JCS_VALUES.items():
        n = 2000
        ours = min(timeit.repeat(lambda value=value: canonical_json(value), number=n, repeat=5)) / n * 1e6
        theirs = min(timeit.repeat(lambda value=value: jcs(value), number=n, repeat=5)) / n * 1e6
        print(f"| {name} | {ours:.1f} | {theirs:.1f} | {'yes' if canonical_json(value) == jcs(value) else 'no'} |")
    print()
    print("| value | canonical_json ms | cut |")
    print("|---|---:|---|")
    for name, value in HOSTILE.items():
        ms = min(timeit.repeat(lambda value=value: canonical_json_bounded(value), number=1, repeat=3)) * 1e3
        print(f"| {name} | {ms:.1f} | {', '.join(canonical_json_bounded(value).cuts)} |")


if __name__ == "__main__":
    main()
