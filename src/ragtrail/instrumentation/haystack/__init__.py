"""Auto-instrumentation for Haystack (``haystack-ai``): one ragtrail stage per retrieval component.

Haystack components share no base class, so each component's ``run`` (and ``run_async`` where it
has one) is patched on its own class:

* ``InMemoryBM25Retriever`` / ``InMemoryEmbeddingRetriever``: ``retrieve`` stages (``bm25`` /
  ``similarity`` scores, the effective filters and the store's size); pgvector-haystack's
  ``PgvectorEmbeddingRetriever`` (the score kind of its ``vector_function``) and
  ``PgvectorKeywordRetriever`` (``ts_rank_cd``: kind ``none``), whose store's size is not asked for
  (a ``SELECT COUNT(*)``); the psycopg 3 stage of their SQL nests inside (``ragtrail_psycopg``);
* ``DocumentJoiner`` (every join mode) and the multi-query retrievers: ``fuse`` stages whose inputs
  are the concatenated input lists, each candidate with the hop of the query that found it;
* ``SentenceTransformersSimilarityRanker``, ``SentenceTransformersDiversityRanker`` (its MMR
  ``lambda_threshold`` as ``ragtrail.stage.mmr.lambda``), ``LostInTheMiddleRanker``,
  ``MetaFieldRanker``: ``rerank`` stages whose every exclusion is classified by re-deriving the component's own rule
  (duplicate id, ``top_k``, score threshold, word budget, missing meta field) from the snapshotted
  inputs, never by guessing;
* ``TopPSampler``: a ``filter`` stage whose ``top_p`` is a budget of probability mass; each
  exclusion re-derived by replaying its softmax cut (``budget_exceeded``) or its drop of a scoreless
  document beside scored ones (``custom:no_score``) (``_sampler``);
* ``SentenceWindowRetriever``: a ``retrieve`` stage without a query whose outputs are the hits'
  windows read from the store (``_window``), so the neighbours it adds are read units;
* ``AutoMergingRetriever``: a ``retrieve`` stage without a query whose outputs are the leaves it kept
  and the parents it read from the store in place of the others (``merge@1``, each replaced leaf
  ``custom:merged`` into its parent; ``_merging``);
* ``QueryExpander``: a ``query_transform`` stage whose expansions become ``expand`` hops;
* ``Pipeline.run`` / ``Pipeline.run_async``: the ``pipeline`` root (hop numbering and coverage are
  per pipeline run) unless an outer ragtrail stage already is the root;
* a generator run by ``Pipeline._run_component`` inside that root: a ``generate`` stage (what of the
  prompt builder's documents reached the prompt, and the answer; ``_generate``).

One module per component family: ``_retrievers``, ``_rankers``, ``_fusion`` (joiner, multi-query),
``_query`` (expander, pipeline root), ``_sampler`` (top-p), on ``_common`` (the call on the hook skeleton, the Document
adapter, snapshots and the re-derivation helpers).

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

import functools
from collections.abc import Callable, Collection
from typing import Any

import wrapt

from ragtrail.hooks import async_wrapper, sync_wrapper
from ragtrail.instrumentation._base import RagtrailInstrumentor

from ._common import HaystackCall, document_adapter
from ._fusion import Joiner, MultiQuery, executor_factory, per_query_async, per_query_sync
from ._generate import ClassPatcher, Generate, install, prompt_builder_run
from ._merging import AutoMerging
from ._query import Expander, PipelineRun
from ._rankers import DiversityRanker, LostInTheMiddle, MetaField, SimilarityRanker
from ._retrievers import EmbeddingRetriever, PgvectorEmbeddingRetriever, PgvectorKeywordRetriever, TextRetriever
from ._sampler import MODULE as _TOP_P
from ._sampler import TopPSampler
from ._window import SentenceWindow

_instruments: Collection[str] = ("haystack-ai >= 2.10",)

_BM25 = "haystack.components.retrievers.in_memory.bm25_retriever"
_EMBEDDING = "haystack.components.retrievers.in_memory.embedding_retriever"
_PG_EMBEDDING = "haystack_integrations.components.retrievers.pgvector.embedding_retriever"
_PG_KEYWORD = "haystack_integrations.components.retrievers.pgvector.keyword_retriever"
_JOINER = "haystack.components.joiners.document_joiner"
_LITM = "haystack.components.rankers.lost_in_the_middle"
_META = "haystack.components.rankers.meta_field"
_ST_RANKER = "haystack_integrations.components.rankers.sentence_transformers.sentence_transformers_similarity"
_ST_RANKER_2X = "haystack.components.rankers.sentence_transformers_similarity"  # haystack-ai 2.x
_DIVERSITY = "haystack_integrations.components.rankers.sentence_transformers.sentence_transformers_diversity"
_DIVERSITY_2X = "haystack.components.rankers.sentence_transformers_diversity"  # haystack-ai 2.x
_EXPANDER = "haystack.components.query.query_expander"
_WINDOW = "haystack.components.retrievers.sentence_window_retriever"
_MERGING = "haystack.components.retrievers.auto_merging_retriever"
_MQ_TEXT = "haystack.components.retrievers.multi_query_text_retriever"
_MQ_EMBEDDING = "haystack.components.retrievers.multi_query_embedding_retriever"
_PIPELINE = "haystack.core.pipeline.pipeline"
_ASYNC_PIPELINE_2X = "haystack.core.pipeline.async_pipeline"  # haystack-ai 2.x


# which handler records which method; the module is patched when it is imported
_TARGETS: tuple[tuple[str, str, type[HaystackCall]], ...] = (
    (_BM25, "InMemoryBM25Retriever", TextRetriever),
    (_EMBEDDING, "InMemoryEmbeddingRetriever", EmbeddingRetriever),
    (_PG_EMBEDDING, "PgvectorEmbeddingRetriever", PgvectorEmbeddingRetriever),
    (_PG_KEYWORD, "PgvectorKeywordRetriever", PgvectorKeywordRetriever),
    (_JOINER, "DocumentJoiner", Joiner),
    (_LITM, "LostInTheMiddleRanker", LostInTheMiddle),
    (_META, "MetaFieldRanker", MetaField),
    (_ST_RANKER, "SentenceTransformersSimilarityRanker", SimilarityRanker),
    (_ST_RANKER_2X, "SentenceTransformersSimilarityRanker", SimilarityRanker),
    (_DIVERSITY, "SentenceTransformersDiversityRanker", DiversityRanker),
    (_DIVERSITY_2X, "SentenceTransformersDiversityRanker", DiversityRanker),
    (_EXPANDER, "QueryExpander", Expander),
    (_TOP_P, "TopPSampler", TopPSampler),
    (_WINDOW, "SentenceWindowRetriever", SentenceWindow),
    (_MERGING, "AutoMergingRetriever", AutoMerging),
    (_MQ_TEXT, "MultiQueryTextRetriever", MultiQuery),
    (_MQ_EMBEDDING, "MultiQueryEmbeddingRetriever", MultiQuery),
    (_PIPELINE, "Pipeline", PipelineRun),
    (_ASYNC_PIPELINE_2X, "AsyncPipeline", PipelineRun),
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
            self.register_adapter(Document, document_adapter)
        for target_module, cls_name, handler in _TARGETS:
            if target_module != name:
                continue
            self.wrap(name, f"{cls_name}.run", self._sync_wrapper(handler))
            self.wrap(name, f"{cls_name}.run_async", self._async_wrapper(handler))
        if name == _PIPELINE:
            install(ClassPatcher(self._patch_generation_class))
        if name in _MULTI_QUERY_MODULES:
            cls_name = _MULTI_QUERY_MODULES[name]
            self.wrap(name, f"{cls_name}._run_on_thread", per_query_sync)
            self.wrap(name, f"{cls_name}._run_one_async", per_query_async)
            self.wrap(name, "ThreadPoolExecutor", executor_factory)

    def _patch_generation_class(self, cls: type, role: str) -> None:
        """Wrap the ``run`` (and ``run_async``) a prompt builder or generator class defines itself."""
        if role == "generate":
            wrappers = {"run": self._sync_wrapper(Generate), "run_async": self._async_wrapper(Generate)}
        else:
            wrappers = {"run": prompt_builder_run}
        for method, wrapper in wrappers.items():
            if method in vars(cls):
                wrapt.wrap_function_wrapper(cls, method, wrapper)
                self._wrapped.append((cls, method))

    def _uninstrument(self, **kwargs: Any) -> None:
        install(None)
        super()._uninstrument(**kwargs)

    def _tracer(self) -> Any:
        return self.tracer

    def _sync_wrapper(self, handler: type[HaystackCall]) -> Callable[..., Any]:
        return sync_wrapper(handler, self._tracer)

    def _async_wrapper(self, handler: type[HaystackCall]) -> Callable[..., Any]:
        return async_wrapper(handler, self._tracer)


__all__ = ["HaystackInstrumentor"]
