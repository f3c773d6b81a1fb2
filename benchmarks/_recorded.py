"""What an exported span records, counted the same way for every tool in the anchor benchmarks.

Documents flattened into attributes (OpenInference's ``retrieval.documents.N.document.*`` and
``reranker.*_documents.N.document.*``) count once per N; ragtrail's own copy of them (its Phoenix
mirror) is not counted again: its ``ragtrail.candidate`` events are. Receipts are every ``*.sha256``
attribute, query hops the distinct ``(trace, hop)`` pairs.
"""

from __future__ import annotations

from typing import Any

COUNTED = ("spans", "candidates", "scored", "exclusions", "reasons", "hops", "receipts")


def new_stats(**extra: int) -> dict[str, int]:
    return {**dict.fromkeys(COUNTED, 0), **extra}


def count_span(span: Any, stats: dict[str, int], hops: set[tuple[int, int]]) -> dict[str, Any]:
    """Add one span's records to ``stats`` (``hops`` collects the distinct hops); returns its
    attributes for a benchmark's own extra counting."""
    stats["spans"] += 1
    attributes = dict(span.attributes or {})
    if "ragtrail.schema" not in attributes:
        prefixes = {k.rsplit(".document.", 1)[0] for k in attributes if ".document." in k}
        stats["candidates"] += len(prefixes)
        stats["scored"] += sum(1 for k in attributes if k.endswith(".document.score"))
    stats["receipts"] += sum(1 for k in attributes if k.endswith(".sha256"))
    if "ragtrail.query.hop" in attributes:
        hops.add((span.context.trace_id, attributes["ragtrail.query.hop"]))
    for event in span.events:
        ev = dict(event.attributes or {})
        if event.name == "ragtrail.candidate":
            stats["candidates"] += 1
            stats["scored"] += "ragtrail.candidate.score" in ev
        elif event.name == "ragtrail.exclusion":
            stats["exclusions"] += 1
            stats["reasons"] += "ragtrail.exclusion.reason" in ev
        elif event.name == "ragtrail.query":
            hops.add((span.context.trace_id, ev["ragtrail.query.hop"]))
        stats["receipts"] += sum(1 for k in ev if k.endswith(".sha256"))
    stats["hops"] = len(hops)
    return attributes
