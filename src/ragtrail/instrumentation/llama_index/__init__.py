"""LlamaIndex auto-instrumentation: one ragtrail stage per retrieval step, with no code change.

``opentelemetry-instrument`` finds it under the entry point ``ragtrail_llama_index``. What is patched
(llama-index-core >= 0.12; verified on 0.14.25):

- ``BaseQueryEngine.query/aquery``: ``pipeline`` (the outermost engine only)
- ``BaseChatEngine.chat/achat/stream_chat/astream_chat``: ``pipeline`` (one chat turn)
- a chat engine's ``_condense_question/_acondense_question``: ``query_transform`` (a ``rewrite`` hop)
- ``BaseQueryTransform.run``: ``query_transform`` (HyDE's ``embedding_strs`` as ``hyde`` hops)
- ``BaseRetriever.retrieve/aretrieve``: ``retrieve`` (``fuse`` for ``QueryFusionRetriever``)
- ``QueryFusionRetriever._get_queries/_aget_queries``: ``query_transform`` (``multi_query`` hops)
- ``BaseQuestionGenerator.generate/agenerate``: ``query_transform`` (``SubQuestionQueryEngine``'s sub-questions as ``decompose`` hops)
- ``QueryFusionRetriever._*_fusion``: hook, the fuse stage's inputs with the hop that found each
- ``AutoMergingRetriever._try_merging/_get_parents_and_merge``: hooks, the leaves found and the parent
  each merged into (outputs under ``merge@1``, each merged leaf ``custom:merged``)
- ``BaseNodePostprocessor.postprocess_nodes/apostprocess_nodes``: ``filter``/``rerank``/``budget``
- ``VectorIndexAutoRetriever._build_retriever_from_spec``: hook, the query and filter the LLM's spec
  became (a ``rewrite`` hop of the question on the auto-retriever's stage, its filter)
- ``LLMRerank._parse_raw_response``, ``StructuredLLMRerank._parse_batch_result``: hook, which nodes the LLM chose
- ``BaseSynthesizer.synthesize/asynthesize``: ``generate`` (outputs: ``Response.source_nodes``)
- ``PromptHelper.truncate/repack``: ``budget`` (tokens); ``_get_available_context_size``: hook, the limit

Subclasses of these bases that override a patched method (e.g. ``RankGPTRerank.apostprocess_nodes``,
``CustomQueryEngine.query``) are patched too when they are defined by the time ``llama_index.core``
is patched. ``instrument()`` imports nothing from LlamaIndex (~1.4 s): the patching runs when the
application imports ``llama_index.core`` (at once when it already has).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from ragtrail.hooks import async_wrapper, sync_wrapper
from ragtrail.instrumentation._base import RagtrailInstrumentor

__all__ = ["LlamaIndexInstrumentor"]


def _subclasses(base: type) -> list[type]:
    seen: dict[type, None] = {}
    stack = [base]
    while stack:
        direct: list[type] = stack.pop().__subclasses__()
        for sub in direct:
            if sub not in seen:
                seen[sub] = None
                stack.append(sub)
    return list(seen)


class LlamaIndexInstrumentor(RagtrailInstrumentor):
    """Records LlamaIndex retrieval pipelines as ragtrail stages (docs/semconv.md §1-3)."""

    _instruments: Collection[str] = ("llama-index-core >= 0.12",)

    def _tracer(self) -> Any:
        return self.tracer

    def _patch(self, **kwargs: Any) -> None:
        self.when_imported("llama_index.core", self._patch_now)

    def _patch_now(self) -> None:
        # importing these packages defines every core subclass, so overrides can be found below
        import llama_index.core.chat_engine  # noqa: F401
        import llama_index.core.postprocessor  # noqa: F401
        import llama_index.core.postprocessor.rankGPT_rerank  # noqa: F401 - overrides apostprocess_nodes, not re-exported
        import llama_index.core.query_engine  # noqa: F401
        import llama_index.core.question_gen  # noqa: F401
        import llama_index.core.response_synthesizers  # noqa: F401
        import llama_index.core.retrievers  # noqa: F401
        from llama_index.core.base.base_query_engine import BaseQueryEngine
        from llama_index.core.base.base_retriever import BaseRetriever
        from llama_index.core.chat_engine.types import BaseChatEngine
        from llama_index.core.indices.query.query_transform.base import BaseQueryTransform
        from llama_index.core.postprocessor.types import BaseNodePostprocessor
        from llama_index.core.question_gen.types import BaseQuestionGenerator
        from llama_index.core.response_synthesizers.base import BaseSynthesizer
        from llama_index.core.schema import BaseNode, NodeWithScore

        from ._nodes import adapt_node, adapt_node_with_score
        from ._postprocess import PostprocessCall
        from ._retrieve import CondenseCall, QueryTransformCall, QuestionGenCall, RetrieveCall
        from ._synthesis import ChatCall, QueryEngineCall, SynthesizeCall

        self.register_adapter(NodeWithScore, adapt_node_with_score)
        self.register_adapter(BaseNode, adapt_node)

        t = self._tracer
        self._wrap_hierarchy(BaseQueryEngine, {"query": sync_wrapper(QueryEngineCall, t), "aquery": async_wrapper(QueryEngineCall, t)})
        self._wrap_hierarchy(
            BaseChatEngine,
            {
                "chat": sync_wrapper(ChatCall, t),
                "stream_chat": sync_wrapper(ChatCall, t),
                "achat": async_wrapper(ChatCall, t),
                "astream_chat": async_wrapper(ChatCall, t),
                "_condense_question": sync_wrapper(CondenseCall, t),
                "_acondense_question": async_wrapper(CondenseCall, t),
            },
        )
        self._wrap_hierarchy(BaseRetriever, {"retrieve": sync_wrapper(RetrieveCall, t), "aretrieve": async_wrapper(RetrieveCall, t)})
        self._wrap_hierarchy(
            BaseNodePostprocessor, {"postprocess_nodes": sync_wrapper(PostprocessCall, t), "apostprocess_nodes": async_wrapper(PostprocessCall, t)}
        )
        self._wrap_hierarchy(BaseQueryTransform, {"run": sync_wrapper(QueryTransformCall, t)})
        self._wrap_hierarchy(BaseQuestionGenerator, {"generate": sync_wrapper(QuestionGenCall, t), "agenerate": async_wrapper(QuestionGenCall, t)})
        self._wrap_hierarchy(BaseSynthesizer, {"synthesize": sync_wrapper(SynthesizeCall, t), "asynthesize": async_wrapper(SynthesizeCall, t)})
        self._patch_private()

    def _patch_private(self) -> None:
        """The hooks on methods of one class each (query generation, fusion, merging, LLM choices,
        the prompt helper's packing)."""
        from ._postprocess import selection_hook
        from ._retrieve import FusionQueriesCall, auto_spec_hook, fusion_hook, merge_hook, try_merging_hook
        from ._synthesis import RepackCall, TruncateCall, available_context_hook

        t = self._tracer
        fusion = "llama_index.core.retrievers.fusion_retriever"
        self.wrap(fusion, "QueryFusionRetriever._get_queries", sync_wrapper(FusionQueriesCall, t))
        self.wrap(fusion, "QueryFusionRetriever._aget_queries", async_wrapper(FusionQueriesCall, t))
        for name in ("_reciprocal_rerank_fusion", "_relative_score_fusion", "_simple_fusion"):
            self.wrap(fusion, f"QueryFusionRetriever.{name}", fusion_hook)
        merging = "llama_index.core.retrievers.auto_merging_retriever"
        self.wrap(merging, "AutoMergingRetriever._try_merging", try_merging_hook)
        self.wrap(merging, "AutoMergingRetriever._get_parents_and_merge", merge_hook)
        auto = "llama_index.core.indices.vector_store.retrievers.auto_retriever.auto_retriever"
        self.wrap(auto, "VectorIndexAutoRetriever._build_retriever_from_spec", auto_spec_hook)
        self.wrap("llama_index.core.postprocessor.llm_rerank", "LLMRerank._parse_raw_response", selection_hook)
        self.wrap("llama_index.core.postprocessor.structured_llm_rerank", "StructuredLLMRerank._parse_batch_result", selection_hook)

        helper = "llama_index.core.indices.prompt_helper"
        self.wrap(helper, "PromptHelper.truncate", sync_wrapper(TruncateCall, t))
        self.wrap(helper, "PromptHelper.repack", sync_wrapper(RepackCall, t))
        self.wrap(helper, "PromptHelper._get_available_context_size", available_context_hook)

    def _wrap_hierarchy(self, base: type, wrappers: dict[str, Callable[..., Any]]) -> None:
        """Patch ``base``'s methods and every loaded subclass's own override of them."""
        for cls in [base, *_subclasses(base)]:
            for name, wrapper in wrappers.items():
                method = vars(cls).get(name)
                if method is None or getattr(method, "__isabstractmethod__", False) or "." in cls.__qualname__:
                    continue
                self.wrap(cls.__module__, f"{cls.__qualname__}.{name}", wrapper)
