"""The events digest (``ragtrail.events.digest``) and the stage receipt (``ragtrail.stage.receipt``
and ``.fields``): what covers a stage's records and every semantic field of it (docs/semconv.md §3, §8).

The recorder stamps them on the host's thread (the fast paths below: pinned to the general rule by
tests/test_write_fast_paths.py) and ``verify`` recomputes them over what arrived, by the same functions.
Two steps, a column's field text and the receipt over a stage's field texts, run in the optional
native package when it is installed (``ragtrail_native``; ``RAGTRAIL_NATIVE_RECEIPTS=off`` keeps them
here): it returns the same text or declines, and this module stays the rule
(tests/test_native_receipts.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import math
import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from ragtrail import native
from ragtrail.contract import semconv
from ragtrail.contract.receipts.canonical import LEAF_TYPES, MAX_CHARS, MAX_ITEMS, canonical_bytes, canonical_json, dumps
from ragtrail.contract.receipts.stamp import Receipt, is_sha256_hex, sha256_hex, stamp

__all__ = [
    "ALG_HMAC_SHA256",
    "ALG_SHA256",
    "FIELD_DIGEST_HEX",
    "StageReceipt",
    "changed_fields",
    "digest_item",
    "events_digest",
    "field_json",
    "field_value",
    "float_json",
    "json_leaf",
    "keyed_receipt",
    "parse_field_digests",
    "receipt_algorithm",
    "records_digest",
    "rule_only",
    "sorted_events_digest",
    "sorted_keys_digest",
    "stage_fields",
    "event_fields",
    "stage_receipt",
    "stage_receipt_of",
]


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
    return (name, str(attributes.get(semconv.CANDIDATE_ID, "")), _digest_part(attributes.get(semconv.CANDIDATE_CONTENT_SHA256, "")))


def events_digest(items: Iterable[tuple[str, str, str]]) -> str:
    """sha256 of the compact JSON array ``[[event name, candidate id, content sha256], ...]``
    (docs/semconv.md §3), the items made by :func:`digest_item`."""
    return _items_digest(items if type(items) is list else list(items))


def _items_digest(items: list[Any]) -> str:
    """The digest of a list of items: a tuple is encoded as the JSON array its list would be, so the
    items are encoded as they are (no list made of each); keys are never sorted (items are arrays)."""
    if not set(map(type, items)) <= _ARRAYS:
        items = [list(i) for i in items]
    return sha256_hex(_ITEMS_ENCODER(items).encode("utf-8", "backslashreplace"))


_ARRAYS = frozenset({tuple, list})
_ITEMS_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

# --- v2: order-free events digest and the stage receipt (docs/semconv.md "v2 changes") ---------
# Backends reorder events (Jaeger v2 sorts a span's events by name), so schema 2 digests are taken
# over a canonical order: the items sorted, never the order they arrived in.
ALG_SHA256 = "sha256"
ALG_HMAC_SHA256 = "hmac-sha256"
FIELD_DIGEST_HEX = 8  # the per-field digests only locate a change: the stage receipt is the full digest

# span attributes a stage receipt does not cover: itself, and what is stamped after the producer
# (the export side's segment stamps, the sampler's marks set when the span starts, and the gateway
# Collector's tail-sampling stamp, docs/semconv.md §5 "Weights")
_UNCOVERED = frozenset(
    {
        semconv.STAGE_RECEIPT,
        semconv.STAGE_RECEIPT_FIELDS,
        semconv.TRACE_SPAN_COUNT,
        semconv.TRACE_SEGMENT_ROOT,
        semconv.TRACE_SEGMENT_SPAN_COUNT,
        semconv.TRACE_LATE,
        semconv.TRACE_INCOMPLETE,
        semconv.SAMPLING_PROBABILITY,
        semconv.SAMPLING_ADJUSTED_COUNT,
        semconv.SAMPLING_TAIL_POLICY,
        semconv.SAMPLING_TAIL_PROBABILITY,
    }
)
_PREFIX = "ragtrail."
_is_ragtrail = operator.methodcaller("startswith", _PREFIX)


def sorted_events_digest(items: Iterable[tuple[str, str, str]]) -> str:
    """Schema 2 ``ragtrail.events.digest``: :func:`events_digest` over the items in sorted order, so
    it does not depend on the order a backend returns events in."""
    listed = items if type(items) is list else list(items)
    text = _plain_sorted_items(listed)
    if text is not None:
        return sha256_hex(text.encode("utf-8"))
    return _items_digest(sorted(listed))


def _plain_sorted_items(items: list[Any]) -> str | None:
    """The compact JSON of ``sorted(items)`` for items that are each three strings of printable ASCII
    with no quote or backslash (what the recorder writes: event names, ids, sha256 hex), whose JSON is
    their text between quotes; ``None`` otherwise (the general path then decides, with the same
    result). See :func:`sorted_keys_digest`."""
    if not items:
        return None
    if set(map(len, items)) != _THREE or not set(map(type, items)) <= _ARRAYS:
        return None
    try:
        keys = list(map(_NUL.join, items))
    except TypeError:  # not every part a str
        return None
    return _plain_sorted_keys(keys)


def sorted_keys_digest(keys: list[str]) -> str | None:
    """:func:`sorted_events_digest` of the items whose parts, joined on NUL, are ``keys`` (the list
    is sorted in place), when every part is printable ASCII with no quote or backslash; ``None``
    otherwise (then the items go to :func:`sorted_events_digest`, which decides)."""
    text = _plain_sorted_keys(keys)
    return sha256_hex(text.encode("utf-8")) if text is not None else None


def records_digest(groups: Sequence[tuple[str, Sequence[Any], Sequence[Any]]]) -> str | None:
    """:func:`sorted_keys_digest` of the items ``(name, id, sha)`` that record groups ``(name, ids,
    shas)`` zip, made in one call of the optional native package; ``None`` when it is not installed
    or declines (a part that is not plain printable ASCII, more ids than shas, no items): the caller
    then takes the rule's other paths."""
    return _native_records_digest(groups) if _native_records_digest is not None else None


def _plain_sorted_keys(keys: list[str]) -> str | None:
    """The compact JSON of the sorted items that ``keys`` join on NUL (three parts each). NUL sorts
    below every character the parts hold, so the joined texts sort as the tuples do (a string sorts
    as a tuple of its characters); one sort of strings and one join stand in for a tuple sort and
    the encoder's walk (this runs per stage on the host's thread)."""
    if not keys:
        return None
    whole = "".join(keys)
    if whole.count(_NUL) != 2 * len(keys) or whole.translate(_PLAIN_GONE):
        return None
    keys.sort()
    return '[["' + '"],["'.join(keys).replace(_NUL, '","') + '"]]'


NATIVE_ENV = "RAGTRAIL_NATIVE_RECEIPTS"  # "off" (or 0, false, no): the receipts computed here only
_native_field_json = native.function("field_json", NATIVE_ENV)
_native_stage_receipt = native.function("stage_receipt", NATIVE_ENV)
_native_receipt_of = native.function("stage_receipt_of", NATIVE_ENV)
_native_records_digest = native.function("records_digest", NATIVE_ENV)
_NATIVE_NAMES = ("_native_field_json", "_native_stage_receipt", "_native_receipt_of", "_native_records_digest")


@contextlib.contextmanager
def rule_only() -> Iterator[None]:
    """Within it, this module computes everything itself, as a process without the native package
    does (tests and benchmarks compare the two; not for the host's threads: it swaps module state)."""
    saved = {name: globals()[name] for name in _NATIVE_NAMES}
    globals().update(dict.fromkeys(_NATIVE_NAMES))
    try:
        yield
    finally:
        globals().update(saved)


_NUL = "\x00"
_THREE = {3}
# deletes NUL (the joints) and printable ASCII but '"' and '\\': what is left of a text is a character
# the JSON encoder would escape (or, non-ASCII, one left to the general path)
_PLAIN_GONE = dict.fromkeys([0, *(c for c in range(0x20, 0x7F) if chr(c) not in '"\\')])


def field_value(value: Any) -> Any:
    """A value as a digest sees it: a list (or tuple) as its canonical JSON text, because Jaeger's v1
    API carries array attributes as that text and readers cannot always tell the two apart; a value
    JSON cannot carry (bytes, a decoded kvlist's odd value) as its canonical JSON."""
    if type(value) in LEAF_TYPES:
        return value
    if isinstance(value, (str, int, float)):
        # a subclass (LangChain's StrOutputParser returns a ``str`` subclass, an IntEnum is an int):
        # the wire carries its plain value, so the digest must too (not the JSON text of it)
        return _plain(value)
    if isinstance(value, (list, tuple)):
        # the usual array (a schema 3 column, findings, cited ids): one primitive type, within the
        # bounds; its canonical JSON is json.dumps of it (what canonical_json finds, without the walk)
        types = set(map(type, value))
        if len(types) == 1 and len(value) <= MAX_ITEMS:
            (kind,) = types
            if kind in _FLAT_KINDS or (kind is str and sum(map(len, value)) <= MAX_CHARS):
                return dumps(value)
        return canonical_json(list(value))
    return canonical_json(value)


def _plain(value: str | int | float) -> str | int | float | bool:
    """The built-in value of a ``str``/``int``/``float`` subclass instance, as OTLP encodes it."""
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    return int.__int__(value) if isinstance(value, int) else float.__float__(value)


_FLAT_KINDS = frozenset({int, float, bool})
_json_str = json.encoder.encode_basestring  # what a JSONEncoder with ensure_ascii=False writes for a str


def json_leaf(value: Any) -> str:
    """``dumps(value)`` for the values a cell holds, the common types without the call."""
    t = type(value)
    if t is str:
        return _json_str(value)
    if t is int:
        return int.__repr__(value)
    if t is float and math.isfinite(value):
        return float.__repr__(value)
    return dumps(value)


def field_json(value: Any) -> str:
    """``json_leaf(field_value(value))``: a value's canonical text as a stage field or cell holds it,
    the usual values (text, ints, the schema 3 columns) without the general walk."""
    t = type(value)
    if t is str:
        return _json_str(value)
    if t is int:
        return int.__repr__(value)
    if t is tuple or t is list:
        text = _native_field_json(value, MAX_ITEMS, MAX_CHARS) if _native_field_json is not None else None
        if text is None:
            text = _quoted_array(value)
        if text is not None:
            return text
    return json_leaf(field_value(value))


def _quoted_array(value: Sequence[Any]) -> str | None:
    """``_json_str(dumps(value))`` for an array of one type (a column) whose JSON needs no escape but
    its own quotes (numbers; ASCII text without backslashes or control characters); ``None`` otherwise
    (the general path then decides, with the same result)."""
    if not value or len(value) > MAX_ITEMS:
        return None
    types = set(map(type, value))
    if len(types) != 1:
        return None
    (kind,) = types
    if kind is str:
        joined = '","'.join(value)
        if len(joined) <= MAX_CHARS and joined.isascii() and joined.isprintable() and "\\" not in joined and joined.count('"') == 2 * len(value) - 2:
            # the array is '["' + joined + '"]'; as a JSON string only its quotes are escaped
            return '"[\\"' + joined.replace('"', '\\"') + '\\"]"'
        return None
    if kind is float:
        return '"' + _floats_json(value) + '"'
    if kind is int or kind is bool:
        return '"' + dumps(value) + '"'
    return None


# the JSON text of recent scores: a score is written on the stage that made it and again on each
# later stage that hands it on or excludes it, and a float's shortest repr is the slowest part of
# a column. Finite, non-zero floats only (0.0 and -0.0 are equal keys with different texts; NaN
# is never equal to itself); started over when full.
_FLOAT_TEXTS: dict[float, str] = {}
_FLOAT_TEXTS_MAX = 1 << 16


def float_json(number: float) -> str:
    """``dumps(number)`` for one float, a recent score's text read from the same memory as the
    columns' (a mirror writes the scores a column of the same stage wrote)."""
    text = _FLOAT_TEXTS.get(number)
    if text is not None:
        return text
    # not a recent column's (the native path fills no memory): float.__repr__ for a finite one
    return float.__repr__(number) if type(number) is float and number - number == 0.0 else dumps(number)


def _floats_json(values: Sequence[float]) -> str:
    """``dumps(values)`` for an array of floats."""
    cache = _FLOAT_TEXTS
    texts = list(map(cache.get, values))
    if None in texts:
        if len(cache) > _FLOAT_TEXTS_MAX:
            cache.clear()
        for index, text in enumerate(texts):
            if text is None:
                number = values[index]
                if number - number == 0.0:  # finite
                    text = float.__repr__(number)
                    if number:
                        cache[number] = text
                else:
                    text = dumps(number)  # NaN, Infinity, -Infinity, as the encoder writes them
                texts[index] = text
    return "[" + ",".join(texts) + "]"  # type: ignore[arg-type]


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


def stage_fields(span_attributes: Mapping[str, Any], events: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, str]:
    """Every semantic field of a stage as canonical text, by field name (``ragtrail.`` cut).

    The span's own ``ragtrail.*`` attributes are one field each. Each event attribute is a column:
    the sorted ``[event name, id (or hop:<n>), value]`` triples of the events that carry it (so the
    column does not depend on event order, and moving a score to another candidate changes it);
    the ``candidate.meta.*`` keys share one column (:func:`event_fields`). Stamps made after the
    producer are left out."""
    return _with_event_fields(span_attributes, event_fields(events))


def _with_event_fields(span_attributes: Mapping[str, Any], columns: dict[str, str]) -> dict[str, str]:
    """The span's fields, then the events' ``columns`` (:func:`event_fields`) over them."""
    # attribute values are OTel primitives (or arrays of them): plain JSON, so json.dumps directly
    fields: dict[str, str] = {}
    uncovered = _UNCOVERED
    start = len(_PREFIX)
    for key in filter(_is_ragtrail, span_attributes):
        if key not in uncovered:
            fields[key[start:]] = field_json(span_attributes[key])
    fields.update(columns)
    return fields


def event_fields(events: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, str]:
    """The events' part of :func:`stage_fields`: one column per event attribute key."""
    # each cell is the JSON text of [name, id, value] (or [name, id, value, key]), written piecewise:
    # the same text as encoding the list, without building one per cell (this runs on the host's thread)
    encode = dumps
    columns: dict[str, list[str]] = {}
    meta_prefix = semconv.CANDIDATE_META_PREFIX
    for name, attributes in events:
        head = encode([name, _event_ident(name, attributes)])[:-1] + ","
        for key, value in attributes.items():
            if not key.startswith(_PREFIX):
                continue
            if key.startswith(meta_prefix):
                column, cell = "candidate.meta", f"{head}{field_json(value)},{_json_str(key)}]"
            else:
                column, cell = "event." + key[9:], f"{head}{field_json(value)}]"
            cells = columns.get(column)
            if cells is None:
                cells = columns[column] = []
            cells.append(cell)
    fields: dict[str, str] = {}
    for column, cells in columns.items():
        cells.sort()
        fields[column] = "[" + ",".join(cells) + "]"
    return fields


def stage_receipt_of(span_attributes: Mapping[str, Any], events: Sequence[tuple[str, Mapping[str, Any]]], key: bytes | None = None) -> StageReceipt:
    """``stage_receipt(stage_fields(span_attributes, events), key)``: what the recorder stamps. Unkeyed
    over a plain dict (what the SDK holds), the optional native package makes the span's fields and
    the receipt in one call (the events' columns made here), or declines."""
    columns = event_fields(events)
    if key is None and _native_receipt_of is not None and type(span_attributes) is dict:
        made = _native_receipt_of(span_attributes, _PREFIX, _UNCOVERED, columns, MAX_ITEMS, MAX_CHARS, FIELD_DIGEST_HEX)
        if made is not None:
            return StageReceipt(*made)
    return stage_receipt(_with_event_fields(span_attributes, columns), key)


def _mac(text: str, key: bytes | None) -> str:
    data = text.encode("utf-8", "backslashreplace")
    if key is None:
        return sha256_hex(data)
    return hmac.new(key, data, hashlib.sha256).hexdigest()


# the unkeyed field digests of short field texts: most of a stage's fields (its kind, component,
# status, counts, score kind, an exclusion reason's cells) say the same text query after query, and
# a sha256 call is most of a field's cost. Texts up to _MEMO_CHARS only (a column or a 64-hex digest
# is new each time); started over when full.
_FIELD_DIGESTS: dict[str, str] = {}
_MEMO_CHARS = 64
_MEMO_ENTRIES = 4096


def _field_digest(text: str) -> str:
    """``_mac(text, None)[:FIELD_DIGEST_HEX]``, remembered for short texts."""
    digest = _FIELD_DIGESTS.get(text)
    if digest is None:
        digest = hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()[:FIELD_DIGEST_HEX]
        if len(text) <= _MEMO_CHARS:
            if len(_FIELD_DIGESTS) >= _MEMO_ENTRIES:
                _FIELD_DIGESTS.clear()
            _FIELD_DIGESTS[text] = digest
    return digest


class StageReceipt(NamedTuple):
    """A stage receipt as written on the wire: ``receipt`` (64 hex, or ``hmac-sha256:<64 hex>``) and ``fields``
    (``<field>=<8 hex>;...`` sorted by field)."""

    receipt: str
    fields: str


def stage_receipt(fields: Mapping[str, str], key: bytes | None = None) -> StageReceipt:
    """The stage receipt over :func:`stage_fields`: sha256, or HMAC-SHA256 when a key is given."""
    if key is None and _native_stage_receipt is not None and type(fields) is dict:
        made = _native_stage_receipt(fields, MAX_ITEMS, MAX_CHARS, FIELD_DIGEST_HEX)
        if made is not None:
            return StageReceipt(*made)
    ordered = sorted(fields.items())
    # fields are text: their canonical JSON is json.dumps of the [name, text] pairs (a tuple is encoded
    # as the array its list would be) unless the bound would cut it
    plain = 3 * len(ordered) <= MAX_ITEMS and sum(len(k) + len(v) for k, v in ordered) <= MAX_CHARS
    whole = _mac(dumps(ordered) if plain else canonical_json([[k, v] for k, v in ordered]), key)
    if key is None:
        short = ";".join([f"{k}={_field_digest(v)}" for k, v in ordered])
    else:
        short = ";".join([f"{k}={_mac(v, key)[:FIELD_DIGEST_HEX]}" for k, v in ordered])
    # unkeyed: the bare 64 hex digits (so it fits the 64-character value limit the other receipts
    # need); keyed: the algorithm named in front
    return StageReceipt(whole if key is None else f"{ALG_HMAC_SHA256}:{whole}", short)


def keyed_receipt(value: Any, key: bytes) -> Receipt:
    """A query receipt in ``hash`` mode under a receipt key (docs/semconv.md §7): chars and bytes as
    :func:`~ragtrail.contract.receipts.stamp` gives them, the digest HMAC-SHA256 of the same canonical
    bytes, named as a keyed stage receipt is (``hmac-sha256:<64 hex>``). An unkeyed sha256 of a short
    question confirms a guess offline; this one only with the key."""
    plain = stamp(value)
    return plain._replace(sha256=f"{ALG_HMAC_SHA256}:{hmac.new(key, canonical_bytes(value), hashlib.sha256).hexdigest()}")


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
    return sorted(
        n
        for n in names
        if (n not in stamped and not (cut and (bound is None or n > bound)))
        or n not in received
        or (n in stamped and _mac(received[n], key)[:FIELD_DIGEST_HEX] != stamped[n])
    )
