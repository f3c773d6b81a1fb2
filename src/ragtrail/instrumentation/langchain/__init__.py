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

import functools
import sys
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from ragtrail.instrumentation._base import RagtrailInstrumentor
from ragtrail.recorder.candidates import register_adapter, unregister_adapter

if TYPE_CHECKING:  # imported lazily at run time, with the first patch
    from ragtrail.instrumentation.langchain._wiring import Wiring


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
    "MultiVectorRetriever": "langchain_classic.retrievers.multi_vector",
    "SelfQueryRetriever": "langchain_classic.retrievers.self_query.base",
    "RePhraseQueryRetriever": "langchain_classic.retrievers.re_phraser",
    "TimeWeightedVectorStoreRetriever": "langchain_classic.retrievers.time_weighted_retriever",
    "CrossEncoderReranker": "langchain_classic.retrievers.document_compressors.cross_encoder_rerank",
    "EmbeddingsFilter": "langchain_classic.retrievers.document_compressors.embeddings_filter",
    "LLMChainFilter": "langchain_classic.retrievers.document_compressors.chain_filter",
    "LLMChainExtractor": "langchain_classic.retrievers.document_compressors.chain_extract",
    "LLMListwiseRerank": "langchain_classic.retrievers.document_compressors.listwise_rerank",
    "DocumentCompressorPipeline": "langchain_classic.retrievers.document_compressors.base",
    "BM25Retriever": "langchain_community.retrievers.bm25",
    # a partner store: importing it runs a pass, so its own search methods are wrapped before the
    # app calls one directly (a store first met through a retriever is wrapped then)
    "QdrantVectorStore": "langchain_qdrant.qdrant",
    "LongContextReorder": "langchain_community.document_transformers.long_context_reorder",
    "EmbeddingsRedundantFilter": "langchain_community.document_transformers.embeddings_redundant_filter",
    "EmbeddingsClusteringFilter": "langchain_community.document_transformers.embeddings_redundant_filter",
}


# LangGraph (``_graph``): (module, what is wrapped, GraphWrappers method; None: ``_graph.finish``)
_GRAPH = (
    ("langgraph.pregel.main", "Pregel.invoke", "invoke"),
    ("langgraph.pregel.main", "Pregel.ainvoke", "ainvoke"),
    ("langgraph.pregel.main", "Pregel.stream", "stream"),
    ("langgraph.pregel.main", "Pregel.astream", "astream"),
    ("langgraph.graph._branch", "BranchSpec._route", "route"),
    ("langgraph.graph._branch", "BranchSpec._aroute", "aroute"),
    ("langgraph.graph._branch", "BranchSpec._finish", None),
    ("langgraph.pregel._runner", "run_with_retry", "task"),
    ("langgraph.pregel._runner", "arun_with_retry", "atask"),
)


def _load(name: str) -> type | None:
    """The class if the application already imported its module (ragtrail imports none: an import
    made here would swallow the library's own DeprecationWarning, which Python shows only when
    the importing frame is the application's ``__main__``)."""
    module = sys.modules.get(_CLASSES[name])
    return getattr(module, name, None) if module is not None else None


class LangChainInstrumentor(RagtrailInstrumentor):
    """``LangChainInstrumentor().instrument(tracer_provider=...)``; ``uninstrument()`` undoes all."""

    _instruments: Collection[str] = ("langchain-core >= 0.3",)
    _wiring: Wiring | None
    _adapted: type | None

    def _patch(self, **kwargs: Any) -> None:
        """Register a post-import hook per module of ``_CLASSES``; each pass patches what the
        application has imported so far (every wrap is idempotent). LangGraph's modules get their
        own hooks (``_graph``: a graph run is one pipeline)."""
        self._wiring = None
        for module in dict.fromkeys(_CLASSES.values()):
            self.when_imported(module, self._patch_loaded)
        for module in dict.fromkeys(module for module, _, _ in _GRAPH):
            self.when_imported(module, functools.partial(self._patch_graph, module))

    def _patch_graph(self, name: str) -> None:
        from ragtrail.instrumentation.langchain._graph import GraphWrappers, finish
        from ragtrail.instrumentation.langchain._wiring import Wiring

        wiring = self._wiring
        if wiring is None:
            wiring = self._wiring = Wiring(self.tracer, self._wrapped, {name: _load(name) for name in _CLASSES})
        graph = GraphWrappers(wiring.shared)
        for module, target, method in _GRAPH:
            if module == name:
                self.wrap(module, target, getattr(graph, method) if method else finish)

    def _patch_loaded(self) -> None:
        from ragtrail.instrumentation.langchain._common import adapt_document
        from ragtrail.instrumentation.langchain._wiring import Wiring

        document = _load("Document")
        if _load("BaseRetriever") is None or document is None:
            return  # langchain-core is not imported yet: a later hook does it
        if getattr(self, "_adapted", None) is None:
            self._adapted = document
            register_adapter(document, adapt_document)
        wiring = self._wiring
        if wiring is None:
            wiring = self._wiring = Wiring(self.tracer, self._wrapped, {})
        wiring.shared.classes.update({name: _load(name) for name in _CLASSES})
        wiring.patch_loaded()

    def _uninstrument(self, **kwargs: Any) -> None:
        super()._uninstrument(**kwargs)
        wiring = getattr(self, "_wiring", None)
        if wiring is not None:
            wiring.undo()
        adapted = getattr(self, "_adapted", None)
        if adapted is not None:
            unregister_adapter(adapted)
            self._adapted = None


__all__ = ["LangChainInstrumentor"]
