"""Every attribute, event and reason-code name ragtrail writes or reads: the one place names live.

These names are public API (users query them in Jaeger and Tempo), mirrored in ``docs/semconv.md``.
The recorder, the exporters and the inspector all import them from here so that a rename is one edit.
"""

from __future__ import annotations

SCHEMA_VERSION = 5
# schema versions a reader accepts (schema 1 traces still read and verify by the v1 rules, schema 2's
# per-candidate events by the v2 rules; schema 3 writes candidates as columns; schema 4 lets a stage
# say its rows' content receipts are an upstream stage's instead of restating them; schema 5 says a
# column that a rule gives for every row (consecutive ranks, one detail, bytes equal to chars) once:
# docs/semconv.md §8)
SCHEMA_VERSIONS = (1, 2, 3, 4, 5)
# the first schema whose candidates are columns on the stage span (and exclusions one event per reason)
SCHEMA_COLUMNS = 3
# the first schema whose rows may inherit their content receipts (``COLUMN_CONTENT_FROM``)
SCHEMA_CONTENT_FROM = 4
# the first schema that may say a column a rule gives for every row once (``COLUMN_RANK_FIRST``,
# ``EXCLUSION_DETAIL`` on an exclusion event, ``COLUMN_CONTENT_ENCODING``)
SCHEMA_SAID_ONCE = 5


def span_id_hex(span_id: int) -> str:
    """A span id as attributes that name a span carry it (``ragtrail.trace.segment.root``,
    ``ragtrail.candidates.content.from``): 16 lowercase hex digits, as every reader prints span ids."""
    return format(span_id, "016x")


# --- spans (docs/semconv.md §1) --------------------------------------------------------------------
SCHEMA = "ragtrail.schema"
STAGE_KIND = "ragtrail.stage.kind"
STAGE_COMPONENT = "ragtrail.stage.component"
STAGE_STATUS = "ragtrail.stage.status"
STAGE_FAILURE_CLASS = "ragtrail.stage.failure_class"
STAGE_FALLBACK = "ragtrail.stage.fallback"
STAGE_TOP_K = "ragtrail.stage.top_k"
STAGE_THRESHOLD = "ragtrail.stage.threshold"
STAGE_BUDGET_LIMIT = "ragtrail.stage.budget.limit"
STAGE_BUDGET_USED = "ragtrail.stage.budget.used"
STAGE_BUDGET_UNIT = "ragtrail.stage.budget.unit"
STAGE_CONTINUATION = "ragtrail.stage.continuation"
STAGE_CONTINUATION_INDEX = "ragtrail.stage.continuation.index"
STAGE_FILTER = "ragtrail.stage.filter"
# vector stores: the searched collection/index, and a batch call's queries (one stage per query)
STAGE_COLLECTION = "ragtrail.stage.collection"
STAGE_BATCH_INDEX = "ragtrail.stage.batch.index"
STAGE_BATCH_SIZE = "ragtrail.stage.batch.size"
STAGE_GROUP_BY = "ragtrail.stage.group_by"
STAGE_GROUP_SIZE = "ragtrail.stage.group_size"
STAGE_FINDINGS = "ragtrail.stage.findings"
STAGE_INSTRUMENTATION_ERRORS = "ragtrail.instrumentation.errors"
# the model a stage ran (a reranker's model id or local path): two runs with different models differ
STAGE_MODEL = "ragtrail.stage.model"
# a maximal-marginal-relevance pick: its relevance/diversity trade-off (1 = relevance only)
STAGE_MMR_LAMBDA = "ragtrail.stage.mmr.lambda"
CANDIDATES_IN = "ragtrail.candidates.in"
CANDIDATES_OUT = "ragtrail.candidates.out"
CANDIDATES_EXCLUDED = "ragtrail.candidates.excluded"
EVENTS_COUNT = "ragtrail.events.count"
EVENTS_DIGEST = "ragtrail.events.digest"
EVENTS_SPANS = "ragtrail.events.spans"
# v2: the stage receipt, written last: every semantic field of the stage and of each of its events
# under one digest (64 hex: sha256; "hmac-sha256:<64 hex>" when keyed), and a short digest per field so a
# reader can name the field that changed ("<field>=<8 hex>;..." with the "ragtrail." prefix cut)
STAGE_RECEIPT = "ragtrail.stage.receipt"
STAGE_RECEIPT_FIELDS = "ragtrail.stage.receipt.fields"

KIND_PIPELINE = "pipeline"
KIND_QUERY_TRANSFORM = "query_transform"
KIND_RETRIEVE = "retrieve"
KIND_FUSE = "fuse"
KIND_RERANK = "rerank"
KIND_FILTER = "filter"
# a text splitter inside a retrieval (LangChain DocumentCompressorPipeline): documents in, chunks out
KIND_SPLIT = "split"
KIND_BUDGET = "budget"
KIND_GENERATE = "generate"
KIND_CITE = "cite"
STAGE_KINDS = (
    KIND_PIPELINE,
    KIND_QUERY_TRANSFORM,
    KIND_RETRIEVE,
    KIND_FUSE,
    KIND_RERANK,
    KIND_FILTER,
    KIND_SPLIT,
    KIND_BUDGET,
    KIND_GENERATE,
    KIND_CITE,
)
# stages whose output may contain candidates that were not in their input
PRODUCING_KINDS = frozenset({KIND_RETRIEVE, KIND_FUSE, KIND_PIPELINE, KIND_QUERY_TRANSFORM, KIND_SPLIT, KIND_GENERATE, KIND_CITE})

STATUS_OK = "ok"
STATUS_EMPTY = "empty"
STATUS_DEGRADED = "degraded"
STATUS_FAILED = "failed"
# stopped from outside (asyncio.CancelledError, KeyboardInterrupt, GeneratorExit): not a failure
STATUS_CANCELLED = "cancelled"
STATUSES = (STATUS_OK, STATUS_EMPTY, STATUS_DEGRADED, STATUS_FAILED, STATUS_CANCELLED)

# --- query hops (docs/semconv.md §2) ---------------------------------------------------------------
QUERY_TEXT = "ragtrail.query.text"
QUERY_HOP = "ragtrail.query.hop"
QUERY_PARENT_HOP = "ragtrail.query.parent_hop"
QUERY_TRANSFORM = "ragtrail.query.transform"
QUERY_CHARS = "ragtrail.query.chars"
QUERY_BYTES = "ragtrail.query.bytes"
QUERY_SHA256 = "ragtrail.query.sha256"
# a query that reached a vector store as a vector (no text): its dimension and the sha256 of its
# little-endian float32 bytes (uint8 bytes for binary vectors), so two runs can be compared
QUERY_VECTOR_DIM = "ragtrail.query.vector.dim"
QUERY_VECTOR_SHA256 = "ragtrail.query.vector.sha256"
# a stage that saw several queries (multi-query, decompose) lists the extra hops as events
EVENT_QUERY = "ragtrail.query"
# hops whose texts were embedded together (averaged) into the one vector that hit the index (HyDE)
QUERY_EMBEDDING_HOPS = "ragtrail.query.embedding_hops"

TRANSFORM_NONE = "none"
TRANSFORM_REWRITE = "rewrite"
TRANSFORM_EXPAND = "expand"
TRANSFORM_HYDE = "hyde"
TRANSFORM_DECOMPOSE = "decompose"
TRANSFORM_MULTI_QUERY = "multi_query"
TRANSFORM_FOLLOW_UP = "follow_up"
# the query changed between two stages and no instrumented transform explains it (a finding)
TRANSFORM_UNTRACKED = "untracked"
QUERY_TRANSFORMS = (
    TRANSFORM_NONE,
    TRANSFORM_REWRITE,
    TRANSFORM_EXPAND,
    TRANSFORM_HYDE,
    TRANSFORM_DECOMPOSE,
    TRANSFORM_MULTI_QUERY,
    TRANSFORM_FOLLOW_UP,
    TRANSFORM_UNTRACKED,
)

# --- candidates and exclusions (docs/semconv.md §3) ------------------------------------------------
EVENT_CANDIDATE = "ragtrail.candidate"
EVENT_EXCLUSION = "ragtrail.exclusion"
CANDIDATE_ID = "ragtrail.candidate.id"
CANDIDATE_RANK = "ragtrail.candidate.rank"
CANDIDATE_SCORE = "ragtrail.candidate.score"
CANDIDATE_SCORE_KIND = "ragtrail.candidate.score_kind"
CANDIDATE_SCORE_RAW = "ragtrail.candidate.score_raw"
CANDIDATE_HOP = "ragtrail.candidate.hop"
CANDIDATE_CONTENT_CHARS = "ragtrail.candidate.content.chars"
CANDIDATE_CONTENT_BYTES = "ragtrail.candidate.content.bytes"
CANDIDATE_CONTENT_SHA256 = "ragtrail.candidate.content.sha256"
CANDIDATE_CONTENT_PREVIEW = "ragtrail.candidate.content.preview"
CANDIDATE_CONTENT_TEXT = "ragtrail.candidate.content.text"
# on a decoded record (schema 4): the span its content receipt was read from (``COLUMN_CONTENT_FROM``)
CANDIDATE_CONTENT_FROM = "ragtrail.candidate.content.from"
CANDIDATE_META_PREFIX = "ragtrail.candidate.meta."
CANDIDATE_TRANSFORM_RULE = "ragtrail.candidate.transform.rule"
CANDIDATE_TRANSFORM_DERIVED_FROM = "ragtrail.candidate.transform.derived_from"
EXCLUSION_REASON = "ragtrail.exclusion.reason"
EXCLUSION_DETAIL = "ragtrail.exclusion.detail"

# schema 3: candidates as columns (docs/semconv.md §3). The stage's outputs are homogeneous arrays on
# the stage span, in output order (a candidate's rank is its position); the excluded inputs are one
# ragtrail.exclusion event per reason carrying the same columns (plus input ranks and details). A
# value the same for every row is said once (the singular names); a row without a value holds the
# column's blank: "" in string columns, -1 in int columns, 0.0 in scores (with score_raw saying why).
COLUMNS_PREFIX = "ragtrail.candidates."
COLUMN_IDS = "ragtrail.candidates.ids"
COLUMN_RANKS = "ragtrail.candidates.ranks"
# schema 5: an exclusion event whose rows' input ranks are consecutive (first, first + 1, ...) says the
# first instead of the ranks column
COLUMN_RANK_FIRST = "ragtrail.candidates.rank_first"
COLUMN_SCORES = "ragtrail.candidates.scores"
# per row: "" (the score is in scores), NO_SCORE (the candidate had none), or the text of a score
# that is not finite ("nan", "inf", "-inf", or its type's name)
COLUMN_SCORE_RAW = "ragtrail.candidates.score_raw"
COLUMN_SCORE_KIND = "ragtrail.candidates.score_kind"
COLUMN_SCORE_KINDS = "ragtrail.candidates.score_kinds"
COLUMN_HOP = "ragtrail.candidates.hop"
COLUMN_HOPS = "ragtrail.candidates.hops"
COLUMN_CONTENT_CHARS = "ragtrail.candidates.content.chars"
COLUMN_CONTENT_BYTES = "ragtrail.candidates.content.bytes"
COLUMN_CONTENT_SHA256 = "ragtrail.candidates.content.sha256"
# schema 5: CONTENT_ASCII when every row's UTF-8 byte count equals its character count (the content
# is ASCII): the bytes column is then not written, a reader takes each row's chars for its bytes
COLUMN_CONTENT_ENCODING = "ragtrail.candidates.content.encoding"
CONTENT_ASCII = "ascii"
COLUMN_CONTENT_PREVIEW = "ragtrail.candidates.content.preview"
# schema 4: instead of the three content columns, the span id (16 hex) of the stage span whose output
# rows carry every row's content receipt, by candidate id: the content did not change since that stage
COLUMN_CONTENT_FROM = "ragtrail.candidates.content.from"
COLUMN_CONTENT_TEXT = "ragtrail.candidates.content.text"
COLUMN_TRANSFORM_RULE = "ragtrail.candidates.transform.rule"
COLUMN_TRANSFORM_DERIVED_FROM = "ragtrail.candidates.transform.derived_from"
# one column per allow-listed metadata key: each row the canonical JSON of the value ("" when absent)
COLUMN_META_PREFIX = "ragtrail.candidates.meta."
COLUMN_EXCLUSION_DETAILS = "ragtrail.exclusion.details"
# (schema 5: an exclusion event whose rows all have the same detail says it once, as EXCLUSION_DETAIL)
NO_SCORE = "~"
# every column name but the metadata ones (those start with COLUMN_META_PREFIX)
COLUMN_NAMES = frozenset(
    {
        COLUMN_IDS,
        COLUMN_RANKS,
        COLUMN_SCORES,
        COLUMN_SCORE_RAW,
        COLUMN_SCORE_KIND,
        COLUMN_SCORE_KINDS,
        COLUMN_HOP,
        COLUMN_HOPS,
        COLUMN_CONTENT_CHARS,
        COLUMN_CONTENT_BYTES,
        COLUMN_CONTENT_SHA256,
        COLUMN_RANK_FIRST,
        COLUMN_CONTENT_ENCODING,
        COLUMN_CONTENT_PREVIEW,
        COLUMN_CONTENT_TEXT,
        COLUMN_CONTENT_FROM,
        COLUMN_TRANSFORM_RULE,
        COLUMN_TRANSFORM_DERIVED_FROM,
        COLUMN_EXCLUSION_DETAILS,
    }
)

SCORE_SIMILARITY = "similarity"
SCORE_DISTANCE = "distance"
SCORE_BM25 = "bm25"
SCORE_RERANK = "rerank"
SCORE_RRF = "rrf"
SCORE_NONE = "none"
# a normalised, weighted fusion score (LlamaIndex QueryFusionRetriever relative_score / dist_based_score,
# Haystack's distribution-based rank fusion); never a sum of raw scores (Haystack's merge join: none)
SCORE_RELATIVE = "relative"
SCORE_KINDS = (SCORE_SIMILARITY, SCORE_DISTANCE, SCORE_BM25, SCORE_RERANK, SCORE_RRF, SCORE_RELATIVE, SCORE_NONE)

REASON_BELOW_RANK_CUTOFF = "below_rank_cutoff"
REASON_BELOW_SCORE_THRESHOLD = "below_score_threshold"
REASON_FILTERED_BY_METADATA = "filtered_by_metadata"
REASON_DEDUPLICATED = "deduplicated"
REASON_SUPERSEDED = "superseded"
REASON_STALE = "stale"
REASON_NOT_PERMITTED = "not_permitted"
REASON_BUDGET_EXCEEDED = "budget_exceeded"
REASON_SELF_REFERENCE = "self_reference"
REASON_UNEXPLAINED = "unexplained"
REASON_CUSTOM_PREFIX = "custom:"
REASONS = (
    REASON_BELOW_RANK_CUTOFF,
    REASON_BELOW_SCORE_THRESHOLD,
    REASON_FILTERED_BY_METADATA,
    REASON_DEDUPLICATED,
    REASON_SUPERSEDED,
    REASON_STALE,
    REASON_NOT_PERMITTED,
    REASON_BUDGET_EXCEEDED,
    REASON_SELF_REFERENCE,
    REASON_UNEXPLAINED,
)


# findings (``ragtrail.stage.findings`` entries start with "<code>: "): what the recorder saw in the
# data that contradicts what the stage claims (docs/semconv.md §3)
# a kept output scores past the stage's threshold: the threshold did not decide what was kept, so no
# exclusion is derived from it
FINDING_KEPT_PAST_THRESHOLD = "kept_past_threshold"
# a rerank stage handed on its inputs in their input order with their input scores: it reranked
# nothing (a silent fallback, seed 002); those scores keep their upstream kind
FINDING_RERANK_IS_IDENTITY = "rerank_is_identity"
FINDINGS = (FINDING_KEPT_PAST_THRESHOLD, FINDING_RERANK_IS_IDENTITY)


def is_valid_reason(reason: str) -> bool:
    """A reason code is one of the codes of docs/semconv.md §3 or ``custom:<name>`` with a non-empty name."""
    return reason in REASONS or (reason.startswith(REASON_CUSTOM_PREFIX) and len(reason) > len(REASON_CUSTOM_PREFIX))


# --- sampling and completeness (docs/semconv.md §5) ------------------------------------------------
SAMPLING_PROBABILITY = "ragtrail.sampling.probability"
SAMPLING_ADJUSTED_COUNT = "ragtrail.sampling.adjusted_count"
# issue 26: stamped by the gateway Collector (collector-config/gateway.yaml, transform/tail_weight) on every
# span of a trace its tail sampler kept: the policy that kept it, and the probability with which that
# policy keeps such a trace (1.0 for a finding policy, the baseline's share); absent for a policy the
# gateway does not know the probability of. A trace weighs head adjusted count x 1 / tail probability.
SAMPLING_TAIL_POLICY = "ragtrail.sampling.tail.policy"
SAMPLING_TAIL_PROBABILITY = "ragtrail.sampling.tail.probability"
# the tail sampler's own record (feature gate processor.tailsamplingprocessor.recordpolicy), an
# instrumentation-scope attribute: the policy that kept the trace
TAILSAMPLING_POLICY = "tailsampling.policy"
JAEGER_SAMPLER_TYPE = "sampler.type"
JAEGER_SAMPLER_PARAM = "sampler.param"
TRACE_SPAN_COUNT = "ragtrail.trace.span_count"
# v2: stamped at export on every other ragtrail span of a segment, so completeness does not depend on
# the root arriving: the local root's span id (hex) and the segment's span count
TRACE_SEGMENT_ROOT = "ragtrail.trace.segment.root"
TRACE_SEGMENT_SPAN_COUNT = "ragtrail.trace.segment.span_count"
TRACE_LATE = "ragtrail.trace.late"
# spans of a segment flushed at shutdown before its local root ended
TRACE_INCOMPLETE = "ragtrail.trace.incomplete"
COVERAGE_CORPUS_SIZE = "ragtrail.coverage.corpus_size"
COVERAGE_RETRIEVED = "ragtrail.coverage.retrieved"
COVERAGE_IN_CONTEXT = "ragtrail.coverage.in_context"
COVERAGE_CITED = "ragtrail.coverage.cited"
# the corpus size (or one of the store sizes summed into it) is an estimate the store reported
# (qdrant's approximate points_count, a user's figure marked approximate): never enough for absence
COVERAGE_CORPUS_APPROXIMATE = "ragtrail.coverage.corpus_size.approximate"
# how many distinct stores were summed into the pipeline's corpus size
COVERAGE_STORES = "ragtrail.coverage.stores"
CITED_IDS = "ragtrail.cited.ids"

# the run as a whole, on the pipeline span: rolled up from its stages (seed 003's four buckets)
RUN_STATUS = "ragtrail.run.status"
RUN_AVAILABLE = "available"
RUN_EMPTY = "empty"
RUN_DEGRADED = "degraded"
RUN_FAILED = "failed"
RUN_CANCELLED = "cancelled"  # the pipeline itself was cancelled or interrupted before it ended
RUN_STATUSES = (RUN_AVAILABLE, RUN_EMPTY, RUN_DEGRADED, RUN_FAILED, RUN_CANCELLED)

# the transform policy the run was recorded under (issue 28; contract/policy.py), on the pipeline span
# only when RAGTRAIL_TRANSFORM_POLICY names one: its version and the sha256 of its canonical JSON
POLICY_VERSION = "ragtrail.policy.version"
POLICY_SHA256 = "ragtrail.policy.sha256"

# the answer, on the pipeline span, said by the app with ragtrail.answer(text, claim=..., refused=...):
# a receipt of the text (<prefix>.chars / .bytes / .sha256), the text itself when content capture
# allows, the kind of claim it makes (an absence claim needs the whole corpus read) and a refusal flag
ANSWER_RECEIPT_PREFIX = "ragtrail.answer"
ANSWER_CHARS = "ragtrail.answer.chars"
ANSWER_BYTES = "ragtrail.answer.bytes"
ANSWER_SHA256 = "ragtrail.answer.sha256"
ANSWER_TEXT = "ragtrail.answer.text"
ANSWER_PREVIEW = "ragtrail.answer.preview"
ANSWER_CLAIM = "ragtrail.answer.claim"
ANSWER_REFUSED = "ragtrail.answer.refused"
CLAIM_PRESENCE = "presence"
CLAIM_ABSENCE = "absence"
CLAIM_NONE = "none"
ANSWER_CLAIMS = (CLAIM_PRESENCE, CLAIM_ABSENCE, CLAIM_NONE)

# loss records: a span named LOSS_SPAN_NAME carrying the counters below
LOSS_SPAN_NAME = "ragtrail.loss"
LOSS_TRACES_DROPPED = "ragtrail.loss.traces_dropped"
LOSS_SPANS_DROPPED = "ragtrail.loss.spans_dropped"
LOSS_TRACES_EXPORT_FAILED = "ragtrail.loss.traces_export_failed"
LOSS_SPANS_EXPORT_FAILED = "ragtrail.loss.spans_export_failed"
LOSS_REASON = "ragtrail.loss.reason"
LOSS_WINDOW_START = "ragtrail.loss.window_start_unix_nano"
# OTel metric counters carrying the same counts
METRIC_LOSS_TRACES = "ragtrail.loss.traces"
METRIC_LOSS_SPANS = "ragtrail.loss.spans"

# --- mirrors for other tools (docs/semconv.md §6) --------------------------------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_DATA_SOURCE_ID = "gen_ai.data_source.id"
# semantic-conventions-genai v0.1.0: retrieval spans carry gen_ai.retrieval.top_k; gen_ai.request.top_k
# (what ragtrail wrote before) is now the model's top-K sampling parameter only, never written here
GEN_AI_RETRIEVAL_TOP_K = "gen_ai.retrieval.top_k"
GEN_AI_REQUEST_TOP_K = "gen_ai.request.top_k"
GEN_AI_OPERATION_RETRIEVAL = "retrieval"
# opt-in (Development status): the query text only with RAGTRAIL_CAPTURE_QUERY=text; the documents as a
# JSON array of {id, score} plus content/metadata when the capture modes allow (extra fields are allowed)
GEN_AI_RETRIEVAL_QUERY_TEXT = "gen_ai.retrieval.query.text"
GEN_AI_RETRIEVAL_DOCUMENTS = "gen_ai.retrieval.documents"
# the GenAI client metric a retrieval's duration is recorded in (docs/semconv.md §6), once per retrieval
# the GenAI mirror claims; its bucket boundaries as the conventions specify them, in seconds
GEN_AI_CLIENT_OPERATION_DURATION = "gen_ai.client.operation.duration"
GEN_AI_DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
ERROR_TYPE = "error.type"  # OTel's (stable): the class of error an operation ended with
ERROR_TYPE_OTHER = "_OTHER"  # its fallback value when the instrumentation knows no more
# EXPERIMENTAL: proposed in semantic-conventions-genai issue #253, in no released package yet
GEN_AI_RERANK_CANDIDATE_COUNT = "gen_ai.rerank.candidate.count"
GEN_AI_RERANK_TOP_N = "gen_ai.rerank.top_n"
GEN_AI_RERANK_SCORES = "gen_ai.rerank.scores"

OPENINFERENCE_SPAN_KIND = "openinference.span.kind"
OI_RETRIEVER = "RETRIEVER"
OI_RERANKER = "RERANKER"
OI_CHAIN = "CHAIN"
OI_INPUT_VALUE = "input.value"
OI_INPUT_MIME_TYPE = "input.mime_type"
OI_OUTPUT_VALUE = "output.value"
OI_OUTPUT_MIME_TYPE = "output.mime_type"
OI_MIME_TEXT = "text/plain"
OI_MIME_JSON = "application/json"
OI_RETRIEVAL_DOCUMENTS = "retrieval.documents"
OI_RERANKER_QUERY = "reranker.query"
OI_RERANKER_TOP_K = "reranker.top_k"
OI_RERANKER_MODEL_NAME = "reranker.model_name"
OI_RERANKER_INPUT_DOCUMENTS = "reranker.input_documents"
OI_RERANKER_OUTPUT_DOCUMENTS = "reranker.output_documents"
OI_DOCUMENT_ID = "document.id"
OI_DOCUMENT_SCORE = "document.score"
OI_DOCUMENT_CONTENT = "document.content"
OI_DOCUMENT_METADATA = "document.metadata"

# when a mirror writes fewer documents than the stage had (the span's attribute limit): how many of
# how many it wrote, per list (output: retrieval.documents / reranker.output_documents; input:
# reranker.input_documents). Written only when a list was cut; ragtrail's own events stay complete.
MIRROR_OUTPUT_DOCUMENTS_MIRRORED = "ragtrail.mirror.output_documents.mirrored"
MIRROR_OUTPUT_DOCUMENTS_TOTAL = "ragtrail.mirror.output_documents.total"
MIRROR_INPUT_DOCUMENTS_MIRRORED = "ragtrail.mirror.input_documents.mirrored"
MIRROR_INPUT_DOCUMENTS_TOTAL = "ragtrail.mirror.input_documents.total"

# --- configuration (environment) -------------------------------------------------------------------
ENV_CAPTURE_QUERY = "RAGTRAIL_CAPTURE_QUERY"
ENV_CAPTURE_CONTENT = "RAGTRAIL_CAPTURE_CONTENT"
ENV_CAPTURE_METADATA = "RAGTRAIL_CAPTURE_METADATA"
ENV_MIRROR_GENAI = "RAGTRAIL_MIRROR_GENAI"
ENV_MIRROR_OPENINFERENCE = "RAGTRAIL_MIRROR_OPENINFERENCE"
# the most documents each mirrored document list carries (an integer >= 0; unset or `all`: no cap)
ENV_MIRROR_DOCUMENTS = "RAGTRAIL_MIRROR_DOCUMENTS"
ENV_EVENTS_PER_SPAN = "RAGTRAIL_EVENTS_PER_SPAN"
# most query stages one vector-store call writes (a faiss search of 1M rows must not cost 1M spans)
ENV_VECTORSTORE_MAX_QUERIES = "RAGTRAIL_VECTORSTORE_MAX_QUERIES"

# v2 keyed receipts: the key (text, UTF-8) that makes stage receipts HMAC-SHA256; never exported
ENV_RECEIPT_KEY = "RAGTRAIL_RECEIPT_KEY"
# issue 28: a transform policy file (JSON) granting components the transform rules they may cite
ENV_TRANSFORM_POLICY = "RAGTRAIL_TRANSFORM_POLICY"
# issue 28: producer checkpoints (contract/checkpoints.py): the append-only file, an optional HTTP
# endpoint (POST), and how often a checkpoint is written (every N segments, or T ms with records pending)
ENV_CHECKPOINT_PATH = "RAGTRAIL_CHECKPOINT_PATH"
ENV_CHECKPOINT_ENDPOINT = "RAGTRAIL_CHECKPOINT_ENDPOINT"
ENV_CHECKPOINT_EVERY_SEGMENTS = "RAGTRAIL_CHECKPOINT_EVERY_SEGMENTS"
ENV_CHECKPOINT_EVERY_MILLIS = "RAGTRAIL_CHECKPOINT_EVERY_MILLIS"

CAPTURE_QUERY_MODES = ("text", "hash", "off")
CAPTURE_CONTENT_MODES = ("off", "preview", "full")

# transform rules (receipts/rules.py defines their semantics)
RULE_PREVIEW = "preview@1"
RULE_BUDGET_TRIM = "budget_trim@1"
RULE_TRUNCATE_PREFIX = "truncate@1:"
# the text handed on is the upstream text with a header of <n> code points put before it (LlamaIndex's
# metadata header when it builds the prompt): checkable from the receipts, chars = upstream chars + n
RULE_METADATA_HEADER_PREFIX = "metadata_header@1:"
# a stage declared it replaced the content (sentence window, PII mask, LLM extraction): not checkable
# from the receipt alone; readers accept it when derived_from matches the upstream receipt
RULE_REPLACE = "replace@1"
RULE_LLM_EXTRACT = "llm_extract@1"
# a chunk a text splitter cut from the document named by derived_from: checkable between stages,
# a chunk is never longer than the document it was cut from
RULE_SPLIT = "split@1"
# the candidate replaced the candidates whose ids derived_from names (a JSON array, contract/columns.py
# replaced_ids_cell): a parent document for its child chunks, a merged node for its leaves. It is a
# new id, first seen here: nothing upstream to check its content against. Each replaced candidate is
# an exclusion of the same stage with REASON_MERGED (detail "into <id>")
RULE_MERGE = "merge@1"
REASON_MERGED = "custom:merged"
# a candidate of a maximal-marginal-relevance pool (the fetch_k candidates fetched for the pick) that
# the pick did not take (issue 24, principle 5): its relevance, less its likeness to the candidates
# already picked, ranked below theirs (or the pick was full). The pool is the stage's inputs
REASON_NOT_PICKED_BY_MMR = "custom:not_picked_by_mmr"
# a document a score-based sampler (Haystack's TopPSampler) dropped because it carries no score while
# other documents of the call do: it could not be ranked at all, as opposed to ranking below the cut
REASON_NO_SCORE = "custom:no_score"
# ragtrail.stage.budget.unit of a top-p (nucleus) cut: the budget is softmax probability mass
BUDGET_UNIT_PROBABILITY = "probability"

# receipt attribute prefixes: <prefix>.chars / .bytes / .sha256
QUERY_RECEIPT_PREFIX = "ragtrail.query"
CANDIDATE_CONTENT_PREFIX = "ragtrail.candidate.content"

# export path configuration (environment; ragtrail.export reads these)
ENV_LOCAL_STORE_DIR = "RAGTRAIL_LOCAL_STORE_DIR"
ENV_LOCAL_STORE_MAX_FILE_BYTES = "RAGTRAIL_LOCAL_STORE_MAX_FILE_BYTES"
ENV_LOCAL_STORE_MAX_TOTAL_BYTES = "RAGTRAIL_LOCAL_STORE_MAX_TOTAL_BYTES"
ENV_EXPORT_MAX_TRACES = "RAGTRAIL_EXPORT_MAX_TRACES"
ENV_EXPORT_MAX_SPANS_PER_TRACE = "RAGTRAIL_EXPORT_MAX_SPANS_PER_TRACE"
ENV_EXPORT_MAX_BYTES = "RAGTRAIL_EXPORT_MAX_BYTES"
ENV_EXPORT_GRACE_MILLIS = "RAGTRAIL_EXPORT_GRACE_MILLIS"
ENV_EXPORT_SCHEDULE_DELAY_MILLIS = "RAGTRAIL_EXPORT_SCHEDULE_DELAY_MILLIS"
ENV_EXPORT_MAX_BATCH_SPANS = "RAGTRAIL_EXPORT_MAX_BATCH_SPANS"
ENV_EXPORT_MAX_REQUEST_BYTES = "RAGTRAIL_EXPORT_MAX_REQUEST_BYTES"
ENV_EXPORT_RETRY_TIMEOUT_MILLIS = "RAGTRAIL_EXPORT_RETRY_TIMEOUT_MILLIS"
ENV_EXPORT_MAX_TRACE_AGE_MILLIS = "RAGTRAIL_EXPORT_MAX_TRACE_AGE_MILLIS"
ENV_LOSS_REPORT_INTERVAL_MILLIS = "RAGTRAIL_LOSS_REPORT_INTERVAL_MILLIS"
