"""How every LlamaIndex wrapper runs its call: one :class:`LlamaCall` per wrapped invocation, on the
one hook skeleton (:mod:`ragtrail.hooks`).

A call opens the stage and snapshots what the call was given *before* the library runs (some
LlamaIndex components rescore and reorder their input in place), then records the result after it.

Re-entrancy: the suppression key is per component instance, so a component whose public method calls
another wrapped public method of *itself* (``aretrieve`` falling back on ``retrieve``, an override
calling ``super()``) records once, while a different component called inside it (the sub-retrievers
of a fusion retriever, a nested query engine) still gets its own span. While it records, a call is
found by the hooks inside it (fusion input, LLM rerank choices, the nodes a synthesizer turns into
text chunks) through :func:`ragtrail.hooks.active_call`.
"""

from __future__ import annotations

from ragtrail.hooks import Call

__all__ = ["LlamaCall"]


class LlamaCall(Call):
    """Records one invocation of a wrapped LlamaIndex method as one stage. Subclasses set ``site``
    and implement ``open`` (``return self.new_stage(kind, ...)``), ``before`` and ``after``."""

    site = "llama_index"
    findable = True
