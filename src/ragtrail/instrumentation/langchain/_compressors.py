"""Document compressors and transformers as ``rerank`` / ``filter`` stages, every exclusion with
its reason.

``compress_documents`` / ``acompress_documents`` are abstract on ``BaseDocumentCompressor`` and
defined per subclass, so each subclass is wrapped where it defines them; the base's default
``acompress_documents`` (which runs the sync method in an executor) is wrapped too, and the
re-entrancy guard keeps that to one span. Each class has a *profile*: its stage kind, knobs, how
its scores are recovered and why it drops what it drops:

- ``CrossEncoderReranker``: rerank; the cross-encoder's scores (computed, not returned) come from a
  sink on the model's ``score``; cut → ``below_rank_cutoff`` with the score it got.
- ``EmbeddingsFilter``: filter; rebuilds Documents without ``id`` (identity falls back to content,
  mapped back to the input's id); similarity from the Document state; excluded →
  ``below_score_threshold`` or ``below_rank_cutoff`` (decided from its k/threshold semantics).
- ``LLMChainFilter``: filter; the LLM said no → ``custom:llm_judged_irrelevant``.
- ``LLMListwiseRerank``: rerank; the LLM's whole ranking (before ``[:top_n]``) is observed through a
  LangChain callback handler (a configure hook, as LangSmith's tracer is added): ranked past
  ``top_n`` → ``below_rank_cutoff``; left out of the LLM's ranking → ``custom:not_ranked_by_llm``,
  whatever ``top_n`` is; not observed and not decidable from the result → ``unexplained``.
- ``DocumentCompressorPipeline`` is *not* a stage (see :meth:`CompressorWrappers.container`).
- ``LongContextReorder``: rerank (order only); ``EmbeddingsRedundantFilter`` → ``deduplicated``.
- any other compressor: rerank when it has ``top_n`` (``relevance_score`` metadata as the score),
  filter otherwise.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from ragtrail.contract import semconv as sc
from ragtrail.hooks import Args, Kwargs, argument, component_name, enabled, run, run_async
from ragtrail.instrumentation.langchain._common import (
    CallRegistry,
    Family,
    LangChainCall,
    Shared,
    adapt_all,
    feed,
    metadata_scores,
    remember_identity,
    shared_memory,
    sink_for,
)
from ragtrail.recorder.candidates import Candidate, hand_over
from ragtrail.recorder.errors import record_internal_error
from ragtrail.recorder.pipeline import current_pipeline
from ragtrail.recorder.stage import Stage

REASON_LLM_IRRELEVANT = "custom:llm_judged_irrelevant"
REASON_NOT_RANKED = "custom:not_ranked_by_llm"
REASON_NOT_REPRESENTATIVE = "custom:not_cluster_representative"
REASON_NOTHING_EXTRACTED = "custom:llm_extracted_nothing"
# an LLM replaced the content by an extract of it: the candidate keeps its identity, its new
# content has its own receipt, and derived_from names the content it came from
RULE_LLM_EXTRACT = sc.RULE_LLM_EXTRACT


class Why(NamedTuple):
    """Why a compressor dropped an input: the reason code and its detail."""

    reason: str
    detail: str | None


Dropped = dict[str, Why]  # input id -> why it is not among the outputs


# --- one call per compressor family -----------------------------------------------------------------
class CompressorCall(LangChainCall):
    """One ``compress_documents`` (or a retrieval transformer's ``transform_documents``): a
    ``rerank`` or ``filter`` stage. The inputs are snapshotted when the stage opens (compressors
    rebuild and reorder); after the call the outputs get back the identity of inputs rebuilt
    without an id, and the family's :meth:`finish` records them and says why each dropped input
    was dropped. A family sets ``kind`` and overrides :meth:`start` for its knobs."""

    site = "lc.compress"
    kind = sc.KIND_FILTER
    inputs: list[Candidate] | None = None

    def __init__(self, shared: Shared, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs, *, transforming: bool = False) -> None:
        super().__init__(shared, wrapped, instance, args, kwargs)
        self.transforming = transforming  # a transformer's call takes no query

    def open(self) -> Stage | None:
        args, kwargs = self.args, self.kwargs
        documents = argument(args, kwargs, 0, "documents")
        s = self.start(None if self.transforming else argument(args, kwargs, 1, "query"))
        if s.recording:
            self.snapshot(s, documents)
        return s

    def start(self, query: Any) -> Stage:
        return self.open_stage(self.kind, query=query)

    def snapshot(self, s: Stage, documents: Any) -> None:
        if isinstance(documents, (list, tuple)):
            inputs = adapt_all(documents)  # snapshot now: compressors rebuild and reorder
            metadata_scores(inputs, documents)
            s.inputs(hand_over(inputs))  # finish reads only ids, receipts and raw objects of these
            self.inputs = inputs
        else:
            s.finding(f"documents are a {type(documents).__name__}, not a list: not snapshotted")

    def after(self, s: Stage, result: Any) -> None:
        inputs = self.inputs
        if not isinstance(result, (list, tuple)):
            s.finding(f"compressor returned a {type(result).__name__}, not a list")
            return
        if inputs is None:
            s.outputs(result)
            return
        outputs = hand_over(adapt_all(result))  # ``finish`` changes them only before recording them
        _carry_identity(inputs, outputs)
        for ident, why in self.finish(s, list(result), outputs, inputs).items():
            s.exclude(ident, why.reason, why.detail)

    def finish(self, s: Stage, result: list[Any], outputs: list[Candidate], inputs: list[Candidate]) -> Dropped:
        """Record the outputs; return the dropped inputs this family can explain."""
        s.outputs(outputs)
        return {}


class AnyCompressor(CompressorCall):
    """A compressor of none of the families below: a rerank stage when it has ``top_n``
    (``relevance_score`` metadata as the score, cut → ``below_rank_cutoff``), a filter otherwise
    (the scores it left in the metadata still count)."""

    top_n: Any = None

    def start(self, query: Any) -> Stage:
        top_n = getattr(self.instance, "top_n", None)
        if isinstance(top_n, int):
            self.top_n = top_n
            return self.open_stage(sc.KIND_RERANK, query=query, top_k=top_n, score_kind=sc.SCORE_RERANK)
        return self.open_stage(sc.KIND_FILTER, query=query)

    def finish(self, s: Stage, result: list[Any], outputs: list[Candidate], inputs: list[Candidate]) -> Dropped:
        metadata_scores(outputs, result)
        s.outputs(outputs)
        if self.top_n is None:
            return {}
        return _one_reason(_dropped(inputs, outputs), Why(sc.REASON_BELOW_RANK_CUTOFF, f"top_k={self.top_n}"))


class CrossEncoderRerank(CompressorCall):
    """``CrossEncoderReranker``: the cross-encoder's scores (computed, not returned) come from a sink
    on the model's ``score``; cut → ``below_rank_cutoff`` with the score it got."""

    kind = sc.KIND_RERANK

    def start(self, query: Any) -> Stage:
        instance = self.instance
        self.top_n, model = instance.top_n, instance.model
        s = self.open_stage(self.kind, query=query, top_k=self.top_n, score_kind=sc.SCORE_RERANK)
        if s.recording:
            self.shared.patcher.ensure(type(model), "score", cross_encoder_score)
        self.listen((model,))
        return s

    def snapshot(self, s: Stage, documents: Any) -> None:
        super().snapshot(s, documents)
        if self.inputs is not None:
            self.documents = list(documents)  # the objects the scores are paired with

    def finish(self, s: Stage, result: list[Any], outputs: list[Candidate], inputs: list[Candidate]) -> Dropped:
        scores = self.sunk("scores")
        documents = self.documents
        by_object: dict[int, Any] = {}
        if scores is not None and len(scores) == len(documents):
            by_object = {id(doc): score for doc, score in zip(documents, scores, strict=False)}
        else:
            s.finding("cross-encoder scores were not observed: outputs recorded without scores")
        for candidate, doc in zip(outputs, result, strict=False):
            if id(doc) in by_object:
                candidate.score = float(by_object[id(doc)])
                candidate.score_kind = sc.SCORE_RERANK
        s.outputs(outputs)
        explicit: Dropped = {}
        for candidate in _dropped(inputs, outputs):
            doc = candidate.raw
            detail = f"top_k={self.top_n}"
            if id(doc) in by_object:
                detail += f" rerank_score={float(by_object[id(doc)]):g}"
            explicit[candidate.id] = Why(sc.REASON_BELOW_RANK_CUTOFF, detail)
        return explicit


class EmbeddingsFilterCall(CompressorCall):
    """``EmbeddingsFilter``: rebuilds Documents without ``id`` (identity falls back to content,
    mapped back to the input's id); similarity from the Document state."""

    def start(self, query: Any) -> Stage:
        instance = self.instance
        return self.open_stage(self.kind, query=query, top_k=instance.k, threshold=instance.similarity_threshold, score_kind=sc.SCORE_SIMILARITY)

    def finish(self, s: Stage, result: list[Any], outputs: list[Candidate], inputs: list[Candidate]) -> Dropped:
        """EmbeddingsFilter keeps ``argsort(similarity)[::-1][:k]``, then those above the threshold,
        in similarity order. Fewer than ``min(k, n)`` kept means the threshold cut everything it
        dropped (the ones past rank k score no higher); otherwise rank k cut them."""
        instance = self.instance
        for candidate, doc in zip(outputs, result, strict=False):
            state = getattr(doc, "state", None)
            if isinstance(state, dict) and "query_similarity_score" in state:
                candidate.score = float(state["query_similarity_score"])
                candidate.score_kind = sc.SCORE_SIMILARITY
        s.outputs(outputs)
        k, threshold = instance.k, instance.similarity_threshold
        if k is None or (threshold is not None and len(outputs) < min(k, len(inputs))):
            why = Why(sc.REASON_BELOW_SCORE_THRESHOLD, f"similarity <= threshold={threshold:g}")
        else:
            why = Why(sc.REASON_BELOW_RANK_CUTOFF, f"top_k={k}")
        return _one_reason(_dropped(inputs, outputs), why)


class LLMFilter(CompressorCall):
    """``LLMChainFilter``: the LLM said no → ``custom:llm_judged_irrelevant``."""

    def finish(self, s: Stage, result: list[Any], outputs: list[Candidate], inputs: list[Candidate]) -> Dropped:
        s.outputs(outputs)
        return _one_reason(_dropped(inputs, outputs), Why(REASON_LLM_IRRELEVANT, "the LLM judged it not relevant to the query"))


class LLMExtract(CompressorCall):
    """``LLMChainExtractor``: each kept input becomes an extract of itself (rule ``llm_extract``)."""

    def finish(self, s: Stage, result: list[Any], outputs: list[Candidate], inputs: list[Candidate]) -> Dropped:
        """LLMChainExtractor returns new Documents holding an extract of each input it kept (the input's
        metadata, in input order): each keeps the input's identity, with the transform declared.
        (pydantic copies the metadata dict, so it is matched by equality, in order.)"""
        j = 0
        for candidate, doc in zip(outputs, result, strict=False):
            metadata = getattr(doc, "metadata", None)
            while j < len(inputs) and getattr(inputs[j].raw, "metadata", None) != metadata:
                j += 1
            if j == len(inputs):
                s.finding("an extract could not be matched to the document it came from")
                break
            source = inputs[j]
            j += 1
            candidate.id = source.id
            if source.receipt is not None and candidate.receipt is not None and source.receipt.sha256 != candidate.receipt.sha256:
                candidate.transform_rule = RULE_LLM_EXTRACT
                candidate.derived_from = source.receipt.sha256
            remember_identity(candidate)  # the outer stage meets the extract without an id
        s.outputs(outputs)
        return _one_reason(_dropped(inputs, outputs), Why(REASON_NOTHING_EXTRACTED, "the LLM found nothing relevant to extract"))


class ListwiseRerank(CompressorCall):
    """``LLMListwiseRerank``: the LLM's whole ranking (before ``[:top_n]``) is observed through a
    LangChain callback handler (a configure hook, as LangSmith's tracer is added)."""

    kind = sc.KIND_RERANK
    observer: Any = None

    def start(self, query: Any) -> Stage:
        self.top_n = self.instance.top_n
        s = self.open_stage(self.kind, query=query, top_k=self.top_n)
        if s.recording:
            self.observer = _new_observer()
            self.set_var(_ranking_observer, self.observer)
        return s

    def finish(self, s: Stage, result: list[Any], outputs: list[Candidate], inputs: list[Candidate]) -> Dropped:
        """What the LLM ranked past ``top_n`` was cut by rank; what it left out of its ranking was never
        ranked (``custom:not_ranked_by_llm``), whatever ``top_n`` is. Without the observed ranking, only
        a result shorter than ``min(top_n, n)`` says the rest were not ranked; else it is not known."""
        s.outputs(outputs)
        top_n = self.top_n
        dropped = _dropped(inputs, outputs)
        observer = self.observer
        if observer is not None and observer.observed:
            position = {id(doc): p for p, doc in reversed(list(enumerate(observer.ranking)))}
            explicit: Dropped = {}
            for candidate in dropped:
                p = position.get(id(candidate.raw))
                explicit[candidate.id] = (
                    Why(sc.REASON_BELOW_RANK_CUTOFF, f"ranked {p + 1} by the LLM, top_k={top_n}")
                    if p is not None
                    else Why(REASON_NOT_RANKED, "left out of the LLM's ranking")
                )
            return explicit
        if len(outputs) < min(top_n, len(inputs)):
            return _one_reason(dropped, Why(REASON_NOT_RANKED, "left out of the LLM's ranking"))
        why = Why(sc.REASON_UNEXPLAINED, f"the LLM's whole ranking was not observed: ranked past top_k={top_n} or not ranked at all")
        return _one_reason(dropped, why)


class Reorder(CompressorCall):
    """``LongContextReorder``: a rerank stage that changes the order only."""

    kind = sc.KIND_RERANK


class RedundantFilter(CompressorCall):
    """``EmbeddingsRedundantFilter``: a dropped document was too similar to a kept one → ``deduplicated``."""

    def start(self, query: Any) -> Stage:
        return self.open_stage(self.kind, query=query, threshold=self.instance.similarity_threshold)

    def finish(self, s: Stage, result: list[Any], outputs: list[Candidate], inputs: list[Candidate]) -> Dropped:
        s.outputs(outputs)
        threshold = self.instance.similarity_threshold
        return _one_reason(_dropped(inputs, outputs), Why(sc.REASON_DEDUPLICATED, f"embedding similarity > {threshold:g} with a kept document"))


class ClusteringFilter(CompressorCall):
    """``EmbeddingsClusteringFilter``: a dropped document was no cluster's representative."""

    def finish(self, s: Stage, result: list[Any], outputs: list[Candidate], inputs: list[Candidate]) -> Dropped:
        s.outputs(outputs)
        return _one_reason(_dropped(inputs, outputs), Why(REASON_NOT_REPRESENTATIVE, "not among the documents closest to a cluster centre"))


# most specific first; a compressor of none of them is AnyCompressor, a transformer of none is no stage
COMPRESSORS: tuple[Family[CompressorCall], ...] = (
    Family("CrossEncoderReranker", CrossEncoderRerank),
    Family("EmbeddingsFilter", EmbeddingsFilterCall),
    Family("LLMChainFilter", LLMFilter),
    Family("LLMChainExtractor", LLMExtract),
    Family("LLMListwiseRerank", ListwiseRerank),
    Family("LongContextReorder", Reorder),
    Family("EmbeddingsRedundantFilter", RedundantFilter),
    Family("EmbeddingsClusteringFilter", ClusteringFilter),
)


# --- the wrappers ------------------------------------------------------------------------------------
class CompressorWrappers:
    """The wrapt wrappers of the compressors and retrieval transformers, bound to one
    ``instrument()``'s :class:`Shared`."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self.compressors = CallRegistry(shared, COMPRESSORS, AnyCompressor)
        # content transformers (HTML to text, translation) are not retrieval stages
        self.transformers = CallRegistry(shared, COMPRESSORS, None)
        self._containers: dict[type, bool] = {}

    def compress(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if self.container(instance):
            if current_pipeline() is not None or not enabled():
                return wrapped(*args, **kwargs)
            with self._standalone(instance):
                return wrapped(*args, **kwargs)
        family = self.compressors.call_for(type(instance))
        if family is None:  # pragma: no cover - every compressor has a family
            return wrapped(*args, **kwargs)
        return run(family(self.shared, wrapped, instance, args, kwargs))

    async def acompress(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if self.container(instance):
            if current_pipeline() is not None or not enabled():
                return await wrapped(*args, **kwargs)
            with self._standalone(instance):
                return await wrapped(*args, **kwargs)
        family = self.compressors.call_for(type(instance))
        if family is None:  # pragma: no cover - every compressor has a family
            return await wrapped(*args, **kwargs)
        return await run_async(family(self.shared, wrapped, instance, args, kwargs))

    def transform(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        family = self.transformers.call_for(type(instance))
        if family is None:
            return wrapped(*args, **kwargs)
        return run(family(self.shared, wrapped, instance, args, kwargs, transforming=True))

    async def atransform(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        family = self.transformers.call_for(type(instance))
        if family is None:
            return await wrapped(*args, **kwargs)
        return await run_async(family(self.shared, wrapped, instance, args, kwargs, transforming=True))

    @contextlib.contextmanager
    def _standalone(self, instance: Any) -> Iterator[None]:
        """A compressor pipeline called on its own (no stage around it): a plain span (no ragtrail
        attributes, not a stage) so its steps form one trace, and one identity memory so a Document
        one step rebuilt without ``id`` keeps its id in the next step."""
        with self.shared.tracer.start_as_current_span(f"compress {component_name(instance).rsplit('.', 1)[-1]}"), shared_memory():
            yield

    def container(self, instance: Any) -> bool:
        """True for a ``DocumentCompressorPipeline``, which is deliberately not a stage.

        It decides nothing of its own: it hands the documents to each inner compressor or
        transformer in turn and returns what the last one returned. Those inner steps are the
        stages (children of whatever span is current, e.g. the ContextualCompressionRetriever's
        ``retrieve``), and they chain: each one's inputs are the previous one's outputs, with
        identity carried across Documents rebuilt without ``id`` by the pipeline-wide memory in
        ``_common``. A container stage would only repeat their exclusions (the manifest would then
        list each one twice) and cost a third of the request's events. Its wrapper only makes
        sure the classes inside are wrapped (a user's compressor first met here), then calls
        through."""
        cls = type(instance)
        is_container = self._containers.get(cls)
        if is_container is None:
            is_container = self._containers[cls] = self.shared.is_a(cls, "DocumentCompressorPipeline")
        if is_container:
            base = self.shared.classes.get("BaseDocumentCompressor")
            try:
                for inner in getattr(instance, "transformers", None) or ():
                    if base is not None and isinstance(inner, base):
                        self.shared.compressor_class(type(inner))
            except Exception as exc:  # pragma: no cover - defensive: never break the host
                record_internal_error("langchain.container", exc)
        return is_container

    def ensure_class(self, klass: type) -> None:
        """Wrap a compressor class's own ``compress_documents``/``acompress_documents`` (also for
        classes first met at run time, e.g. a user's compressor inside a compression retriever)."""
        try:
            base = self.shared.classes.get("BaseDocumentCompressor")
            ensure = self.shared.patcher.ensure
            ensure(klass, "compress_documents", self.compress, skip=() if base is None else (base,))
            ensure(klass, "acompress_documents", self.acompress)
        except Exception as exc:  # pragma: no cover - defensive
            record_internal_error("langchain.ensure_compressor", exc)


def cross_encoder_score(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """Around a cross-encoder's ``score`` under a CrossEncoderReranker stage: its scores into the sink."""
    result = wrapped(*args, **kwargs)
    if sink_for(instance) is None:
        return result
    if hasattr(result, "__len__"):
        feed(instance, "scores", result)
        return result
    # an iterator (HuggingFaceCrossEncoder returns ``map`` for two-logit models): record the
    # scores as the library consumes them, never consuming them ahead of it
    seen: list[Any] = []
    feed(instance, "scores", seen)
    return _Recording(result, seen)


class _Recording:
    """An iterator that hands on every item of ``source`` and keeps a copy in ``seen``."""

    __slots__ = ("_source", "_seen")

    def __init__(self, source: Any, seen: list[Any]) -> None:
        self._source = iter(source)
        self._seen = seen

    def __iter__(self) -> _Recording:
        return self

    def __next__(self) -> Any:
        item = next(self._source)
        self._seen.append(item)
        return item


# --- finishing --------------------------------------------------------------------------------------
def _one_reason(dropped: list[Candidate], why: Why) -> Dropped:
    """Every dropped input with one reason (one ``Why`` shared, not one per dropped document)."""
    return dict.fromkeys([c.id for c in dropped], why)


def _carry_identity(inputs: list[Candidate], outputs: list[Candidate]) -> None:
    """An output Document rebuilt without its id takes the id of an input with the same content
    that no other output claimed (in input order), so two inputs with equal content stay two."""
    rebuilt = [c for c in outputs if getattr(c.raw, "id", None) in (None, "") and c.receipt is not None]
    if not rebuilt:
        return
    waiting: dict[str, list[str]] = {}
    for candidate in inputs:
        if candidate.receipt is not None:
            waiting.setdefault(candidate.receipt.sha256, []).append(candidate.id)
    rebuilt_objects = {id(c) for c in rebuilt}
    taken = Counter(c.id for c in outputs if id(c) not in rebuilt_objects)
    for candidate in rebuilt:
        stamped = candidate.receipt  # never None here: ``rebuilt`` keeps only candidates with one
        queue = waiting.get(stamped.sha256) if stamped is not None else None
        while queue:
            ident = queue.pop(0)
            if taken[ident] == 0:
                candidate.id = ident
                taken[ident] += 1
                break
            taken[ident] -= 1


def _dropped(inputs: list[Candidate], outputs: list[Candidate]) -> list[Candidate]:
    remaining = Counter(c.id for c in outputs)
    dropped = []
    for candidate in inputs:
        if remaining[candidate.id] > 0:
            remaining[candidate.id] -= 1
        else:
            dropped.append(candidate)
    return dropped


_ranking_observer: contextvars.ContextVar[Any] = contextvars.ContextVar("ragtrail_lc_ranking", default=None)
_hook_registered = False


def register_ranking_hook() -> None:
    """Let LangChain add the open listwise stage's observer to every callback manager configured
    while it is set (``register_configure_hook``: how LangSmith's tracer joins a run). Once per process."""
    global _hook_registered
    if _hook_registered:
        return
    from langchain_core.tracers.context import register_configure_hook

    register_configure_hook(_ranking_observer, True)
    _hook_registered = True


def _observer_class() -> type:
    from langchain_core.callbacks import BaseCallbackHandler

    class RankingObserver(BaseCallbackHandler):
        """Keeps the output of the first chain run started inside the compressor (its ``reranker``
        runnable): the LLM's whole ranking, before ``[:top_n]``. Reads only; never raises."""

        run_inline = True
        raise_error = False

        def __init__(self) -> None:
            self.started: set[Any] = set()
            self.root: Any = None
            self.ranking: Any = None
            self.observed = False

        def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: Any, parent_run_id: Any = None, **kwargs: Any) -> None:
            if self.root is None and parent_run_id not in self.started:
                self.root = run_id
            self.started.add(run_id)

        def on_chain_end(self, outputs: Any, *, run_id: Any, **kwargs: Any) -> None:
            if run_id == self.root and not self.observed:
                self.ranking = list(outputs) if isinstance(outputs, (list, tuple)) else None
                self.observed = self.ranking is not None

    return RankingObserver


_observer_type: type | None = None


def _new_observer() -> Any:
    global _observer_type
    if _observer_type is None:
        register_ranking_hook()
        _observer_type = _observer_class()
    return _observer_type()


__all__ = [
    "COMPRESSORS",
    "AnyCompressor",
    "ClusteringFilter",
    "CompressorCall",
    "CompressorWrappers",
    "CrossEncoderRerank",
    "EmbeddingsFilterCall",
    "LLMExtract",
    "LLMFilter",
    "ListwiseRerank",
    "RedundantFilter",
    "Reorder",
    "Why",
    "cross_encoder_score",
    "register_ranking_hook",
]
