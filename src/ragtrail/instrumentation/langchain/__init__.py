"""LangChain auto-instrumentation: one ragtrail stage per retrieval step, no code change.

Entry point ``ragtrail_langchain`` (``opentelemetry-instrument`` loads it). What it patches:

- ``BaseRetriever.invoke/ainvoke`` → ``retrieve`` (every retriever; scores recovered for BM25 and
  vector stores); ``EnsembleRetriever.invoke/ainvoke`` → ``fuse`` with RRF scores;
  ``MultiQueryRetriever`` → ``fuse`` (in = every inner hit, surplus copies ``deduplicated``),
  its ``generate_queries/agenerate_queries`` → query hops;
- document compressors (``compress_documents``/``acompress_documents`` per subclass) and the
  retrieval transformers (``LongContextReorder``, ``EmbeddingsRedundantFilter``,
  ``EmbeddingsClusteringFilter``) → ``rerank`` / ``filter`` with a reason for every exclusion;
  a ``DocumentCompressorPipeline`` is a container, not a stage: its members are the stages;
- ``TextSplitter.transform_documents`` inside a retrieval → ``split`` (chunks ``derived_from`` the
  document they were cut from, see ``_splitters``);
- ``RunnableSequence.invoke/ainvoke`` of a chain holding a retriever → the ``pipeline`` root, and a
  chat model / LLM called straight under it → ``generate`` (see ``_chains``);
- ``VectorStore.similarity_search_with_score`` / ``similarity_search_with_relevance_scores``
  (sync and async) → ``retrieve`` when called directly; under a retriever they only feed it scores.

ragtrail imports nothing of LangChain: each module is patched by a post-import hook when the
application imports it (so the library's own DeprecationWarning, attributed to the application's
import line, stays visible); a part that is never imported (``langchain-classic``,
``langchain-community``) is never patched.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Collection

from ragtrail.recorder.candidates import register_adapter, unregister_adapter
from ragtrail.instrumentation._base import RagtrailInstrumentor
from ragtrail.recorder.errors import record_internal_error

if TYPE_CHECKING:  # imported lazily at run time, with the first patch
    from ragtrail.instrumentation.langchain._chains import ChainWrappers
    from ragtrail.instrumentation.langchain._compressors import CompressorWrappers
    from ragtrail.instrumentation.langchain._retrievers import RetrieverWrappers
    from ragtrail.instrumentation.langchain._splitters import SplitterWrappers


# each class under the module that defines it: the packages re-export lazily (``__getattr__``), so a
# hook on the package fires before the class exists, and one on the defining module fires after
_CLASSES = {
    "BaseRetriever": "langchain_core.retrievers",
    "VectorStore": "langchain_core.vectorstores.base",
    "VectorStoreRetriever": "langchain_core.vectorstores.base",
    "InMemoryVectorStore": "langchain_core.vectorstores.in_memory",
    "Document": "langchain_core.documents.base",
    "BaseDocumentCompressor": "langchain_core.documents.compressor",
    "BaseDocumentTransformer": "langchain_core.documents.transformers",
    "TextSplitter": "langchain_text_splitters.base",
    "RunnableSequence": "langchain_core.runnables.base",
    "BaseChatModel": "langchain_core.language_models.chat_models",
    "BaseLLM": "langchain_core.language_models.llms",
    "EnsembleRetriever": "langchain_classic.retrievers.ensemble",
    "MultiQueryRetriever": "langchain_classic.retrievers.multi_query",
    "CrossEncoderReranker": "langchain_classic.retrievers.document_compressors.cross_encoder_rerank",
    "EmbeddingsFilter": "langchain_classic.retrievers.document_compressors.embeddings_filter",
    "LLMChainFilter": "langchain_classic.retrievers.document_compressors.chain_filter",
    "LLMChainExtractor": "langchain_classic.retrievers.document_compressors.chain_extract",
    "LLMListwiseRerank": "langchain_classic.retrievers.document_compressors.listwise_rerank",
    "DocumentCompressorPipeline": "langchain_classic.retrievers.document_compressors.base",
    "BM25Retriever": "langchain_community.retrievers.bm25",
    "LongContextReorder": "langchain_community.document_transformers.long_context_reorder",
    "EmbeddingsRedundantFilter": "langchain_community.document_transformers.embeddings_redundant_filter",
    "EmbeddingsClusteringFilter": "langchain_community.document_transformers.embeddings_redundant_filter",
}


def _load(name: str) -> type | None:
    """The class if the application already imported its module (ragtrail imports none: an import
    made here would swallow the library's own DeprecationWarning, which Python shows only when
    the importing frame is the application's ``__main__``)."""
    module = sys.modules.get(_CLASSES[name])
    return getattr(module, name, None) if module is not None else None


def _subclasses(cls: type) -> list[type]:
    found: list[type] = []
    stack = [cls]
    while stack:
        direct: list[type] = stack.pop().__subclasses__()
        for sub in direct:
            if sub not in found:
                found.append(sub)
                stack.append(sub)
    return found


class LangChainInstrumentor(RagtrailInstrumentor):
    """``LangChainInstrumentor().instrument(tracer_provider=...)``; ``uninstrument()`` undoes all."""

    _instruments: Collection[str] = ("langchain-core >= 0.3",)
    _retrievers: RetrieverWrappers | None
    _compressors: CompressorWrappers
    _splitters: SplitterWrappers
    _chains: ChainWrappers
    _adapted: type | None

    def _patch(self, **kwargs: Any) -> None:
        """Register a post-import hook per module of ``_CLASSES``; each pass patches what the
        application has imported so far (every wrap is idempotent)."""
        self._retrievers = None
        for module in dict.fromkeys(_CLASSES.values()):
            self.when_imported(module, self._patch_loaded)

    def _patch_loaded(self) -> None:
        from ragtrail.instrumentation.langchain._chains import ChainWrappers
        from ragtrail.instrumentation.langchain._common import LazyPatcher, adapt_document
        from ragtrail.instrumentation.langchain._compressors import CompressorWrappers
        from ragtrail.instrumentation.langchain._retrievers import RetrieverWrappers
        from ragtrail.instrumentation.langchain._splitters import SplitterWrappers

        retrievers = self._retrievers
        if retrievers is None:
            document = _load("Document")
            if _load("BaseRetriever") is None or document is None:
                return  # langchain-core is not imported yet: a later hook does it
            self._adapted = document
            register_adapter(document, adapt_document)
            patcher = LazyPatcher(self._wrapped)
            classes: dict[str, type | None] = {}
            retrievers = self._retrievers = RetrieverWrappers(self.tracer, patcher, classes)
            self._compressors = CompressorWrappers(self.tracer, patcher, classes)
            self._splitters = SplitterWrappers(self.tracer, patcher)
            self._chains = ChainWrappers(self.tracer, classes)
        compressors = self._compressors
        classes, patcher = retrievers.classes, retrievers.patcher
        classes.update({name: _load(name) for name in _CLASSES})

        base_retriever = classes["BaseRetriever"]
        if base_retriever is not None:  # always: the first pass waits for it
            patcher.ensure(base_retriever, "invoke", retrievers.invoke)
            patcher.ensure(base_retriever, "ainvoke", retrievers.ainvoke)
        ensemble = classes["EnsembleRetriever"]
        if ensemble is not None:
            patcher.ensure(ensemble, "invoke", retrievers.ensemble_invoke)
            patcher.ensure(ensemble, "ainvoke", retrievers.ensemble_ainvoke)
            patcher.ensure(ensemble, "weighted_reciprocal_rank", retrievers.weighted_reciprocal_rank)
        multi_query = classes["MultiQueryRetriever"]
        if multi_query is not None:
            patcher.ensure(multi_query, "generate_queries", retrievers.generate_queries)
            patcher.ensure(multi_query, "agenerate_queries", retrievers.agenerate_queries)
            patcher.ensure(multi_query, "retrieve_documents", retrievers.retrieve_documents)
            patcher.ensure(multi_query, "aretrieve_documents", retrievers.aretrieve_documents)

        store_base = classes["VectorStore"]
        if store_base is not None:
            patcher.ensure(store_base, "similarity_search_with_relevance_scores", retrievers.similarity_search_with_relevance_scores)
            patcher.ensure(store_base, "asimilarity_search_with_relevance_scores", retrievers.asimilarity_search_with_relevance_scores)
            patcher.ensure(store_base, "_similarity_search_with_relevance_scores", retrievers.pre_threshold)
            patcher.ensure(store_base, "_asimilarity_search_with_relevance_scores", retrievers.apre_threshold)
            patcher.ensure(store_base, "asimilarity_search_with_score", retrievers.asimilarity_search_with_score)
            for store in _subclasses(store_base):
                retrievers.ensure_store_class(store)

        compressor_base = classes["BaseDocumentCompressor"]
        if compressor_base is not None:
            patcher.ensure(compressor_base, "acompress_documents", compressors.acompress)
            for klass in _subclasses(compressor_base):
                self.ensure_compressor_class(klass)
        transformer_base = classes["BaseDocumentTransformer"]
        if transformer_base is not None:
            patcher.ensure(transformer_base, "atransform_documents", compressors.atransform)
            for name in ("LongContextReorder", "EmbeddingsRedundantFilter", "EmbeddingsClusteringFilter"):
                transformer = classes[name]
                if transformer is not None:
                    patcher.ensure(transformer, "transform_documents", compressors.transform, skip=(transformer_base,))
                    patcher.ensure(transformer, "atransform_documents", compressors.atransform)
        splitter = classes["TextSplitter"]
        if splitter is not None:
            patcher.ensure(splitter, "transform_documents", self._splitters.transform)
            patcher.ensure(splitter, "atransform_documents", self._splitters.atransform,
                           skip=(transformer_base,) if transformer_base is not None else ())
        chains = self._chains
        sequence = classes["RunnableSequence"]
        if sequence is not None:
            patcher.ensure(sequence, "invoke", chains.sequence_invoke)
            patcher.ensure(sequence, "ainvoke", chains.sequence_ainvoke)
        for name in ("BaseChatModel", "BaseLLM"):
            model = classes[name]
            if model is not None:
                patcher.ensure(model, "invoke", chains.model_invoke)
                patcher.ensure(model, "ainvoke", chains.model_ainvoke)
        retrievers.compressor_class_hook = self.ensure_compressor_class
        compressors.class_hook = self.ensure_compressor_class

    def ensure_compressor_class(self, klass: type) -> None:
        """Wrap a compressor class's own ``compress_documents``/``acompress_documents`` (also for
        classes first met at run time, e.g. a user's compressor inside a compression retriever)."""
        try:
            retrievers = self._retrievers
            if retrievers is None:  # pragma: no cover - the hooks are set after both wrappers are made
                return
            base = retrievers.classes["BaseDocumentCompressor"]
            patcher = retrievers.patcher
            patcher.ensure(klass, "compress_documents", self._compressors.compress, skip=() if base is None else (base,))
            patcher.ensure(klass, "acompress_documents", self._compressors.acompress)
        except Exception as exc:  # pragma: no cover - defensive
            record_internal_error("langchain.ensure_compressor", exc)

    def _uninstrument(self, **kwargs: Any) -> None:
        super()._uninstrument(**kwargs)
        adapted = getattr(self, "_adapted", None)
        if adapted is not None:
            unregister_adapter(adapted)
            self._adapted = None


__all__ = ["LangChainInstrumentor"]
