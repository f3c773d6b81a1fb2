"""Which LangChain method each hook wraps, written once as a table (:data:`Wiring.patches`), and the
pass that applies it to the classes imported so far (every wrap is idempotent: a pass per imported
module, each wrapping what is new).

The hooks of one ``instrument()`` share one :class:`Shared` (tracer, lazy patcher, classes by
name) and come in four families of wrappers: retrievers and vector stores (``_retrievers``),
compressors and retrieval transformers (``_compressors``), text splitters (``_splitters``), chains
and models (``_chains``). Subclasses met later (a user's vector store or compressor) are wrapped on
first use through the class hooks in :class:`Shared`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from ragtrail.hooks import guard
from ragtrail.instrumentation.langchain._chains import ChainWrappers
from ragtrail.instrumentation.langchain._common import LazyPatcher, Shared
from ragtrail.instrumentation.langchain._compressors import CompressorWrappers
from ragtrail.instrumentation.langchain._retrievers import (
    RetrieverWrappers,
    apre_threshold,
    aretrieve_documents,
    combined_score,
    pre_threshold,
    prepared_query,
    retrieve_documents,
    weighted_reciprocal_rank,
)
from ragtrail.instrumentation.langchain._splitters import SplitterWrappers

_TRANSFORMER = "BaseDocumentTransformer"


class Patch(NamedTuple):
    """One method wrapped on a LangChain class (by name) once its module is imported; ``skip``: not
    when the method is only inherited from that class (wrapped there by another entry)."""

    cls: str
    method: str
    wrapper: Callable[..., Any]
    skip: str | None = None


def subclasses(cls: type) -> list[type]:
    """Every subclass of ``cls`` defined so far, depth first, each once."""
    found: list[type] = []
    stack = [cls]
    while stack:
        direct: list[type] = stack.pop().__subclasses__()
        for sub in direct:
            if sub not in found:
                found.append(sub)
                stack.append(sub)
    return found


class Wiring:
    """The LangChain hooks of one ``instrument()``: what they share, the wrapper families, and the
    table of what they patch. ``wrapped`` is the instrumentor's list of wraps (undone by
    ``uninstrument()``); ``classes`` is filled by the instrumentor as modules are imported."""

    def __init__(self, tracer: Any, wrapped: list[tuple[Any, str]], classes: dict[str, type | None]) -> None:
        self.shared = shared = Shared(tracer, LazyPatcher(wrapped), classes)
        self.retrievers = RetrieverWrappers(shared)
        self.compressors = CompressorWrappers(shared)
        self.splitters = SplitterWrappers(shared)
        self.chains = ChainWrappers(shared)
        shared.compressor_class = self.compressors.ensure_class
        shared.store_class = self.retrievers.ensure_store_class
        self.patches = self._retrieval() + self._documents() + self._chains()

    def _retrieval(self) -> tuple[Patch, ...]:
        ret = self.retrievers
        return (
            Patch("BaseRetriever", "invoke", ret.invoke),
            Patch("BaseRetriever", "ainvoke", ret.ainvoke),
            Patch("EnsembleRetriever", "invoke", ret.ensemble_invoke),
            Patch("EnsembleRetriever", "ainvoke", ret.ensemble_ainvoke),
            Patch("EnsembleRetriever", "weighted_reciprocal_rank", weighted_reciprocal_rank),
            Patch("TimeWeightedVectorStoreRetriever", "_get_combined_score", combined_score),
            Patch("MultiQueryRetriever", "generate_queries", ret.generate_queries),
            Patch("MultiQueryRetriever", "agenerate_queries", ret.agenerate_queries),
            Patch("MultiQueryRetriever", "retrieve_documents", retrieve_documents),
            Patch("MultiQueryRetriever", "aretrieve_documents", aretrieve_documents),
            Patch("SelfQueryRetriever", "_prepare_query", prepared_query),
            Patch("VectorStore", "similarity_search_with_relevance_scores", ret.similarity_search_with_relevance_scores),
            Patch("VectorStore", "asimilarity_search_with_relevance_scores", ret.asimilarity_search_with_relevance_scores),
            Patch("VectorStore", "_similarity_search_with_relevance_scores", pre_threshold),
            Patch("VectorStore", "_asimilarity_search_with_relevance_scores", apre_threshold),
            Patch("VectorStore", "asimilarity_search_with_score", ret.asimilarity_search_with_score),
        )

    def _documents(self) -> tuple[Patch, ...]:
        comp, split = self.compressors, self.splitters
        return (
            Patch("BaseDocumentCompressor", "acompress_documents", comp.acompress),
            Patch(_TRANSFORMER, "atransform_documents", comp.atransform),
            *(
                patch
                for name in ("LongContextReorder", "EmbeddingsRedundantFilter", "EmbeddingsClusteringFilter")
                for patch in (
                    Patch(name, "transform_documents", comp.transform, skip=_TRANSFORMER),
                    Patch(name, "atransform_documents", comp.atransform),
                )
            ),
            Patch("TextSplitter", "transform_documents", split.transform),
            Patch("TextSplitter", "atransform_documents", split.atransform, skip=_TRANSFORMER),
        )

    def _chains(self) -> tuple[Patch, ...]:
        chain = self.chains
        return (
            Patch("RunnableSequence", "invoke", chain.sequence_invoke),
            Patch("RunnableSequence", "ainvoke", chain.sequence_ainvoke),
            *(
                patch
                for name in ("BaseChatModel", "BaseLLM")
                for patch in (Patch(name, "invoke", chain.model_invoke), Patch(name, "ainvoke", chain.model_ainvoke))
            ),
        )

    def patch_loaded(self) -> None:
        """Apply the table to the classes imported so far, then wrap the vector stores and
        compressors already subclassed (each class its own search / compress methods)."""
        classes, ensure = self.shared.classes, self.shared.patcher.ensure
        for patch in self.patches:
            cls = classes[patch.cls]
            if cls is None:
                continue
            skip = classes[patch.skip] if patch.skip is not None else None
            ensure(cls, patch.method, patch.wrapper, skip=(skip,) if skip is not None else ())
        for base, ensure_class in (("VectorStore", self.shared.store_class), ("BaseDocumentCompressor", self.shared.compressor_class)):
            cls = classes[base]
            if cls is not None:
                for sub in subclasses(cls):
                    ensure_class(sub)
        self._watch_stores(classes["VectorStore"])

    def _watch_stores(self, base: type | None) -> None:
        """Every vector-store class defined from now on (``langchain_chroma``, FAISS, a user's) is
        patched as it is defined, so its direct searches record whether or not a retriever ever
        wraps it: a ``__init_subclass__`` on ``VectorStore``, removed by :meth:`undo`."""
        if base is None or "__init_subclass__" in vars(base):
            return
        ensure_class = self.shared.store_class
        owner: Any = base

        def on_subclass(cls: Any, /, **kwargs: Any) -> None:
            super(owner, cls).__init_subclass__(**kwargs)
            guard("langchain.store_class", ensure_class, cls)

        on_subclass.ragtrail = True  # type: ignore[attr-defined]
        base.__init_subclass__ = classmethod(on_subclass)  # type: ignore[assignment]
        self._watched = base

    _watched: type | None = None

    def undo(self) -> None:
        """Remove the ``__init_subclass__`` hook (the wraps themselves are undone by the instrumentor)."""
        base = getattr(self, "_watched", None)
        hook = vars(base).get("__init_subclass__") if base is not None else None
        if hook is not None and getattr(hook.__func__, "ragtrail", False):
            del base.__init_subclass__
        self._watched = None


__all__ = ["Patch", "Wiring", "subclasses"]
