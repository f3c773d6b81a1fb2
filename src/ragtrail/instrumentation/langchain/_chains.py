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

import contextlib
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.hooks import Args, Kwargs, argument, component_name, enabled, guard, run, run_async
from ragtrail.instrumentation._generate import answer_text, mapping_text, prompt_text, record_generation, set_model
from ragtrail.instrumentation.langchain._common import ChainRun, LangChainCall, Shared, chain_run
from ragtrail.recorder.pipeline import current_pipeline
from ragtrail.recorder.stage import Stage, current_stage, framework_output

_QUERY_KEYS = ("input", "question", "query")
# where a runnable keeps the runnables it runs (sequence, parallel map, assign, binding, branch, fallbacks)
_CHILDREN = ("first", "middle", "last", "steps__", "mapper", "bound", "runnable", "branches", "default", "fallbacks")
_MAX_DEPTH = 16


class ChainCall(LangChainCall):
    """A chain holding a retriever: the ``pipeline`` root, and the :class:`ChainRun` its retrievers
    offer their documents to and its model call reads them from."""

    site = "lc.chain"

    def open(self) -> Stage:
        query = mapping_text(argument(self.args, self.kwargs, 0, "input"), _QUERY_KEYS)
        s = self.open_stage(sc.KIND_PIPELINE, query=query)
        if s.recording:
            self.set_var(chain_run, ChainRun(s, query))
        return s

    def after(self, s: Stage, result: Any) -> None:
        framework_output(s, output_text(result))


class GenerateCall(LangChainCall):
    """A chat model / LLM called straight under a chain's pipeline: a ``generate`` stage (the
    documents the chain's retrievers offered, those in the prompt, and the answer)."""

    site = "lc.generate"

    def open(self) -> Stage:
        s = self.open_stage(sc.KIND_GENERATE)
        if s.recording:
            set_model(s, self.instance)
            self.prompt = argument(self.args, self.kwargs, 0, "input")
            self.chain = chain_run.get()
        return s

    def after(self, s: Stage, result: Any) -> None:
        chain = self.chain
        if chain is None:
            return
        offered = list(chain.offered)
        record_generation(s, offered, self.prompt, result)
        said = answer_text(result)
        if not offered and said:
            # read no document: what it wrote may be the question a retriever of this run is asked next
            asked = chain.asked
            text = prompt_text(self.prompt)
            chain.note_made(said, component_name(self.instance), asked is not None and text is not None and asked in text)


class ChainWrappers:
    """The wrapt wrappers of chains and models, bound to one ``instrument()``'s :class:`Shared`."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self._reads: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()

    # --- the chain: a pipeline root ------------------------------------------------------------------
    def sequence_invoke(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if current_pipeline() is not None or not enabled() or not guard("langchain.chain", self.reads_documents, instance):
            return wrapped(*args, **kwargs)
        return run(ChainCall(self.shared, wrapped, instance, args, kwargs))

    async def sequence_ainvoke(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if current_pipeline() is not None or not enabled() or not guard("langchain.chain", self.reads_documents, instance):
            return await wrapped(*args, **kwargs)
        return await run_async(ChainCall(self.shared, wrapped, instance, args, kwargs))

    def reads_documents(self, chain: Any) -> bool:
        """Whether a retriever is among the runnables ``chain`` runs (cached per chain object)."""
        try:
            return self._reads[chain]
        except (KeyError, TypeError):
            pass
        retriever = self.shared.classes.get("BaseRetriever")
        found = retriever is not None and _contains(chain, retriever, 0, set())
        with contextlib.suppress(TypeError):  # not weakly referenceable: not cached
            self._reads[chain] = found
        return found

    # --- the model call: a generate stage ------------------------------------------------------------
    def model_invoke(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if not _generating():
            return wrapped(*args, **kwargs)
        return run(GenerateCall(self.shared, wrapped, instance, args, kwargs))

    async def model_ainvoke(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if not _generating():
            return await wrapped(*args, **kwargs)
        return await run_async(GenerateCall(self.shared, wrapped, instance, args, kwargs))


def output_text(result: Any) -> str | None:
    """The chain's answer as it returned it: its output string (``| StrOutputParser()``), a message's
    text (a chain ending in the model), or ``create_retrieval_chain``'s ``answer``; else ``None``
    (a list of documents, a mapping without an answer string)."""
    if isinstance(result, Mapping):
        value = result.get("answer")
        return value if isinstance(value, str) else None
    if isinstance(result, (list, tuple)):
        return None
    return answer_text(result)


def _generating() -> bool:
    """A model call straight under a chain's pipeline (not inside one of its stages)."""
    chain = chain_run.get()
    return chain is not None and current_stage() is chain.stage and chain.generates()


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


__all__ = ["ChainCall", "ChainWrappers", "GenerateCall", "output_text"]
