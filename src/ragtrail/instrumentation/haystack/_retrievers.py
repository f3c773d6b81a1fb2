"""``InMemoryBM25Retriever`` / ``InMemoryEmbeddingRetriever``: ``retrieve`` stages (``bm25`` /
``similarity`` scores, the effective filters and the store's size); pgvector-haystack's
``PgvectorEmbeddingRetriever`` / ``PgvectorKeywordRetriever`` the same way, but the store's size is
not asked for (``count_documents`` is a ``SELECT COUNT(*)`` on the user's database: unknown unless
``ragtrail.corpus_size`` gives it)."""

from __future__ import annotations

from typing import Any

from ragtrail import settings
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import canonical_json
from ragtrail.hooks import guard
from ragtrail.instrumentation._vectorstore import vector_receipt
from ragtrail.recorder.candidates import adapt
from ragtrail.recorder.pipeline import current_pipeline
from ragtrail.recorder.stage import Stage

from ._common import HaystackCall, documents_of, note_kinds, pipeline_query, query_text


class TextRetriever(HaystackCall):
    """``InMemoryBM25Retriever``: the query is text."""

    score_kind = sc.SCORE_BM25
    hop: int | None = None  # the hop the query searched for, once recorded
    counts_corpus = True  # the store's count_documents is free (in memory): the corpus size is read

    scaled_kind = sc.SCORE_NONE  # ``scale_score=True``: ``expit(bm25 / 8)``, no BM25 score any more

    def kind_of(self, bound: dict[str, Any]) -> str:
        """The kind of the scores this call returns: the in-memory store rescales them when the
        call's ``scale_score`` (else the retriever's) is true."""
        return self.scaled_kind if self.scaled(bound) else type(self).score_kind

    def scaled(self, bound: dict[str, Any]) -> bool:
        """Whether the store rescales this call's scores (``scale_score``: the call's, else the
        retriever's)."""
        flag = bound.get("scale_score")
        return (getattr(self.instance, "scale_score", False) if flag is None else flag) is True

    def scaling(self) -> str:
        """How the in-memory store rescales this retriever's scores (haystack's document_store.py)."""
        return "expit(bm25 / 8)"

    def query_text(self, bound: dict[str, Any]) -> Any:
        return bound.get("query")

    def before(self, s: Stage) -> None:
        instance, bound = self.instance, self.arguments
        self.score_kind = self.kind_of(bound)
        s.score_kind = self.score_kind
        if self.scaled(bound):
            s.finding(f"scale_score=True: each document's score is the store's {self.scaling()}, not the raw score")
        top_k = bound.get("top_k")
        s.set(top_k=getattr(instance, "top_k", None) if top_k is None else top_k)
        text = self.query_text(bound)
        if not isinstance(text, str) and _only_hop() == 0:
            text = pipeline_query.get()  # the one query of this run: the vector is its embedding
        hop = s.query(text) if isinstance(text, str) else _only_hop()
        self.vector_receipt(s, bound)
        filters = _effective_filters(instance, bound.get("filters"))
        if filters:
            s.set_attribute(sc.STAGE_FILTER, canonical_json(filters))
        store = getattr(instance, "document_store", None)
        count = getattr(store, "count_documents", None) if self.counts_corpus else None
        if callable(count):
            s.corpus_size(guard("haystack.count_documents", count), store=store)  # one store read by two retrievers counts once
        self.hop = hop

    def vector_receipt(self, s: Stage, bound: dict[str, Any]) -> None:
        """A text retriever's query is no vector."""

    def after(self, s: Stage, result: Any) -> None:
        docs = documents_of(result)
        if docs is None:
            s.finding(f"run returned a {type(result).__name__} without a documents list")
            return
        candidates = [adapt(d) for d in docs]
        s.outputs(candidates, hop=self.hop)
        note_kinds(candidates, self.score_kind)

    def counted_outputs(self, result: Any) -> Any:
        """Sampled out: the documents' number is the outcome (ragtrail reads no fallback here)."""
        docs = result.get("documents") if isinstance(result, dict) else None
        return docs if isinstance(docs, (list, tuple)) else None


class EmbeddingRetriever(TextRetriever):
    """``InMemoryEmbeddingRetriever``: the query is a vector; its text is known when a multi-query
    retriever embedded it (or, in a pipeline that saw one query only, it is that query's hop)."""

    score_kind = sc.SCORE_SIMILARITY
    scaled_kind = sc.SCORE_SIMILARITY  # (cosine + 1) / 2 or expit(dot / 100): still higher-is-more-similar

    def scaling(self) -> str:
        function = getattr(getattr(self.instance, "document_store", None), "embedding_similarity_function", None)
        return _EMBEDDING_SCALING.get(str(function), f"rescaled {function!r} similarity (a function ragtrail does not know)")

    def query_text(self, bound: dict[str, Any]) -> Any:
        return query_text.get()

    def vector_receipt(self, s: Stage, bound: dict[str, Any]) -> None:
        """The query vector's receipt (``ragtrail.query.vector.*``): the query reached the index as
        this vector."""
        vector = bound.get("query_embedding")
        if vector is None or settings.get().query == "off":
            return
        found = vector_receipt(vector, False)
        if found is not None:
            s.set_attribute(sc.QUERY_VECTOR_DIM, found[0])
            s.set_attribute(sc.QUERY_VECTOR_SHA256, found[1])


# the in-memory store's embedding_similarity_function -> what scale_score=True makes of its scores
_EMBEDDING_SCALING = {"cosine": "(cosine + 1) / 2", "dot_product": "expit(dot_product / 100)"}

# pgvector-haystack's vector_function -> the kind of the score its SQL selects: ``1 - (a <=> b)``
# (cosine similarity), ``(a <#> b) * -1`` (the inner product), ``a <-> b`` (the L2 distance)
_PGVECTOR_KINDS = {"cosine_similarity": sc.SCORE_SIMILARITY, "inner_product": sc.SCORE_SIMILARITY, "l2_distance": sc.SCORE_DISTANCE}


class PgvectorKeywordRetriever(TextRetriever):
    """``PgvectorKeywordRetriever``: PostgreSQL full-text search scored by ``ts_rank_cd``, a rank of
    no kind the contract names (not BM25): kind ``none``, the score kept as the store gave it."""

    score_kind = sc.SCORE_NONE
    counts_corpus = False


class PgvectorEmbeddingRetriever(EmbeddingRetriever):
    """``PgvectorEmbeddingRetriever``: the score kind follows the call's ``vector_function`` (else the
    retriever's, which defaults to the store's)."""

    counts_corpus = False

    def kind_of(self, bound: dict[str, Any]) -> str:
        function = bound.get("vector_function") or getattr(self.instance, "vector_function", None)
        return _PGVECTOR_KINDS.get(str(function), sc.SCORE_NONE)


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
