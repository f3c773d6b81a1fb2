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
- ``MultiVectorRetriever`` (``ParentDocumentRetriever``) → a ``retrieve`` stage whose inputs are the
  child chunks the store found and whose outputs are their parents under the docstore's keys
  (``merge@1``; each chunk ``custom:merged`` into its parent).
- ``RePhraseQueryRetriever`` → the rephrased question its inner retriever is called with as a
  ``rewrite`` hop of the question.
- ``SelfQueryRetriever._prepare_query`` → the LLM's constructed query as a ``rewrite`` hop of the
  question and its filter (translated for the store) as the stage's ``filter``.
- ``VectorStore.similarity_search_with_score`` / ``similarity_search_with_relevance_scores`` called
  directly → a ``retrieve`` stage of their own.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from ragtrail import settings
from ragtrail.contract import semconv as sc
from ragtrail.hooks import Args, Kwargs, argument, bind, run, run_async
from ragtrail.instrumentation._replace import record_replacements
from ragtrail.instrumentation._vectorstore import filter_json, vector_receipt
from ragtrail.instrumentation.langchain._common import (
    CallRegistry,
    ChainRun,
    Family,
    LangChainCall,
    Shared,
    adapt_all,
    chain_run,
    feed,
    metadata_scores,
    remember_identity,
    sink_for,
)
from ragtrail.instrumentation.langchain._mmr import MMR_POOL, mmr_pool, record_mmr, record_mmr_pick
from ragtrail.recorder.candidates import hand_over
from ragtrail.recorder.pipeline import current_pipeline
from ragtrail.recorder.stage import Stage, current_stage

# a sink key: the retriever that opened the sink wrote the query its inner retriever is called with
REWRITES_QUERY = "rewrites_query"
_NOTHING: Mapping[str, Any] = MappingProxyType({})  # the data of a sink that was never opened
# score kinds of ``similarity_search_with_score`` per store (class name); unknown stores: "none"
_WITH_SCORE_KIND = {
    "InMemoryVectorStore": sc.SCORE_SIMILARITY,  # cosine similarity
    "FAISS": sc.SCORE_DISTANCE,
    "Chroma": sc.SCORE_DISTANCE,
    "Qdrant": sc.SCORE_SIMILARITY,
    "QdrantVectorStore": sc.SCORE_SIMILARITY,
    # langchain-postgres: the ordering distance itself for every strategy (cosine and euclidean
    # distance, pgvector's negative inner product): lower is better
    "PGVector": sc.SCORE_DISTANCE,
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


def report_store(call: LangChainCall, s: Stage, store: Any) -> None:
    """The store's size (one store, one count, whichever stage reports it) and, for a FAISS store,
    its docstore ids for the nested faiss stage: one document, one id in both stages."""
    size, identity = store_size(store)
    s.corpus_size(size, store=identity)
    mapping = getattr(store, "index_to_docstore_id", None)
    if identity is not store and isinstance(mapping, dict):
        from ragtrail.instrumentation.faiss import row_ids

        call.enter(row_ids(identity, mapping))


# --- BaseRetriever.invoke / ainvoke: one call per retriever family ---------------------------------
class RetrieverCall(LangChainCall):
    """One ``invoke``/``ainvoke`` of a retriever; the family (a subclass) opens the stage in
    :meth:`start` and records the result in :meth:`record`. What a retriever called straight under
    a chain's pipeline returns is offered to the prompt (``_chains``)."""

    site = "lc.retriever"
    chain: ChainRun | None = None

    def open(self) -> Stage | None:
        run = chain_run.get()
        self.chain = run if run is not None and current_stage() is run.stage else None
        query = argument(self.args, self.kwargs, 0, "input")
        sink = sink_for(self.instance)
        if sink is not None and sink.data.get(REWRITES_QUERY) and isinstance(query, str):
            # the retriever around this one wrote the query it searches with (RePhraseQueryRetriever)
            sink.stage.add_query_variant(query, transform=sc.TRANSFORM_REWRITE)
        return self.start(query)

    def start(self, query: Any) -> Stage:  # pragma: no cover - abstract
        raise NotImplementedError

    def record(self, s: Stage, result: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def after(self, s: Stage, result: Any) -> None:
        self.record(s, result)
        if self.chain is not None and isinstance(result, list):
            self.chain.offer(adapt_all(result))

    def counted_outputs(self, result: Any) -> Any:
        """Sampled out: the documents' number is the outcome (ragtrail reads no fallback here)."""
        return result if isinstance(result, list) else None


class AnyRetriever(RetrieverCall):
    """A retriever of its own kind (a vendor's, the app's, a compression retriever): the scores it
    left where LangChain libraries put them (:func:`metadata_scores`)."""

    def start(self, query: Any) -> Stage:
        instance = self.instance
        k = getattr(instance, "k", None)
        compressor = getattr(instance, "base_compressor", None)  # ContextualCompressionRetriever
        if compressor is not None:
            self.shared.compressor_class(type(compressor))
        return self.open_stage(sc.KIND_RETRIEVE, query=query, top_k=k if isinstance(k, int) else None)

    def record(self, s: Stage, result: Any) -> None:
        if not isinstance(result, (list, tuple)):
            return outputs_as_is(s, result)
        outputs = adapt_all(result)
        metadata_scores(outputs, result)
        s.outputs(hand_over(outputs))


class MultiQueryRetrieval(RetrieverCall):
    """``MultiQueryRetriever``: a fuse stage. The inner retriever reads the index once per query
    variant (each its own retrieve stage on its own hop); this stage merges those results
    (``unique_union``)."""

    def start(self, query: Any) -> Stage:
        s = self.open_stage(sc.KIND_FUSE, query=query)
        self.listen((self.instance,))
        return s

    def record(self, s: Stage, result: Any) -> None:
        """The union of what every query variant found: each hit carries the hop of the variant whose
        sub-retrieval found it first (recorded by those child stages), not the original question's."""
        if not isinstance(result, list):
            return outputs_as_is(s, result)
        state = current_pipeline()
        inner = self.sunk("inner")
        if isinstance(inner, list):
            # every inner hit, duplicates included: the recorder calls the surplus copies deduplicated
            inputs = adapt_all(inner)
            for candidate in inputs:
                candidate.hop = state.candidate_hop(candidate.id) if state is not None else None
            s.inputs(hand_over(inputs))
        outputs = adapt_all(result)
        for candidate in outputs:
            candidate.hop = state.candidate_hop(candidate.id) if state is not None else None
        s.outputs(hand_over(outputs))


class BM25Retrieval(RetrieverCall):
    """``BM25Retriever``: its scores come from the sink on ``rank_bm25``'s ``get_scores``."""

    def start(self, query: Any) -> Stage:
        instance = self.instance
        s = self.open_stage(sc.KIND_RETRIEVE, query=query, top_k=getattr(instance, "k", None), score_kind=sc.SCORE_BM25)
        vectorizer = getattr(instance, "vectorizer", None)
        if s.recording:
            docs = getattr(instance, "docs", None)
            if isinstance(docs, list):
                s.corpus_size(len(docs), store=instance)
            if vectorizer is not None:
                self.shared.patcher.ensure(type(vectorizer), "get_scores", bm25_get_scores)
        self.listen((vectorizer,) if vectorizer is not None else ())
        return s

    def record(self, s: Stage, result: Any) -> None:
        """BM25Retriever returns ``vectorizer.get_top_n`` without scores: the scores array rank_bm25
        computed is in the sink; the top-n are re-derived with rank_bm25's own ``argsort`` and must be
        exactly the returned objects, else the scores are left out (a finding, never a guess)."""
        if not isinstance(result, list):
            return outputs_as_is(s, result)
        scores = self.sunk("bm25_scores")
        docs = getattr(self.instance, "docs", None)
        if scores is None or not isinstance(docs, list) or len(docs) != len(scores):
            s.outputs(hand_over(adapt_all(result)))
            return
        import numpy as np

        if result and not _may_lead(np, scores, docs, result[0]):
            top: Any = ()  # the first document is none of the best-scored: no need to sort them all
        else:
            top = np.argsort(scores)[::-1][: len(result)]
        if len(top) != len(result) or any(docs[i] is not doc for i, doc in zip(top, result, strict=False)):
            s.finding("BM25 scores could not be matched to the returned documents")
            s.outputs(hand_over(adapt_all(result)))
            return
        s.outputs(_scored((doc, float(scores[i])) for i, doc in zip(top, result, strict=False)))


class VectorStoreRetrieval(RetrieverCall):
    """``VectorStoreRetriever``: the store's own search feeds the scores (``similarity``), or the
    relevance scores before and after ``score_threshold`` (``similarity_score_threshold``)."""

    threshold: Any = None
    mmr: Mapping[str, Any] | None = None  # an MMR search's arguments (defaults applied)

    def start(self, query: Any) -> Stage:
        instance = self.instance
        search_kwargs = getattr(instance, "search_kwargs", None) or {}
        search_type = getattr(instance, "search_type", "similarity")
        store = getattr(instance, "vectorstore", None)
        threshold = search_kwargs.get("score_threshold") if search_type == "similarity_score_threshold" else None
        if search_type == "similarity_score_threshold":
            score_kind: str | None = sc.SCORE_SIMILARITY
        elif search_type == "similarity":
            score_kind = with_score_kind(store)
        else:
            score_kind = None
        s = self.open_stage(sc.KIND_RETRIEVE, query=query, top_k=search_kwargs.get("k", 4), threshold=threshold, score_kind=score_kind)
        if s.recording and store is not None:
            report_store(self, s, store)
            self.shared.store_class(type(store))
            if search_type == "mmr":  # the retriever calls the store's MMR search with its search_kwargs
                self.mmr = bind(store.max_marginal_relevance_search, (query,), search_kwargs)
                record_mmr(s, self.mmr)
        self.listen((store,) if store is not None else ())
        self.threshold = threshold
        return s

    def record(self, s: Stage, result: Any) -> None:
        if not isinstance(result, list):
            return outputs_as_is(s, result)
        data = self.sink.data if self.sink is not None else _NOTHING
        if "relevance" in data:
            record_threshold(s, self.threshold, data.get("pre_threshold"), data["relevance"], result)
            return
        if self.mmr is not None:
            store = getattr(self.instance, "vectorstore", None)
            if record_mmr_pick(s, result, data.get(MMR_POOL), self.mmr, with_score_kind(store)):
                return
        _scored_outputs(s, result, data.get("scored"))


class EnsembleRetrieval(RetrieverCall):
    """``EnsembleRetriever``: a fuse stage whose inputs are the union of the sub-retrievers' results
    and whose outputs carry the weighted RRF scores LangChain computes but does not return."""

    def start(self, query: Any) -> Stage:
        s = self.open_stage(sc.KIND_FUSE, query=query, score_kind=sc.SCORE_RRF)
        self.listen((self.instance,))
        return s

    def record(self, s: Stage, result: Any) -> None:
        if not isinstance(result, list):
            return outputs_as_is(s, result)
        captured = self.sunk("rrf")
        if captured is None:
            s.outputs(result)
            return
        doc_lists, fused = captured
        instance = self.instance
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
        if any(a < b for a, b in zip(fused_scores, fused_scores[1:], strict=False)):
            s.finding("recomputed RRF scores disagree with the fused order: scores left out")
            s.outputs(result)
            return
        s.outputs(_scored(zip(result, fused_scores, strict=False)))


class ParentDocumentRetrieval(RetrieverCall):
    """``MultiVectorRetriever`` (``ParentDocumentRetriever``): the vector store finds child chunks and
    the retriever hands on their parents from its docstore. Inputs: the chunks its search returned
    (the sink on the store); outputs: the parents, each under the docstore key the chunks keep in
    ``metadata[id_key]`` (the store's own id, not a content hash), rule ``merge@1`` naming the chunks
    it replaced; each chunk an exclusion ``custom:merged`` (issue 24, principle 2)."""

    def start(self, query: Any) -> Stage:
        store = getattr(self.instance, "vectorstore", None)
        s = self.open_stage(sc.KIND_RETRIEVE, query=query)
        if s.recording and store is not None:
            report_store(self, s, store)
            self.shared.store_class(type(store))
        self.listen((store,) if store is not None else ())
        return s

    def record(self, s: Stage, result: Any) -> None:
        data = self.sink.data if self.sink is not None else _NOTHING
        pairs = data.get("scored", data.get("relevance"))
        if not isinstance(result, list) or not isinstance(pairs, list):
            if isinstance(result, list):
                s.finding("the child chunks behind these parents were not seen (a search the recorder does not hook): recorded without them")
            return outputs_as_is(s, result)
        kind = sc.SCORE_SIMILARITY if "scored" not in data else with_score_kind(getattr(self.instance, "vectorstore", None))
        children = _scored(pairs)
        for child in children:
            child.score_kind = kind
        id_key = getattr(self.instance, "id_key", "doc_id")
        keys = [_metadata_key(doc, id_key) for doc, _ in pairs]
        parent_keys = list(dict.fromkeys(k for k in keys if k is not None))
        parents = adapt_all(result)
        if len(parent_keys) != len(parents):  # a key the docstore did not hold: pairing would be a guess
            s.finding(f"{len(parents)} parents for {len(parent_keys)} keys the chunks name: recorded without the replacement")
            s.inputs(hand_over(children))
            s.outputs(hand_over(parents))
            return
        sources: dict[str, list[str]] = {key: [] for key in parent_keys}
        for child, key in zip(children, keys, strict=True):
            if key is not None:
                sources[key].append(child.id)
        for parent, key in zip(parents, parent_keys, strict=True):
            parent.id = key
            remember_identity(parent)
        record_replacements(s, hand_over(children), hand_over(parents), sources)


class SelfQueryRetrieval(AnyRetriever):
    """``SelfQueryRetriever``: an LLM turns the question into a search query and a metadata filter
    (``_prepare_query``, hooked), and the store is searched with those, not with the question. The
    constructed query is a ``rewrite`` hop of the question, recorded on this stage with the filter
    (the stage's ``filter``), so the store's search finds its hop by its text; the question itself
    is "→ index" only when it was searched (``use_original_query``) (issue 24, principle 3)."""

    def start(self, query: Any) -> Stage:
        s = super().start(query)
        self.listen((self.instance,))
        return s


class RePhraseRetrieval(AnyRetriever):
    """``RePhraseQueryRetriever``: an LLM rephrases the question and the inner retriever searches with
    the rephrased one, which becomes a ``rewrite`` hop of the question on this stage (its inner
    retriever's call records it, through this stage's sink) (issue 24, principle 3)."""

    def start(self, query: Any) -> Stage:
        s = super().start(query)
        inner = getattr(self.instance, "retriever", None)
        self.listen((inner,) if inner is not None else ())
        if self.sink is not None:
            self.sink.data[REWRITES_QUERY] = True
        return s


def prepared_query(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """Around ``SelfQueryRetriever._prepare_query(query, structured_query)``: the query and search
    arguments the LLM's structured query became, on the retriever's stage."""
    result = wrapped(*args, **kwargs)
    sink = sink_for(instance)
    if sink is not None:
        try:
            new_query, search_kwargs = result
            if isinstance(new_query, str) and new_query != argument(args, kwargs, 0, "query"):
                sink.stage.add_query_variant(new_query, transform=sc.TRANSFORM_REWRITE)
            found = filter_json(search_kwargs.get("filter")) if isinstance(search_kwargs, Mapping) else None
            if found is not None:
                sink.stage.set_attribute(sc.STAGE_FILTER, found)
        except Exception as exc:
            sink.stage.record_error("lc.self_query", exc)
    return result


def _metadata_key(doc: Any, id_key: Any) -> str | None:
    metadata = getattr(doc, "metadata", None)
    value = metadata.get(id_key) if isinstance(metadata, dict) else None
    return None if value is None else str(value)


class TimeWeightedRetrieval(RetrieverCall):
    """``TimeWeightedVectorStoreRetriever``: it rescores the recent memories and the salient hits
    (similarity + ``(1 - decay_rate) ** hours`` since last access, + any ``other_score_keys``) and
    keeps the ``k`` best. The score it sorted by is recorded (kind ``rerank``, as LlamaIndex's
    ``TimeWeightedPostprocessor``) on every document it scored, and each one cut names its own
    similarity and recency parts, so a best-similarity document that recency pushed out says so."""

    def start(self, query: Any) -> Stage:
        k = getattr(self.instance, "k", None)
        s = self.open_stage(sc.KIND_RETRIEVE, query=query, top_k=k, score_kind=sc.SCORE_RERANK)
        self.listen((self.instance,))
        return s

    def record(self, s: Stage, result: Any) -> None:
        scored = self.sunk("combined")
        if not isinstance(result, list) or not isinstance(scored, list):
            return outputs_as_is(s, result)
        # inputs in the order the retriever scored them, with the similarity each came with
        # (``None`` for a recent memory the search did not return); outputs with the score it sorted by
        by_object = {id(doc): (doc, relevance, score) for doc, relevance, score in scored}
        ordered = list(by_object.values())
        inputs = _scored((doc, relevance) for doc, relevance, _ in ordered)
        s.inputs(inputs, score_kind=sc.SCORE_SIMILARITY)
        s.outputs(_scored((doc, by_object[id(doc)][2] if id(doc) in by_object else None) for doc in result))
        kept = {id(doc) for doc in result}
        k = getattr(self.instance, "k", None)
        for candidate, (doc, relevance, score) in zip(inputs, ordered, strict=False):
            if id(doc) not in kept:
                s.exclude(candidate.id, sc.REASON_BELOW_RANK_CUTOFF, f"top_k={k} by recency-adjusted score {_parts(score, relevance)}")


def _parts(score: Any, relevance: Any) -> str:
    """``1.29 = similarity 0.29 + recency 1`` (what the time-weighted retriever added up)."""
    try:
        if relevance is None:
            return f"{score:.4g} = recency {score:.4g} (not among the search's hits)"
        return f"{score:.4g} = similarity {relevance:.4g} + recency {score - relevance:.4g}"
    except (TypeError, ValueError):
        return str(score)


def combined_score(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """``_get_combined_score(document, vector_relevance, current_time)``: hand each score the
    time-weighted retriever computes to its stage (never changes it)."""
    score = wrapped(*args, **kwargs)
    sink = sink_for(instance)
    if sink is not None:
        document = argument(args, kwargs, 0, "document")
        relevance = argument(args, kwargs, 1, "vector_relevance")
        sink.data.setdefault("combined", []).append((document, relevance, score))
    return score


# most specific first: a retriever of none of these is AnyRetriever
RETRIEVERS: tuple[Family[RetrieverCall], ...] = (
    Family("MultiVectorRetriever", ParentDocumentRetrieval),
    Family("SelfQueryRetriever", SelfQueryRetrieval),
    Family("RePhraseQueryRetriever", RePhraseRetrieval),
    Family("TimeWeightedVectorStoreRetriever", TimeWeightedRetrieval),
    Family("EnsembleRetriever", EnsembleRetrieval),
    Family("VectorStoreRetriever", VectorStoreRetrieval),
    Family("BM25Retriever", BM25Retrieval),
    Family("MultiQueryRetriever", MultiQueryRetrieval),
)


# --- MultiQueryRetriever.generate_queries called on its own: query hops ----------------------------
class QueryGeneration(LangChainCall):
    """``generate_queries``/``agenerate_queries`` outside a multi-query retrieval: a
    ``query_transform`` stage whose outputs are ``multi_query`` hops."""

    site = "lc.mq"

    def open(self) -> Stage:
        self.question = argument(self.args, self.kwargs, 0, "question")
        return self.open_stage(sc.KIND_QUERY_TRANSFORM, query=self.question)

    def after(self, s: Stage, result: Any) -> None:
        _add_variants(s, self.question, result)


# --- VectorStore searches called directly: a retrieve stage of their own ---------------------------
class ScoredSearch(LangChainCall):
    """``similarity_search_with_score``: the store's own scores, of the kind the store computes."""

    site = "lc.vs"

    def open(self) -> Stage:
        instance, args, kwargs = self.instance, self.args, self.kwargs
        s = self.open_stage(
            sc.KIND_RETRIEVE,
            query=argument(args, kwargs, 0, "query"),
            top_k=argument(args, kwargs, 1, "k", default=4),
            score_kind=with_score_kind(instance),
        )
        if s.recording:
            report_store(self, s, instance)
        self.listen((instance,))
        return s

    def after(self, s: Stage, result: Any) -> None:
        outputs_as_is(s, result)

    def counted_outputs(self, result: Any) -> Any:
        return result if isinstance(result, list) else None


class RelevanceSearch(LangChainCall):
    """``similarity_search_with_relevance_scores``: every hit ``score_threshold`` removed is an
    exclusion (the pre-threshold hits come from the sink)."""

    site = "lc.vs"

    def open(self) -> Stage:
        instance, args, kwargs = self.instance, self.args, self.kwargs
        threshold = kwargs.get("score_threshold")
        s = self.open_stage(
            sc.KIND_RETRIEVE,
            query=argument(args, kwargs, 0, "query"),
            top_k=argument(args, kwargs, 1, "k", default=4),
            threshold=threshold,
            score_kind=sc.SCORE_SIMILARITY,
        )
        if s.recording:
            report_store(self, s, instance)
            self.shared.store_class(type(instance))
        self.listen((instance,))
        self.threshold = threshold
        return s

    def after(self, s: Stage, result: Any) -> None:
        if not isinstance(result, list):
            return outputs_as_is(s, result)
        record_threshold(s, self.threshold, self.sunk("pre_threshold"), result, None)

    def counted_outputs(self, result: Any) -> Any:
        return result if isinstance(result, list) else None


class DocsSearch(LangChainCall):
    """``similarity_search``, ``similarity_search_by_vector``, ``max_marginal_relevance_search``
    (sync and async) called directly: a retrieve stage whose scores are the ones the store's own
    scored search computed beneath it (fed through the sink), of the store's kind; a store that
    computes none beneath (MMR's selection, a store searching its engine straight) gives kind ``none``.
    Under a retriever these calls are the retriever's, not stages of their own; a search calling
    another of them records once (one suppression key per store)."""

    site = "lc.vs"
    by_vector = False

    def open(self) -> Stage:
        instance, args, kwargs = self.instance, self.args, self.kwargs
        first = argument(args, kwargs, 0, "embedding" if self.by_vector else "query")
        s = self.open_stage(sc.KIND_RETRIEVE, query=None if self.by_vector else first, top_k=argument(args, kwargs, 1, "k", default=4))
        if s.recording:
            if self.by_vector and settings.get().query != "off":
                found = vector_receipt(first)
                if found is not None:
                    s.set_attribute(sc.QUERY_VECTOR_DIM, found[0])
                    s.set_attribute(sc.QUERY_VECTOR_SHA256, found[1])
            report_store(self, s, instance)
        self.listen((instance,))
        return s

    def after(self, s: Stage, result: Any) -> None:
        if not isinstance(result, list):
            return outputs_as_is(s, result)
        scored = self.sunk("scored")
        s.score_kind = with_score_kind(self.instance) if isinstance(scored, list) else sc.SCORE_NONE
        _scored_outputs(s, result, scored)


class VectorSearch(DocsSearch):
    by_vector = True


class MmrSearch(DocsSearch):
    """``max_marginal_relevance_search`` called directly: LangChain fetches ``fetch_k`` candidates
    and picks ``k`` by maximal marginal relevance in Python. The trade-off it ran with
    (``lambda_mult``, 1 = relevance only; the method's own default when not passed) is the MMR
    lambda; the pool, where the store's prefetch is observed, is the stage's inputs and each
    candidate it did not pick an exclusion (:mod:`._mmr`), else a finding says they are not recorded."""

    def open(self) -> Stage:
        s = super().open()
        if s.recording:
            record_mmr(s, self.arguments)
        return s

    def after(self, s: Stage, result: Any) -> None:
        if not isinstance(result, list):
            return outputs_as_is(s, result)
        if not record_mmr_pick(s, result, self.sunk(MMR_POOL), self.arguments, with_score_kind(self.instance)):
            super().after(s, result)


# --- the wrappers ------------------------------------------------------------------------------------
class RetrieverWrappers:
    """The wrapt wrappers of the retrieval side, bound to one ``instrument()``'s :class:`Shared`."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self.families = CallRegistry(shared, RETRIEVERS, AnyRetriever)

    def invoke(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        family = self.families.call_for(type(instance))
        if family is None:  # pragma: no cover - every retriever has a family
            return wrapped(*args, **kwargs)
        return run(family(self.shared, wrapped, instance, args, kwargs))

    async def ainvoke(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        family = self.families.call_for(type(instance))
        if family is None:  # pragma: no cover - every retriever has a family
            return await wrapped(*args, **kwargs)
        return await run_async(family(self.shared, wrapped, instance, args, kwargs))

    def ensemble_invoke(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        return run(EnsembleRetrieval(self.shared, wrapped, instance, args, kwargs))

    async def ensemble_ainvoke(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        return await run_async(EnsembleRetrieval(self.shared, wrapped, instance, args, kwargs))

    def generate_queries(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        sink = sink_for(instance)
        if sink is not None:  # inside the multi-query retrieval: hops on its stage
            result = wrapped(*args, **kwargs)
            _add_variants(sink.stage, argument(args, kwargs, 0, "question"), result)
            return result
        return run(QueryGeneration(self.shared, wrapped, instance, args, kwargs))

    async def agenerate_queries(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        sink = sink_for(instance)
        if sink is not None:
            result = await wrapped(*args, **kwargs)
            _add_variants(sink.stage, argument(args, kwargs, 0, "question"), result)
            return result
        return await run_async(QueryGeneration(self.shared, wrapped, instance, args, kwargs))

    def ensure_store_class(self, cls: type) -> None:
        """Patch a vector-store class met at run time (the eager pass only sees classes imported
        before ``instrument()``)."""
        base = self.shared.classes.get("VectorStore")
        skip = (base,) if base is not None else ()
        ensure = self.shared.patcher.ensure
        ensure(cls, "similarity_search_with_score", self.similarity_search_with_score, skip=skip)
        ensure(cls, "asimilarity_search_with_score", self.asimilarity_search_with_score)
        ensure(cls, "_similarity_search_with_relevance_scores", pre_threshold)
        ensure(cls, "_asimilarity_search_with_relevance_scores", apre_threshold)
        ensure(cls, "similarity_search_with_relevance_scores", self.similarity_search_with_relevance_scores)
        ensure(cls, "asimilarity_search_with_relevance_scores", self.asimilarity_search_with_relevance_scores)
        ensure(cls, "similarity_search", self.docs_search(DocsSearch), skip=skip)
        ensure(cls, "asimilarity_search", self.adocs_search(DocsSearch))
        ensure(cls, "max_marginal_relevance_search", self.docs_search(MmrSearch), skip=skip)
        ensure(cls, "amax_marginal_relevance_search", self.adocs_search(MmrSearch))
        ensure(cls, "similarity_search_by_vector", self.docs_search(VectorSearch), skip=skip)
        ensure(cls, "asimilarity_search_by_vector", self.adocs_search(VectorSearch))
        ensure(cls, "similarity_search_with_score_by_vector", scored_by_vector, skip=skip)
        # InMemoryVectorStore's MMR prefetch: the pool (ids, similarities) its pick is made from
        ensure(cls, "_similarity_search_with_score_by_vector", mmr_pool, skip=skip)

    def docs_search(self, family: type[DocsSearch]) -> Callable[..., Any]:
        """A direct search returning Documents: a stage of its own, unless a retriever is searching."""

        def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
            if sink_for(instance) is not None:  # under a retriever (or another search): the caller's
                return wrapped(*args, **kwargs)
            return run(family(self.shared, wrapped, instance, args, kwargs))

        return wrapper

    def adocs_search(self, family: type[DocsSearch]) -> Callable[..., Any]:
        async def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
            if sink_for(instance) is not None:
                return await wrapped(*args, **kwargs)
            return await run_async(family(self.shared, wrapped, instance, args, kwargs))

        return wrapper

    def similarity_search_with_score(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if sink_for(instance) is not None:  # under a retriever: only feeds it scores
            result = wrapped(*args, **kwargs)
            feed(instance, "scored", result)
            return result
        return run(ScoredSearch(self.shared, wrapped, instance, args, kwargs))

    async def asimilarity_search_with_score(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if sink_for(instance) is not None:
            result = await wrapped(*args, **kwargs)
            feed(instance, "scored", result)
            return result
        return await run_async(ScoredSearch(self.shared, wrapped, instance, args, kwargs))

    def similarity_search_with_relevance_scores(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if sink_for(instance) is not None:
            result = wrapped(*args, **kwargs)
            feed(instance, "relevance", result)
            return result
        return run(RelevanceSearch(self.shared, wrapped, instance, args, kwargs))

    async def asimilarity_search_with_relevance_scores(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if sink_for(instance) is not None:
            result = await wrapped(*args, **kwargs)
            feed(instance, "relevance", result)
            return result
        return await run_async(RelevanceSearch(self.shared, wrapped, instance, args, kwargs))


# --- score producers feeding sinks (no stage of their own) ------------------------------------------
def weighted_reciprocal_rank(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    result = wrapped(*args, **kwargs)
    if sink_for(instance) is not None:
        doc_lists = argument(args, kwargs, 0, "doc_lists")
        feed(instance, "rrf", ([list(docs) for docs in doc_lists], result))
    return result


def retrieve_documents(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    result = wrapped(*args, **kwargs)
    feed(instance, "inner", result)
    return result


async def aretrieve_documents(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    result = await wrapped(*args, **kwargs)
    feed(instance, "inner", result)
    return result


def bm25_get_scores(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    result = wrapped(*args, **kwargs)
    feed(instance, "bm25_scores", result)
    return result


def pre_threshold(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    result = wrapped(*args, **kwargs)
    feed(instance, "pre_threshold", result)
    return result


async def apre_threshold(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    result = await wrapped(*args, **kwargs)
    feed(instance, "pre_threshold", result)
    return result


# --- recording helpers ----------------------------------------------------------------------------
def scored_by_vector(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """A store's ``similarity_search_with_score_by_vector`` (no stage): its scores feed the search above."""
    result = wrapped(*args, **kwargs)
    feed(instance, "scored", result)
    return result


def outputs_as_is(s: Stage, result: Any) -> None:
    if isinstance(result, (list, tuple)):
        s.outputs(hand_over(adapt_all(result)))
    else:
        s.finding(f"retriever returned a {type(result).__name__}, not a list")


def _scored(pairs: Any) -> list[Any]:
    """``(Document, score)`` pairs as Candidates (cheaper for the recorder than tuples)."""
    pairs = list(pairs)
    out = adapt_all([doc for doc, _ in pairs])
    for candidate, (_, score) in zip(out, pairs, strict=False):
        candidate.score = score
    return hand_over(out)  # each list is handed to one stage call, unchanged after


def _scored_outputs(s: Stage, result: list[Any], scored: Any) -> None:
    """Pair each returned Document with the score computed for that very object."""
    by_object = {id(doc): score for doc, score in scored} if isinstance(scored, list) else {}
    s.outputs(_scored((doc, by_object.get(id(doc))) for doc in result))


def record_threshold(s: Stage, threshold: Any, pre: Any, post: list[Any], docs: list[Any] | None) -> None:
    """Relevance search: the pre-threshold hits are the stage's inputs, so every hit the threshold
    removed is an exclusion (``below_score_threshold`` with its score)."""
    if isinstance(pre, list) and threshold is not None:
        s.inputs(_scored(pre), score_kind=sc.SCORE_SIMILARITY)
    if docs is None:
        s.outputs(_scored(post))
    else:
        _scored_outputs(s, docs, post)


def _may_lead(np: Any, scores: Any, docs: list[Any], first: Any) -> bool:
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
    for docs, weight in zip(doc_lists, weights, strict=False):
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


__all__ = [
    "RETRIEVERS",
    "AnyRetriever",
    "BM25Retrieval",
    "EnsembleRetrieval",
    "MultiQueryRetrieval",
    "QueryGeneration",
    "RelevanceSearch",
    "RetrieverCall",
    "RetrieverWrappers",
    "ScoredSearch",
    "VectorStoreRetrieval",
    "aretrieve_documents",
    "apre_threshold",
    "bm25_get_scores",
    "pre_threshold",
    "retrieve_documents",
    "weighted_reciprocal_rank",
]
