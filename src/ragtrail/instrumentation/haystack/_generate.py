"""The generation of a Haystack RAG pipeline: ``PromptBuilder`` / ``ChatPromptBuilder`` + a generator.

Generators share no base class (``OpenAIGenerator``, ``OpenAIChatGenerator``, a local model, an
app's own ``@component``), so the pipeline root (``Pipeline.run``) walks its components when a run
starts and patches the ``run`` of each class it has not met yet (once per class, undone by
``uninstrument()``):

- a component whose class name ends in ``PromptBuilder`` and that is given ``documents``: those
  documents are what the pipeline offered to the prompt;
- a component whose class name ends in ``Generator`` and that is given a ``prompt`` (str) or
  ``messages`` (chat messages) → a ``generate`` stage (:mod:`ragtrail.instrumentation._generate`):
  the offered documents, those whose text is in the prompt, and the first reply as the answer.

Only inside a pipeline run ragtrail records (``Pipeline.run`` of a pipeline that reads documents).
No ``cite`` stage: a generator's reply does not say which documents it used.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.hooks import Args, Kwargs
from ragtrail.instrumentation._generate import record_generation, set_model
from ragtrail.recorder.stage import Stage

from ._common import HaystackCall, snapshot


class HaystackRun:
    """One recorded pipeline run: the documents its prompt builder was given."""

    __slots__ = ("prompt_documents",)

    def __init__(self) -> None:
        self.prompt_documents: list[Any] | None = None


run_state: contextvars.ContextVar[HaystackRun | None] = contextvars.ContextVar("ragtrail_haystack_run", default=None)


def role_of(cls: type) -> str | None:
    """``prompt`` for a prompt builder class, ``generate`` for a generator class, else ``None``."""
    name = cls.__name__
    if name.endswith("PromptBuilder"):
        return "prompt"
    if name.endswith("Generator"):
        return "generate"
    return None


class Generate(HaystackCall):
    """A generator's ``run`` inside a recorded pipeline run: a ``generate`` stage."""

    kind = sc.KIND_GENERATE
    site = "haystack.generate"

    def skip(self) -> bool:
        bound = self.arguments
        return run_state.get() is None or not (isinstance(bound.get("prompt"), str) or isinstance(bound.get("messages"), (list, tuple)))

    def before(self, s: Stage) -> None:
        bound = self.arguments
        state = run_state.get()
        self.prompt = bound.get("prompt") if isinstance(bound.get("prompt"), str) else bound.get("messages")
        docs = state.prompt_documents if state is not None else None
        if docs is None:
            s.finding("no prompt builder was given documents in this run: nothing was offered to the prompt")
        self.offered = snapshot(list(docs or ())) or []
        set_model(s, self.instance)

    def after(self, s: Stage, result: Any) -> None:
        replies = result.get("replies") if isinstance(result, dict) else None
        record_generation(s, self.offered, self.prompt, replies)


def prompt_builder_run(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """A prompt builder's ``run``: its ``documents`` are what this run offers to the prompt."""
    state = run_state.get()
    docs = kwargs.get("documents")
    if state is not None and isinstance(docs, (list, tuple)):
        state.prompt_documents = list(docs)
    return wrapped(*args, **kwargs)


class ClassPatcher:
    """Patches ``run`` of the prompt builders and generators a pipeline holds, once per class."""

    def __init__(self, patch: Callable[[type, str], None]) -> None:
        self._patch = patch  # (class, role) -> wraps its run; the instrumentor records it
        self._seen: set[type] = set()
        self._lock = threading.Lock()

    def prepare(self, pipeline: Any) -> None:
        walk = getattr(pipeline, "walk", None)
        if not callable(walk):
            return
        for _, component in walk():
            cls = type(component)
            if cls in self._seen:
                continue
            with self._lock:
                if cls in self._seen:
                    continue
                self._seen.add(cls)
                role = role_of(cls)
                if role is not None:
                    self._patch(cls, role)


_current: list[ClassPatcher] = []  # the instrumentor's patcher (one at a time)


def current_patcher() -> ClassPatcher | None:
    return _current[-1] if _current else None


def install(p: ClassPatcher | None) -> None:
    _current.clear()
    if p is not None:
        _current.append(p)


__all__ = ["ClassPatcher", "Generate", "HaystackRun", "current_patcher", "install", "prompt_builder_run", "role_of", "run_state"]
