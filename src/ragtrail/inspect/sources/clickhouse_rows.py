"""Rows of the Collector's ClickHouse exporter (table ``otel_traces``) back into the inspector's spans.

The exporter writes every attribute value as text (``Map(LowCardinality(String), String)``: pdata's
``AsString``): an int ``5`` and a string ``"5"`` arrive alike, a double ``1.0`` as ``"1"``, an
array as its JSON. The type is restored here by one fixed rule, never by guessing from a value
alone where the contract says otherwise:

- a key the contract types as text (:data:`TEXT_KEYS`, every ``ragtrail.candidate.meta.*`` and
  every key outside the ``ragtrail.`` namespace: resource attributes, the app's own) stays text;
- a key the contract types as a float (:data:`FLOAT_KEYS`: scores, threshold, sampling) is a float
  (an array of them, a list of floats);
- any other ``ragtrail.`` key is read as the JSON the exporter wrote for it: a number, ``true`` /
  ``false``, or an array; text that is none of these stays text.

The table carries no dropped counts (the trace says so, as Jaeger v1's does) and no scope attributes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ragtrail.contract import semconv as sc

from ..model import Event, Span, normalize_trace_id
from ..otlp import MAX_VALUE_DEPTH, depth_within

__all__ = ["COLUMNS", "FLOAT_KEYS", "SPAN_SELECT", "TEXT_KEYS", "SpanRow", "attribute_value", "attributes", "span_from_row"]

TEXT_KEYS = frozenset(
    {
        sc.STAGE_KIND,
        sc.STAGE_COMPONENT,
        sc.STAGE_STATUS,
        sc.STAGE_FAILURE_CLASS,
        sc.STAGE_FALLBACK,
        sc.STAGE_FILTER,
        sc.STAGE_MODEL,
        sc.STAGE_COLLECTION,
        sc.STAGE_GROUP_BY,
        sc.STAGE_BUDGET_UNIT,
        sc.EVENTS_DIGEST,
        sc.STAGE_RECEIPT,
        sc.STAGE_RECEIPT_FIELDS,
        sc.QUERY_TEXT,
        sc.QUERY_TRANSFORM,
        sc.QUERY_SHA256,
        sc.QUERY_VECTOR_SHA256,
        sc.CANDIDATE_ID,
        sc.CANDIDATE_SCORE_KIND,
        sc.CANDIDATE_SCORE_RAW,
        sc.CANDIDATE_CONTENT_SHA256,
        sc.CANDIDATE_CONTENT_PREVIEW,
        sc.CANDIDATE_CONTENT_TEXT,
        sc.CANDIDATE_CONTENT_FROM,
        sc.CANDIDATE_TRANSFORM_RULE,
        sc.CANDIDATE_TRANSFORM_DERIVED_FROM,
        sc.EXCLUSION_REASON,
        sc.EXCLUSION_DETAIL,
        sc.COLUMN_SCORE_KIND,
        sc.COLUMN_CONTENT_ENCODING,
        sc.COLUMN_CONTENT_FROM,
        sc.RUN_STATUS,
        sc.ANSWER_SHA256,
        sc.ANSWER_TEXT,
        sc.ANSWER_PREVIEW,
        sc.ANSWER_CLAIM,
        sc.POLICY_SHA256,
    }
)
"""Keys the contract (docs/semconv.md) types as ``str``: their text is the value, whatever it looks like."""

FLOAT_KEYS = frozenset({sc.CANDIDATE_SCORE, sc.COLUMN_SCORES, sc.STAGE_THRESHOLD, sc.SAMPLING_PROBABILITY, sc.SAMPLING_ADJUSTED_COUNT})
"""Keys the recorder writes as doubles (or arrays of them): ``"1"`` is ``1.0`` there, as the SDK sent it."""


def _floats(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, list):
        return [_floats(v) for v in value]
    return value


def attribute_value(key: str, text: str) -> Any:
    """One attribute's value, typed back by the module's rule (the exporter wrote ``text``)."""
    if key in TEXT_KEYS or not key.startswith("ragtrail.") or key.startswith(sc.CANDIDATE_META_PREFIX):
        return text
    if text in ("true", "false"):
        return text == "true"
    first = text[:1]
    if not (first == "[" or first == "-" or first.isdigit()):
        return text
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return text
    if isinstance(value, list) and not depth_within(value, MAX_VALUE_DEPTH):
        return text
    if not isinstance(value, (int, float, list)) or isinstance(value, bool):
        return text
    return _floats(value) if key in FLOAT_KEYS else value


def attributes(raw: Mapping[str, str]) -> dict[str, Any]:
    """A whole attribute map, typed back key by key."""
    return {key: attribute_value(key, text) for key, text in raw.items()}


COLUMNS: dict[str, str] = {
    "Timestamp": "DateTime64(9)",
    "TraceId": "String",
    "SpanId": "String",
    "ParentSpanId": "String",
    "TraceState": "String",
    "SpanName": "String",
    "ResourceAttributes": "Map(String, String)",
    "ScopeName": "String",
    "SpanAttributes": "Map(String, String)",
    "Duration": "UInt64",
    "StatusCode": "String",
    "StatusMessage": "String",
    "Events.Timestamp": "Array(DateTime64(9))",
    "Events.Name": "Array(String)",
    "Events.Attributes": "Array(Map(String, String))",
}
"""The columns read, with their type as ClickHouse reports it (``LowCardinality(...)`` taken off, and
``Int64`` taken for ``UInt64``: older exporters wrote Duration signed): a table that lacks one, or
types it otherwise, is not the exporter's and is refused with its name."""

SPAN_SELECT = (
    "toUnixTimestamp64Nano(Timestamp) AS start_ns, TraceId, SpanId, ParentSpanId, TraceState, SpanName, ResourceAttributes, "
    "ScopeName, SpanAttributes, Duration, StatusCode, StatusMessage, arrayMap(t -> toUnixTimestamp64Nano(t), Events.Timestamp) AS event_ns, "
    "Events.Name AS event_names, Events.Attributes AS event_attributes"
)
"""The SELECT list of one span row (``FORMAT JSONEachRow``: 64-bit integers arrive quoted, read with ``int``)."""

_STATUS = {"Unset": "UNSET", "Ok": "OK", "Error": "ERROR", "STATUS_CODE_UNSET": "UNSET", "STATUS_CODE_OK": "OK", "STATUS_CODE_ERROR": "ERROR"}


@dataclass(frozen=True)
class SpanRow:
    """One JSONEachRow object of :data:`SPAN_SELECT`, checked for the shape the query asked for."""

    row: Mapping[str, Any]

    def text(self, key: str) -> str:
        value = self.row[key]
        if not isinstance(value, str):
            raise TypeError(f"{key} is a {type(value).__name__}")
        return value

    def string_map(self, key: str) -> dict[str, str]:
        value = self.row[key]
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise TypeError(f"{key} is not a map of strings")
        return value

    def array(self, key: str) -> list[Any]:
        value = self.row[key]
        if not isinstance(value, list):
            raise TypeError(f"{key} is a {type(value).__name__}")
        return value


def span_from_row(raw: Mapping[str, Any]) -> Span:
    """One span (``TypeError``/``ValueError``/``KeyError`` when the row is not what the query selects)."""
    row = SpanRow(raw)
    start = int(raw["start_ns"])
    names, times, attrs = row.array("event_names"), row.array("event_ns"), row.array("event_attributes")
    if not len(names) == len(times) == len(attrs):
        raise ValueError("Events.* arrays of different lengths")
    events = [
        Event(name=str(name), time_ns=int(when), attributes=attributes(SpanRow({"a": a}).string_map("a")), dropped_attributes=None)
        for name, when, a in zip(names, times, attrs, strict=True)
    ]
    parent = row.text("ParentSpanId")
    status_message = row.text("StatusMessage")
    return Span(
        trace_id=normalize_trace_id(row.text("TraceId")),
        span_id=row.text("SpanId").lower(),
        parent_span_id=parent.lower() if parent else None,
        name=row.text("SpanName"),
        start_ns=start,
        end_ns=start + int(raw["Duration"]),
        attributes=attributes(row.string_map("SpanAttributes")),
        events=events,
        dropped_attributes=None,
        dropped_events=None,
        dropped_links=None,
        trace_state=row.text("TraceState") or None,
        resource=dict(row.string_map("ResourceAttributes")),
        scope_name=row.text("ScopeName") or None,
        status_code=_STATUS.get(row.text("StatusCode"), row.text("StatusCode") or None),
        status_message=status_message or None,
    )
