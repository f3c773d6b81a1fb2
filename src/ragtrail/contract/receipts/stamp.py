"""A payload's receipt (size + sha256) as its producer stamps it, the checks that it arrived whole,
and the cache that keeps the host's thread from hashing the same chunk again."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from ragtrail.contract.receipts.canonical import canonical_bytes

__all__ = [
    "RECEIPT_CACHE_CHARS",
    "RECEIPT_CACHE_ENTRIES",
    "Receipt",
    "clear_receipt_cache",
    "content_id",
    "is_count",
    "is_sha256_hex",
    "receipt",
    "receipt_keys",
    "sha256_hex",
    "stamp",
]

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
    def from_attributes(cls, attributes: Mapping[str, Any], prefix: str) -> Receipt | None:
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


# Receipts of recent texts, by value: a RAG pipeline hands the same chunks over query after query
# (a BM25 top 100 of a 3,000-chunk corpus), and hashing them again was a tenth of the recorder's time
# on the host's thread. A text's receipt depends on the text alone, so a hit is the same receipt.
# Bounded by entries and by characters held (the texts are mostly the app's own strings, referenced,
# not copied); when full it starts over (cheap, and a pipeline's working set refills it at once).
RECEIPT_CACHE_ENTRIES = 4096
RECEIPT_CACHE_CHARS = 4 * 1024 * 1024
_receipt_cache: dict[str, Receipt] = {}
_receipt_cache_chars = 0


def receipt(value: Any) -> Receipt:
    """Stamp a receipt for ``value`` (str, bytes, or anything JSON-able)."""
    global _receipt_cache_chars
    if type(value) is str:
        cached = _receipt_cache.get(value)
        if cached is not None:
            return cached
        stamped = stamp(value)
        size = len(value)
        if size <= RECEIPT_CACHE_CHARS // 64:
            if len(_receipt_cache) >= RECEIPT_CACHE_ENTRIES or _receipt_cache_chars + size > RECEIPT_CACHE_CHARS:
                _receipt_cache.clear()
                _receipt_cache_chars = 0
            _receipt_cache[value] = stamped
            _receipt_cache_chars += size
        return stamped
    return stamp(value)


def stamp(value: Any) -> Receipt:
    """A receipt stamped afresh, never from the cache (what :func:`receipt` caches)."""
    data = canonical_bytes(value)
    if isinstance(value, str):
        chars = len(value)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        chars = len(bytes(value).decode("utf-8", "replace"))
    else:
        chars = len(data.decode("utf-8", "replace"))
    return Receipt(chars=chars, bytes=len(data), sha256=sha256_hex(data))


def clear_receipt_cache() -> None:
    """Forget every cached receipt (a cached receipt is always the one :func:`stamp` gives: only a
    test that compares the two needs this)."""
    global _receipt_cache_chars
    _receipt_cache.clear()
    _receipt_cache_chars = 0
