"""What every ragtrail library instrumentor shares: patching with wrapt and clean unpatching. How
a patched call is recorded (suppression, guarding, sync and async) is :mod:`ragtrail.hooks`.

A library module subclasses :class:`RagtrailInstrumentor`, declares ``_instruments`` and implements
``_patch()`` with :meth:`RagtrailInstrumentor.wrap`; ``uninstrument()`` undoes every wrap it made and
every candidate adapter it registered with :meth:`RagtrailInstrumentor.register_adapter`.

Why patch on import (:meth:`RagtrailInstrumentor.when_imported`): ``opentelemetry-instrument`` calls
``instrument()`` for every installed instrumentation at start-up, and importing a RAG library costs
0.2-10 s (llama-index ~1.4 s, chromadb and qdrant ~0.8 s, torch-based rerankers 5-10 s). A process
that merely has a library installed must not pay that: ``_patch`` only registers a post-import hook
and the patching runs when the application imports the module (at once when it already has).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Collection
from typing import Any

import wrapt
from opentelemetry import trace

# the module starts with a file-level ``# type: ignore``, so mypy sees none of its names (a
# release without that line needs no ignore: hence unused-ignore)
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined, unused-ignore]
from opentelemetry.instrumentation.utils import unwrap

from ragtrail import __version__
from ragtrail.hooks import guard
from ragtrail.recorder import candidates as _candidates


class RagtrailInstrumentor(BaseInstrumentor):  # type: ignore[misc, unused-ignore]  # OTel's base is untyped (Any) for mypy
    """Base for ragtrail's per-library instrumentors."""

    _instruments: Collection[str] = ()
    _wrapped: list[tuple[Any, str]]

    def instrumentation_dependencies(self) -> Collection[str]:
        return self._instruments

    def _instrument(self, **kwargs: Any) -> None:
        self.tracer = trace.get_tracer("ragtrail", __version__, tracer_provider=kwargs.get("tracer_provider"))
        # BaseInstrumentor is a singleton whose __init__ runs on every ``Cls()``: state lives here
        self.__dict__.setdefault("_hooks_lock", threading.RLock())
        with self._hooks_lock:
            self._wrapped = []
            self._adapters: list[type] = []
            self._import_token: object | None = object()
        self._patch(**kwargs)

    def _uninstrument(self, **kwargs: Any) -> None:
        with self.__dict__.setdefault("_hooks_lock", threading.RLock()):
            self._import_token = None  # a hook that has not fired yet will do nothing
            for owner, name in reversed(getattr(self, "_wrapped", [])):
                unwrap(owner, name)
            self._wrapped = []
            for cls in reversed(getattr(self, "_adapters", [])):
                _candidates.unregister_adapter(cls)
            self._adapters = []

    def when_imported(self, module: str, patch: Callable[[], Any]) -> None:
        """Run ``patch`` when the application imports ``module`` (at once when it already has).

        ``instrument()`` must import no library (see the module docstring). The hook belongs to
        this ``instrument()``: after ``uninstrument()`` (or a later ``instrument()``) it does
        nothing. An error in ``patch`` is counted and logged, never raised into the import."""
        token = self._import_token

        def hook(_module: Any) -> None:
            with self._hooks_lock:
                if self._import_token is token and token is not None:
                    guard(f"{type(self).__name__}.patch {module}", patch)

        wrapt.register_post_import_hook(hook, module)

    def register_adapter(self, cls: type, fn: Callable[[Any], Any]) -> None:
        """Register a candidate adapter for a library type; ``uninstrument()`` removes it."""
        _candidates.register_adapter(cls, fn)
        self._adapters.append(cls)

    def _patch(self, **kwargs: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def wrap(self, module: str, name: str, wrapper: Callable[..., Any], *, optional: bool = True) -> bool:
        """Patch ``module.name`` (``name`` may be ``Class.method``). A missing module or attribute
        is skipped when ``optional`` (versions differ), so one absent class never blocks the rest.
        A method defined only on a base class is patched there, not duplicated on the subclass."""
        try:
            target = importlib.import_module(module)
            owner = target
            parts = name.split(".")
            for part in parts[:-1]:
                owner = getattr(owner, part)
            if parts[-1] not in vars(owner) and isinstance(owner, type) and optional:
                return False
            getattr(owner, parts[-1])
        except (ImportError, AttributeError):
            if optional:
                return False
            raise
        wrapt.wrap_function_wrapper(owner, parts[-1], wrapper)
        self._wrapped.append((owner, parts[-1]))
        return True
