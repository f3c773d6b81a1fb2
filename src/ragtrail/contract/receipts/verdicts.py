"""The verdicts a reader gives a received payload against its producer's receipt."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ragtrail.contract.receipts.canonical import canonical_bytes, canonical_text
from ragtrail.contract.receipts.rules import TransformRule, parse_rule
from ragtrail.contract.receipts.stamp import Receipt, sha256_hex

__all__ = ["CHANGED_CITED", "CHANGED_UNCITED", "INTACT", "UNVERIFIABLE", "VERDICTS", "classify"]

INTACT = "intact"
CHANGED_CITED = "changed_cited"
CHANGED_UNCITED = "changed_uncited"
UNVERIFIABLE = "unverifiable"
VERDICTS = (INTACT, CHANGED_CITED, CHANGED_UNCITED, UNVERIFIABLE)


def classify(received: Any, original: Receipt | None, rules: Iterable[str | TransformRule] = ()) -> str:
    """Compare a received payload with the producer's receipt.

    ``intact``: the hash matches. ``changed_cited``: it differs and one of ``rules`` covers the
    difference. ``changed_uncited``: it differs and nothing covers it (an alarm).
    ``unverifiable``: the receipt is missing or damaged (a sha256 cut below 64 hex digits is never a
    match), or there is no payload to compare."""
    if original is None or received is None or not original.well_formed:
        return UNVERIFIABLE
    if sha256_hex(canonical_bytes(received)) == original.sha256:
        return INTACT
    received_chars = len(canonical_text(received))
    for rule in rules:
        parsed = parse_rule(rule)
        if parsed is not None and parsed.covers(received_chars, original):
            return CHANGED_CITED
    return CHANGED_UNCITED
