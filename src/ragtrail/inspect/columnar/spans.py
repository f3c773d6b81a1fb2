"""The slim per-span projection the aggregates read: a few typed columns out of ``otel_traces``' maps.

``otel_traces`` keeps every attribute of a span in one ``Map`` (most of a span's bytes: candidate
columns, receipts, OpenInference copies); each aggregate reading that map again would decompress it
again. :func:`select_sql` picks once what ``stats`` and ``compare`` need; the embedded engine keeps it
in ``ragtrail_spans``, filled by a materialized view on every insert into ``otel_traces`` (the
pattern the exporter itself uses for ``otel_traces_trace_id_ts``), and a ClickHouse server can create
the same view (:func:`view_ddl`) or read ``(select_sql(...))`` as a subquery in its place.
"""

from __future__ import annotations

from ragtrail.contract import semconv as sc

SPANS_TABLE = "ragtrail_spans"

_A = "SpanAttributes"


def _a(key: str) -> str:
    return f"{_A}['{key}']"


def _has(key: str) -> str:
    return f"mapContains({_A}, '{key}')"


def _ids(attrs: str) -> str:
    """A span's or event's candidate ids as a JSON array string (schema 3+ column, else the one id)."""
    one = f"if(mapContains({attrs}, '{sc.CANDIDATE_ID}'), toJSONString([{attrs}['{sc.CANDIDATE_ID}']]), '[]')"
    return f"if(mapContains({attrs}, '{sc.COLUMN_IDS}'), {attrs}['{sc.COLUMN_IDS}'], {one})"


def _probability() -> str:
    """The span's sampling probability (``ragtrail.sampling.probability`` or Jaeger's probabilistic
    sampler param), NULL when it states none in (0, 1]."""
    p = (
        f"if({_has(sc.SAMPLING_PROBABILITY)}, toFloat64OrNull({_a(sc.SAMPLING_PROBABILITY)}),"
        f" if({_a(sc.JAEGER_SAMPLER_TYPE)} = 'probabilistic', toFloat64OrNull({_a(sc.JAEGER_SAMPLER_PARAM)}), NULL))"
    )
    return f"if(({p}) > 0 AND ({p}) <= 1, {p}, NULL)"


def _int(key: str) -> str:
    return f"if({_has(key)}, toInt64OrNull({_a(key)}), NULL)"


COLUMNS = """
    TraceId String, ParentSpanId String, Timestamp DateTime64(9), EndTimestamp DateTime64(9), TraceState String,
    IsStage UInt8, Kind LowCardinality(String), Component LowCardinality(String), Status LowCardinality(String),
    FailureClass LowCardinality(String), Fallback LowCardinality(String), Continuation UInt8,
    NIn Nullable(Int64), NOut Nullable(Int64), NExcluded Nullable(Int64),
    Probability Nullable(Float64), AdjustedCount Nullable(Float64),
    HasTailPolicy UInt8, TailPolicy String, TailProbability Nullable(Float64),
    RunStatus LowCardinality(String), Refused LowCardinality(String), CorpusSize Nullable(Int64), InContext Nullable(Int64),
    HasRetrievedCount UInt8, AnswerSha256 String, CitedIds String, QueryHop String, QuerySha256 String,
    Ids String, ExcludedIds Array(String), ExcludedReasons Array(String), ExcludedCounts Array(UInt64)
"""


def _expressions() -> list[str]:
    """One SQL expression per column of :data:`COLUMNS`, in its order."""
    ex = f"arrayFilter((x, n) -> n = '{sc.EVENT_EXCLUSION}', `Events.Attributes`, `Events.Name`)"
    adjusted = f"toFloat64OrNull({_a(sc.SAMPLING_ADJUSTED_COUNT)})"
    return [
        "TraceId", "ParentSpanId", "Timestamp", "Timestamp + toIntervalNanosecond(Duration)", "TraceState",
        _has(sc.STAGE_KIND), _a(sc.STAGE_KIND), _a(sc.STAGE_COMPONENT), _a(sc.STAGE_STATUS),
        _a(sc.STAGE_FAILURE_CLASS), _a(sc.STAGE_FALLBACK), f"{_a(sc.STAGE_CONTINUATION)} = 'true'",
        _int(sc.CANDIDATES_IN), _int(sc.CANDIDATES_OUT), _int(sc.CANDIDATES_EXCLUDED),
        _probability(), f"if({adjusted} > 0, {adjusted}, NULL)",
        _has(sc.SAMPLING_TAIL_POLICY), _a(sc.SAMPLING_TAIL_POLICY), f"toFloat64OrNull({_a(sc.SAMPLING_TAIL_PROBABILITY)})",
        _a(sc.RUN_STATUS), _a(sc.ANSWER_REFUSED), _int(sc.COVERAGE_CORPUS_SIZE), _int(sc.COVERAGE_IN_CONTEXT),
        _has(sc.COVERAGE_RETRIEVED), _a(sc.ANSWER_SHA256), _a(sc.CITED_IDS), _a(sc.QUERY_HOP), _a(sc.QUERY_SHA256),
        _ids(_A), f"arrayMap(x -> {_ids('x')}, {ex})",
        f"arrayMap(x -> if(mapContains(x, '{sc.EXCLUSION_REASON}'), x['{sc.EXCLUSION_REASON}'], 'None'), {ex})",
        f"arrayMap(x -> toUInt64(JSONLength({_ids('x')})), {ex})",
    ]  # fmt: skip


def names() -> list[str]:
    """The column names of :data:`COLUMNS`."""
    return [c.split()[0] for c in COLUMNS.replace("\n", " ").split(",") if c.strip() and not c.strip()[0].islower()]


def select_sql(table: str) -> str:
    """``SELECT`` of the slim columns (named as in :data:`COLUMNS`) from an ``otel_traces`` table."""
    cols = ",\n    ".join(f"{e} AS {n}" if e != n else n for e, n in zip(_expressions(), names(), strict=True))
    return f"SELECT\n    {cols}\nFROM {table}"


def table_ddl(table: str = SPANS_TABLE) -> str:
    return f"CREATE TABLE IF NOT EXISTS {table} ({COLUMNS}) ENGINE = MergeTree() ORDER BY (TraceId, Timestamp)"


def view_ddl(source: str, table: str = SPANS_TABLE) -> str:
    """The materialized view that fills ``table`` from every insert into ``source`` (``otel_traces``)."""
    return f"CREATE MATERIALIZED VIEW IF NOT EXISTS {table}_mv TO {table} AS {select_sql(source)}"


def subquery(table: str) -> str:
    """The slim spans of ``table`` as a subquery, for a server with no ``ragtrail_spans`` view: pass it
    where the statements of :mod:`.sql` and :mod:`.compare` take ``spans``."""
    return f"({select_sql(table)})"
