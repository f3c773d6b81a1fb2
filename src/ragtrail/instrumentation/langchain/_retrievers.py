"""Retrievers, rank fusion, multi-query hops and vector-store searches as ragtrail stages.

- ``BaseRetriever.invoke/ainvoke`` → a ``retrieve`` stage for every retriever. Scores LangChain
  computes but drops are recovered through sinks: BM25 (``rank_bm25`` ``get_scores``), vector
  similarity (``similarity_search_with_score``), relevance scores before and after
  ``score_threshold`` (→ ``below_score_threshold`` exclusions).
- ``EnsembleRetriever.invoke/ainvoke`` → a ``fuse`` stage: its sub-retrievers are child
  ``retrieve`` stages; inputs are the union of their results, outputs the fused list with the
  weighted RRF scores LangChain computes but does not return (recomputed with its own formula over
  the very lists it fused, and checked against the order it produced).
- ``MultiQueryRetriever.generate_queries/agenerate_queries`` → query hops (``multi_query``) on the
  retriever's stage; each sub-retrieval finds its hop by its text, so candidates carry the hop
  that found them.
- ``VectorStore.similarity_search_with_score`` / ``similarity_search_with_relevance_scores`` called
  directly → a ``retrieve`` stage of their own.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable

from ragtrail.contract import semconv as sc
from ragtrail.hooks import argument, component_name
from ragtrail.instrumentation.langchain._common import (
    LangChainCall,
    LazyPatcher,
    adapt_all,
    feed,
    open_stage,
    run_async,
    metadata_scores,
    run_sync,
    sink_for,
)
from ragtrail.recorder.candidates import hand_over
from ragtrail.recorder.pipeline import current_pipeline

# score kinds of ``similarity_search_with_score`` per store (class name); unknown stores: "none"
_WITH_SCORE_KIND = {
    "InMemoryVectorStore": sc.SCORE_SIMILARITY,  # cosine similarity
    "FAISS": sc.SCORE_DISTANCE,
    "Chroma": sc.SCORE_DISTANCE,
    "Qdrant": sc.SCORE_SIMILARITY,
    "QdrantVectorStore": sc.SCORE_SIMILARITY,
}


def with_score_kind(store: Any) -> str:
    for klass in type(store).__mro__:
        kind = _WITH_SCORE_KIND.get(klass.__name__)
        if kind is not None:
            return kind
    return sc.SCORE_NONE


def store_size(store: Any) -> tuple[int | None, Any]:
    """The store's size from what it already holds in memory, and its identity for counting it
    once: a FAISS store is its faiss index (the nested faiss stage reports the same index), an
    InMemoryVectorStore its own object. ``(None, store)`` when nothing cheap says the size."""
    inner = getattr(store, "store", None)  # InMemoryVectorStore
    if isinstance(inner, dict):
        return len(inner), store
    index = getattr(store, "index", None)  # FAISS
    total = getattr(index, "ntotal", None)
    if isinstance(total, int):
        return total, index
    return None, store


def report_store(call: LangChainCall, s: Any, store: Any) -> None:
    """The store's size (one store, one count, whichever stage reports it) and, for a FAISS store,
    its docstore ids for the nested faiss stage: one document, one id in both stages."""
    size, identity = store_size(store)
    s.corpus_size(size, store=identity)
    mapping = getattr(store, "index_to_docstore_id", None)
    if identity is not store and isinstance(mapping, dict):
        from ragtrail.instrumentation.faiss import row_ids

        call.enter(row_ids(identity, mapping))


class RetrieverWrappers:
    """The wrappers, bound to the instrumentor's tracer and its lazy patcher."""

    def __init__(self, tracer: Any, patcher: LazyPatcher, classes: dict[str, type | None]) -> None:
        self.tracer = tracer
        self.patcher = patcher
        self.classes = classes
        self._profiles: dict[type, Callable[[LangChainCall, Any, str], None]] = {}
        self.compressor_class_hook: Callable[[type], None] | None = None

    # --- BaseRetriever.invoke / ainvoke ---------------------------------------------------------
    def invoke(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        return run_sync(self.tracer, "lc.retriever", self._open_retriever, wrapped, instance, args, kwargs)

    async def ainvoke(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        return await run_async(self.tracer, "lc.retriever", self._open_retriever, wrapped, instance, args, kwargs)

    def _open_retriever(self, call: LangChainCall) -> None:
        query = argument(call.args, call.kwargs, 0, "input")
        cls = type(call.instance)
        profile = self._profiles.get(cls)
        if profile is None:
            profile = self._profile_for(cls)
            self._profiles[cls] = profile
        profile(call, query, component_name(call.instance))

    def _profile_for(self, cls: type) -> Callable[[LangChainCall, Any, str], None]:
        def is_a(name: str) -> bool:
            klass = self.classes.get(name)
            return klass is not None and issubclass(cls, klass)

        if is_a("EnsembleRetriever"):
            return self._open_ensemble
        if is_a("VectorStoreRetriever"):
            return self._open_vectorstore_retriever
        if is_a("BM25Retriever"):
            return self._open_bm25
        if is_a("MultiQueryRetriever"):
            return self._open_multi_query
        return self._open_generic

    def _open_generic(self, call: LangChainCall, query: Any, comp: str) -> None:
        instance = call.instance
        k = getattr(instance, "k", None)
        compressor = getattr(instance, "base_compressor", None)  # ContextualCompressionRetriever
        if compressor is not None and self.compressor_class_hook is not None:
            self.compressor_class_hook(type(compressor))
        open_stage(call, sc.KIND_RETRIEVE, comp, query=query, top_k=k if isinstance(k, int) else None)
        call.finisher = _outputs_with_metadata_scores

    def _open_multi_query(self, call: LangChainCall, query: Any, comp: str) -> None:
        # a fuse stage: the inner retriever reads the index once per query variant (each its own
        # retrieve stage on its own hop); this stage merges those results (unique_union)
        open_stage(call, sc.KIND_FUSE, comp, query=query)
        call.listen((call.instance,))
        call.finisher = _finish_multi_query

    def _open_bm25(self, call: LangChainCall, query: Any, comp: str) -> None:
        instance = call.instance
        s = open_stage(call, sc.KIND_RETRIEVE, comp, query=query, top_k=getattr(instance, "k", None),
                       score_kind=sc.SCORE_BM25)
        vectorizer = getattr(instance, "vectorizer", None)
        if s.recording:
            docs = getattr(instance, "docs", None)
            if isinstance(docs, list):
                s.corpus_size(len(docs), store=instance)
            if vectorizer is not None:
                self.patcher.ensure(type(vectorizer), "get_scores", self.bm25_get_scores)
        call.listen((vectorizer,) if vectorizer is not None else ())
        call.finisher = _finish_bm25

    def _open_vectorstore_retriever(self, call: LangChainCall, query: Any, comp: str) -> None:
        instance = call.instance
        search_kwargs = getattr(instance, "search_kwargs", None) or {}
        search_type = getattr(instance, "search_type", "similarity")
        store = getattr(instance, "vectorstore", None)
        threshold = search_kwargs.get("score_threshold") if search_type == "similarity_score_threshold" else None
        if search_type == "similarity_score_threshold":
            score_kind = sc.SCORE_SIMILARITY
        elif search_type == "similarity":
            score_kind = with_score_kind(store)
        else:
            score_kind = None
        s = open_stage(call, sc.KIND_RETRIEVE, comp, query=query, top_k=search_kwargs.get("k", 4),
                       threshold=threshold, score_kind=score_kind)
        if s.recording and store is not None:
            report_store(call, s, store)
            self.ensure_store_class(type(store))
        call.listen((store,) if store is not None else ())
        call.finisher = _finish_vectorstore
        call.memo["threshold"] = threshold

    # --- EnsembleRetriever: a fuse stage with recovered RRF scores ------------------------------
    def ensemble_invoke(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        return run_sync(self.tracer, "lc.retriever", self._open_ensemble_call, wrapped, instance, args, kwargs)

    async def ensemble_ainvoke(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        return await run_async(self.tracer, "lc.retriever", self._open_ensemble_call, wrapped, instance, args, kwargs)

    def _open_ensemble_call(self, call: LangChainCall) -> None:
        self._open_ensemble(call, argument(call.args, call.kwargs, 0, "input"), component_name(call.instance))

    def _open_ensemble(self, call: LangChainCall, query: Any, comp: str) -> None:
        open_stage(call, sc.KIND_FUSE, comp, query=query, score_kind=sc.SCORE_RRF)
        call.listen((call.instance,))
        call.finisher = _finish_ensemble

    def weighted_reciprocal_rank(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        result = wrapped(*args, **kwargs)
        if sink_for(instance) is not None:
            doc_lists = argument(args, kwargs, 0, "doc_lists")
            feed(instance, "rrf", ([list(docs) for docs in doc_lists], result))
        return result

    # --- MultiQueryRetriever: query hops, and the merged inner results -----------------------
    def retrieve_documents(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        result = wrapped(*args, **kwargs)
        feed(instance, "inner", result)
        return result

    async def aretrieve_documents(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        result = await wrapped(*args, **kwargs)
        feed(instance, "inner", result)
        return result

    def generate_queries(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        question = argument(args, kwargs, 0, "question")
        sink = sink_for(instance)
        if sink is not None:
            result = wrapped(*args, **kwargs)
            _add_variants(sink.stage, question, result)
            return result
        return run_sync(self.tracer, "lc.mq", self._open_transform, wrapped, instance, args, kwargs)

    async def agenerate_queries(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        question = argument(args, kwargs, 0, "question")
        sink = sink_for(instance)
        if sink is not None:
            result = await wrapped(*args, **kwargs)
            _add_variants(sink.stage, question, result)
            return result
        return await run_async(self.tracer, "lc.mq", self._open_transform, wrapped, instance, args, kwargs)

    def _open_transform(self, call: LangChainCall) -> None:
        question = argument(call.args, call.kwargs, 0, "question")
        open_stage(call, sc.KIND_QUERY_TRANSFORM, component_name(call.instance), query=question)
        call.finisher = lambda c, result: _add_variants(c.stage, question, result)

    # --- score producers feeding sinks ----------------------------------------------------------
    def bm25_get_scores(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        result = wrapped(*args, **kwargs)
        feed(instance, "bm25_scores", result)
        return result

    # --- vector stores ----------------------------------------------------------------------------
    def ensure_store_class(self, cls: type) -> None:
        """Patch a vector-store class met at run time (the eager pass only sees classes imported
        before ``instrument()``)."""
        base = self.classes.get("VectorStore")
        skip = (base,) if base is not None else ()
        self.patcher.ensure(cls, "similarity_search_with_score", self.similarity_search_with_score, skip=skip)
        self.patcher.ensure(cls, "asimilarity_search_with_score", self.asimilarity_search_with_score)
        self.patcher.ensure(cls, "_similarity_search_with_relevance_scores", self.pre_threshold)
        self.patcher.ensure(cls, "_asimilarity_search_with_relevance_scores", self.apre_threshold)
        self.patcher.ensure(cls, "similarity_search_with_relevance_scores", self.similarity_search_with_relevance_scores)
        self.patcher.ensure(cls, "asimilarity_search_with_relevance_scores", self.asimilarity_search_with_relevance_scores)

    def similarity_search_with_score(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        if sink_for(instance) is not None:
            result = wrapped(*args, **kwargs)
            feed(instance, "scored", result)
            return result
        return run_sync(self.tracer, "lc.vs", self._open_with_score, wrapped, instance, args, kwargs)

    async def asimilarity_search_with_score(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        if sink_for(instance) is not None:
            result = await wrapped(*args, **kwargs)
            feed(instance, "scored", result)
            return result
        return await run_async(self.tracer, "lc.vs", self._open_with_score, wrapped, instance, args, kwargs)

    def _open_with_score(self, call: LangChainCall) -> None:
        instance, args, kwargs = call.instance, call.args, call.kwargs
        s = open_stage(call, sc.KIND_RETRIEVE, component_name(instance), query=argument(args, kwargs, 0, "query"),
                       top_k=argument(args, kwargs, 1, "k", default=4), score_kind=with_score_kind(instance))
        if s.recording:
            report_store(call, s, instance)
        call.listen((instance,))
        call.finisher = _outputs_as_is

    def pre_threshold(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        result = wrapped(*args, **kwargs)
        feed(instance, "pre_threshold", result)
        return result

    async def apre_threshold(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        result = await wrapped(*args, **kwargs)
        feed(instance, "pre_threshold", result)
        return result

    def similarity_search_with_relevance_scores(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        if sink_for(instance) is not None:
            result = wrapped(*args, **kwargs)
            feed(instance, "relevance", result)
            return result
        return run_sync(self.tracer, "lc.vs", self._open_relevance, wrapped, instance, args, kwargs)

    async def asimilarity_search_with_relevance_scores(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        if sink_for(instance) is not None:
            result = await wrapped(*args, **kwargs)
            feed(instance, "relevance", result)
            return result
        return await run_async(self.tracer, "lc.vs", self._open_relevance, wrapped, instance, args, kwargs)

    def _open_relevance(self, call: LangChainCall) -> None:
        instance, args, kwargs = call.instance, call.args, call.kwargs
        threshold = kwargs.get("score_threshold")
        s = open_stage(call, sc.KIND_RETRIEVE, component_name(instance), query=argument(args, kwargs, 0, "query"),
                       top_k=argument(args, kwargs, 1, "k", default=4), threshold=threshold, score_kind=sc.SCORE_SIMILARITY)
        if s.recording:
            report_store(call, s, instance)
            self.ensure_store_class(type(instance))
        call.listen((instance,))
        call.finisher = _finish_relevance
        call.memo["threshold"] = threshold


# --- finishers ------------------------------------------------------------------------------------
def _outputs_as_is(call: LangChainCall, result: Any) -> None:
    if isinstance(result, (list, tuple)):
        call.live.outputs(hand_over(adapt_all(result)))
    else:
        call.live.finding(f"retriever returned a {type(result).__name__}, not a list")


def _outputs_with_metadata_scores(call: LangChainCall, result: Any) -> None:
    """A retriever of its own kind (a vendor's, the app's, a compression retriever): the scores it
    left where LangChain libraries put them (:func:`metadata_scores`)."""
    if not isinstance(result, (list, tuple)):
        return _outputs_as_is(call, result)
    outputs = adapt_all(result)
    metadata_scores(outputs, result)
    call.live.outputs(hand_over(outputs))


def _finish_multi_query(call: LangChainCall, result: Any) -> None:
    """The union of what every query variant found: each hit carries the hop of the variant whose
    sub-retrieval found it first (recorded by those child stages), not the original question's."""
    if not isinstance(result, list):
        return _outputs_as_is(call, result)
    state = current_pipeline()
    inner = call.sink.data.get("inner") if call.sink is not None else None
    if isinstance(inner, list):
        # every inner hit, duplicates included: the recorder calls the surplus copies deduplicated
        inputs = adapt_all(inner)
        for candidate in inputs:
            candidate.hop = state.candidate_hop(candidate.id) if state is not None else None
        call.live.inputs(hand_over(inputs))
    outputs = adapt_all(result)
    for candidate in outputs:
        candidate.hop = state.candidate_hop(candidate.id) if state is not None else None
    call.live.outputs(hand_over(outputs))


def _scored(pairs: Any) -> list[Any]:
    """``(Document, score)`` pairs as Candidates (cheaper for the recorder than tuples)."""
    pairs = list(pairs)
    out = adapt_all([doc for doc, _ in pairs])
    for candidate, (_, score) in zip(out, pairs):
        candidate.score = score
    return hand_over(out)  # each list is handed to one stage call, unchanged after


def _scored_outputs(call: LangChainCall, result: list, scored: Any) -> None:
    """Pair each returned Document with the score computed for that very object."""
    by_object = {id(doc): score for doc, score in scored} if isinstance(scored, list) else {}
    call.live.outputs(_scored((doc, by_object.get(id(doc))) for doc in result))


def _finish_vectorstore(call: LangChainCall, result: Any) -> None:
    if not isinstance(result, list):
        return _outputs_as_is(call, result)
    data = call.sink.data if call.sink is not None else {}
    if "relevance" in data:
        _record_threshold(call, data.get("pre_threshold"), data["relevance"], result)
        return
    _scored_outputs(call, result, data.get("scored"))


def _finish_relevance(call: LangChainCall, result: Any) -> None:
    if not isinstance(result, list):
        return _outputs_as_is(call, result)
    data = call.sink.data if call.sink is not None else {}
    _record_threshold(call, data.get("pre_threshold"), result, None)


def _record_threshold(call: LangChainCall, pre: Any, post: list, docs: list | None) -> None:
    """Relevance search: the pre-threshold hits are the stage's inputs, so every hit the threshold
    removed is an exclusion (``below_score_threshold`` with its score)."""
    s = call.live
    if isinstance(pre, list) and call.memo.get("threshold") is not None:
        s.inputs(_scored(pre), score_kind=sc.SCORE_SIMILARITY)
    if docs is None:
        s.outputs(_scored(post))
    else:
        _scored_outputs(call, docs, post)


def _finish_bm25(call: LangChainCall, result: Any) -> None:
    """BM25Retriever returns ``vectorizer.get_top_n`` without scores: the scores array rank_bm25
    computed is in the sink; the top-n are re-derived with rank_bm25's own ``argsort`` and must be
    exactly the returned objects, else the scores are left out (a finding, never a guess)."""
    if not isinstance(result, list):
        return _outputs_as_is(call, result)
    scores = call.sink.data.get("bm25_scores") if call.sink is not None else None
    docs = getattr(call.instance, "docs", None)
    if scores is None or not isinstance(docs, list) or len(docs) != len(scores):
        call.live.outputs(hand_over(adapt_all(result)))
        return
    import numpy as np

    if result and not _may_lead(np, scores, docs, result[0]):
        top: Any = ()  # the first document is none of the best-scored: no need to sort them all
    else:
        top = np.argsort(scores)[::-1][: len(result)]
    if len(top) != len(result) or any(docs[i] is not doc for i, doc in zip(top, result)):
        call.live.finding("BM25 scores could not be matched to the returned documents")
        call.live.outputs(hand_over(adapt_all(result)))
        return
    call.live.outputs(_scored((doc, float(scores[i])) for i, doc in zip(top, result)))


def _may_lead(np: Any, scores: Any, docs: list, first: Any) -> bool:
    """False only when ``first`` is certainly not where ``argsort(scores)[::-1]`` puts first: it
    is none of the documents holding the highest score (a NaN or an odd array: not decided here)."""
    try:
        values = np.asarray(scores)
        if values.dtype.kind != "f" or values.ndim != 1:
            return True
        best = np.flatnonzero(values == values.max())
    except Exception:
        return True
    return len(best) == 0 or any(docs[i] is first for i in best)


def _finish_ensemble(call: LangChainCall, result: Any) -> None:
    s = call.live
    if not isinstance(result, list):
        return _outputs_as_is(call, result)
    captured = call.sink.data.get("rrf") if call.sink is not None else None
    if captured is None:
        s.outputs(result)
        return
    doc_lists, fused = captured
    instance = call.instance
    # inputs: the union of the sub-retrievers' results (by ragtrail identity, first seen first)
    union = []
    seen: set[str] = set()
    for docs in doc_lists:
        for candidate in adapt_all(docs):
            if candidate.id not in seen:
                seen.add(candidate.id)
                union.append(candidate)
    s.inputs(hand_over(union))
    scores = _rrf_scores(instance, doc_lists)
    if scores is None or fused is not result:
        s.finding("RRF scores could not be recomputed for this EnsembleRetriever")
        s.outputs(result)
        return
    key = _rrf_key(instance)
    fused_scores = [scores[key(doc)] for doc in result]
    if any(a < b for a, b in zip(fused_scores, fused_scores[1:])):
        s.finding("recomputed RRF scores disagree with the fused order: scores left out")
        s.outputs(result)
        return
    s.outputs(_scored(zip(result, fused_scores)))


def _rrf_key(instance: Any) -> Callable[[Any], Any]:
    id_key = getattr(instance, "id_key", None)
    if id_key is None:
        return lambda doc: doc.page_content
    return lambda doc: doc.metadata[id_key]


def _rrf_scores(instance: Any, doc_lists: list[list[Any]]) -> dict[Any, float] | None:
    """LangChain's weighted RRF: score(d) = Σ weight_i / (rank_i(d) + c), rank from 1."""
    weights = getattr(instance, "weights", None)
    c = getattr(instance, "c", None)
    if not isinstance(weights, list) or len(weights) != len(doc_lists) or not isinstance(c, (int, float)):
        return None
    key = _rrf_key(instance)
    scores: dict[Any, float] = defaultdict(float)
    for docs, weight in zip(doc_lists, weights):
        for rank, doc in enumerate(docs, start=1):
            scores[key(doc)] += weight / (rank + c)
    return scores


def _add_variants(s: Any, question: Any, result: Any) -> None:
    """Each generated query becomes a hop (``multi_query``) derived from the question; a line that
    repeats the question or an earlier line is the same query, not a new hop."""
    if s is None or not getattr(s, "recording", False):
        return
    if not isinstance(result, list):
        s.finding(f"generated queries are a {type(result).__name__}, not a list")
        return
    seen = {question} if isinstance(question, str) else set()
    for text in result:
        if isinstance(text, str) and text not in seen:
            seen.add(text)
            s.add_query_variant(text, transform=sc.TRANSFORM_MULTI_QUERY)


__all__ = ["RetrieverWrappers"]
