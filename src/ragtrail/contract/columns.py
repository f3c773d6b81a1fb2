"""The candidate columns (docs/semconv.md §3, schemas 3 to 5): each rule written once, what the
recorder writes (``encode_*``) beside what the inspector reads back from it (``decode_*``).

A stage span carries its outputs as columns, one homogeneous array per field in output order (a
row's rank is its position); an exclusion event carries one reason's candidates the same way, with
their input ranks and details. The recorder hands each ``encode_*`` rule the rows' wire values and
the rule writes its column (or its single value) into the attributes being built (by the current
schema's rules, or an older accepted one's: what that schema's writer wrote); the inspector
hands :func:`decode` a span's or an event's attributes and gets one :class:`Row` per candidate.

Three habits run through the rules. A value a rule gives for every row is said once (score kind and
hop always; schema 5 adds consecutive input ranks, one shared detail, ASCII content's byte counts),
else the column is written. A row without a value holds the column's blank (``""`` in text, ``-1``
in counts and hops, ``0.0`` in scores with ``score_raw`` saying why), and a column no row has a value
for is not written. Each schema is read by its own rules: ``content.from`` from schema 4 on, the
schema 5 single forms only on schema 5. What is not there is never guessed: a column shorter than
``ids`` leaves its field out of the rows it does not reach.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import Receipt, finite_or_none
from ragtrail.contract.receipts.canonical import dumps

__all__ = [
    "FIELD_OF_COLUMN",
    "Row",
    "as_float",
    "as_list",
    "decode",
    "decode_content_from",
    "decode_details",
    "decode_hops",
    "decode_ids",
    "decode_kinds",
    "decode_meta",
    "decode_payload",
    "decode_ranks",
    "decode_receipts",
    "decode_scores",
    "decode_text",
    "encode_content_from",
    "encode_details",
    "encode_hops",
    "encode_ids",
    "encode_kinds",
    "encode_meta",
    "encode_once",
    "encode_payload",
    "encode_ranks",
    "encode_receipts",
    "encode_scores",
    "encode_text",
    "meta_cell",
    "replaced_ids",
    "replaced_ids_cell",
    "score_text",
]

_NO_META: Mapping[str, Any] = MappingProxyType({})


class Row(NamedTuple):
    """One candidate as its columns say it; ``None``: the row has no such field. Values are what
    arrived (a trace read back is untrusted: a changed column may hold any type)."""

    id: str
    rank: int | None = None
    score: Any = None
    score_raw: Any = None
    score_kind: Any = None
    hop: Any = None
    content_chars: Any = None
    content_bytes: Any = None
    content_sha256: Any = None
    transform_rule: Any = None
    derived_from: Any = None
    detail: Any = None
    content_preview: Any = None
    content_text: Any = None
    meta: Mapping[str, Any] = _NO_META  # by metadata key (the column name less ``COLUMN_META_PREFIX``)
    content_from: str | None = None
    reason: Any = None


# each column and the Row field it is read into (what an alarm about a decoded row names)
FIELD_OF_COLUMN: Mapping[str, str] = MappingProxyType(
    {
        sc.COLUMN_IDS: "id",
        sc.COLUMN_RANKS: "rank",
        sc.COLUMN_RANK_FIRST: "rank",
        sc.COLUMN_SCORES: "score",
        sc.COLUMN_SCORE_RAW: "score_raw",
        sc.COLUMN_SCORE_KIND: "score_kind",
        sc.COLUMN_SCORE_KINDS: "score_kind",
        sc.COLUMN_HOP: "hop",
        sc.COLUMN_HOPS: "hop",
        sc.COLUMN_CONTENT_CHARS: "content_chars",
        sc.COLUMN_CONTENT_BYTES: "content_bytes",
        sc.COLUMN_CONTENT_ENCODING: "content_bytes",
        sc.COLUMN_CONTENT_SHA256: "content_sha256",
        sc.COLUMN_TRANSFORM_RULE: "transform_rule",
        sc.COLUMN_TRANSFORM_DERIVED_FROM: "derived_from",
        sc.COLUMN_EXCLUSION_DETAILS: "detail",
        sc.COLUMN_CONTENT_PREVIEW: "content_preview",
        sc.COLUMN_CONTENT_TEXT: "content_text",
    }
)


# --- the shapes a column arrives in ---------------------------------------------------------------
def as_list(value: Any) -> list[Any]:
    """A column as a list: an array as decoded, JSON text of one (Jaeger v1), else nothing."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str) and value[:1] == "[":
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            return []
        return parsed if isinstance(parsed, list) else []
    return []


def as_float(value: Any) -> Any:
    """A score as the recorder wrote it (a float): Jaeger v1's JSON text writes ``1.0`` as ``1``."""
    if type(value) is int:
        return float(value)
    return value


def _cells(column: list[Any], count: int) -> list[Any]:
    """One cell per row: a short column's missing cells are ``None`` (never shifted, never guessed)."""
    return column[:count] + [None] * (count - len(column))


def _blank_is_none(cells: list[Any], blank: Any) -> list[Any]:
    return [None if v is None or v == blank else v for v in cells]


def _column(attributes: Mapping[str, Any], key: str, count: int) -> list[Any]:
    return _cells(as_list(attributes.get(key)), count)


# --- the said-once rule: a value the same for every row once, else the column ----------------------
def encode_once(out: dict[str, Any], values: list[Any], single: str, column: str) -> None:
    """A field the same (equal, and of one type) for every row said once (``single``), else its column."""
    first = values[0]
    if all(v == first and type(v) is type(first) for v in values):
        out[single] = first
    else:
        out[column] = values


def _decode_once(attributes: Mapping[str, Any], single: str, column: str, count: int) -> list[Any]:
    """Each row's value: the column when it holds any cell, else the single value for every row."""
    cells = as_list(attributes.get(column))
    return _cells(cells, count) if cells else [attributes.get(single)] * count


# --- ids ---------------------------------------------------------------------------------------------
def encode_ids(out: dict[str, Any], ids: list[str]) -> None:
    """The candidate ids (wire text), always written when there is a row: the rows are the ids."""
    out[sc.COLUMN_IDS] = ids


def decode_ids(attributes: Mapping[str, Any]) -> list[str]:
    return [i if isinstance(i, str) else str(i) for i in as_list(attributes.get(sc.COLUMN_IDS))]


# --- ranks: a stage span's row is ranked by its position; an exclusion event states input ranks ----
def encode_ranks(out: dict[str, Any], ranks: list[int], schema: int = sc.SCHEMA_VERSION) -> None:
    """An exclusion event's input ranks (``-1``: none); schema 5: consecutive ranks said by the first."""
    first = ranks[0]
    if schema >= sc.SCHEMA_SAID_ONCE and first >= 0 and ranks[-1] - first == len(ranks) - 1 and ranks == list(range(first, first + len(ranks))):
        out[sc.COLUMN_RANK_FIRST] = first
    else:
        out[sc.COLUMN_RANKS] = ranks


def decode_ranks(attributes: Mapping[str, Any], count: int, exclusion: bool, schema: int) -> list[int | None]:
    """Each row's rank: the ranks column; else a stage span's row its position; else (an exclusion
    event) schema 5's run from ``rank_first``, or no rank (its position in the event is not one)."""
    if sc.COLUMN_RANKS in attributes:
        cells = _column(attributes, sc.COLUMN_RANKS, count)
    elif not exclusion:
        return list(range(count))
    else:
        first = attributes.get(sc.COLUMN_RANK_FIRST) if schema >= sc.SCHEMA_SAID_ONCE else None
        cells = list(range(first, first + count)) if type(first) is int and first >= 0 else [None] * count
    return [r if type(r) is int and r >= 0 else None for r in cells]


# --- scores: finite in scores; otherwise 0.0 there and score_raw says why ------------------------------
def score_text(value: Any) -> str:
    """A score that is not a finite number, said as text (``nan``, ``inf``, or its type)."""
    try:
        return repr(float(value))
    except (TypeError, ValueError):
        return type(value).__name__


def encode_scores(out: dict[str, Any], values: Iterable[Any]) -> None:
    """``scores`` when any row has a finite score; ``score_raw`` when some row has none (``""``: the
    score is in scores, ``NO_SCORE``: the candidate had none, else :func:`score_text`)."""
    values = values if type(values) is list else list(values)
    if values and set(map(type, values)) == _FLOATS and math.isfinite(sum(values)):
        # every row a finite float (a sum of them is finite only then, or when it overflows: then the
        # rows are looked at one by one below): the column is the scores as they are, no score_raw
        out[sc.COLUMN_SCORES] = list(values)
        return
    scores: list[float] = []
    raw: list[str] = []
    finite = odd = 0
    for value in values:
        number = None if value is None else finite_or_none(value)
        if number is not None:
            scores.append(number)
            raw.append("")
            finite += 1
        else:
            scores.append(0.0)
            raw.append(sc.NO_SCORE if value is None else score_text(value))
            if value is not None:
                odd += 1
    if finite:
        out[sc.COLUMN_SCORES] = scores
    if odd or (finite and finite < len(scores)):
        out[sc.COLUMN_SCORE_RAW] = raw


_FLOATS = {float}


def decode_scores(attributes: Mapping[str, Any], count: int) -> tuple[list[Any], list[Any]]:
    """Each row's score and its raw text (at most one of the two; a ``NO_SCORE`` row has neither)."""
    scores = _column(attributes, sc.COLUMN_SCORES, count)
    flags = _column(attributes, sc.COLUMN_SCORE_RAW, count) if sc.COLUMN_SCORE_RAW in attributes else [""] * count
    numbers = [as_float(s) if f == "" and s is not None else None for s, f in zip(scores, flags, strict=True)]
    raws = [f if f is not None and f != "" and f != sc.NO_SCORE else None for f in flags]
    return numbers, raws


# --- score kind and hop: said once when the same for every row ---------------------------------------
def encode_kinds(out: dict[str, Any], kinds: list[str]) -> None:
    """Every row's score kind (``none`` when not known): always written."""
    encode_once(out, kinds, sc.COLUMN_SCORE_KIND, sc.COLUMN_SCORE_KINDS)


def decode_kinds(attributes: Mapping[str, Any], count: int) -> list[Any]:
    return _decode_once(attributes, sc.COLUMN_SCORE_KIND, sc.COLUMN_SCORE_KINDS, count)


def encode_hops(out: dict[str, Any], hops: list[int]) -> None:
    """The hop that found each row (``-1``: none); nothing when no row has one."""
    if any(h != -1 for h in hops):
        encode_once(out, hops, sc.COLUMN_HOP, sc.COLUMN_HOPS)


def decode_hops(attributes: Mapping[str, Any], count: int) -> list[Any]:
    return _blank_is_none(_decode_once(attributes, sc.COLUMN_HOP, sc.COLUMN_HOPS, count), -1)


# --- exclusion details: schema 5 says one detail for every row once -----------------------------------
def encode_details(out: dict[str, Any], details: list[str], schema: int = sc.SCHEMA_VERSION) -> None:
    """An exclusion event's details (``""``: none); nothing when no row has one; schema 5: one detail
    for every row said once."""
    if not any(details):
        return
    if schema >= sc.SCHEMA_SAID_ONCE:
        encode_once(out, details, sc.EXCLUSION_DETAIL, sc.COLUMN_EXCLUSION_DETAILS)
    else:
        out[sc.COLUMN_EXCLUSION_DETAILS] = details


def decode_details(attributes: Mapping[str, Any], count: int, exclusion: bool, schema: int) -> list[Any]:
    """Each row's detail: the details column, else (an exclusion event, schema 5) the one said once."""
    if exclusion and schema >= sc.SCHEMA_SAID_ONCE and sc.COLUMN_EXCLUSION_DETAILS not in attributes and sc.EXCLUSION_DETAIL in attributes:
        return _blank_is_none([attributes[sc.EXCLUSION_DETAIL]] * count, "")
    return decode_text(attributes, sc.COLUMN_EXCLUSION_DETAILS, count)


# --- content receipts: stated per row, or (schema 4) pointed to on an upstream stage --------------------
def encode_receipts(out: dict[str, Any], receipts: list[Receipt | None], schema: int = sc.SCHEMA_VERSION) -> None:
    """chars, bytes (schema 5: ``encoding = ascii`` instead when every row's bytes are its chars) and
    sha256 of each row's content (``-1`` / ``""``: the stage never saw that row's content)."""
    chars = out[sc.COLUMN_CONTENT_CHARS] = [-1 if r is None else r.chars for r in receipts]
    content_bytes = [-1 if r is None else r.bytes for r in receipts]
    if schema >= sc.SCHEMA_SAID_ONCE and content_bytes == chars:
        out[sc.COLUMN_CONTENT_ENCODING] = sc.CONTENT_ASCII
    else:
        out[sc.COLUMN_CONTENT_BYTES] = content_bytes
    out[sc.COLUMN_CONTENT_SHA256] = [r.sha256 if r is not None else "" for r in receipts]


def decode_receipts(attributes: Mapping[str, Any], count: int, schema: int) -> tuple[list[Any], list[Any], list[Any]]:
    """Each row's content chars, bytes and sha256 as stated on these columns."""
    chars = _column(attributes, sc.COLUMN_CONTENT_CHARS, count)
    if (
        schema >= sc.SCHEMA_SAID_ONCE
        and sc.COLUMN_CONTENT_BYTES not in attributes
        and sc.COLUMN_CONTENT_CHARS in attributes
        and attributes.get(sc.COLUMN_CONTENT_ENCODING) == sc.CONTENT_ASCII
    ):
        sizes = chars
    else:
        sizes = _column(attributes, sc.COLUMN_CONTENT_BYTES, count)
    return _blank_is_none(chars, -1), _blank_is_none(sizes, -1), decode_text(attributes, sc.COLUMN_CONTENT_SHA256, count)


def encode_content_from(out: dict[str, Any], span_id: str) -> None:
    """Schema 4: instead of the receipt columns, the stage span whose output rows carry every row's."""
    out[sc.COLUMN_CONTENT_FROM] = span_id


def decode_content_from(attributes: Mapping[str, Any], schema: int) -> str | None:
    source = attributes.get(sc.COLUMN_CONTENT_FROM) if schema >= sc.SCHEMA_CONTENT_FROM else None
    return None if source is None else source if isinstance(source, str) else str(source)


def encode_payload(out: dict[str, Any], column: str, texts: list[str]) -> None:
    """The captured preview or text (``COLUMN_CONTENT_PREVIEW`` / ``_TEXT``; ``""``: a row without content)."""
    out[column] = texts


def decode_payload(attributes: Mapping[str, Any], column: str, count: int, shas: list[Any]) -> list[Any]:
    """Each row's captured payload; a blank one only where the row states a receipt (empty content)."""
    return [v if v is not None and (v != "" or sha is not None) else None for v, sha in zip(_column(attributes, column, count), shas, strict=True)]


# --- text columns whose blank means "none" (transform rule, derived_from) -----------------------------
def encode_text(out: dict[str, Any], column: str, values: list[str]) -> None:
    """A text column (``""``: the row has none); nothing when no row has one."""
    if any(values):
        out[column] = values


def decode_text(attributes: Mapping[str, Any], column: str, count: int) -> list[Any]:
    return _blank_is_none(_column(attributes, column, count), "")


# --- derived_from of a replacement (rule merge@1): the ids it replaced, encoded and decoded here -------
def replaced_ids_cell(ids: Iterable[str]) -> str:
    """``derived_from`` of a candidate that replaced others (``merge@1``): the canonical JSON array of
    their ids, in the order the stage received them (one cell holds every id a row replaced)."""
    return dumps([str(i) for i in ids])


def replaced_ids(derived_from: Any) -> list[str]:
    """The ids a ``merge@1`` row's ``derived_from`` names; ``[]`` when it names none (a trace read
    back is untrusted: anything but a JSON array of strings names nothing)."""
    return [i for i in as_list(derived_from) if isinstance(i, str)] if isinstance(derived_from, str) else []


# --- metadata: one column per allow-listed key, each cell the canonical JSON of the value -------------
# a metadata cell: the canonical JSON of the attribute value (sorted keys, compact, no ASCII escaping)
meta_cell: Callable[[Any], str] = dumps


def encode_meta(out: dict[str, Any], key: str, cells: list[str]) -> None:
    """One key's :func:`meta_cell` per row (``""``: the row has no such key); nothing when no row has it."""
    if any(cells):
        out[sc.COLUMN_META_PREFIX + key] = cells


def _meta_value(cell: str) -> Any:
    try:
        value = json.loads(cell)
    except (ValueError, RecursionError):  # not what the recorder wrote: shown as it came
        return cell
    return tuple(value) if isinstance(value, list) else value


def decode_meta(attributes: Mapping[str, Any], count: int) -> list[dict[str, Any]]:
    """Each row's metadata by key, in the order the columns arrived."""
    rows: list[dict[str, Any]] = [{} for _ in range(count)]
    start = len(sc.COLUMN_META_PREFIX)
    for column, value in attributes.items():
        if column.startswith(sc.COLUMN_META_PREFIX):
            key = column[start:]
            for row, cell in zip(rows, _cells(as_list(value), count), strict=True):
                if isinstance(cell, str) and cell != "":
                    row[key] = _meta_value(cell)
    return rows


# --- a span's (or an exclusion event's) rows ------------------------------------------------------------
def decode(attributes: Mapping[str, Any], reason: Any = None, schema: int = sc.SCHEMA_VERSION) -> list[Row]:
    """The rows of the columns in ``attributes``: a stage span's outputs, or, with ``reason``, an
    exclusion event's candidates. ``schema``: the stage span's; each is read by its own rules."""
    ids = decode_ids(attributes)
    if not ids:
        return []
    count, exclusion = len(ids), reason is not None
    scores, raws = decode_scores(attributes, count)
    chars, sizes, shas = decode_receipts(attributes, count, schema)
    source = decode_content_from(attributes, schema)
    columns = zip(
        ids,
        decode_ranks(attributes, count, exclusion, schema),
        scores,
        raws,
        decode_kinds(attributes, count),
        decode_hops(attributes, count),
        chars,
        sizes,
        shas,
        decode_text(attributes, sc.COLUMN_TRANSFORM_RULE, count),
        decode_text(attributes, sc.COLUMN_TRANSFORM_DERIVED_FROM, count),
        decode_details(attributes, count, exclusion, schema),
        decode_payload(attributes, sc.COLUMN_CONTENT_PREVIEW, count, shas),
        decode_payload(attributes, sc.COLUMN_CONTENT_TEXT, count, shas),
        decode_meta(attributes, count),
        strict=True,
    )
    return [
        Row(
            id=ident,
            rank=rank,
            score=score,
            score_raw=raw,
            score_kind=kind,
            hop=hop,
            content_chars=n_chars,
            content_bytes=n_bytes,
            content_sha256=sha,
            transform_rule=rule,
            derived_from=derived,
            detail=detail,
            content_preview=preview,
            content_text=text,
            meta=meta,
            content_from=source,
            reason=reason,
        )
        for (ident, rank, score, raw, kind, hop, n_chars, n_bytes, sha, rule, derived, detail, preview, text, meta) in columns
    ]
