"""Small helpers shared by tests: read spans and events as plain dicts, OpenInference-style."""

from __future__ import annotations

from typing import Any, Iterable


def attrs(span: Any) -> dict[str, Any]:
    """A mutable copy of a span's attributes (tuples turned into lists) to pop expected keys from."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in (span.attributes or {}).items()}


def events(span: Any, name: str | None = None) -> list[dict[str, Any]]:
    return [dict(e.attributes or {}) for e in span.events if name is None or e.name == name]


def by_name(spans: Iterable[Any], name: str) -> Any:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, f"expected one span named {name!r}, got {[s.name for s in spans]}"
    return found[0]


def pop_all(mapping: dict[str, Any], expected: dict[str, Any]) -> None:
    """Pop every expected key asserting its value (``...`` accepts any value)."""
    for key, value in expected.items():
        assert key in mapping, f"missing {key}"
        actual = mapping.pop(key)
        if value is not ...:
            assert actual == value, f"{key}: {actual!r} != {value!r}"
