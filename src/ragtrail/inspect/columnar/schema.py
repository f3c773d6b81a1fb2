"""The table the Collector's ClickHouse exporter writes, so one set of SQL reads both stores.

``OTEL_TRACES_DDL`` is the exporter's ``internal/sqltemplates/traces_table.sql``
(opentelemetry-collector-contrib, exporter/clickhouseexporter, the v0.16x template without full-text
search) with its template holes filled for an embedded engine: the session's database, the engine
``MergeTree()``, no TTL and no cluster clause. Attribute values are stored as the exporter stores them (``pcommon.Value.AsString``):
strings as they are, integers in decimal, booleans ``true``/``false``, arrays as JSON arrays.
"""

from __future__ import annotations

TABLE = "otel_traces"
INGEST_TABLE = "ragtrail_ingested"
LINES_TABLE = "ragtrail_trace_lines"
SCOPE_TABLE = "ragtrail_scope_policies"

OTEL_TRACES_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
    Timestamp DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    Duration UInt64 CODEC(T64, ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    Events Nested (
        Timestamp DateTime64(9),
        Name LowCardinality(String),
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    Links Nested (
        TraceId String,
        SpanId String,
        TraceState String,
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    ResourceAttributeItems Array(String) ALIAS arrayMap(kv -> concat(kv.1, '=', kv.2), CAST(ResourceAttributes, 'Array(Tuple(String, String))')),
    SpanAttributeItems Array(String) ALIAS arrayMap(kv -> concat(kv.1, '=', kv.2), CAST(SpanAttributes, 'Array(Tuple(String, String))')),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_key mapKeys(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_value mapValues(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1,
    INDEX idx_lower_span_name lower(SpanName) TYPE tokenbf_v1(32768, 3, 0) GRANULARITY 8
) ENGINE = MergeTree()
PARTITION BY toDate(Timestamp)
PRIMARY KEY (ServiceName, SpanName, toDateTime(Timestamp))
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1
"""

INGEST_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
    File String,
    Offset UInt64,
    Lines UInt64,
    At DateTime64(3) DEFAULT now64(3)
) ENGINE = MergeTree() ORDER BY (File, Offset)
"""

LINES_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
    File String,
    Line UInt64,
    Pos UInt32,
    TraceId String
) ENGINE = MergeTree() ORDER BY (File, Line, Pos)
"""
"""Where each trace was first written (file, line, place in the line): the order the Python reader
reads a store in, which ``compare`` lists questions in. Local stores only; a server has no such order."""

SCOPE_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
    TraceId String,
    Timestamp DateTime64(9),
    Policy String
) ENGINE = MergeTree() ORDER BY (TraceId, Timestamp)
"""
"""The spans whose instrumentation scope carries the tail sampler's own record (``tailsampling.policy``):
the exporter's ``otel_traces`` keeps no scope attributes, so the embedded ingest keeps this one apart
for the weight rule's fallback (:func:`ragtrail.inspect.columnar.sql.trace_weights_sql`)."""
