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
import hmac
import json
import math
import re
import time
from dataclasses import dataclass
from collections.abc import Callable, Iterable, Mapping
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


# --- canonical JSON, with bounded work ----------------------------------------------------------
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


def _json_default(value: Any, budget: "_Budget | None" = None) -> Any:
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
                return budget.cut(f"opaque {_type_name(value)} (its tolist() returned a {_type_name(result)})",
                                  f"opaque:{_type_name(value)}")
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
        return sorted(_dumps(_convert(v, depth + 1, budget)) for v in value)
    # converted values are plain data (see _json_default), so this recursion ends: depth grows by one
    return _convert(_json_default(value, budget), depth + 1, budget)


def _dumps(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


_LEAVES = frozenset({str, int, float, bool, type(None)})
_STR_KEYS = {str}


def _plain_within_bounds(value: Any) -> bool:
    """True for exactly dicts (str keys), lists, tuples, str, int, float, bool and None, within every
    bound: such a value's canonical form is json.dumps of it, done at C speed. Checked without
    recursion, a container's children by their set of types (``map(type, ...)`` runs in C)."""
    t = type(value)
    if t in _LEAVES:
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
        if not types <= _LEAVES:
            for x in children:
                tx = type(x)
                if tx is dict or tx is list or tx is tuple:
                    stack.append((x, depth + 1))
                elif tx not in _LEAVES:
                    return False
        if items > MAX_ITEMS or chars > MAX_CHARS:
            return False
    return True


def canonical_json_bounded(value: Any) -> Canonical:
    """Canonical JSON of ``value`` and the reasons anything was cut (``depth``, ``items``, ``size``,
    ``time``, or an object with no plain form): sorted keys, compact separators, no ASCII escaping
    (docs/semconv.md §4). Never raises, never recurses without bound."""
    if _plain_within_bounds(value):
        return Canonical(_dumps(value), ())
    budget = _Budget()
    try:
        data = _convert(value, 0, budget)
    except RecursionError:  # the host's own stack was nearly full: the value stands as cut
        data = budget.cut("depth")
    return Canonical(_dumps(data), tuple(budget.cuts))


def canonical_json(value: Any) -> str:
    """JSON with sorted keys, compact separators and no ASCII escaping (docs/semconv.md §4), its work bounded:
    a cut is marked ``<cut:REASON>`` in the text and reported to the cut observer."""
    text, cuts = canonical_json_bounded(value)
    if cuts and _cut_observer is not None:
        try:
            _cut_observer(cuts)
        except Exception:  # pragma: no cover - an observer must not break the caller
            pass
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
        stamped = _stamp(value)
        size = len(value)
        if size <= RECEIPT_CACHE_CHARS // 64:
            if len(_receipt_cache) >= RECEIPT_CACHE_ENTRIES or _receipt_cache_chars + size > RECEIPT_CACHE_CHARS:
                _receipt_cache.clear()
                _receipt_cache_chars = 0
            _receipt_cache[value] = stamped
            _receipt_cache_chars += size
        return stamped
    return _stamp(value)


def _stamp(value: Any) -> Receipt:
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


def parse_rule(rule: "str | TransformRule") -> TransformRule | None:
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


def _digest_part(value: Any) -> str:
    """A digest item's sha256 part as the recorder wrote it (a string, or ``""`` when missing). Any
    other type arrived changed: it is marked so that it can never hash like what the recorder wrote
    (a sha256 in hex, or empty: never a NUL)."""
    return value if isinstance(value, str) else f"\x00{type(value).__name__}:{value!r:.200}"


def digest_item(name: str, attributes: Mapping[str, Any]) -> tuple[str, str, str]:
    """One event's entry in ``ragtrail.events.digest`` (docs/semconv.md §3): ``(event name,
    candidate id, content sha256)``; a query event is identified as ``hop:<n>`` with the query's
    sha256. A missing part is ``""`` (the reader digests what arrived), and so is the content of a
    row that points to an upstream stage's receipt (schema 4's ``content.from``: the stage did not
    state it; what it points to is covered by its stage receipt)."""
    if name == semconv.EVENT_QUERY:
        return name, f"hop:{attributes.get(semconv.QUERY_HOP)}", _digest_part(attributes.get(semconv.QUERY_SHA256, ""))
    if semconv.CANDIDATE_CONTENT_FROM in attributes:
        return name, str(attributes.get(semconv.CANDIDATE_ID, "")), ""
    return (name, str(attributes.get(semconv.CANDIDATE_ID, "")),
            _digest_part(attributes.get(semconv.CANDIDATE_CONTENT_SHA256, "")))


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


# --- v2: order-free events digest and the stage receipt (docs/semconv.md "v2 changes") ---------
# Backends reorder events (Jaeger v2 sorts a span's events by name), so schema 2 digests are taken
# over a canonical order: the items sorted, never the order they arrived in.
ALG_SHA256 = "sha256"
ALG_HMAC_SHA256 = "hmac-sha256"
FIELD_DIGEST_HEX = 8  # the per-field digests only locate a change: the stage receipt is the full digest

# span attributes a stage receipt does not cover: itself, and what is stamped after the producer
# (the export side's segment stamps, the sampler's marks set when the span starts)
_UNCOVERED = frozenset({semconv.STAGE_RECEIPT, semconv.STAGE_RECEIPT_FIELDS, semconv.TRACE_SPAN_COUNT,
                        semconv.TRACE_SEGMENT_ROOT, semconv.TRACE_SEGMENT_SPAN_COUNT, semconv.TRACE_LATE,
                        semconv.TRACE_INCOMPLETE, semconv.SAMPLING_PROBABILITY, semconv.SAMPLING_ADJUSTED_COUNT})
_PREFIX = "ragtrail."


def sorted_events_digest(items: Iterable[tuple[str, str, str]]) -> str:
    """Schema 2 ``ragtrail.events.digest``: :func:`events_digest` over the items in sorted order, so
    it does not depend on the order a backend returns events in."""
    return events_digest(sorted(items))


# one encoder for every cell (json.dumps with options builds a new one per call): the same text as _dumps
_CELL_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _field_value(value: Any) -> Any:
    """A value as a digest sees it: a list (or tuple) as its canonical JSON text, because Jaeger's v1
    API carries array attributes as that text and readers cannot always tell the two apart; a value
    JSON cannot carry (bytes, a decoded kvlist's odd value) as its canonical JSON."""
    if type(value) in _LEAVES:
        return value
    if isinstance(value, (list, tuple)):
        # the usual array (a schema 3 column, findings, cited ids): one primitive type, within the
        # bounds; its canonical JSON is json.dumps of it (what canonical_json finds, without the walk)
        types = set(map(type, value))
        if len(types) == 1 and len(value) <= MAX_ITEMS:
            (kind,) = types
            if kind in _FLAT_KINDS or (kind is str and sum(map(len, value)) <= MAX_CHARS):
                return _dumps(value)
        return canonical_json(list(value))
    return canonical_json(value)


_FLAT_KINDS = frozenset({int, float, bool})
_json_str = json.encoder.encode_basestring  # what a JSONEncoder with ensure_ascii=False writes for a str


def _json_leaf(value: Any) -> str:
    """``_CELL_ENCODER.encode(value)`` for the values a cell holds, the common types without the call."""
    t = type(value)
    if t is str:
        return _json_str(value)
    if t is int:
        return int.__repr__(value)
    if t is float and math.isfinite(value):
        return float.__repr__(value)
    return _CELL_ENCODER.encode(value)


def _short(key: str) -> str:
    return key[len(_PREFIX):] if key.startswith(_PREFIX) else key


def _event_ident(name: str, attributes: Mapping[str, Any]) -> str:
    """What names an event in the stage receipt's cells: its hop, its candidate, or (schema 3: one
    exclusion event per reason, its candidates as columns) its reason, so that moving ids, details or
    any other column from one reason's event to another's changes the receipt."""
    if name == semconv.EVENT_QUERY:
        return f"hop:{attributes.get(semconv.QUERY_HOP)}"
    ident = attributes.get(semconv.CANDIDATE_ID)
    if ident is None and name == semconv.EVENT_EXCLUSION and semconv.EXCLUSION_REASON in attributes:
        return f"reason:{attributes.get(semconv.EXCLUSION_REASON)}"
    return "" if ident is None else str(ident)


def stage_fields(span_attributes: Mapping[str, Any],
                 events: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, str]:
    """Every semantic field of a stage as canonical text, by field name (``ragtrail.`` cut).

    The span's own ``ragtrail.*`` attributes are one field each. Each event attribute is a column:
    the sorted ``[event name, id (or hop:<n>), value]`` triples of the events that carry it (so the
    column does not depend on event order, and moving a score to another candidate changes it);
    the ``candidate.meta.*`` keys share one column. Stamps made after the producer are left out."""
    # attribute values are OTel primitives (or arrays of them): plain JSON, so json.dumps directly
    fields: dict[str, str] = {}
    for key, value in span_attributes.items():
        if key.startswith(_PREFIX) and key not in _UNCOVERED:
            fields[_short(key)] = _dumps(_field_value(value))
    # each cell is the JSON text of [name, id, value] (or [name, id, value, key]), written piecewise:
    # the same text as encoding the list, without building one per cell (this runs on the host's thread)
    dumps = _CELL_ENCODER.encode
    columns: dict[str, list[str]] = {}
    meta_prefix = semconv.CANDIDATE_META_PREFIX
    for name, attributes in events:
        head = dumps([name, _event_ident(name, attributes)])[:-1] + ","
        for key, value in attributes.items():
            if not key.startswith(_PREFIX):
                continue
            if key.startswith(meta_prefix):
                column, cell = "candidate.meta", f"{head}{_json_leaf(_field_value(value))},{_json_str(key)}]"
            else:
                column, cell = "event." + key[9:], f"{head}{_json_leaf(_field_value(value))}]"
            cells = columns.get(column)
            if cells is None:
                cells = columns[column] = []
            cells.append(cell)
    for column, cells in columns.items():
        cells.sort()
        fields[column] = "[" + ",".join(cells) + "]"
    return fields


def _mac(text: str, key: bytes | None) -> str:
    data = text.encode("utf-8", "backslashreplace")
    if key is None:
        return sha256_hex(data)
    return hmac.new(key, data, hashlib.sha256).hexdigest()


class StageReceipt(NamedTuple):
    """A stage receipt as written on the wire: ``receipt`` (64 hex, or ``hmac-sha256:<64 hex>``) and ``fields``
    (``<field>=<8 hex>;...`` sorted by field)."""

    receipt: str
    fields: str


def stage_receipt(fields: Mapping[str, str], key: bytes | None = None) -> StageReceipt:
    """The stage receipt over :func:`stage_fields`: sha256, or HMAC-SHA256 when a key is given."""
    ordered = sorted(fields.items())
    pairs = [[k, v] for k, v in ordered]
    # fields are text: their canonical JSON is json.dumps of them unless the bound would cut it
    plain = 3 * len(pairs) <= MAX_ITEMS and sum(len(k) + len(v) for k, v in ordered) <= MAX_CHARS
    whole = _mac(_dumps(pairs) if plain else canonical_json(pairs), key)
    short = ";".join(f"{k}={_mac(v, key)[:FIELD_DIGEST_HEX]}" for k, v in ordered)
    # unkeyed: the bare 64 hex digits (so it fits the 64-character value limit the other receipts
    # need); keyed: the algorithm named in front
    return StageReceipt(whole if key is None else f"{ALG_HMAC_SHA256}:{whole}", short)


def receipt_algorithm(value: Any) -> str | None:
    """The algorithm of a stage receipt: ``sha256`` (64 hex digits) or ``hmac-sha256``
    (``hmac-sha256:<64 hex>``); ``None`` when malformed (cut, or an algorithm this reader does not know)."""
    if is_sha256_hex(value):
        return ALG_SHA256
    if not isinstance(value, str):
        return None
    alg, _, digest = value.partition(":")
    return ALG_HMAC_SHA256 if alg == ALG_HMAC_SHA256 and is_sha256_hex(digest) else None


def parse_field_digests(value: Any) -> dict[str, str]:
    """``ragtrail.stage.receipt.fields`` back into ``{field: 8 hex}`` (what does not parse is left out)."""
    out: dict[str, str] = {}
    if isinstance(value, str):
        for part in value.split(";"):
            name, sep, digest = part.rpartition("=")
            if sep and name:
                out[name] = digest
            elif part:  # a fragment: the list was cut here (kept, in order, so the reader sees the cut)
                out[part] = ""
    return out


def changed_fields(received: Mapping[str, str], stamped: Mapping[str, str], key: bytes | None = None) -> list[str]:
    """The fields whose received value does not hash to the stamped field digest, plus the fields
    present on one side only, sorted (the reader's answer to "which field changed").

    The field digests are sorted by name, so a list cut by a value-length limit (a collector's
    ``truncate_all``) covers a prefix of the names: a cut last entry is left out, and a received
    field sorting after the last stamped one is not called added (the cut hid its digest)."""
    stamped = dict(stamped)  # in the order written: sorted by name, a cut leaves a fragment last
    cut = False
    if stamped:
        last = next(reversed(stamped))
        if len(stamped[last]) != FIELD_DIGEST_HEX:
            del stamped[last]
            cut = True
    bound = next(reversed(stamped)) if (cut and stamped) else None
    names = set(received) | set(stamped)
    return sorted(n for n in names
                  if (n not in stamped and not (cut and (bound is None or n > bound)))
                  or n not in received
                  or (n in stamped and _mac(received[n], key)[:FIELD_DIGEST_HEX] != stamped[n]))
