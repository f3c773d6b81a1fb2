"""Schema 3's candidate columns read back as the per-candidate records the rest of the reader uses.

A schema 3 stage span carries its outputs as homogeneous arrays (``ragtrail.candidates.*``, in output
order, a row's rank its position) and each ``ragtrail.exclusion`` event carries one reason's excluded
inputs the same way (plus their input ranks and details). Backends return arrays in several shapes
(OTLP ``arrayValue`` from the local store, the Collector, Tempo and Jaeger's v3 API; JSON text from
Jaeger's v1 API, where a float ``1.0`` comes back as ``1``): :func:`normalize` puts every shape back
into what the recorder wrote, so the stage receipt is checked over the same values, and
:func:`records` turns the columns into one attribute dict per candidate, keyed by the schema 2
per-event names (``ragtrail.candidate.*``), so the manifest, verify, diff and stats read every schema
the same way. A column shorter than ``ids`` leaves its field out of the rows it does not reach (the
stage receipt and the record count say the trail was cut); what is not there is never guessed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from ragtrail.contract import semconv as sc

# string columns whose blank ("") means "this row has none" and the per-candidate name they stand for
_TEXT = ((sc.COLUMN_CONTENT_SHA256, sc.CANDIDATE_CONTENT_SHA256),
         (sc.COLUMN_TRANSFORM_RULE, sc.CANDIDATE_TRANSFORM_RULE),
         (sc.COLUMN_TRANSFORM_DERIVED_FROM, sc.CANDIDATE_TRANSFORM_DERIVED_FROM),
         (sc.COLUMN_EXCLUSION_DETAILS, sc.EXCLUSION_DETAIL))
_COUNTS = ((sc.COLUMN_CONTENT_CHARS, sc.CANDIDATE_CONTENT_CHARS), (sc.COLUMN_CONTENT_BYTES, sc.CANDIDATE_CONTENT_BYTES))
_PAYLOADS = ((sc.COLUMN_CONTENT_PREVIEW, sc.CANDIDATE_CONTENT_PREVIEW), (sc.COLUMN_CONTENT_TEXT, sc.CANDIDATE_CONTENT_TEXT))
_META_LEN = len(sc.COLUMN_META_PREFIX)
# each column's per-candidate name (what an alarm about a decoded record names)
RECORD_NAMES = {column: name for column, name in (*_TEXT, *_COUNTS, *_PAYLOADS)}
RECORD_NAMES.update({sc.COLUMN_IDS: sc.CANDIDATE_ID, sc.COLUMN_RANKS: sc.CANDIDATE_RANK,
                     sc.COLUMN_RANK_FIRST: sc.CANDIDATE_RANK, sc.COLUMN_CONTENT_ENCODING: sc.CANDIDATE_CONTENT_BYTES,
                     sc.COLUMN_SCORES: sc.CANDIDATE_SCORE,
                     sc.COLUMN_SCORE_RAW: sc.CANDIDATE_SCORE_RAW, sc.COLUMN_SCORE_KIND: sc.CANDIDATE_SCORE_KIND,
                     sc.COLUMN_SCORE_KINDS: sc.CANDIDATE_SCORE_KIND, sc.COLUMN_HOP: sc.CANDIDATE_HOP,
                     sc.COLUMN_HOPS: sc.CANDIDATE_HOP})
W = TypeVar("W")


def _list(value: Any) -> list[Any]:
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


def _float(value: Any) -> Any:
    """A score as the recorder wrote it (a float): Jaeger v1's JSON text writes ``1.0`` as ``1``."""
    if type(value) is int:
        return float(value)
    return value


def normalize(attributes: dict[str, Any]) -> None:
    """Put a schema 3 stage span's (or exclusion event's) columns back into the types the recorder
    wrote: arrays as lists (not JSON text), scores as floats. In place; other attributes untouched."""
    for key, value in attributes.items():
        if not key.startswith(sc.COLUMNS_PREFIX) and key != sc.COLUMN_EXCLUSION_DETAILS:
            continue
        if isinstance(value, str) and value[:1] == "[":
            parsed = _list(value)
            if parsed or value.strip() == "[]":
                attributes[key] = value = parsed
        if key == sc.COLUMN_SCORES and isinstance(value, list):
            attributes[key] = [_float(v) for v in value]


def _cell(column: list[Any], i: int) -> Any:
    return column[i] if i < len(column) else None


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def records(attributes: Mapping[str, Any], reason: Any = None, schema: int = sc.SCHEMA_VERSION) -> list[dict[str, Any]]:
    """The rows of the columns in ``attributes`` as per-candidate attribute dicts (schema 2 names):
    a stage span's outputs (rank = position), or, with ``reason``, an exclusion event's candidates
    (rank = the input rank, absent when -1; schema 5 may say consecutive ranks by the first, one
    shared detail once, and ASCII content's bytes as its chars). Schema 4 on: a row of columns that point
    to an upstream stage's content receipts carries that span id (``ragtrail.candidate.content.from``),
    for :func:`resolve_content` to fill in. ``schema``: the stage span's; each is read by its own rules."""
    ids = _list(attributes.get(sc.COLUMN_IDS))
    if not ids:
        return []
    get = attributes.get
    source = get(sc.COLUMN_CONTENT_FROM) if schema >= sc.SCHEMA_CONTENT_FROM else None
    once = schema >= sc.SCHEMA_SAID_ONCE
    ranks: list[Any] | None = _list(get(sc.COLUMN_RANKS)) if sc.COLUMN_RANKS in attributes else None
    if ranks is None and reason is not None:
        # schema 5: consecutive input ranks said by the first; an exclusion event with neither (the
        # writer always states one: it was evicted or cut) gives no rank, its position in the event is not one
        first = _int(get(sc.COLUMN_RANK_FIRST)) if once else None
        ranks = list(range(first, first + len(ids))) if first is not None and first >= 0 else []
    scores = _list(get(sc.COLUMN_SCORES))
    raw = _list(get(sc.COLUMN_SCORE_RAW))
    has_raw = sc.COLUMN_SCORE_RAW in attributes
    kinds = _list(get(sc.COLUMN_SCORE_KINDS))
    kind = get(sc.COLUMN_SCORE_KIND)
    hops = _list(get(sc.COLUMN_HOPS))
    hop = get(sc.COLUMN_HOP)
    text = [(_list(get(key)), name) for key, name in _TEXT if key in attributes]
    if once and reason is not None and sc.COLUMN_EXCLUSION_DETAILS not in attributes and sc.EXCLUSION_DETAIL in attributes:
        detail = get(sc.EXCLUSION_DETAIL)  # schema 5: one detail for every row, said once
        text.append(([detail] * len(ids), sc.EXCLUSION_DETAIL))
    counts = [(_list(get(key)), name) for key, name in _COUNTS if key in attributes]
    if (once and sc.COLUMN_CONTENT_BYTES not in attributes and sc.COLUMN_CONTENT_CHARS in attributes
            and get(sc.COLUMN_CONTENT_ENCODING) == sc.CONTENT_ASCII):
        counts.append((counts[0][0], sc.CANDIDATE_CONTENT_BYTES))  # schema 5: ASCII, each row's bytes its chars
    payloads = [(_list(get(key)), name) for key, name in _PAYLOADS if key in attributes]
    shas = _list(get(sc.COLUMN_CONTENT_SHA256))
    meta = [(_list(value), sc.CANDIDATE_META_PREFIX + key[_META_LEN:]) for key, value in attributes.items()
            if key.startswith(sc.COLUMN_META_PREFIX)]
    rows: list[dict[str, Any]] = []
    for i, ident in enumerate(ids):
        row: dict[str, Any] = {sc.CANDIDATE_ID: ident if isinstance(ident, str) else str(ident)}
        if ranks is None:
            row[sc.CANDIDATE_RANK] = i
        else:
            rank = _cell(ranks, i)
            if _int(rank) is not None and rank >= 0:
                row[sc.CANDIDATE_RANK] = rank
        flag = _cell(raw, i) if has_raw else ""
        score = _cell(scores, i)
        if flag == "":
            if score is not None:
                row[sc.CANDIDATE_SCORE] = _float(score)
        elif flag is not None and flag != sc.NO_SCORE:
            row[sc.CANDIDATE_SCORE_RAW] = flag
        cell_kind = _cell(kinds, i) if kinds else kind
        if cell_kind is not None:
            row[sc.CANDIDATE_SCORE_KIND] = cell_kind
        cell_hop = _cell(hops, i) if hops else hop
        if cell_hop is not None and cell_hop != -1:
            row[sc.CANDIDATE_HOP] = cell_hop
        for column, name in counts:
            value = _cell(column, i)
            if value is not None and value != -1:
                row[name] = value
        for column, name in text:
            value = _cell(column, i)
            if value is not None and value != "":
                row[name] = value
        received_sha = _cell(shas, i)
        for column, name in payloads:
            value = _cell(column, i)
            if value is not None and (value != "" or (received_sha is not None and received_sha != "")):
                row[name] = value
        for column, name in meta:
            value = _cell(column, i)
            if isinstance(value, str) and value != "":
                try:
                    row[name] = json.loads(value)
                except (ValueError, RecursionError):  # not what the recorder wrote: shown as it came
                    row[name] = value
                else:
                    if isinstance(row[name], list):
                        row[name] = tuple(row[name])
        if source is not None:
            row[sc.CANDIDATE_CONTENT_FROM] = source if isinstance(source, str) else str(source)
        if reason is not None:
            row[sc.EXCLUSION_REASON] = reason
        rows.append(row)
    return rows


_RECEIPT_NAMES = (sc.CANDIDATE_CONTENT_CHARS, sc.CANDIDATE_CONTENT_BYTES, sc.CANDIDATE_CONTENT_SHA256)


def content_by_id(attributes: Mapping[str, Any], schema: int = sc.SCHEMA_VERSION) -> dict[str, dict[str, Any]]:
    """A stage span's output content receipts by candidate id, as a schema 4 row pointing to that span
    reads them: only rows that state their receipt (a sha256), and not an id whose rows disagree (which
    of them was meant is not known)."""
    out: dict[str, dict[str, Any]] = {}
    ambiguous: set[str] = set()
    for row in records(attributes, None, schema):
        sha = row.get(sc.CANDIDATE_CONTENT_SHA256)
        if not isinstance(sha, str):
            continue
        receipt = {name: row[name] for name in _RECEIPT_NAMES if name in row}
        ident = row[sc.CANDIDATE_ID]
        known = out.get(ident)
        if known is None and ident not in ambiguous:
            out[ident] = receipt
        elif known is not None and known != receipt:
            del out[ident]
            ambiguous.add(ident)
    return out


def resolve_content(rows: Iterable[dict[str, Any]], source_of: Any) -> None:
    """Fill in each row that points to an upstream stage (``ragtrail.candidate.content.from``) with
    that stage's receipt for its id. ``source_of(span_id)`` gives the referenced span's
    :func:`content_by_id` (``None``: not in the trace). A row whose receipt cannot be found keeps no
    content receipt (verify says why); the pointer stays on the row."""
    for row in rows:
        source = row.get(sc.CANDIDATE_CONTENT_FROM)
        if source is None:
            continue
        known = source_of(str(source).lower())
        receipt = known.get(row.get(sc.CANDIDATE_ID)) if known is not None else None
        if receipt is not None:
            row.update(receipt)


def _input_rank(row: Mapping[str, Any]) -> float:
    rank = row.get(sc.CANDIDATE_RANK)
    return rank if type(rank) is int else float("inf")


def expand(attributes: Mapping[str, Any], events: Iterable[tuple[W, str, Mapping[str, Any]]],
           head: W, schema: int = sc.SCHEMA_VERSION) -> list[tuple[W, str, dict[str, Any]]]:
    """A schema 3 stage's records in emission order: its produced queries as they arrived, its
    outputs (from the stage span's columns, ``head``) by rank, then its exclusions (from each
    reason's event) by input rank, those without one last. Each record keeps where it came from
    (the opaque first item: the span that carried it)."""
    queries: list[tuple[W, str, dict[str, Any]]] = []
    excluded: list[tuple[W, str, dict[str, Any]]] = []
    for where, name, event_attributes in events:
        if name == sc.EVENT_QUERY:
            queries.append((where, name, event_attributes))  # type: ignore[arg-type]  # as it arrived
        elif name == sc.EVENT_EXCLUSION:
            reason = event_attributes.get(sc.EXCLUSION_REASON)
            excluded.extend((where, name, row)
                            for row in records(event_attributes, "" if reason is None else reason, schema))
    excluded.sort(key=lambda item: _input_rank(item[2]))
    outputs = [(head, sc.EVENT_CANDIDATE, row) for row in records(attributes, None, schema)]
    return queries + outputs + excluded
