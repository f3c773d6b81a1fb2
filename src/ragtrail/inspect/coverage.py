"""Survival and coverage: how much evidence each stage kept, and which claims what was read can support.

Coverage scores context against corpus, a different axis from faithfulness (answer against
context): an answer built from 6 of 1,003 chunks can quote what it read but cannot say that
something is absent, that all items agree, which one is the latest, or how many there are. There
is deliberately no threshold: 999,999 of 1,000,000 still cannot establish absence.
"""

from __future__ import annotations

from typing import Any

# (claim type, example sentence, needs the whole corpus)
CLAIMS: tuple[tuple[str, str, bool], ...] = (
    ("quote", "the policy says X", False),
    ("absence", "there is no policy about X", True),
    ("universal", "all policies require X", True),
    ("latest", "the most recent policy is Y", True),
    ("count", "there are three mentions of X", True),
)


def coverage(corpus_size: int | None, retrieved: int, in_context: int, cited: int) -> dict[str, Any]:
    """The manifest's ``coverage`` block: counts, ``exhaustive``, one statement, per-claim verdicts."""
    read = in_context
    exhaustive = corpus_size is not None and corpus_size > 0 and read >= corpus_size
    claims = []
    for name, example, needs_all in CLAIMS:
        if read == 0:
            ok, why = False, "nothing reached the model: a retrieval or context failure, not a reasoning one"
        elif not needs_all:
            ok, why = True, f"needs only the units quoted ({cited} cited)" if cited else "needs only the units quoted"
        elif exhaustive:
            ok, why = True, f"all {corpus_size} units were read"
        elif corpus_size is None:
            ok, why = False, "the corpus size is unknown, so the unread remainder is unknown"
        else:
            ok, why = False, f"asserts something about the {corpus_size - read} units never read"
        claims.append({"claim": name, "example": example, "supported": ok, "why": why})
    if read == 0:
        statement = f"nothing read ({retrieved} retrieved, 0 in context): no claim is supported"
    elif exhaustive:
        statement = f"all {corpus_size} of {corpus_size} read: absence, universal, latest and count claims are supported"
    elif corpus_size is None:
        statement = f"{read} read of a corpus of unknown size: an absence claim is not supported"
    else:
        statement = f"{read} of {corpus_size} read: an absence claim is not supported"
    return {"corpus_size": corpus_size, "retrieved": retrieved, "in_context": in_context, "cited": cited,
            "exhaustive": exhaustive, "statement": statement, "claims": claims}


def survival(stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Evidence in and out of every stage that handles candidates, in pipeline order (the funnel)."""
    rows = []
    for stage in stages:
        if stage["kind"] in ("query_transform",) and not stage["out"]:
            continue
        rows.append({"stage": stage["kind"], "component": stage["component"], "in": stage["in"],
                     "out": stage["out"], "excluded": stage["excluded_count"]})
    return rows
