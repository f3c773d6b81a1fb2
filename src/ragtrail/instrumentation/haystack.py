"""Auto-instrumentation for Haystack (``haystack-ai``): one ragtrail stage per retrieval component.

Haystack components share no base class, so each component's ``run`` (and ``run_async`` where it
has one) is patched on its own class:

* ``InMemoryBM25Retriever`` / ``InMemoryEmbeddingRetriever``: ``retrieve`` stages (``bm25`` /
  ``similarity`` scores, the effective filters and the store's size);
* ``DocumentJoiner`` (every join mode) and the multi-query retrievers: ``fuse`` stages whose inputs
  are the concatenated input lists, each candidate with the hop of the query that found it;
* ``SentenceTransformersSimilarityRanker``, ``LostInTheMiddleRanker``, ``MetaFieldRanker``:
  ``rerank`` stages whose every exclusion is classified by re-deriving the component's own rule
  (duplicate id, ``top_k``, score threshold, word budget, missing meta field) from the snapshotted
  inputs, never by guessing;
* ``QueryExpander``: a ``query_transform`` stage whose expansions become ``expand`` hops;
* ``Pipeline.run`` / ``Pipeline.run_async``: the ``pipeline`` root (hop numbering and coverage are
  per pipeline run) unless an outer ragtrail stage already is the root.

Why post-import hooks: importing Haystack costs seconds (and the sentence-transformers integration
imports torch), so nothing is imported until the application imports it itself; a hook patches each
module the moment it is loaded (:meth:`RagtrailInstrumentor.when_imported`). Why the executor patch: the multi-query retrievers run the inner
retriever on a plain ``ThreadPoolExecutor`` that does not carry the caller's context, so the inner
spans would start new traces; the module's ``ThreadPoolExecutor`` name is replaced with a subclass
that runs each submitted callable in a copy of the submitter's context.

Haystack's own OpenTelemetry tracing (``haystack.component.run`` spans) lives in the separate
``opentelemetry-haystack`` package; this module neither needs nor disturbs it.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Collection, Mapping


from ragtrail import settings
from ragtrail.contract import semconv as sc
from ragtrail.recorder.candidates import Candidate, adapt
from ragtrail.instrumentation._base import RagtrailInstrumentor, enabled, guard, suppressed
from ragtrail.contract.receipts import canonical_json, finite_or_none, receipt
from ragtrail.recorder.pipeline import current_pipeline
from ragtrail.recorder.stage import Stage, stage as new_stage

_instruments: Collection[str] = ("haystack-ai >= 2.10",)

_BM25 = "haystack.components.retrievers.in_memory.bm25_retriever"
_EMBEDDING = "haystack.components.retrievers.in_memory.embedding_retriever"
_JOINER = "haystack.components.joiners.document_joiner"
_LITM = "haystack.components.rankers.lost_in_the_middle"
_META = "haystack.components.rankers.meta_field"
_ST_RANKER = "haystack_integrations.components.rankers.sentence_transformers.sentence_transformers_similarity"
_ST_RANKER_2X = "haystack.components.rankers.sentence_transformers_similarity"  # haystack-ai 2.x
_EXPANDER = "haystack.components.query.query_expander"
_MQ_TEXT = "haystack.components.retrievers.multi_query_text_retriever"
_MQ_EMBEDDING = "haystack.components.retrievers.multi_query_embedding_retriever"
_PIPELINE = "haystack.core.pipeline.pipeline"
_ASYNC_PIPELINE_2X = "haystack.core.pipeline.async_pipeline"  # haystack-ai 2.x

_PIPELINE_KEY = "haystack:pipeline"
_QUERY_KEYS = ("query", "question", "text", "query_str", "prompt")

# the text of the query a multi-query embedding retriever is embedding on this thread/task, so the
# inner embedding retriever's stage can name the hop that found its documents
_query_text: contextvars.ContextVar[str | None] = contextvars.ContextVar("ragtrail_haystack_query", default=None)
# (id of the multi-query retriever, [(query, documents), ...]) collected by its per-query workers
_collector: contextvars.ContextVar[tuple[int, list[tuple[Any, Any]]] | None] = contextvars.ContextVar(
    "ragtrail_haystack_multi_query", default=None)


# --- helpers ---------------------------------------------------------------------------------------
def _component(instance: Any) -> str:
    cls = type(instance)
    return f"{cls.__module__}.{cls.__qualname__}"


_signatures: dict[Any, inspect.Signature | None] = {}


def _bind(wrapped: Callable[..., Any], args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by parameter name (defaults not applied: ``None`` means "not given")."""
    key = getattr(wrapped, "__func__", wrapped)
    if key not in _signatures:
        try:
            _signatures[key] = inspect.signature(wrapped)
        except (TypeError, ValueError):
            _signatures[key] = None
    signature = _signatures[key]
    if signature is None:
        return dict(kwargs)
    try:
        return dict(signature.bind_partial(*args, **kwargs).arguments)
    except TypeError:
        # the call itself is wrong: the library raises its own error; record what we can
        return dict(kwargs)


def _document_adapter(doc: Any) -> Candidate:
    """A Haystack ``Document``: its id, text (or blob bytes), score and meta."""
    content = getattr(doc, "content", None)
    if content is None:
        blob = getattr(doc, "blob", None)
        content = getattr(blob, "data", None) if blob is not None else None
    meta = getattr(doc, "meta", None)
    return Candidate(id=str(doc.id), content=content, score=getattr(doc, "score", None),
                     metadata=dict(meta) if isinstance(meta, Mapping) and meta else None)


def _documents(result: Any) -> list[Any] | None:
    if isinstance(result, Mapping):
        docs = result.get("documents")
        if isinstance(docs, (list, tuple)):
            return list(docs)
    return None


def _snapshot(docs: Any, *, with_hops: bool = True) -> list[Candidate] | None:
    """Adapt the input documents now (rankers may rescore them in place), each with the hop and
    score kind an earlier stage of this pipeline gave it."""
    if not isinstance(docs, (list, tuple)):
        return None
    state = current_pipeline()
    result = []
    for doc in docs:
        candidate = adapt(doc)
        if candidate.score_kind is None and state is not None:
            candidate.score_kind = state.candidate_score_kind(candidate.id)
        if with_hops and candidate.hop is None and state is not None:
            candidate.hop = state.candidate_hop(candidate.id)
        result.append(candidate)
    return result


def _best_copies(inputs: list[Candidate]) -> dict[str, Candidate]:
    """Haystack's ``_deduplicate_documents``: one document per id, the first highest-scored copy,
    in first-seen order of the ids."""
    best: dict[str, Candidate] = {}
    for candidate in inputs:
        score = finite_or_none(candidate.score)
        score = float("-inf") if score is None else score
        current = best.get(candidate.id)
        if current is None:
            best[candidate.id] = candidate
            continue
        current_score = finite_or_none(current.score)
        if score > (float("-inf") if current_score is None else current_score):
            best[candidate.id] = candidate
    return best


def _outputs_like_inputs(docs: list[Any], inputs: list[Candidate], kind: str | None) -> list[Candidate]:
    """Adapt the output documents; one that is an input object (not a rescored copy) keeps that
    input's hop and score kind, a rescored one takes ``kind``."""
    by_object = {id(c.raw): c for c in inputs if c.raw is not None}
    by_id = {}
    for c in inputs:
        by_id.setdefault(c.id, c)
    result = []
    for doc in docs:
        candidate = adapt(doc)
        source = by_object.get(id(doc))
        if source is not None and source.raw is doc:
            candidate.score_kind = source.score_kind
            candidate.hop = source.hop
        else:
            origin = by_id.get(candidate.id)
            candidate.score_kind = kind if kind is not None else (origin.score_kind if origin else None)
            if origin is not None:
                candidate.hop = origin.hop
        result.append(candidate)
    return result


def _exclude_missing(s: Stage, inputs: list[Candidate], outputs: list[Candidate],
                     reason_of: Callable[[Candidate], tuple[str, str | None]]) -> None:
    """Give the first copy of every input id that did not leave its reason; surplus copies of an id
    are left to the recorder, which calls them ``deduplicated``."""
    kept = {c.id for c in outputs}
    best = _best_copies(inputs)
    done: set[str] = set()
    for candidate in inputs:
        if candidate.id in kept or candidate.id in done:
            continue
        done.add(candidate.id)
        reason, detail = reason_of(best[candidate.id])
        s.exclude(candidate.id, reason, detail)


# --- one handler per component kind -----------------------------------------------------------------
class _Handler:
    """How one component maps onto a stage. ``before`` runs with the stage open and recording and
    returns a memo for ``after``; both are guarded by the wrapper."""

    kind = sc.KIND_RETRIEVE

    def skip(self, instance: Any) -> bool:
        return False

    def before(self, s: Stage, instance: Any, bound: dict[str, Any]) -> dict[str, Any]:
        return {}

    def after(self, s: Stage, instance: Any, memo: dict[str, Any], result: Any) -> None:
        pass

    def cleanup(self, memo: dict[str, Any]) -> None:
        """Undo what ``before`` set in the context; runs whether the call raised or not."""


class _TextRetriever(_Handler):
    """``InMemoryBM25Retriever``: the query is text."""

    score_kind = sc.SCORE_BM25

    def query_text(self, bound: dict[str, Any]) -> Any:
        return bound.get("query")

    def before(self, s: Stage, instance: Any, bound: dict[str, Any]) -> dict[str, Any]:
        s.score_kind = self.score_kind
        top_k = bound.get("top_k")
        s.set(top_k=getattr(instance, "top_k", None) if top_k is None else top_k)
        memo: dict[str, Any] = {}
        text = self.query_text(bound)
        if isinstance(text, str):
            memo["hop"] = s.query(text)
        else:
            memo["hop"] = _only_hop()
        filters = _effective_filters(instance, bound.get("filters"))
        if filters:
            s.set_attribute(sc.STAGE_FILTER, canonical_json(filters))
        store = getattr(instance, "document_store", None)
        count = getattr(store, "count_documents", None)
        if callable(count):
            s.corpus_size(guard("haystack.count_documents", count))
        return memo

    def after(self, s: Stage, instance: Any, memo: dict[str, Any], result: Any) -> None:
        docs = _documents(result)
        if docs is None:
            s.finding(f"run returned a {type(result).__name__} without a documents list")
            return
        candidates = [adapt(d) for d in docs]
        s.outputs(candidates, hop=memo.get("hop"))


class _EmbeddingRetriever(_TextRetriever):
    """``InMemoryEmbeddingRetriever``: the query is a vector; its text is known when a multi-query
    retriever embedded it (or, in a pipeline that saw one query only, it is that query's hop)."""

    score_kind = sc.SCORE_SIMILARITY

    def query_text(self, bound: dict[str, Any]) -> Any:
        return _query_text.get()


def _only_hop() -> int | None:
    """Hop 0 when this pipeline has seen exactly one query (the retriever must have searched for
    it); ``None`` when that cannot be said."""
    state = current_pipeline()
    if state is not None and state.hop_count() == 1:
        return 0
    return None


def _effective_filters(instance: Any, runtime: Any) -> Any:
    policy = getattr(instance, "filter_policy", None)
    init = getattr(instance, "filters", None)
    if policy is None:
        return runtime or init
    from haystack.document_stores.types.filter_policy import apply_filter_policy

    return apply_filter_policy(policy, init, runtime)


class _Joiner(_Handler):
    """``DocumentJoiner``: every join mode keeps one document per id; ``top_k`` cuts the rest."""

    kind = sc.KIND_FUSE

    def before(self, s: Stage, instance: Any, bound: dict[str, Any]) -> dict[str, Any]:
        top_k = bound.get("top_k")
        top_k = getattr(instance, "top_k", None) if top_k is None else top_k
        s.set(top_k=top_k)
        mode = getattr(getattr(instance, "join_mode", None), "value", None)
        lists = bound.get("documents")
        memo: dict[str, Any] = {"mode": mode, "top_k": top_k}
        if isinstance(lists, (list, tuple)) and all(isinstance(item, (list, tuple)) for item in lists):
            inputs = _snapshot([doc for item in lists for doc in item])
            memo["inputs"] = inputs
            s.inputs(inputs)
        else:
            s.finding(f"documents is a {type(lists).__name__}, not a list of lists: inputs not snapshotted")
        if mode == "reciprocal_rank_fusion":
            s.score_kind = sc.SCORE_RRF
        return memo

    def after(self, s: Stage, instance: Any, memo: dict[str, Any], result: Any) -> None:
        docs = _documents(result)
        if docs is None:
            s.finding(f"run returned a {type(result).__name__} without a documents list")
            return
        inputs = memo.get("inputs") or []
        mode = memo.get("mode")
        # concatenate keeps the input objects (and their scores); the other modes rescore copies
        kind = {"reciprocal_rank_fusion": sc.SCORE_RRF, "merge": sc.SCORE_RELATIVE,
                "distribution_based_rank_fusion": sc.SCORE_RELATIVE}.get(mode)
        outputs = _outputs_like_inputs(docs, inputs, kind)
        s.outputs(outputs)
        if "inputs" in memo:
            _exclude_missing(s, inputs, outputs, lambda c: (sc.REASON_BELOW_RANK_CUTOFF, f"top_k={memo['top_k']}"))


class _Ranker(_Handler):
    """Shared by the rankers: snapshot the input documents, adapt the output keeping hops."""

    kind = sc.KIND_RERANK
    output_kind: str | None = sc.SCORE_RERANK

    def snapshot(self, s: Stage, bound: dict[str, Any], memo: dict[str, Any]) -> None:
        docs = bound.get("documents")
        inputs = _snapshot(docs)
        if inputs is None:
            s.finding(f"documents is a {type(docs).__name__}, not a list: inputs not snapshotted")
            return
        memo["inputs"] = inputs
        s.inputs(inputs)

    def outputs(self, s: Stage, memo: dict[str, Any], result: Any, kind: str | None) -> list[Candidate] | None:
        docs = _documents(result)
        if docs is None:
            s.finding(f"run returned a {type(result).__name__} without a documents list")
            return None
        outputs = _outputs_like_inputs(docs, memo.get("inputs") or [], kind)
        s.outputs(outputs)
        return outputs


class _SimilarityRanker(_Ranker):
    """``SentenceTransformersSimilarityRanker``: dedup by id, keep ``score >= score_threshold``, then
    ``top_k``. Its scores are sorted, so when fewer than ``top_k`` survive every other document fell
    below the threshold; otherwise each was at least cut by rank."""

    def before(self, s: Stage, instance: Any, bound: dict[str, Any]) -> dict[str, Any]:
        top_k = bound.get("top_k")
        top_k = getattr(instance, "top_k", None) if top_k is None else top_k
        threshold = bound.get("score_threshold")
        threshold = getattr(instance, "score_threshold", None) if threshold is None else threshold
        s.score_kind = sc.SCORE_RERANK
        s.set(top_k=top_k, threshold=threshold)
        query = bound.get("query")
        if isinstance(query, str):
            s.query(query)
        model = getattr(instance, "model", None)
        if isinstance(model, str) and settings.get().mirror_openinference:
            s.set_attribute(sc.OI_RERANKER_MODEL_NAME, model)
        memo = {"top_k": top_k, "threshold": threshold}
        self.snapshot(s, bound, memo)
        return memo

    def after(self, s: Stage, instance: Any, memo: dict[str, Any], result: Any) -> None:
        outputs = self.outputs(s, memo, result, sc.SCORE_RERANK)
        if outputs is None or "inputs" not in memo:
            return
        top_k, threshold = memo["top_k"], memo["threshold"]

        def reason(candidate: Candidate) -> tuple[str, str | None]:
            if threshold is not None and (top_k is None or len(outputs) < top_k):
                return sc.REASON_BELOW_SCORE_THRESHOLD, f"rerank score < score_threshold={threshold:g}"
            return sc.REASON_BELOW_RANK_CUTOFF, f"top_k={top_k}"

        _exclude_missing(s, memo["inputs"], outputs, reason)


class _LostInTheMiddle(_Ranker):
    """``LostInTheMiddleRanker``: dedup by id, then ``top_k``, then a word budget that keeps documents
    until the running word count reaches ``word_count_threshold`` (the one that reaches it is kept).
    Each exclusion is classified by replaying that rule on the snapshotted inputs."""

    def before(self, s: Stage, instance: Any, bound: dict[str, Any]) -> dict[str, Any]:
        top_k = bound.get("top_k") or getattr(instance, "top_k", None)
        words = bound.get("word_count_threshold") or getattr(instance, "word_count_threshold", None)
        s.set(top_k=top_k)
        if words:
            s.set(budget_limit=words, budget_unit="words")
        memo = {"top_k": top_k, "words": words}
        self.snapshot(s, bound, memo)
        return memo

    def after(self, s: Stage, instance: Any, memo: dict[str, Any], result: Any) -> None:
        outputs = self.outputs(s, memo, result, None)
        if outputs is None or "inputs" not in memo:
            return
        top_k, limit = memo["top_k"], memo["words"]
        unique = list(_best_copies(memo["inputs"]).values())
        reorder = unique[:top_k] if top_k else unique
        reasons: dict[str, tuple[str, str | None]] = {
            c.id: (sc.REASON_BELOW_RANK_CUTOFF, f"top_k={top_k}") for c in unique[len(reorder):]}
        if limit and len(reorder) > 1:
            used = 0
            cut_at = len(reorder)
            for index, candidate in enumerate(reorder):
                text = candidate.content if isinstance(candidate.content, str) else ""
                if text:
                    used += len(text.split())
                if used >= limit:
                    cut_at = index + 1
                    break
            s.set(budget_used=used)
            for candidate in reorder[cut_at:]:
                reasons[candidate.id] = (sc.REASON_BUDGET_EXCEEDED,
                                         f"{used} words >= word_count_threshold={limit} before this document")
        _exclude_missing(s, memo["inputs"], outputs,
                         lambda c: reasons.get(c.id, (sc.REASON_UNEXPLAINED, None)))


class _MetaField(_Ranker):
    """``MetaFieldRanker``: dedup by id; with ``missing_meta="drop"`` a document without the meta
    field is dropped; the rest is ranked (``rrf`` or ``linear_score``) and cut at ``top_k``. When the
    meta values cannot be sorted (or none has the field) Haystack returns the input order instead:
    recorded as ``degraded`` with fallback ``input_order``."""

    def before(self, s: Stage, instance: Any, bound: dict[str, Any]) -> dict[str, Any]:
        top_k = bound.get("top_k")
        top_k = getattr(instance, "top_k", None) if top_k is None else top_k
        weight = bound.get("weight")
        weight = getattr(instance, "weight", None) if weight is None else weight
        memo = {
            "top_k": top_k,
            "weight": weight,
            "mode": bound.get("ranking_mode") or getattr(instance, "ranking_mode", None),
            "missing": bound.get("missing_meta") or getattr(instance, "missing_meta", None),
            "field": getattr(instance, "meta_field", None),
        }
        s.set(top_k=top_k)
        self.snapshot(s, bound, memo)
        return memo

    def after(self, s: Stage, instance: Any, memo: dict[str, Any], result: Any) -> None:
        docs = _documents(result)
        inputs = memo.get("inputs") or []
        ranked = memo["weight"] != 0
        fallback = False
        if ranked and docs:
            originals = {id(c.raw) for c in inputs}
            # a ranked run returns rescored copies; the input objects themselves mean no ranking ran
            fallback = all(id(doc) in originals for doc in docs)
        kind = None
        if ranked and not fallback:
            kind = sc.SCORE_RRF if memo["mode"] == "reciprocal_rank_fusion" else sc.SCORE_RERANK
        s.score_kind = kind
        outputs = self.outputs(s, memo, result, kind)
        if outputs is None or "inputs" not in memo:
            return
        field, drop = memo["field"], memo["missing"] == "drop"
        if fallback:
            present = any((c.metadata or {}).get(field) is not None for c in inputs)
            s.set_status(sc.STATUS_DEGRADED, failure_class="meta_not_sortable" if present else "meta_field_missing",
                         fallback="input_order")

        def reason(candidate: Candidate) -> tuple[str, str | None]:
            meta = candidate.metadata or {}
            if ranked and drop and meta.get(field) is None:
                return sc.REASON_FILTERED_BY_METADATA, f"meta field {field!r} missing (missing_meta=drop)"
            return sc.REASON_BELOW_RANK_CUTOFF, f"top_k={memo['top_k']}"

        _exclude_missing(s, inputs, outputs, reason)


class _Expander(_Handler):
    """``QueryExpander``: each expansion is a new ``expand`` hop whose parent is the query's hop; the
    original query, when kept, keeps its own hop. No expansion at all is a degraded stage (Haystack
    swallows the generator's error and returns the original query)."""

    kind = sc.KIND_QUERY_TRANSFORM

    def before(self, s: Stage, instance: Any, bound: dict[str, Any]) -> dict[str, Any]:
        query = bound.get("query")
        n = bound.get("n_expansions")
        n = getattr(instance, "n_expansions", None) if n is None else n
        if isinstance(query, str):
            s.query(query)
        return {"query": query, "n": n, "original": getattr(instance, "include_original_query", True)}

    def after(self, s: Stage, instance: Any, memo: dict[str, Any], result: Any) -> None:
        queries = result.get("queries") if isinstance(result, Mapping) else None
        if not isinstance(queries, (list, tuple)):
            s.finding(f"run returned a {type(result).__name__} without a queries list")
            return
        query = memo["query"]
        if not isinstance(query, str) or not query.strip():
            s.finding("empty query: nothing expanded")
            return
        expansions = [q for q in queries if isinstance(q, str) and q != query]
        for text in expansions:
            s.add_query_variant(text, transform=sc.TRANSFORM_EXPAND)
        if not expansions:
            s.set_status(sc.STATUS_DEGRADED, failure_class="no_expansion",
                         fallback="original_query" if memo["original"] else "no_query")


class _MultiQuery(_Handler):
    """The multi-query retrievers: a ``fuse`` stage over the inner retriever's per-query results (the
    inner retriever records its own ``retrieve`` stage, a child of this one); each candidate carries
    the hop of the query that found it; duplicates across queries are ``deduplicated``."""

    kind = sc.KIND_FUSE

    def before(self, s: Stage, instance: Any, bound: dict[str, Any]) -> dict[str, Any]:
        queries = bound.get("queries")
        bucket: list[tuple[Any, Any]] = []
        memo: dict[str, Any] = {
            "queries": list(queries) if isinstance(queries, (list, tuple)) else None,
            "bucket": bucket,
            "token": _collector.set((id(instance), bucket)),
        }
        return memo

    def cleanup(self, memo: dict[str, Any]) -> None:
        token = memo.pop("token", None)
        if token is not None:
            try:
                _collector.reset(token)
            except ValueError:  # pragma: no cover - reset from another context
                pass

    def after(self, s: Stage, instance: Any, memo: dict[str, Any], result: Any) -> None:
        docs = _documents(result)
        if docs is None:
            s.finding(f"run returned a {type(result).__name__} without a documents list")
            return
        state = current_pipeline()
        by_query: dict[Any, list[Any]] = {}
        for query, found in list(memo["bucket"]):
            by_query.setdefault(query, []).append(found)
        order = memo["queries"] if memo["queries"] is not None else [q for q, _ in memo["bucket"]]
        inputs: list[Candidate] = []
        for query in order:
            results = by_query.get(query)
            if not results:
                continue
            found = results.pop(0)
            hop = None
            if isinstance(query, str) and state is not None:
                hop = state.untracked_hop(receipt(query).sha256).number
            for candidate in _snapshot(found, with_hops=False) or []:
                candidate.hop = hop
                inputs.append(candidate)
        s.inputs(inputs)
        outputs = _outputs_like_inputs(docs, inputs, None)
        s.outputs(outputs)


class _Pipeline(_Handler):
    """``Pipeline.run`` / ``run_async``: the root that numbers the hops, unless a ragtrail stage is
    already open around it (then that one is the root)."""

    kind = sc.KIND_PIPELINE

    def skip(self, instance: Any) -> bool:
        return current_pipeline() is not None

    def before(self, s: Stage, instance: Any, bound: dict[str, Any]) -> dict[str, Any]:
        text = _pipeline_query(bound.get("data"))
        if text is not None:
            s.query(text)
        return {}


def _pipeline_query(data: Any) -> str | None:
    """The user's query in ``Pipeline.run(data=...)``: flat ``{"query": ...}`` or per component
    ``{"retriever": {"query": ...}}``, first match in order."""
    if not isinstance(data, Mapping):
        return None
    for key in _QUERY_KEYS:
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            return value
    for key in _QUERY_KEYS:
        for inputs in data.values():
            if isinstance(inputs, Mapping):
                value = inputs.get(key)
                if isinstance(value, str) and value.strip():
                    return value
    return None


class _ContextThreadPoolExecutor(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` that runs each task in a copy of the submitting context (as
    ``asyncio.to_thread`` does), so spans opened by the task have the submitter's span as parent."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return super().submit(contextvars.copy_context().run, fn, *args, **kwargs)


def _executor_factory(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    return _ContextThreadPoolExecutor(*args, **kwargs)


def _per_query_sync(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``_run_on_thread(query, ...)``: name the query for the inner stage, hand the result to the
    multi-query stage."""
    query = args[0] if args else kwargs.get("query")
    token = _query_text.set(query) if isinstance(query, str) else None
    try:
        result = wrapped(*args, **kwargs)
    finally:
        if token is not None:
            _query_text.reset(token)
    _collect(instance, query, result)
    return result


async def _per_query_async(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    query = args[0] if args else kwargs.get("query")
    token = _query_text.set(query) if isinstance(query, str) else None
    try:
        result = await wrapped(*args, **kwargs)
    finally:
        if token is not None:
            _query_text.reset(token)
    _collect(instance, query, result)
    return result


def _collect(instance: Any, query: Any, result: Any) -> None:
    target = _collector.get()
    if target is not None and target[0] == id(instance) and isinstance(result, (list, tuple)):
        target[1].append((query, list(result)))


# which handler records which method; the module is patched when it is imported
_TARGETS: tuple[tuple[str, str, _Handler], ...] = (
    (_BM25, "InMemoryBM25Retriever", _TextRetriever()),
    (_EMBEDDING, "InMemoryEmbeddingRetriever", _EmbeddingRetriever()),
    (_JOINER, "DocumentJoiner", _Joiner()),
    (_LITM, "LostInTheMiddleRanker", _LostInTheMiddle()),
    (_META, "MetaFieldRanker", _MetaField()),
    (_ST_RANKER, "SentenceTransformersSimilarityRanker", _SimilarityRanker()),
    (_ST_RANKER_2X, "SentenceTransformersSimilarityRanker", _SimilarityRanker()),
    (_EXPANDER, "QueryExpander", _Expander()),
    (_MQ_TEXT, "MultiQueryTextRetriever", _MultiQuery()),
    (_MQ_EMBEDDING, "MultiQueryEmbeddingRetriever", _MultiQuery()),
    (_PIPELINE, "Pipeline", _Pipeline()),
    (_ASYNC_PIPELINE_2X, "AsyncPipeline", _Pipeline()),
)
_MULTI_QUERY_MODULES = {_MQ_TEXT: "MultiQueryTextRetriever", _MQ_EMBEDDING: "MultiQueryEmbeddingRetriever"}


class HaystackInstrumentor(RagtrailInstrumentor):
    """``opentelemetry-instrument`` entry point ``ragtrail_haystack``; or
    ``HaystackInstrumentor().instrument(tracer_provider=...)`` in code."""

    _instruments = _instruments

    def _patch(self, **kwargs: Any) -> None:
        modules: dict[str, None] = {}
        for module, _, _ in _TARGETS:
            modules[module] = None
        for module in modules:
            self.when_imported(module, functools.partial(self._patch_module, module))

    def _patch_module(self, name: str) -> None:
        """Patch ``name``'s components now that the application imported it."""
        from haystack.dataclasses import Document

        if Document not in self._adapters:
            self.register_adapter(Document, _document_adapter)
        for target_module, cls_name, handler in _TARGETS:
            if target_module != name:
                continue
            self.wrap(name, f"{cls_name}.run", self._sync_wrapper(handler))
            self.wrap(name, f"{cls_name}.run_async", self._async_wrapper(handler))
        if name in _MULTI_QUERY_MODULES:
            cls_name = _MULTI_QUERY_MODULES[name]
            self.wrap(name, f"{cls_name}._run_on_thread", _per_query_sync)
            self.wrap(name, f"{cls_name}._run_one_async", _per_query_async)
            self.wrap(name, "ThreadPoolExecutor", _executor_factory)

    # --- the wrappers: open the stage, snapshot before, call through untouched, record after ---------
    def _open(self, handler: _Handler, instance: Any, wrapped: Any, args: tuple, kwargs: dict) -> tuple[Stage, dict] | None:
        if guard("haystack.skip", handler.skip, instance):
            return None
        s = new_stage(handler.kind, _component(instance), tracer=self.tracer).start()
        memo: dict[str, Any] = {}
        if s.recording:
            bound = guard("haystack.bind", _bind, wrapped, args, kwargs) or {}
            memo = guard("haystack.before", handler.before, s, instance, bound) or {}
        return s, memo

    def _sync_wrapper(self, handler: _Handler) -> Callable[..., Any]:
        def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
            if instance is None or not enabled():
                return wrapped(*args, **kwargs)
            key = _PIPELINE_KEY if handler.kind == sc.KIND_PIPELINE else f"haystack:{id(instance)}"
            with suppressed(key) as inner:
                if inner:
                    return wrapped(*args, **kwargs)
                opened = self._open(handler, instance, wrapped, args, kwargs)
                if opened is None:
                    return wrapped(*args, **kwargs)
                s, memo = opened
                try:
                    result = wrapped(*args, **kwargs)
                except BaseException as exc:
                    guard("haystack.cleanup", handler.cleanup, memo)
                    s.finish(exc)
                    raise
                guard("haystack.cleanup", handler.cleanup, memo)
                if s.recording:
                    guard("haystack.after", handler.after, s, instance, memo, result)
                s.finish()
                return result

        return wrapper

    def _async_wrapper(self, handler: _Handler) -> Callable[..., Any]:
        async def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
            if instance is None or not enabled():
                return await wrapped(*args, **kwargs)
            key = _PIPELINE_KEY if handler.kind == sc.KIND_PIPELINE else f"haystack:{id(instance)}"
            with suppressed(key) as inner:
                if inner:
                    return await wrapped(*args, **kwargs)
                opened = self._open(handler, instance, wrapped, args, kwargs)
                if opened is None:
                    return await wrapped(*args, **kwargs)
                s, memo = opened
                try:
                    result = await wrapped(*args, **kwargs)
                except BaseException as exc:
                    guard("haystack.cleanup", handler.cleanup, memo)
                    s.finish(exc)
                    raise
                guard("haystack.cleanup", handler.cleanup, memo)
                if s.recording:
                    guard("haystack.after", handler.after, s, instance, memo, result)
                s.finish()
                return result

        return wrapper


__all__ = ["HaystackInstrumentor"]
