"""How every LlamaIndex wrapper runs its call: one :class:`Call` per wrapped invocation.

A ``Call`` opens the stage and snapshots what the call was given *before* the library runs (some
LlamaIndex components rescore and reorder their input in place), then records the result after it.
The runners call the wrapped function outside any ``try`` that could swallow its exception, return
its result object unchanged, and are real ``async def`` for coroutine methods so the span covers the
awaited work and lives in the task that runs it.

Re-entrancy: the suppression key is per component instance, so a component whose public method calls
another wrapped public method of *itself* (``aretrieve`` falling back on ``retrieve``, an override
calling ``super()``) records once, while a different component called inside it (the sub-retrievers
of a fusion retriever, a nested query engine) still gets its own span.
"""

from __future__ import annotations

import contextvars
from typing import Any, Callable, Sequence

from ragtrail.instrumentation._base import enabled, is_suppressed, suppressed
from ragtrail.recorder.errors import record_internal_error
from ragtrail.recorder.stage import Stage, stage

# component instance id -> the Call recording it right now (for hooks inside the call: fusion input,
# LLM rerank choices, the nodes a synthesizer turns into text chunks)
_active_calls: contextvars.ContextVar[dict[int, "Call"]] = contextvars.ContextVar("ragtrail_llama_index_calls", default={})


def component_name(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def argument(args: Sequence[Any], kwargs: dict[str, Any], position: int, *names: str) -> Any:
    """The argument at ``position`` or passed under one of ``names`` (wrapt hands us both forms)."""
    for name in names:
        if name in kwargs:
            return kwargs[name]
    return args[position] if len(args) > position else None


def active_call(instance: Any) -> "Call | None":
    return _active_calls.get().get(id(instance))


class Call:
    """Records one invocation of a wrapped method as one stage. Subclasses set ``prefix`` and
    implement :meth:`open` (build the Stage), :meth:`before` and :meth:`after`."""

    prefix = "llama_index"

    def __init__(self, tracer: Any, instance: Any, args: tuple, kwargs: dict) -> None:
        self.tracer = tracer
        self.instance = instance
        self.args = args
        self.kwargs = kwargs
        self.stage: Stage | None = None
        self._token: contextvars.Token | None = None

    # --- what a subclass provides ------------------------------------------------------------------
    def open(self) -> Stage | None:  # pragma: no cover - abstract
        """The stage to record this call as; ``None`` to let the call through unrecorded."""
        raise NotImplementedError

    def before(self, s: Stage) -> None:
        """Record the query and snapshot the inputs (only called when the span is recording)."""

    def after(self, s: Stage, result: Any) -> None:
        """Record the outputs (only called when the span is recording)."""

    # --- lifecycle, every step guarded -----------------------------------------------------------
    def start(self) -> bool:
        try:
            opened = self.open()
            if opened is None:
                return False
            self.stage = opened.start()
        except Exception as exc:
            record_internal_error(f"{self.prefix}.open", exc)
            return False
        try:
            calls = dict(_active_calls.get())
            calls[id(self.instance)] = self
            self._token = _active_calls.set(calls)
        except Exception as exc:  # pragma: no cover - defensive
            record_internal_error(f"{self.prefix}.register", exc)
        if self.stage.recording:
            try:
                self.before(self.stage)
            except Exception as exc:
                self.stage.record_error(f"{self.prefix}.before", exc)
        return True

    def end(self, result: Any = None, exc: BaseException | None = None) -> None:
        s = self.stage
        if s is None:
            return
        if exc is None and s.recording:
            try:
                self.after(s, result)
            except Exception as error:
                s.record_error(f"{self.prefix}.after", error)
        if self._token is not None:
            try:
                _active_calls.reset(self._token)
            except ValueError:  # ended in another context: leave the other context's map alone
                pass
            self._token = None
        s.finish(exc)

    def new_stage(self, kind: str, **options: Any) -> Stage:
        return stage(kind, component_name(self.instance), tracer=self.tracer, **options)


def run_sync(call_cls: Callable[..., Call], tracer: Any, wrapped: Callable[..., Any], instance: Any,
             args: tuple, kwargs: dict) -> Any:
    key = f"{call_cls.prefix}:{id(instance)}"
    if not enabled() or is_suppressed(key):
        return wrapped(*args, **kwargs)
    with suppressed(key):
        call = call_cls(tracer, instance, args, kwargs)
        if not call.start():
            return wrapped(*args, **kwargs)
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exc:
            call.end(exc=exc)
            raise
        call.end(result)
        return result


async def run_async(call_cls: Callable[..., Call], tracer: Any, wrapped: Callable[..., Any], instance: Any,
                    args: tuple, kwargs: dict) -> Any:
    key = f"{call_cls.prefix}:{id(instance)}"
    if not enabled() or is_suppressed(key):
        return await wrapped(*args, **kwargs)
    with suppressed(key):
        call = call_cls(tracer, instance, args, kwargs)
        if not call.start():
            return await wrapped(*args, **kwargs)
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as exc:
            call.end(exc=exc)
            raise
        call.end(result)
        return result


def sync_wrapper(call_cls: Callable[..., Call], tracer_of: Callable[[], Any]) -> Callable[..., Any]:
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        return run_sync(call_cls, tracer_of(), wrapped, instance, args, kwargs)

    return wrapper


def async_wrapper(call_cls: Callable[..., Call], tracer_of: Callable[[], Any]) -> Callable[..., Any]:
    async def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        return await run_async(call_cls, tracer_of(), wrapped, instance, args, kwargs)

    return wrapper
