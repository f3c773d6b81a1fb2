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

The column rules themselves (each schema's, said once beside the recorder's encoding) are
:mod:`ragtrail.contract.columns`; this module adapts its typed rows (:class:`~ragtrail.contract.columns.Row`)
to the reader's records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from ragtrail.contract import columns as codec
from ragtrail.contract import semconv as sc

# each Row field's per-candidate (schema 2) name; a record lists them in the Row's order, then the
# metadata, the content pointer and the reason
_RECORD_NAME = {
    "id": sc.CANDIDATE_ID,
    "rank": sc.CANDIDATE_RANK,
    "score": sc.CANDIDATE_SCORE,
    "score_raw": sc.CANDIDATE_SCORE_RAW,
    "score_kind": sc.CANDIDATE_SCORE_KIND,
    "hop": sc.CANDIDATE_HOP,
    "content_chars": sc.CANDIDATE_CONTENT_CHARS,
    "content_bytes": sc.CANDIDATE_CONTENT_BYTES,
    "content_sha256": sc.CANDIDATE_CONTENT_SHA256,
    "transform_rule": sc.CANDIDATE_TRANSFORM_RULE,
    "derived_from": sc.CANDIDATE_TRANSFORM_DERIVED_FROM,
    "detail": sc.EXCLUSION_DETAIL,
    "content_preview": sc.CANDIDATE_CONTENT_PREVIEW,
    "content_text": sc.CANDIDATE_CONTENT_TEXT,
}
# each column's per-candidate name (what an alarm about a decoded record names)
RECORD_NAMES = {column: _RECORD_NAME[field] for column, field in codec.FIELD_OF_COLUMN.items()}
W = TypeVar("W")


def normalize(attributes: dict[str, Any]) -> None:
    """Put a schema 3 stage span's (or exclusion event's) columns back into the types the recorder
    wrote: arrays as lists (not JSON text), scores as floats. In place; other attributes untouched."""
    for key, value in attributes.items():
        if not key.startswith(sc.COLUMNS_PREFIX) and key != sc.COLUMN_EXCLUSION_DETAILS:
            continue
        if isinstance(value, str) and value[:1] == "[":
            parsed = codec.as_list(value)
            if parsed or value.strip() == "[]":
                attributes[key] = value = parsed
        if key == sc.COLUMN_SCORES and isinstance(value, list):
            attributes[key] = [codec.as_float(v) for v in value]


def record(row: codec.Row) -> dict[str, Any]:
    """A decoded row as the per-candidate attribute dict schema 2's events held (a field the row has
    not is left out)."""
    out: dict[str, Any] = {}
    for field, name in _RECORD_NAME.items():
        value = getattr(row, field)
        if value is not None:
            out[name] = value
    for key, value in row.meta.items():
        out[sc.CANDIDATE_META_PREFIX + key] = value
    if row.content_from is not None:
        out[sc.CANDIDATE_CONTENT_FROM] = row.content_from
    if row.reason is not None:
        out[sc.EXCLUSION_REASON] = row.reason
    return out


def records(attributes: Mapping[str, Any], reason: Any = None, schema: int = sc.SCHEMA_VERSION) -> list[dict[str, Any]]:
    """The rows of the columns in ``attributes`` (:func:`ragtrail.contract.columns.decode`) as
    per-candidate attribute dicts (schema 2 names): a stage span's outputs (rank = position), or,
    with ``reason``, an exclusion event's candidates (rank = the input rank, absent when -1; schema 5
    may say consecutive ranks by the first, one shared detail once, and ASCII content's bytes as its
    chars). Schema 4 on: a row of columns that point to an upstream stage's content receipts carries
    that span id (``ragtrail.candidate.content.from``), for :func:`resolve_content` to fill in.
    ``schema``: the stage span's; each is read by its own rules."""
    return [record(row) for row in codec.decode(attributes, reason, schema)]


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


def expand(
    attributes: Mapping[str, Any], events: Iterable[tuple[W, str, Mapping[str, Any]]], head: W, schema: int = sc.SCHEMA_VERSION
) -> list[tuple[W, str, dict[str, Any]]]:
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
            excluded.extend((where, name, row) for row in records(event_attributes, "" if reason is None else reason, schema))
    excluded.sort(key=lambda item: _input_rank(item[2]))
    outputs = [(head, sc.EVENT_CANDIDATE, row) for row in records(attributes, None, schema)]
    return queries + outputs + excluded
