"""Canonical forms of the values a receipt or a digest covers: JSON text with bounded work, the
text a receipt's ``chars`` counts, the bytes its sha256 is taken over, and a score's finite number.

One encoder (:data:`dumps`) writes every canonical JSON text, so the recorder and the inspector
produce the same text for the same value (docs/semconv.md §4).
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

__all__ = [
    "MAX_CHARS",
    "MAX_DEPTH",
    "MAX_ITEMS",
    "TIME_BUDGET_S",
    "LEAF_TYPES",
    "Canonical",
    "CutObserver",
    "canonical_bytes",
    "canonical_json",
    "canonical_json_bounded",
    "canonical_text",
    "cut_observer",
    "dumps",
    "finite_or_none",
    "set_cut_observer",
]

# A candidate, a metadata value or a filter is whatever the host handed over: a deeply nested dict, a
# million-item list, or an object that answers every attribute (``unittest.mock.MagicMock``: its
# ``tolist()`` returns another MagicMock, whose ``tolist()``...). The host's thread must not wait on
# it, so the work per value is bounded; what does not fit is replaced by a ``<cut:REASON>`` marker in
# the canonical form, and reported (see :func:`canonical_json_bounded`, :func:`set_cut_observer`).
# Ordinary values never reach a bound: their canonical form is what it always was.
MAX_DEPTH = 64  # containers nested deeper than this are cut
MAX_ITEMS = 100_000  # values visited per canonical form (well under the time budget, even on a busy machine)
MAX_CHARS = 16 * 1024 * 1024  # characters of strings and keys per canonical form
TIME_BUDGET_S = 1.0  # a last resort (slow conversions): a cut by time is not reproducible, and says so

_SCALARS = (str, int, float, bool, type(None))
_NATIVE = (*_SCALARS, list, tuple, dict)
_KEY_TYPES = (str, int, float, bool, type(None))


class Canonical(NamedTuple):
    """A canonical JSON text and what had to be cut to make it (empty when nothing was)."""

    text: str
    cuts: tuple[str, ...]


CutObserver = Callable[[tuple[str, ...]], None]
_cut_observer: CutObserver | None = None


def set_cut_observer(observer: CutObserver | None) -> None:
    """Who hears about cuts made by :func:`canonical_json` (the recorder: a finding on the current
    stage). One observer per process; it must not raise."""
    global _cut_observer
    _cut_observer = observer


class _Budget:
    __slots__ = ("items", "chars", "deadline", "cuts")

    def __init__(self) -> None:
        self.items = 0
        self.chars = 0
        self.deadline = time.perf_counter() + TIME_BUDGET_S
        self.cuts: dict[str, None] = {}

    def cut(self, reason: str, marker: str | None = None) -> str:
        """Note the cut; the marker that stands in the canonical form where the value was."""
        self.cuts[reason] = None
        return f"<cut:{marker or reason}>"

    def spend(self) -> str | None:
        """Count one visited value; the reason to stop, if any."""
        self.items += 1
        if self.items > MAX_ITEMS:
            return "items"
        if not self.items & 1023 and time.perf_counter() > self.deadline:
            return "time"
        return None


def _type_name(value: Any) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


_NO_CONVERSION = object()


def _json_default(value: Any, budget: _Budget | None = None) -> Any:
    """Make common non-JSON values deterministic (never ``repr``: it embeds memory addresses).

    A conversion is taken only when it yields a plain value (numpy's ``item()``/``tolist()``, a date's
    ``isoformat()``): an object answering every attribute gets no further than its type name."""
    try:
        item = getattr(value, "item", None)  # numpy scalars
        if callable(item) and getattr(value, "shape", None) == ():
            result = item()
            if isinstance(result, _SCALARS):
                return result
        tolist = getattr(value, "tolist", None)  # numpy arrays
        if callable(tolist):
            result = tolist()
            if isinstance(result, _NATIVE):
                return result
            if budget is not None:  # an object answering every attribute (a mock): its type name only
                return budget.cut(f"opaque {_type_name(value)} (its tolist() returned a {_type_name(result)})", f"opaque:{_type_name(value)}")
        if isinstance(value, (bytes, bytearray, memoryview)):
            return {"$bytes": bytes(value).hex()}
        isoformat = getattr(value, "isoformat", None)
        if callable(isoformat):
            result = isoformat()
            if isinstance(result, str):
                return result
        if isinstance(value, Mapping):
            return {str(k): v for k, v in value.items()}
    except Exception:  # a conversion that fails is not taken: the type name stands for the value
        pass
    return f"<{_type_name(value)}>"


def _dict_keys_native(value: dict[Any, Any]) -> bool:
    """True when json.dumps(sort_keys=True) takes these keys as they are (JSON key types, sortable)."""
    keys = list(value)
    if all(type(k) is str for k in keys):
        return True
    if not all(isinstance(k, _KEY_TYPES) for k in keys):
        return False
    try:
        sorted(keys)
    except TypeError:
        return False
    return True


def _convert(value: Any, depth: int, budget: _Budget) -> Any:
    """``value`` as plain JSON data (containers rebuilt, odd values converted), within the budget."""
    stop = budget.spend()
    if stop:
        return budget.cut(stop)
    if isinstance(value, str):
        budget.chars += len(value)
        return value if budget.chars <= MAX_CHARS else budget.cut("size")
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (list, tuple, dict, set, frozenset)) and depth >= MAX_DEPTH:
        return budget.cut("depth")
    if isinstance(value, dict):
        if not _dict_keys_native(value):
            value = {str(k): v for k, v in value.items()}  # keys of mixed or non-JSON types: as text
        out = {}
        for k, v in value.items():
            if isinstance(k, str):
                budget.chars += len(k)
            out[k] = _convert(v, depth + 1, budget)
            if budget.items > MAX_ITEMS:
                break
        return out
    if isinstance(value, (list, tuple)):
        out_list = []
        for v in value:
            out_list.append(_convert(v, depth + 1, budget))
            if budget.items > MAX_ITEMS:
                break
        return out_list
    if isinstance(value, (set, frozenset)):
        return sorted(dumps(_convert(v, depth + 1, budget)) for v in value)
    # converted values are plain data (see _json_default), so this recursion ends: depth grows by one
    return _convert(_json_default(value, budget), depth + 1, budget)


# one encoder for every canonical form: ``json.dumps`` with options builds a new JSONEncoder per call
# (a third of its cost on a short value); the encoder keeps no state between calls, so one is shared
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
dumps = _ENCODER.encode  # json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# JSON's scalar types: a value of one of them is its own canonical form (the digests' fast paths test it too)
LEAF_TYPES = frozenset({str, int, float, bool, type(None)})
_STR_KEYS = {str}


def _plain_within_bounds(value: Any) -> bool:
    """True for exactly dicts (str keys), lists, tuples, str, int, float, bool and None, within every
    bound: such a value's canonical form is json.dumps of it, done at C speed. Checked without
    recursion, a container's children by their set of types (``map(type, ...)`` runs in C)."""
    t = type(value)
    if t in LEAF_TYPES:
        return t is not str or len(value) <= MAX_CHARS
    if t is not dict and t is not list and t is not tuple:
        return False
    stack = [(value, 0)]
    items = chars = 0
    while stack:
        v, depth = stack.pop()
        if depth >= MAX_DEPTH:
            return False
        if type(v) is dict:
            if v and set(map(type, v)) != _STR_KEYS:
                return False
            chars += sum(map(len, v))
            children: Any = v.values()
        else:
            children = v
        items += len(children)
        types = set(map(type, children))
        if str in types:
            chars += sum(len(x) for x in children if type(x) is str)
        if not types <= LEAF_TYPES:
            for x in children:
                tx = type(x)
                if tx is dict or tx is list or tx is tuple:
                    stack.append((x, depth + 1))
                elif tx not in LEAF_TYPES:
                    return False
        if items > MAX_ITEMS or chars > MAX_CHARS:
            return False
    return True


def canonical_json_bounded(value: Any) -> Canonical:
    """Canonical JSON of ``value`` and the reasons anything was cut (``depth``, ``items``, ``size``,
    ``time``, or an object with no plain form): sorted keys, compact separators, no ASCII escaping
    (docs/semconv.md §4). Never raises, never recurses without bound."""
    if _plain_within_bounds(value):
        return Canonical(dumps(value), ())
    budget = _Budget()
    try:
        data = _convert(value, 0, budget)
    except RecursionError:  # the host's own stack was nearly full: the value stands as cut
        data = budget.cut("depth")
    return Canonical(dumps(data), tuple(budget.cuts))


def canonical_json(value: Any) -> str:
    """JSON with sorted keys, compact separators and no ASCII escaping (docs/semconv.md §4), its work bounded:
    a cut is marked ``<cut:REASON>`` in the text and reported to the cut observer."""
    text, cuts = canonical_json_bounded(value)
    if cuts and _cut_observer is not None:
        with contextlib.suppress(Exception):  # an observer must not break the caller
            _cut_observer(cuts)
    return text


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


def cut_observer() -> CutObserver | None:
    """The observer :func:`set_cut_observer` installed (``None``: none), so a caller can put it back."""
    return _cut_observer


def finite_or_none(value: Any) -> float | None:
    """A score as a finite float, or ``None`` (NaN, inf, None, or not a number)."""
    if type(value) is float:  # the usual score, without the conversion: finite when x - x is 0.0
        return value if value - value == 0.0 else None
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
