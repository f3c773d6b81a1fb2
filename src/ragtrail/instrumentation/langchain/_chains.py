"""LangChain chains as ragtrail pipelines: ``retriever | prompt | llm`` (LCEL, as in LangChain's RAG
tutorial) and ``create_retrieval_chain``.

- ``RunnableSequence.invoke/ainvoke`` of a chain that holds a retriever → the ``pipeline`` root
  (unless a ragtrail stage is already open around it), so the retrieval and the model call are one
  trace with one hop numbering. A chain without a retriever records nothing (no empty pipeline
  trace); the walk looks through sequences, parallel maps, ``assign``, bindings and branches.
- ``BaseChatModel`` / ``BaseLLM`` ``invoke/ainvoke`` called straight under such a pipeline → a
  ``generate`` stage (:mod:`ragtrail.instrumentation._generate`): the documents the chain's
  retrievers handed on, those whose text is in the prompt the model got, and the answer (its
  receipt on the pipeline, through ``ragtrail.answer``). A model called inside another stage (a
  multi-query generator, an LLM compressor) is part of that stage, not a generation.

No ``cite`` stage: a LangChain chain does not say which documents the answer used.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

from ragtrail.contract import semconv as sc
from ragtrail.instrumentation._generate import mapping_text, record_generation, set_model
from ragtrail.hooks import argument, component_name, enabled, guard
from ragtrail.instrumentation.langchain._common import ChainRun, LangChainCall, chain_run, open_stage, run_async, run_sync
from ragtrail.recorder.pipeline import current_pipeline
from ragtrail.recorder.stage import current_stage

_QUERY_KEYS = ("input", "question", "query")
# where a runnable keeps the runnables it runs (sequence, parallel map, assign, binding, branch, fallbacks)
_CHILDREN = ("first", "middle", "last", "steps__", "mapper", "bound", "runnable", "branches", "default", "fallbacks")
_MAX_DEPTH = 16


class ChainWrappers:
    def __init__(self, tracer: Any, classes: dict[str, type | None]) -> None:
        self.tracer = tracer
        self.classes = classes
        self._reads: "weakref.WeakKeyDictionary[Any, bool]" = weakref.WeakKeyDictionary()

    # --- the chain: a pipeline root ------------------------------------------------------------------
    def sequence_invoke(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        if current_pipeline() is not None or not enabled() or not guard("langchain.chain", self.reads_documents, instance):
            return wrapped(*args, **kwargs)
        return run_sync(self.tracer, "lc.chain", _open_chain, wrapped, instance, args, kwargs)

    async def sequence_ainvoke(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        if current_pipeline() is not None or not enabled() or not guard("langchain.chain", self.reads_documents, instance):
            return await wrapped(*args, **kwargs)
        return await run_async(self.tracer, "lc.chain", _open_chain, wrapped, instance, args, kwargs)

    def reads_documents(self, chain: Any) -> bool:
        """Whether a retriever is among the runnables ``chain`` runs (cached per chain object)."""
        try:
            return self._reads[chain]
        except (KeyError, TypeError):
            pass
        retriever = self.classes.get("BaseRetriever")
        found = retriever is not None and _contains(chain, retriever, 0, set())
        try:
            self._reads[chain] = found
        except TypeError:  # pragma: no cover - not weakly referenceable
            pass
        return found

    # --- the model call: a generate stage ------------------------------------------------------------
    def model_invoke(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        if not _generating():
            return wrapped(*args, **kwargs)
        return run_sync(self.tracer, "lc.generate", _open_generate, wrapped, instance, args, kwargs)

    async def model_ainvoke(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        if not _generating():
            return await wrapped(*args, **kwargs)
        return await run_async(self.tracer, "lc.generate", _open_generate, wrapped, instance, args, kwargs)


def _generating() -> bool:
    """A model call straight under a chain's pipeline (not inside one of its stages)."""
    run = chain_run.get()
    return run is not None and current_stage() is run.stage


def _open_chain(call: LangChainCall) -> None:
    query = mapping_text(argument(call.args, call.kwargs, 0, "input"), _QUERY_KEYS)
    s = open_stage(call, sc.KIND_PIPELINE, component_name(call.instance), query=query)
    if s.recording:
        call.set_var(chain_run, ChainRun(s))


def _open_generate(call: LangChainCall) -> None:
    s = open_stage(call, sc.KIND_GENERATE, component_name(call.instance))
    if not s.recording:
        return
    set_model(s, call.instance)
    call.memo["prompt"] = argument(call.args, call.kwargs, 0, "input")
    call.memo["run"] = chain_run.get()
    call.finisher = _finish_generate


def _finish_generate(call: LangChainCall, result: Any) -> None:
    run: ChainRun = call.memo["run"]
    if call.stage is not None:
        record_generation(call.stage, list(run.offered), call.memo["prompt"], result)


def _contains(obj: Any, cls: type, depth: int, seen: set[int]) -> bool:
    if isinstance(obj, cls):
        return True
    if depth > _MAX_DEPTH or id(obj) in seen or isinstance(obj, (str, bytes, int, float)):
        return False
    seen.add(id(obj))
    if isinstance(obj, dict):
        return any(_contains(v, cls, depth + 1, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_contains(v, cls, depth + 1, seen) for v in obj)
    for name in _CHILDREN:
        try:
            child = getattr(obj, name, None)
        except Exception:
            continue
        if child is not None and _contains(child, cls, depth + 1, seen):
            return True
    return False


__all__ = ["ChainWrappers"]
