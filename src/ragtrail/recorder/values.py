"""How a Python value becomes an OpenTelemetry attribute value on ragtrail's spans and events.

Strings are written exactly as the receipt's canonical bytes escape them (lone surrogates
backslash-escaped), so the received text still verifies as intact (docs/semconv.md §4).
"""

from __future__ import annotations

from typing import Any

from ragtrail.contract.receipts import canonical_json

__all__ = ["attribute_value", "wire_str", "wire_text"]


def wire_str(value: str) -> str:
    """A string as OTLP can carry it: lone surrogates backslash-escaped, exactly as the receipt's
    canonical bytes escape them (so the received text still verifies as intact)."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")


def wire_text(value: Any) -> str:
    """A payload as wire text: a string (wire-escaped), decoded bytes, or canonical JSON."""
    if isinstance(value, str):
        return wire_str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return canonical_json(value)


def attribute_value(value: Any) -> Any:
    """OTel attributes take str/bool/int/float and homogeneous lists of them; anything else becomes
    canonical JSON (deterministic), so nested metadata is kept rather than dropped."""
    if isinstance(value, str):
        return wire_str(value)
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (list, tuple)) and value:
        # OTel takes homogeneous lists of str, bool, int or float as they are
        for kind in (str, bool, int, float):
            if all(type(v) is kind for v in value):
                return tuple(wire_str(v) for v in value) if kind is str else tuple(value)
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():
        try:
            return attribute_value(item())
        except Exception:  # pragma: no cover
            pass
    return canonical_json(value)
