"""What an exported span records, counted the same way for every tool in the anchor benchmarks.

Documents flattened into attributes (OpenInference's ``retrieval.documents.N.document.*`` and
``reranker.*_documents.N.document.*``) count once per N; ragtrail's own copy of them (its Phoenix
mirror) is not counted again: its records are (its ``ragtrail.candidate`` events, or schema 3's
candidate columns decoded one record per candidate). Receipts are every ``*.sha256``
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
    # schema 3: the candidates are columns on the stage span, exclusions one event per reason; the
    # reader's decoding gives one record per candidate (schema 1-2: the events themselves)
    from ragtrail.inspect.columns import expand

    wire = [(None, e.name, dict(e.attributes or {})) for e in span.events]
    if attributes.get("ragtrail.schema", 1) >= 3:
        stats["receipts"] -= sum(1 for k in attributes if k.endswith(".sha256") and isinstance(attributes[k], tuple))
        records = [(name, ev) for _, name, ev in expand(attributes, wire, None)]
    else:
        records = [(name, ev) for _, name, ev in wire]
    for name, ev in records:
        if name == "ragtrail.candidate":
            stats["candidates"] += 1
            stats["scored"] += "ragtrail.candidate.score" in ev
        elif name == "ragtrail.exclusion":
            stats["exclusions"] += 1
            stats["reasons"] += "ragtrail.exclusion.reason" in ev
        elif name == "ragtrail.query":
            hops.add((span.context.trace_id, ev["ragtrail.query.hop"]))
        stats["receipts"] += sum(1 for k in ev if k.endswith(".sha256"))
    stats["hops"] = len(hops)
    return attributes
