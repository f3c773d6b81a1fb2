"""Transform rules: versioned, named licences to change a payload (a 256-character preview, a
declared truncation, a budget trim, a header, a split), each checkable from the receipts alone."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ragtrail.contract import semconv
from ragtrail.contract.receipts.stamp import Receipt, is_count

__all__ = [
    "BUDGET_TRIM_RULE",
    "PREVIEW_CHARS",
    "PREVIEW_RULE",
    "SPLIT_RULE",
    "TransformRule",
    "metadata_header_rule",
    "parse_rule",
    "preview",
    "truncate_rule",
]

PREVIEW_CHARS = 256


def preview(text: str) -> str:
    """The authorised cut ``preview@1``: exactly the first ``PREVIEW_CHARS`` code points."""
    return text[:PREVIEW_CHARS]


@dataclass(frozen=True)
class TransformRule:
    """A versioned, named licence to change a payload, checkable from the receipt alone.

    ``kind`` is ``prefix`` (the received text is the first ``length`` code points of the original,
    or all of it when shorter), ``shorter`` (any strict shortening, e.g. a budget trim whose new
    payload carries its own receipt and ``transform.derived_from``), ``header`` (the upstream text
    with ``length`` code points put before it; checked between stages by :meth:`covers_handoff`) or
    ``part`` (a chunk cut from the upstream text: never longer than it, checked between stages)."""

    id: str
    kind: str
    length: int | None = None

    def covers(self, received_chars: int, original: Receipt) -> bool:
        if self.kind == "prefix" and self.length is not None:
            return received_chars == min(self.length, original.chars) and received_chars < original.chars
        if self.kind == "shorter":
            return received_chars < original.chars
        return False

    def covers_handoff(self, chars: Any, upstream_chars: Any) -> bool | None:
        """Whether a receipt of ``chars`` code points, ``derived_from`` an upstream receipt of
        ``upstream_chars``, is what this rule allows; ``None`` when the rule has no arithmetic
        between stages (only ``derived_from`` then speaks for it)."""
        if self.kind == "part":
            return is_count(chars) and is_count(upstream_chars) and chars <= upstream_chars
        if self.kind != "header" or self.length is None:
            return None
        return is_count(chars) and is_count(upstream_chars) and chars == upstream_chars + self.length


PREVIEW_RULE = TransformRule(semconv.RULE_PREVIEW, "prefix", PREVIEW_CHARS)
BUDGET_TRIM_RULE = TransformRule(semconv.RULE_BUDGET_TRIM, "shorter")
SPLIT_RULE = TransformRule(semconv.RULE_SPLIT, "part")
# ASCII digits, at most 18 (a rule id read back from a trace is untrusted: int() of 5,000 digits raises)
_RULE_ID = re.compile(re.escape(semconv.RULE_TRUNCATE_PREFIX) + r"([0-9]{1,18})")


def truncate_rule(length: int) -> TransformRule:
    """The rule for a declared cut to ``length`` code points: id ``truncate@1:<length>``."""
    return TransformRule(f"{semconv.RULE_TRUNCATE_PREFIX}{int(length)}", "prefix", int(length))


_HEADER_RULE_ID = re.compile(re.escape(semconv.RULE_METADATA_HEADER_PREFIX) + r"([0-9]{1,18})")


def metadata_header_rule(length: int) -> TransformRule:
    """The rule for a header of ``length`` code points put before the upstream text (LlamaIndex's
    metadata header): id ``metadata_header@1:<length>``."""
    return TransformRule(f"{semconv.RULE_METADATA_HEADER_PREFIX}{int(length)}", "header", int(length))


def parse_rule(rule: str | TransformRule) -> TransformRule | None:
    """A rule from its id; ``None`` for an unknown id (which then authorises nothing)."""
    if isinstance(rule, TransformRule):
        return rule
    if rule == PREVIEW_RULE.id:
        return PREVIEW_RULE
    if rule == BUDGET_TRIM_RULE.id:
        return BUDGET_TRIM_RULE
    if rule == SPLIT_RULE.id:
        return SPLIT_RULE
    match = _RULE_ID.fullmatch(rule or "")
    if match:
        return truncate_rule(int(match.group(1)))
    match = _HEADER_RULE_ID.fullmatch(rule or "")
    if match:
        return metadata_header_rule(int(match.group(1)))
    return None
