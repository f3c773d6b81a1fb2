"""Retrieval-side stages: ``BaseRetriever.retrieve/aretrieve``, ``QueryFusionRetriever`` (query
generation, per-query retrievals, fusion) and ``BaseQueryTransform.run`` (HyDE, decompose, ...).

Query hops: a transform records each text it produced as a new hop (HyDE's hypothetical document as
``hyde``, the fusion retriever's generated queries as ``multi_query``). A retrieve stage records the
query that actually hit the index: for an embedding retriever that is the bundle's
``embedding_strs`` (HyDE leaves ``query_str`` untouched), for anything else ``query_str``.
"""

from __future__ import annotations

from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import receipt
from ragtrail.hooks import Args, Kwargs, active_call, argument
from ragtrail.instrumentation._replace import record_replacements
from ragtrail.instrumentation._vectorstore import filter_json
from ragtrail.recorder.candidates import Candidate, adapt, is_candidate_list
from ragtrail.recorder.pipeline import current_pipeline
from ragtrail.recorder.stage import Stage

from ._calls import LlamaCall
from ._nodes import embedded_texts, node_id, query_text

_FUSION_SCORE_KINDS = {
    "reciprocal_rerank": sc.SCORE_RRF,
    "relative_score": sc.SCORE_RELATIVE,
    "dist_based_score": sc.SCORE_RELATIVE,
    "simple": None,  # the max of the input scores: keeps their kind
}
_class_flags: dict[type, tuple[bool, bool, bool]] = {}


def _flags(cls: type) -> tuple[bool, bool, bool]:
    """(is QueryFusionRetriever, embeds the query, BM25-scored) for a retriever class, cached."""
    try:
        return _class_flags[cls]
    except KeyError:
        pass
    names = {(c.__module__, c.__name__) for c in cls.__mro__}
    fusion = ("llama_index.core.retrievers.fusion_retriever", "QueryFusionRetriever") in names
    vector = ("llama_index.core.indices.vector_store.retrievers.retriever", "VectorIndexRetriever") in names
    bm25 = any("bm25" in c.__name__.lower() for c in cls.__mro__)
    _class_flags[cls] = (fusion, vector, bm25)
    return _class_flags[cls]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _hop_of(text: str) -> int | None:
    state = current_pipeline()
    if state is None:
        return None
    return state.untracked_hop(receipt(text).sha256).number


def _known(text: str) -> bool:
    state = current_pipeline()
    if state is None:
        return False
    return state.lookup_hop(receipt(text).sha256) is not None


def _nothing(candidate_id: str) -> None:
    return None


def record_kept(s: Stage, items: list[Any], ids: list[str]) -> None:
    """Record the outputs of a stage that does not rescore: each keeps the score kind an earlier
    stage of this pipeline gave it (a filter or a reorder does not change what a score means).
    The common case, one kind for all, hands the items straight to the recorder."""
    state = current_pipeline()
    known = state.candidate_score_kind if state is not None else _nothing
    kinds = {known(i) for i in ids}
    if len(kinds) <= 1:
        s.outputs(items, score_kind=next(iter(kinds), None))
        return
    outputs = []
    for item, ident in zip(items, ids, strict=False):
        candidate = adapt(item)
        if candidate.score_kind is None:
            candidate.score_kind = known(ident)
        outputs.append(candidate)
    s.outputs(outputs)


class RetrieveCall(LlamaCall):
    """One ``retrieve``/``aretrieve``: a ``retrieve`` stage, or a ``fuse`` stage for QueryFusionRetriever
    (whose per-query retrievals are child ``retrieve`` stages)."""

    site = "llama_index.retrieve"
    merge_inputs: list[Candidate] | None = None

    def open(self) -> Stage:
        self.merged: dict[str, str] = {}  # AutoMergingRetriever: node id -> the parent it merged into
        inst = self.instance
        self.fusion, self.vector, bm25 = _flags(type(inst))
        top_k = _int(getattr(inst, "similarity_top_k", None))
        if self.fusion:
            mode = getattr(inst, "mode", None)
            self.mode = str(getattr(mode, "value", mode))
            return self.new_stage(sc.KIND_FUSE, top_k=top_k, score_kind=_FUSION_SCORE_KINDS.get(self.mode))
        return self.new_stage(sc.KIND_RETRIEVE, top_k=top_k, score_kind=sc.SCORE_BM25 if bm25 else sc.SCORE_SIMILARITY)

    def before(self, s: Stage) -> None:
        query = argument(self.args, self.kwargs, 0, "str_or_query_bundle", "query_bundle")
        text = query_text(query)
        if self.vector:
            texts = embedded_texts(query)
            if texts and texts != [text]:
                primary = next((t for t in texts if t != text), texts[0])
                s.query(primary)
                if len(texts) > 1:
                    s.set_attribute(sc.QUERY_EMBEDDING_HOPS, [_hop_of(t) for t in texts])
            else:
                s.query(text)
            self._store_facts(s)
        else:
            s.query(text)
            self._list_index_size(s)

    def _list_index_size(self, s: Stage) -> None:
        """A ``SummaryIndex`` (``IndexList``) retriever searches the index's own node list, held in
        memory: its length is the corpus, known for free (the plain retriever hands on all of it)."""
        index = getattr(self.instance, "_index", None)
        struct = getattr(index, "index_struct", None)
        nodes = getattr(struct, "nodes", None)
        if type(struct).__name__ == "IndexList" and isinstance(nodes, list):
            s.corpus_size(len(nodes), store=index)

    def _store_facts(self, s: Stage) -> None:
        """Corpus size (for the coverage statement) and the metadata filter the store applied."""
        inst = self.instance
        store = getattr(inst, "_vector_store", None)
        data = getattr(store, "data", None)
        embeddings = getattr(data, "embedding_dict", None)
        if isinstance(embeddings, dict):
            s.corpus_size(len(embeddings), store=store)
        filters = getattr(inst, "_filters", None)
        if filters is not None:
            # canonical JSON (sorted keys, unset fields left out), as for every store's filter
            found = filter_json(filters)
            if found is not None:
                s.set_attribute(sc.STAGE_FILTER, found)

    def record_fusion_inputs(self, results: Any) -> None:
        """Called by the fusion hook with ``{(query_str, retriever_index): nodes}`` before the fusion
        overwrites the scores in place; each input carries the hop of the query that found it."""
        s = self.stage
        if s is None or not s.recording or not isinstance(results, dict):
            return
        candidates: list[Candidate] = []
        hops: dict[str, int | None] = {}
        for key, nodes in results.items():
            query = key[0] if isinstance(key, tuple) and key else key
            if isinstance(query, str) and query not in hops:
                hops[query] = _hop_of(query)
            for node in nodes or ():
                candidate = adapt(node)
                if candidate.hop is None and isinstance(query, str):
                    candidate.hop = hops[query]
                candidates.append(candidate)
        s.inputs(candidates)

    def record_constructed(self, built: Any) -> None:
        """An auto-retriever searches with the query and filter its LLM wrote, not the question: the
        query is a ``rewrite`` hop of the question on this stage (its inner retriever finds that hop
        by its text, and the question is "→ index" only if it was searched), the filter this stage's."""
        s = self.stage
        if s is None or not s.recording or not isinstance(built, tuple) or len(built) != 2:
            return
        retriever, bundle = built
        text = query_text(bundle)
        if isinstance(text, str) and text != query_text(argument(self.args, self.kwargs, 0, "str_or_query_bundle", "query_bundle")):
            s.add_query_variant(text, transform=sc.TRANSFORM_REWRITE)
        filters = getattr(retriever, "_filters", None)
        found = filter_json(filters) if filters is not None else None
        if found is not None:
            s.set_attribute(sc.STAGE_FILTER, found)

    def record_merge_input(self, nodes: Any) -> None:
        """Called by the merge hook on AutoMergingRetriever's first merging round: the nodes its
        inner retriever found are this stage's inputs (snapshotted: the rounds rebuild the list)."""
        if self.merge_inputs is None and is_candidate_list(nodes):
            self.merge_inputs = [adapt(n) for n in nodes]

    def record_merges(self, before: Any, after: Any) -> None:
        """Called by the merge hook after one ``_get_parents_and_merge`` round: every node that left
        the list for the parent that came into it is merged into that parent."""
        if not is_candidate_list(before) or not is_candidate_list(after):
            return
        added = {node_id(n) for n in after} - {node_id(n) for n in before}
        kept = {node_id(n) for n in after}
        for node in before:
            parent = getattr(getattr(getattr(node, "node", None), "parent_node", None), "node_id", None)
            ident = node_id(node)
            if ident not in kept and parent in added:
                self.merged[ident] = str(parent)

    def after(self, s: Stage, result: Any) -> None:
        if not is_candidate_list(result):
            s.finding(f"retriever returned a {type(result).__name__}, not a list: outputs not recorded")
            return
        if self.merge_inputs is not None:
            self._record_merged(s, result)
        elif self.fusion and _FUSION_SCORE_KINDS.get(self.mode, sc.SCORE_NONE) is None:
            record_kept(s, result, [node_id(n) for n in result])
        else:
            s.outputs(result)

    def _record_merged(self, s: Stage, result: list[Any]) -> None:
        """AutoMergingRetriever: its inner retriever's nodes in, the merged list out; each output
        that replaced found nodes names them (``merge@1``; a parent merged again names its leaves)."""
        inputs = self.merge_inputs or []
        sources: dict[str, list[str]] = {}
        for leaf in inputs:
            target, seen = leaf.id, {leaf.id}
            while target in self.merged and self.merged[target] not in seen:
                target = self.merged[target]
                seen.add(target)
            if target != leaf.id:
                sources.setdefault(target, []).append(leaf.id)
        record_replacements(s, inputs, [adapt(n) for n in result], sources)

    def counted_outputs(self, result: Any) -> Any:
        """Sampled out: the nodes' number is the outcome (ragtrail reads no fallback here)."""
        return result if is_candidate_list(result) else None


def fusion_hook(wrapped: Any, instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """Around ``QueryFusionRetriever._*_fusion(results)``: snapshot the per-query results as the
    fuse stage's inputs, then run the fusion untouched."""
    call = active_call(instance)
    if isinstance(call, RetrieveCall):
        try:
            call.record_fusion_inputs(argument(args, kwargs, 0, "results"))
        except Exception as exc:
            call.error("fusion_inputs", exc)
    return wrapped(*args, **kwargs)


def try_merging_hook(wrapped: Any, instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """Around ``AutoMergingRetriever._try_merging(nodes)``: the first round's nodes are the stage's inputs."""
    call = active_call(instance)
    if isinstance(call, RetrieveCall):
        try:
            call.record_merge_input(argument(args, kwargs, 0, "nodes"))
        except Exception as exc:
            call.error("merge_input", exc)
    return wrapped(*args, **kwargs)


def merge_hook(wrapped: Any, instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """Around ``AutoMergingRetriever._get_parents_and_merge(nodes)``: which nodes merged into which parent."""
    result = wrapped(*args, **kwargs)
    call = active_call(instance)
    if isinstance(call, RetrieveCall):
        try:
            merged = result[0] if isinstance(result, tuple) and result else None
            call.record_merges(argument(args, kwargs, 0, "nodes"), merged)
        except Exception as exc:
            call.error("merges", exc)
    return result


def auto_spec_hook(wrapped: Any, instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """Around ``VectorIndexAutoRetriever._build_retriever_from_spec(spec)``: the retriever and query
    the LLM's spec became (issue 24, principle 3: an LLM-made query is a hop of the question)."""
    result = wrapped(*args, **kwargs)
    call = active_call(instance)
    if isinstance(call, RetrieveCall):
        try:
            call.record_constructed(result)
        except Exception as exc:
            call.error("auto_spec", exc)
    return result


class FusionQueriesCall(LlamaCall):
    """``QueryFusionRetriever._get_queries/_aget_queries``: a ``query_transform`` stage whose outputs
    are ``multi_query`` hops."""

    site = "llama_index.fusion_queries"

    def open(self) -> Stage:
        return self.new_stage(sc.KIND_QUERY_TRANSFORM)

    def before(self, s: Stage) -> None:
        self.original = argument(self.args, self.kwargs, 0, "original_query")
        s.query(self.original)

    def after(self, s: Stage, result: Any) -> None:
        if not is_candidate_list(result):
            s.finding(f"query generation returned a {type(result).__name__}, not a list")
            return
        for bundle in result:
            text = query_text(bundle)
            if text and text != self.original and not _known(text):
                s.add_query_variant(text, transform=sc.TRANSFORM_MULTI_QUERY)


_TRANSFORMS = {
    "HyDEQueryTransform": sc.TRANSFORM_HYDE,
    "DecomposeQueryTransform": sc.TRANSFORM_DECOMPOSE,
    "StepDecomposeQueryTransform": sc.TRANSFORM_DECOMPOSE,
    "IdentityQueryTransform": sc.TRANSFORM_NONE,
}


def _transform_of(obj: Any) -> str:
    for cls in type(obj).__mro__:
        if cls.__name__ in _TRANSFORMS:
            return _TRANSFORMS[cls.__name__]
    return sc.TRANSFORM_REWRITE


class QueryTransformCall(LlamaCall):
    """``BaseQueryTransform.run``: every text the transform produced becomes a hop (HyDE's
    ``embedding_strs`` as ``hyde``, a changed ``query_str`` as ``decompose``/``rewrite``)."""

    site = "llama_index.query_transform"

    def open(self) -> Stage:
        return self.new_stage(sc.KIND_QUERY_TRANSFORM)

    def before(self, s: Stage) -> None:
        self.original = query_text(argument(self.args, self.kwargs, 0, "query_bundle_or_str"))
        s.query(self.original)

    def after(self, s: Stage, result: Any) -> None:
        transform = _transform_of(self.instance)
        if transform == sc.TRANSFORM_NONE:
            return
        added: set[str] = set()
        new_query = query_text(result)
        if new_query and new_query != self.original and not _known(new_query):
            s.add_query_variant(new_query, transform=sc.TRANSFORM_REWRITE if transform == sc.TRANSFORM_HYDE else transform)
            added.add(new_query)
        for text in getattr(result, "custom_embedding_strs", None) or ():
            if isinstance(text, str) and text and text != self.original and text not in added and not _known(text):
                s.add_query_variant(text, transform=transform)
                added.add(text)


class CondenseCall(LlamaCall):
    """A chat engine's ``_condense_question``: the latest message rewritten, with the chat history,
    into the standalone question that is retrieved with (a ``rewrite`` hop)."""

    site = "llama_index.condense"

    def open(self) -> Stage:
        return self.new_stage(sc.KIND_QUERY_TRANSFORM)

    def before(self, s: Stage) -> None:
        self.original = argument(self.args, self.kwargs, 1, "latest_message", "last_message")
        s.query(self.original)

    def after(self, s: Stage, result: Any) -> None:
        text = query_text(result)
        if text and text != self.original and not _known(text):
            s.add_query_variant(text, transform=sc.TRANSFORM_REWRITE)


class QuestionGenCall(LlamaCall):
    """``BaseQuestionGenerator.generate/agenerate`` (``SubQuestionQueryEngine``): the sub-questions an
    LLM wrote for the question are ``decompose`` hops of it, so each sub-query engine's retrieval
    finds its hop by its text instead of opening an ``untracked`` one (issue 24, principle 3)."""

    site = "llama_index.question_gen"

    def open(self) -> Stage:
        return self.new_stage(sc.KIND_QUERY_TRANSFORM)

    def before(self, s: Stage) -> None:
        self.original = query_text(argument(self.args, self.kwargs, 1, "query"))
        s.query(self.original)

    def after(self, s: Stage, result: Any) -> None:
        if not is_candidate_list(result):
            s.finding(f"question generation returned a {type(result).__name__}, not a list")
            return
        for sub in result:
            text = getattr(sub, "sub_question", None)
            if isinstance(text, str) and text and text != self.original and not _known(text):
                s.add_query_variant(text, transform=sc.TRANSFORM_DECOMPOSE)
