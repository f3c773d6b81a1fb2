"""Producer-stamped receipts (size + sha256) and the arithmetic that checks them.

A receipt is stamped once, by the stage that hands a payload over, and never rewritten downstream.
Anything between the producer and the reader (the SDK's limits, a collector's ``truncate_all``, a
backend's size cap) that changes a payload is caught by comparing what arrived with its receipt.
A cut that a versioned transform rule authorises (a 256-character preview, a declared truncation,
a budget trim) is told apart from a silent one. Both the recorder and the inspector use this module:
it is part of the wire contract (docs/semconv.md §3-4), not of either side: the rules written once
here (receipt attribute names, the 64-hex and count checks, the events digest and its items) are
the ones both sides apply.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from ragtrail.contract import semconv

INTACT = "intact"
CHANGED_CITED = "changed_cited"
CHANGED_UNCITED = "changed_uncited"
UNVERIFIABLE = "unverifiable"
VERDICTS = (INTACT, CHANGED_CITED, CHANGED_UNCITED, UNVERIFIABLE)

PREVIEW_CHARS = 256


def preview(text: str) -> str:
    """The authorised cut ``preview@1``: exactly the first ``PREVIEW_CHARS`` code points."""
    return text[:PREVIEW_CHARS]


_HEX64 = re.compile(r"[0-9a-f]{64}")


def is_sha256_hex(value: Any) -> bool:
    """Exactly 64 lowercase hex digits: a sha256 that arrived whole (a cut one never matches)."""
    return isinstance(value, str) and _HEX64.fullmatch(value) is not None


def is_count(value: Any) -> bool:
    """A receipt's ``chars`` / ``bytes``: a non-negative int (never a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


_KEYS: dict[str, tuple[str, str, str]] = {}


def receipt_keys(prefix: str) -> tuple[str, str, str]:
    """A receipt's attribute names under ``prefix``: ``{prefix}.chars``, ``.bytes``, ``.sha256``
    (e.g. ``semconv.QUERY_RECEIPT_PREFIX``), built once per prefix."""
    keys = _KEYS.get(prefix)
    if keys is None:
        keys = _KEYS[prefix] = (f"{prefix}.chars", f"{prefix}.bytes", f"{prefix}.sha256")
    return keys


def _json_default(value: Any) -> Any:
    """Make common non-JSON values deterministic (never ``repr``: it embeds memory addresses)."""
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item) and getattr(value, "shape", None) == ():
        try:
            return item()
        except Exception:  # pragma: no cover - exotic scalar types
            pass
    tolist = getattr(value, "tolist", None)  # numpy arrays
    if callable(tolist):
        try:
            return tolist()
        except Exception:  # pragma: no cover
            pass
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": bytes(value).hex()}
    if isinstance(value, (set, frozenset)):
        return sorted((canonical_json(v) for v in value))
    isoformat = getattr(value, "isoformat", None)
    if callable(isoformat):
        return isoformat()
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    if isinstance(value, (list, tuple)):  # pragma: no cover - json handles these itself
        return list(value)
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def canonical_json(value: Any) -> str:
    """JSON with sorted keys, compact separators and no ASCII escaping (docs/semconv.md §4)."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_json_default)
    except (TypeError, ValueError):
        # keys of mixed types cannot be sorted; stringify them, still deterministically
        if isinstance(value, Mapping):
            return canonical_json({str(k): v for k, v in value.items()})
        return json.dumps(_json_default(value), separators=(",", ":"), ensure_ascii=False)


def canonical_text(value: Any) -> str:
    """The text a receipt's ``chars`` counts: the string itself, decoded bytes, or canonical JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return canonical_json(value)


def canonical_bytes(value: Any) -> bytes:
    """Canonical bytes of a payload: ``str`` as UTF-8 with lone surrogates backslash-escaped,
    ``bytes`` as they are, anything else as canonical JSON."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return canonical_json(value).encode("utf-8", "backslashreplace")


class Receipt(NamedTuple):
    """What the producer saw: code points, UTF-8 bytes and the sha256 of the canonical bytes.
    (A named tuple: the recorder stamps one per candidate, and tuples are the cheapest to make.)"""

    chars: int
    bytes: int
    sha256: str

    def as_attributes(self, prefix: str) -> dict[str, Any]:
        """``{prefix}.chars``, ``{prefix}.bytes``, ``{prefix}.sha256`` as span/event attributes."""
        chars, size, sha = receipt_keys(prefix)
        return {chars: self.chars, size: self.bytes, sha: self.sha256}

    @classmethod
    def from_attributes(cls, attributes: Mapping[str, Any], prefix: str) -> "Receipt | None":
        """Read a receipt back; ``None`` when any part is missing (which the reader reports)."""
        chars_key, bytes_key, sha_key = receipt_keys(prefix)
        chars = attributes.get(chars_key)
        size = attributes.get(bytes_key)
        digest = attributes.get(sha_key)
        if chars is None and size is None and digest is None:
            return None
        return cls(chars=chars, bytes=size, sha256=digest)  # type: ignore[arg-type]

    @property
    def well_formed(self) -> bool:
        """A receipt whose sha256 is not exactly 64 lowercase hex digits was damaged in transit."""
        return is_sha256_hex(self.sha256) and is_count(self.chars) and is_count(self.bytes)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_id(value: Any) -> str:
    """Identity of a payload that has no id of its own: ``sha256:`` + the digest of its canonical bytes."""
    return "sha256:" + sha256_hex(canonical_bytes(value))


def receipt(value: Any) -> Receipt:
    """Stamp a receipt for ``value`` (str, bytes, or anything JSON-able)."""
    data = canonical_bytes(value)
    if isinstance(value, str):
        chars = len(value)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        chars = len(bytes(value).decode("utf-8", "replace"))
    else:
        chars = len(data.decode("utf-8", "replace"))
    return Receipt(chars=chars, bytes=len(data), sha256=sha256_hex(data))


# --- transform rules -----------------------------------------------------------------------------
@dataclass(frozen=True)
class TransformRule:
    """A versioned, named licence to change a payload, checkable from the receipt alone.

    ``kind`` is ``prefix`` (the received text is the first ``length`` code points of the original,
    or all of it when shorter) or ``shorter`` (any strict shortening, e.g. a budget trim whose new
    payload carries its own receipt and ``transform.derived_from``)."""

    id: str
    kind: str
    length: int | None = None

    def covers(self, received_chars: int, original: Receipt) -> bool:
        if self.kind == "prefix" and self.length is not None:
            return received_chars == min(self.length, original.chars) and received_chars < original.chars
        if self.kind == "shorter":
            return received_chars < original.chars
        return False


PREVIEW_RULE = TransformRule(semconv.RULE_PREVIEW, "prefix", PREVIEW_CHARS)
BUDGET_TRIM_RULE = TransformRule(semconv.RULE_BUDGET_TRIM, "shorter")
_RULE_ID = re.compile(re.escape(semconv.RULE_TRUNCATE_PREFIX) + r"(\d+)")


def truncate_rule(length: int) -> TransformRule:
    """The rule for a declared cut to ``length`` code points: id ``truncate@1:<length>``."""
    return TransformRule(f"{semconv.RULE_TRUNCATE_PREFIX}{int(length)}", "prefix", int(length))


def parse_rule(rule: "str | TransformRule") -> TransformRule | None:
    """A rule from its id; ``None`` for an unknown id (which then authorises nothing)."""
    if isinstance(rule, TransformRule):
        return rule
    if rule == PREVIEW_RULE.id:
        return PREVIEW_RULE
    if rule == BUDGET_TRIM_RULE.id:
        return BUDGET_TRIM_RULE
    match = _RULE_ID.fullmatch(rule or "")
    if match:
        return truncate_rule(int(match.group(1)))
    return None


def classify(received: Any, original: "Receipt | None", rules: Iterable["str | TransformRule"] = ()) -> str:
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


def digest_item(name: str, attributes: Mapping[str, Any]) -> tuple[str, str, str]:
    """One event's entry in ``ragtrail.events.digest`` (docs/semconv.md §3): ``(event name,
    candidate id, content sha256)``; a query event is identified as ``hop:<n>`` with the query's
    sha256. A missing part is ``""`` (the reader digests what arrived)."""
    if name == semconv.EVENT_QUERY:
        return name, f"hop:{attributes.get(semconv.QUERY_HOP)}", attributes.get(semconv.QUERY_SHA256, "")
    return name, str(attributes.get(semconv.CANDIDATE_ID, "")), attributes.get(semconv.CANDIDATE_CONTENT_SHA256, "")


def events_digest(items: Iterable[tuple[str, str, str]]) -> str:
    """sha256 of the compact JSON array ``[[event name, candidate id, content sha256], ...]``
    (docs/semconv.md §3), the items made by :func:`digest_item`."""
    payload = json.dumps([list(i) for i in items], separators=(",", ":"), ensure_ascii=False)
    return sha256_hex(payload.encode("utf-8", "backslashreplace"))


def finite_or_none(value: Any) -> float | None:
    """A score as a finite float, or ``None`` (NaN, inf, None, or not a number)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
