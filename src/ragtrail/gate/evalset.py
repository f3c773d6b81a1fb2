"""The gate's eval set: a small labelled JSONL file, parsed strictly, and its digest.

One JSON object per line::

    {"id": "refund-enterprise", "query": "what is our refund window for enterprise?",
     "relevant": ["policy-2026-05"], "slice": "policy", "claim": "presence"}

``query`` (a non-empty string) and ``relevant`` (a list of document ids, strings; it may be empty
for a case whose right answer is a refusal) are required; ``id`` (default ``line-N``), ``slice``
(default: only the aggregate) and ``claim`` (the claim the answer is expected to make: ``presence``,
``absence`` or ``none``) are optional. Any other key, a duplicate id or a malformed line is an error
naming the line: a typo in a labelled set must not silently turn a case into one that always passes.

The digest (sha256 of the cases in canonical JSON) ties a baseline to the set it was frozen from:
a gate run against a baseline of another set is inconclusive, never a comparison of two different
questionnaires.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ragtrail.contract import semconv as sc
from ragtrail.inspect.errors import MalformedInput, TraceNotFound

from .model import EvalCase

_KEYS = frozenset({"id", "query", "relevant", "slice", "claim"})


@dataclass(slots=True)
class EvalSet:
    """The parsed cases, in file order, and the digest that names this exact set."""

    cases: list[EvalCase]
    digest: str
    path: str | None = None

    def slices(self) -> list[str]:
        """The slices named by the cases, sorted (the aggregate is not among them)."""
        return sorted({c.slice for c in self.cases if c.slice is not None})


def _fail(where: str, number: int, message: str) -> MalformedInput:
    return MalformedInput(
        f"{where} line {number}: {message}", 'each line is {"query": "...", "relevant": ["doc-id", ...]} with optional "id", "slice", "claim"'
    )


def _case(obj: object, where: str, number: int) -> EvalCase:
    if not isinstance(obj, dict):
        raise _fail(where, number, f"a JSON object is expected, got {type(obj).__name__}")
    unknown = sorted(set(obj) - _KEYS)
    if unknown:
        raise _fail(where, number, f"unknown key {unknown[0]!r} (keys: {', '.join(sorted(_KEYS))})")
    query = obj.get("query")
    if not isinstance(query, str) or not query.strip():
        raise _fail(where, number, '"query" must be a non-empty string')
    relevant = obj.get("relevant")
    if not isinstance(relevant, list) or not all(isinstance(r, str) and r for r in relevant):
        raise _fail(where, number, '"relevant" must be a list of non-empty document id strings')
    if len(set(relevant)) != len(relevant):
        raise _fail(where, number, '"relevant" names the same id twice')
    ident = obj.get("id", f"line-{number}")
    if not isinstance(ident, str) or not ident:
        raise _fail(where, number, '"id" must be a non-empty string')
    slice_ = obj.get("slice")
    if slice_ is not None and (not isinstance(slice_, str) or not slice_ or slice_.startswith("(")):
        raise _fail(where, number, '"slice" must be a non-empty string not starting with "("')
    claim = obj.get("claim")
    if claim is not None and claim not in sc.ANSWER_CLAIMS:
        raise _fail(where, number, f'"claim" must be one of {", ".join(sc.ANSWER_CLAIMS)}')
    return EvalCase(id=ident, query=query, relevant=tuple(relevant), slice=slice_, claim=claim)


def digest(cases: list[EvalCase]) -> str:
    """sha256 of the cases (id, query, relevant ids, slice, claim) in file order, canonical JSON."""
    rows = [{"id": c.id, "query": c.query, "relevant": list(c.relevant), "slice": c.slice, "claim": c.claim} for c in cases]
    data = json.dumps(rows, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def parse(text: str, where: str = "eval set") -> EvalSet:
    """Cases of a JSONL text; blank lines are skipped, everything else must be a valid case."""
    cases: list[EvalCase] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise _fail(where, number, f"not valid JSON ({str(exc).split(':')[0]})") from None
        case = _case(obj, where, number)
        if case.id in seen:
            raise _fail(where, number, f"id {case.id!r} already used on line {seen[case.id]}")
        seen[case.id] = number
        cases.append(case)
    if not cases:
        raise MalformedInput(f"{where} holds no case", "write one JSON object per line")
    return EvalSet(cases=cases, digest=digest(cases), path=None)


def load(path: str | Path) -> EvalSet:
    """The eval set at ``path`` (UTF-8 JSONL)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TraceNotFound(f"no eval set at {p}", "pass --set eval.jsonl") from None
    except UnicodeDecodeError:
        raise MalformedInput(f"{p} is not UTF-8 text", "write the eval set as UTF-8 JSONL") from None
    result = parse(text, str(p))
    result.path = str(p)
    return result


__all__ = ["EvalSet", "digest", "load", "parse"]
