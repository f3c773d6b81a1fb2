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
from typing import Any, Callable, Iterator

from ragtrail.contract import semconv as sc
from ragtrail.recorder.candidates import Candidate, hand_over
from ragtrail.hooks import argument, component_name, enabled
from ragtrail.recorder.errors import record_internal_error
from ragtrail.instrumentation.langchain._common import (
    LangChainCall,
    LazyPatcher,
    adapt_all,
    feed,
    open_stage,
    remember_identity,
    sink_for,
    run_async,
    metadata_scores,
    run_sync,
    shared_memory,
)
from ragtrail.recorder.pipeline import current_pipeline

REASON_LLM_IRRELEVANT = "custom:llm_judged_irrelevant"
REASON_NOT_RANKED = "custom:not_ranked_by_llm"
REASON_NOT_REPRESENTATIVE = "custom:not_cluster_representative"
REASON_NOTHING_EXTRACTED = "custom:llm_extracted_nothing"
# an LLM replaced the content by an extract of it: the candidate keeps its identity, its new
# content has its own receipt, and derived_from names the content it came from
RULE_LLM_EXTRACT = sc.RULE_LLM_EXTRACT


class CompressorWrappers:
    def __init__(self, tracer: Any, patcher: LazyPatcher, classes: dict[str, type | None]) -> None:
        self.tracer = tracer
        self.patcher = patcher
        self.classes = classes
        self._profiles: dict[type, Callable[[Any], dict[str, Any]] | None] = {}
        self._containers: dict[type, bool] = {}
        self.class_hook: Callable[[type], None] | None = None

    # --- entry points -------------------------------------------------------------------------
    def compress(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        if self.container(instance):
            if current_pipeline() is not None or not enabled():
                return wrapped(*args, **kwargs)
            with self._standalone(instance):
                return wrapped(*args, **kwargs)
        return run_sync(self.tracer, "lc.compress", self._open_compress, wrapped, instance, args, kwargs)

    async def acompress(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        if self.container(instance):
            if current_pipeline() is not None or not enabled():
                return await wrapped(*args, **kwargs)
            with self._standalone(instance):
                return await wrapped(*args, **kwargs)
        return await run_async(self.tracer, "lc.compress", self._open_compress, wrapped, instance, args, kwargs)

    @contextlib.contextmanager
    def _standalone(self, instance: Any) -> Iterator[None]:
        """A compressor pipeline called on its own (no stage around it): a plain span (no ragtrail
        attributes, not a stage) so its steps form one trace, and one identity memory so a Document
        one step rebuilt without ``id`` keeps its id in the next step."""
        with self.tracer.start_as_current_span(f"compress {component_name(instance).rsplit('.', 1)[-1]}"):
            with shared_memory():
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
            is_container = self._containers[cls] = self._is(cls, "DocumentCompressorPipeline")
        if is_container and self.class_hook is not None:
            base = self.classes.get("BaseDocumentCompressor")
            try:
                for inner in getattr(instance, "transformers", None) or ():
                    if base is not None and isinstance(inner, base):
                        self.class_hook(type(inner))
            except Exception as exc:  # pragma: no cover - defensive: never break the host
                record_internal_error("langchain.container", exc)
        return is_container

    def transform(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        if self._profile(type(instance), transformer=True) is None:
            return wrapped(*args, **kwargs)
        return run_sync(self.tracer, "lc.compress", self._open_transform, wrapped, instance, args, kwargs)

    async def atransform(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        if self._profile(type(instance), transformer=True) is None:
            return await wrapped(*args, **kwargs)
        return await run_async(self.tracer, "lc.compress", self._open_transform, wrapped, instance, args, kwargs)

    def cross_encoder_score(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
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

    # --- profiles -------------------------------------------------------------------------------
    def _is(self, cls: type, name: str) -> bool:
        klass = self.classes.get(name)
        return klass is not None and issubclass(cls, klass)

    def _profile(self, cls: type, transformer: bool = False) -> Callable[[Any], dict[str, Any]] | None:
        try:
            return self._profiles[cls]
        except KeyError:
            pass
        profile: Callable[[Any], dict[str, Any]] | None
        if self._is(cls, "CrossEncoderReranker"):
            profile = lambda i: {"kind": sc.KIND_RERANK, "top_k": i.top_n, "score_kind": sc.SCORE_RERANK,  # noqa: E731
                                 "finish": _finish_cross_encoder, "feeds": (i.model,)}
        elif self._is(cls, "EmbeddingsFilter"):
            profile = lambda i: {"kind": sc.KIND_FILTER, "top_k": i.k, "threshold": i.similarity_threshold,  # noqa: E731
                                 "score_kind": sc.SCORE_SIMILARITY, "finish": _finish_embeddings_filter}
        elif self._is(cls, "LLMChainFilter"):
            profile = lambda i: {"kind": sc.KIND_FILTER, "finish": _finish_llm_filter}  # noqa: E731
        elif self._is(cls, "LLMChainExtractor"):
            profile = lambda i: {"kind": sc.KIND_FILTER, "finish": _finish_extractor}  # noqa: E731
        elif self._is(cls, "LLMListwiseRerank"):
            profile = lambda i: {"kind": sc.KIND_RERANK, "top_k": i.top_n, "finish": _finish_listwise,  # noqa: E731
                                 "observe_ranking": True}
        elif self._is(cls, "LongContextReorder"):
            profile = lambda i: {"kind": sc.KIND_RERANK, "finish": _finish_generic}  # noqa: E731
        elif self._is(cls, "EmbeddingsRedundantFilter"):
            profile = lambda i: {"kind": sc.KIND_FILTER, "threshold": i.similarity_threshold,  # noqa: E731
                                 "finish": _finish_redundant}
        elif self._is(cls, "EmbeddingsClusteringFilter"):
            profile = lambda i: {"kind": sc.KIND_FILTER, "finish": _finish_clustering}  # noqa: E731
        elif transformer:
            profile = None  # content transformers (HTML to text, translation) are not retrieval stages
        else:
            profile = _generic_compressor
        self._profiles[cls] = profile
        return profile

    # --- opening a stage ---------------------------------------------------------------------
    def _open_compress(self, call: LangChainCall) -> None:
        args, kwargs = call.args, call.kwargs
        self._open(call, argument(args, kwargs, 0, "documents"), argument(args, kwargs, 1, "query"), transformer=False)

    def _open_transform(self, call: LangChainCall) -> None:
        self._open(call, argument(call.args, call.kwargs, 0, "documents"), None, transformer=True)

    def _open(self, call: LangChainCall, documents: Any, query: Any, transformer: bool) -> None:
        instance = call.instance
        profile_of = self._profile(type(instance), transformer)
        if profile_of is None:  # not a retrieval stage (transform() lets such calls through first)
            return
        profile = profile_of(instance)
        comp = component_name(instance)
        s = open_stage(call, profile["kind"], comp, query=query, top_k=profile.get("top_k"),
                       threshold=profile.get("threshold"), score_kind=profile.get("score_kind"))
        if s.recording and self._is(type(instance), "CrossEncoderReranker"):
            self.patcher.ensure(type(instance.model), "score", self.cross_encoder_score)
        call.listen(profile.get("feeds", ()))
        call.finisher = _finish_with(profile["finish"])
        if not s.recording:
            return
        if profile.get("observe_ranking"):
            call.memo["ranking"] = observer = _new_observer()
            call.set_var(_ranking_observer, observer)
        call.memo.update(component=comp, profile=profile)
        if isinstance(documents, (list, tuple)):
            inputs = adapt_all(documents)  # snapshot now: compressors rebuild and reorder
            metadata_scores(inputs, documents)
            s.inputs(hand_over(inputs))  # the finisher reads only ids, receipts and raw objects of these
            call.memo["inputs"] = inputs
            call.memo["documents"] = list(documents)
        else:
            s.finding(f"documents are a {type(documents).__name__}, not a list: not snapshotted")


class _Recording:
    """An iterator that hands on every item of ``source`` and keeps a copy in ``seen``."""

    __slots__ = ("_source", "_seen")

    def __init__(self, source: Any, seen: list[Any]) -> None:
        self._source = iter(source)
        self._seen = seen

    def __iter__(self) -> "_Recording":
        return self

    def __next__(self) -> Any:
        item = next(self._source)
        self._seen.append(item)
        return item


def _generic_compressor(instance: Any) -> dict[str, Any]:
    top_n = getattr(instance, "top_n", None)
    if isinstance(top_n, int):
        return {"kind": sc.KIND_RERANK, "top_k": top_n, "score_kind": sc.SCORE_RERANK, "finish": _finish_metadata_scores}
    return {"kind": sc.KIND_FILTER, "finish": _finish_relevance_scores}


# --- finishing --------------------------------------------------------------------------------------
def _finish_with(fn: Callable[[LangChainCall, list, list[Candidate]], dict[str, tuple[str, str | None]]]) -> Callable[[LangChainCall, Any], None]:
    """Common tail: outputs recorded by ``fn``, which returns explicit exclusions by input id."""

    def finisher(call: LangChainCall, result: Any) -> None:
        s = call.live
        inputs: list[Candidate] | None = call.memo.get("inputs")
        if not isinstance(result, (list, tuple)):
            s.finding(f"compressor returned a {type(result).__name__}, not a list")
            return
        if inputs is None:
            s.outputs(result)
            return
        outputs = hand_over(adapt_all(result))  # ``fn`` changes them only before recording them
        _carry_identity(inputs, outputs)
        explicit = fn(call, list(result), outputs)
        for ident, (reason, detail) in explicit.items():
            s.exclude(ident, reason, detail)

    return finisher


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


def _finish_generic(call: LangChainCall, result: list, outputs: list[Candidate]) -> dict[str, tuple[str, str | None]]:
    call.live.outputs(outputs)
    return {}


def _finish_relevance_scores(call: LangChainCall, result: list, outputs: list[Candidate]) -> dict[str, tuple[str, str | None]]:
    """A compressor with no ``top_n`` (a reranker configured without one): the scores it left in the
    metadata still count (:func:`metadata_scores`)."""
    metadata_scores(outputs, result)
    call.live.outputs(outputs)
    return {}


def _finish_metadata_scores(call: LangChainCall, result: list, outputs: list[Candidate]) -> dict[str, tuple[str, str | None]]:
    """Rerankers that write ``relevance_score`` into the returned Documents' metadata (Cohere,
    Flashrank, Jina, ...): the candidates' ``rerank`` scores (:func:`metadata_scores`)."""
    metadata_scores(outputs, result)
    call.live.outputs(outputs)
    top_n = call.memo["profile"].get("top_k")
    return {c.id: (sc.REASON_BELOW_RANK_CUTOFF, f"top_k={top_n}") for c in _dropped(call.memo["inputs"], outputs)}


def _finish_cross_encoder(call: LangChainCall, result: list, outputs: list[Candidate]) -> dict[str, tuple[str, str | None]]:
    s = call.live
    top_n = call.memo["profile"]["top_k"]
    scores = call.sink.data.get("scores") if call.sink is not None else None
    documents = call.memo["documents"]
    by_object: dict[int, Any] = {}
    if scores is not None and len(scores) == len(documents):
        by_object = {id(doc): score for doc, score in zip(documents, scores)}
    else:
        s.finding("cross-encoder scores were not observed: outputs recorded without scores")
    for candidate, doc in zip(outputs, result):
        if id(doc) in by_object:
            candidate.score = float(by_object[id(doc)])
            candidate.score_kind = sc.SCORE_RERANK
    s.outputs(outputs)
    explicit: dict[str, tuple[str, str | None]] = {}
    inputs = call.memo["inputs"]
    for candidate in _dropped(inputs, outputs):
        doc = candidate.raw
        detail = f"top_k={top_n}"
        if id(doc) in by_object:
            detail += f" rerank_score={float(by_object[id(doc)]):g}"
        explicit[candidate.id] = (sc.REASON_BELOW_RANK_CUTOFF, detail)
    return explicit


def _finish_embeddings_filter(call: LangChainCall, result: list, outputs: list[Candidate]) -> dict[str, tuple[str, str | None]]:
    """EmbeddingsFilter keeps ``argsort(similarity)[::-1][:k]``, then those above the threshold,
    in similarity order. Fewer than ``min(k, n)`` kept means the threshold cut everything it
    dropped (the ones past rank k score no higher); otherwise rank k cut them."""
    instance = call.instance
    for candidate, doc in zip(outputs, result):
        state = getattr(doc, "state", None)
        if isinstance(state, dict) and "query_similarity_score" in state:
            candidate.score = float(state["query_similarity_score"])
            candidate.score_kind = sc.SCORE_SIMILARITY
    call.live.outputs(outputs)
    k, threshold = instance.k, instance.similarity_threshold
    inputs = call.memo["inputs"]
    if k is None or (threshold is not None and len(outputs) < min(k, len(inputs))):
        reason, detail = sc.REASON_BELOW_SCORE_THRESHOLD, f"similarity <= threshold={threshold:g}"
    else:
        reason, detail = sc.REASON_BELOW_RANK_CUTOFF, f"top_k={k}"
    return {c.id: (reason, detail) for c in _dropped(inputs, outputs)}


def _finish_extractor(call: LangChainCall, result: list, outputs: list[Candidate]) -> dict[str, tuple[str, str | None]]:
    """LLMChainExtractor returns new Documents holding an extract of each input it kept (the input's
    metadata, in input order): each keeps the input's identity, with the transform declared.
    (pydantic copies the metadata dict, so it is matched by equality, in order.)"""
    inputs: list[Candidate] = call.memo["inputs"]
    j = 0
    for candidate, doc in zip(outputs, result):
        metadata = getattr(doc, "metadata", None)
        while j < len(inputs) and getattr(inputs[j].raw, "metadata", None) != metadata:
            j += 1
        if j == len(inputs):
            call.live.finding("an extract could not be matched to the document it came from")
            break
        source = inputs[j]
        j += 1
        candidate.id = source.id
        if source.receipt is not None and candidate.receipt is not None and source.receipt.sha256 != candidate.receipt.sha256:
            candidate.transform_rule = RULE_LLM_EXTRACT
            candidate.derived_from = source.receipt.sha256
        remember_identity(candidate)  # the outer stage meets the extract without an id
    call.live.outputs(outputs)
    return {c.id: (REASON_NOTHING_EXTRACTED, "the LLM found nothing relevant to extract")
            for c in _dropped(inputs, outputs)}


def _finish_llm_filter(call: LangChainCall, result: list, outputs: list[Candidate]) -> dict[str, tuple[str, str | None]]:
    call.live.outputs(outputs)
    return {c.id: (REASON_LLM_IRRELEVANT, "the LLM judged it not relevant to the query")
            for c in _dropped(call.memo["inputs"], outputs)}


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

        def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: Any, parent_run_id: Any = None,
                           **kwargs: Any) -> None:
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


def _finish_listwise(call: LangChainCall, result: list, outputs: list[Candidate]) -> dict[str, tuple[str, str | None]]:
    """What the LLM ranked past ``top_n`` was cut by rank; what it left out of its ranking was never
    ranked (``custom:not_ranked_by_llm``), whatever ``top_n`` is. Without the observed ranking, only
    a result shorter than ``min(top_n, n)`` says the rest were not ranked; else it is not known."""
    call.live.outputs(outputs)
    top_n = call.memo["profile"]["top_k"]
    inputs = call.memo["inputs"]
    dropped = _dropped(inputs, outputs)
    observer = call.memo.get("ranking")
    if observer is not None and observer.observed:
        position = {id(doc): p for p, doc in reversed(list(enumerate(observer.ranking)))}
        explicit: dict[str, tuple[str, str | None]] = {}
        for candidate in dropped:
            p = position.get(id(candidate.raw))
            explicit[candidate.id] = ((sc.REASON_BELOW_RANK_CUTOFF, f"ranked {p + 1} by the LLM, top_k={top_n}")
                                      if p is not None else
                                      (REASON_NOT_RANKED, "left out of the LLM's ranking"))
        return explicit
    if len(outputs) < min(top_n, len(inputs)):
        return {c.id: (REASON_NOT_RANKED, "left out of the LLM's ranking") for c in dropped}
    return {c.id: (sc.REASON_UNEXPLAINED, f"the LLM's whole ranking was not observed: ranked past top_k={top_n} "
                   "or not ranked at all") for c in dropped}


def _finish_redundant(call: LangChainCall, result: list, outputs: list[Candidate]) -> dict[str, tuple[str, str | None]]:
    call.live.outputs(outputs)
    threshold = call.instance.similarity_threshold
    return {c.id: (sc.REASON_DEDUPLICATED, f"embedding similarity > {threshold:g} with a kept document")
            for c in _dropped(call.memo["inputs"], outputs)}


def _finish_clustering(call: LangChainCall, result: list, outputs: list[Candidate]) -> dict[str, tuple[str, str | None]]:
    call.live.outputs(outputs)
    return {c.id: (REASON_NOT_REPRESENTATIVE, "not among the documents closest to a cluster centre")
            for c in _dropped(call.memo["inputs"], outputs)}

