"""The one hook skeleton every ragtrail hook runs on: the library instrumentations
(:mod:`ragtrail.instrumentation`) and the decorators of :mod:`ragtrail.api`. Public: both depend on
it, and a new integration is written against it (see docs/architecture.md).

A hook is a :class:`Call` subclass, instantiated once per invocation of the wrapped function, that
says what the invocation means as a stage:

``open()``
    The stage this invocation is (started, through :meth:`Call.new_stage`), or ``None`` when it is
    no stage here (a query engine inside a pipeline, a reranker inside a rerank stage).
``before(stage)``
    What the call was given: the query, a snapshot of its inputs (libraries sort and rescore in
    place). Runs only when the span records.
``after(stage, result)``
    What the call returned. Runs only when the span records (:meth:`Call.records`), never changes
    the result.
``cleanup()``
    Runs once the stage has ended, whatever happened (after a failure too): undo what ``open`` /
    ``before`` put in the context, write stages that must not be children of this one.

:func:`run` (sync) and :func:`run_async` (a real coroutine: the stage covers the awaited work, in the
task that awaits it) are the only two runners. Their contract, modelled on the
opentelemetry-python-contrib instrumentations:

* One suppression rule. A call is recorded unless ``is_instrumentation_enabled()`` is false (OTel's
  ``suppress_instrumentation()``), or a call with the same :meth:`Call.key` is already being
  recorded in this context. The key is per component instance by default (``site:id(instance)``),
  so a public method that calls another wrapped method of the same object (``aretrieve`` falling
  back on ``retrieve``, an override calling ``super()``) records once, while a different component
  called inside it still gets its own stage; a hook may widen it to the whole library
  (:attr:`Call.per_instance` false) or turn it off (``key`` returning ``None``: a decorated
  function).
* The wrapped function is called outside any ``try`` that could swallow its exception; its result
  is returned as the very same object; an exception propagates unchanged after the stage ended
  ``failed``; nothing is awaited after the wrapped coroutine finished.
* Every hook step is guarded: an error is counted (``ragtrail.internal_error_count()``) and logged
  once, the stage records it, and the host never sees it. A stage half-opened by a failing ``open``
  is ended, and context variables set through :meth:`Call.set_var` are reset, so the host's context
  is exactly as before.

Also here, written once: :func:`bind` (the call's arguments by name, defaults applied),
:func:`argument` (one argument by position or name), :func:`component_name` (``module.Class`` of
what ran), :func:`active_call` (the call recording a component right now, for hooks inside it) and
:func:`guard`.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any

from opentelemetry.instrumentation.utils import is_instrumentation_enabled

from ragtrail.recorder.errors import record_internal_error
from ragtrail.recorder.stage import Stage, counted, stage

Args = tuple[Any, ...]  # a wrapped call's positional arguments, as wrapt hands them over
Kwargs = dict[str, Any]  # and its keyword arguments
_active: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("ragtrail_active_hooks", default=frozenset())
# component instance id -> the Call recording it in this context (see active_call)
_calls: contextvars.ContextVar[Mapping[int, Call]] = contextvars.ContextVar("ragtrail_active_calls", default=MappingProxyType({}))


def enabled() -> bool:
    """False inside OTel's ``suppress_instrumentation()``; every hook respects it."""
    return is_instrumentation_enabled()


def is_active(key: str) -> bool:
    """Whether a call with ``key`` is being recorded in this context."""
    return key in _active.get()


def guard(site: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a recording step; an error is counted and logged once, never raised into the app."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        record_internal_error(site, exc)
        return None


# --- names and arguments ---------------------------------------------------------------------------
_names: dict[Any, str] = {}


def component_name(obj: Any) -> str:
    """``module.Qualname`` of what ran: a function's own name, else its class's (cached). A
    ``functools.partial`` is named by the function it wraps; anything without a ``__qualname__``
    (a callable instance, an extension object) by its class, or by ``__name__``: never raises."""
    while isinstance(obj, functools.partial):
        obj = obj.func
    target = obj if isinstance(obj, type) or inspect.isroutine(obj) else type(obj)
    try:
        return _names[target]
    except (KeyError, TypeError):
        pass
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    if not isinstance(qualname, str):
        qualname = getattr(type(target), "__qualname__", "callable")
    name = f"{module}.{qualname}" if isinstance(module, str) and module else str(qualname)
    with contextlib.suppress(TypeError):  # an unhashable callable: not cached
        _names[target] = name
    return name


def argument(args: Args, kwargs: Mapping[str, Any], position: int | None, *names: str, default: Any = None) -> Any:
    """A call argument passed under one of ``names`` or at ``position`` (``None``: keyword-only).
    wrapt hands a wrapper either form, never both for one parameter."""
    for name in names:
        if name in kwargs:
            return kwargs[name]
    if position is not None and len(args) > position:
        return args[position]
    return default


_signatures: dict[tuple[Any, bool], inspect.Signature | None] = {}


def bind(fn: Callable[..., Any], args: Args, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The call's arguments by parameter name, with the callee's defaults applied: every name has
    the value the function itself sees (a left-out ``top_k=None`` reads ``None``, a left-out
    ``n_results=10`` reads ``10``). The signature is computed once per function. Without a
    signature, or when the arguments do not fit it (the call will raise its own ``TypeError``, and
    the stage records that failure), the keyword arguments as given."""
    key = (getattr(fn, "__func__", fn), hasattr(fn, "__self__"))  # a bound method's signature has no self
    try:
        signature = _signatures[key]
    except KeyError:
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):  # builtins and extension functions without one
            signature = None
        _signatures[key] = signature
    except TypeError:  # pragma: no cover - unhashable callable
        signature = None
    if signature is None:
        return dict(kwargs)
    try:
        bound = signature.bind_partial(*args, **kwargs)
    except TypeError:
        return dict(kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def active_call(instance: Any) -> Call | None:
    """The :attr:`Call.findable` call recording ``instance`` in this context, if any: how a hook on
    one of the component's internal methods (a fusion step, an LLM's parse) reaches its stage."""
    return _calls.get().get(id(instance))


# --- one invocation --------------------------------------------------------------------------------
class Call:
    """One invocation of a wrapped function, and what it means as a stage (see the module docs)."""

    site = "hook"  # where errors are counted, and the prefix of the suppression key
    per_instance = True  # the key is per component instance (False: one for the whole library)
    findable = False  # register in :func:`active_call` while recording

    def __init__(self, tracer: Any, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> None:
        self.tracer = tracer
        self.wrapped = wrapped
        self.instance = instance
        self.args = args
        self.kwargs = kwargs
        self.stage: Stage | None = None
        self._resets: list[tuple[contextvars.ContextVar[Any], contextvars.Token[Any]]] | None = None
        self._arguments: dict[str, Any] | None = None

    # --- what a hook provides ----------------------------------------------------------------------
    def key(self) -> str | None:
        """The suppression key (see the module docs); ``None``: never suppressed by nesting."""
        return f"{self.site}:{id(self.instance)}" if self.per_instance else self.site

    def open(self) -> Stage | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def before(self, s: Stage) -> None:
        """Record what the call was given (only while the span records)."""

    def after(self, s: Stage, result: Any) -> None:
        """Record what the call returned (only when :meth:`records`)."""

    def failed(self, s: Stage, exc: BaseException) -> None:
        """The call raised ``exc``; the stage then ends ``failed`` (a hook may refine the status)."""

    def cleanup(self) -> None:
        """After the stage ended, however the call went."""

    def records(self) -> bool:
        """Whether :meth:`after` runs: the span records."""
        return self.stage is not None and self.stage.recording

    def counted_outputs(self, result: Any) -> Any:
        """Sampled out while metrics are counted (docs/semconv.md §9): the call's output list when the
        number of its items is the call's whole outcome (the stage keeps only that number: none an
        ``empty`` stage, some an ``ok`` one). ``None`` (the default): not known cheaply, e.g. a hook that
        reads a fallback from the result; the stage then counts ``unknown``. Nothing is adapted or copied."""
        return None

    # --- helpers for hooks -------------------------------------------------------------------------
    def new_stage(self, kind: str, component: str | None = None, **options: Any) -> Stage:
        """Start this call's stage (``component`` defaults to the instance's ``module.Class``)."""
        s = stage(kind, component or component_name(self.instance), tracer=self.tracer, **options)
        self.stage = s
        return s.start()

    @property
    def arguments(self) -> dict[str, Any]:
        """The call's arguments by name, defaults applied (:func:`bind`), bound once."""
        if self._arguments is None:
            self._arguments = bind(self.wrapped, self.args, self.kwargs)
        return self._arguments

    def set_var(self, var: contextvars.ContextVar[Any], value: Any) -> None:
        """Set a context variable until the call's stage ends (reset however the call ends)."""
        if self._resets is None:
            self._resets = []
        self._resets.append((var, var.set(value)))

    def error(self, step: str, exc: BaseException) -> None:
        """Count an error in a hook step (on the stage when there is one)."""
        site = f"{self.site}.{step}"
        if self.stage is not None:
            self.stage.record_error(site, exc)
        else:
            record_internal_error(site, exc)


# --- the runners -----------------------------------------------------------------------------------
def _begin(call: Call) -> contextvars.Token[frozenset[str]] | bool:
    """Open the stage and record the inputs. Returns the suppression token (``True`` when the call
    has no key) once a stage is open; ``False`` to let the call through unrecorded."""
    if not is_instrumentation_enabled():
        return False
    try:
        key = call.key()
    except Exception as exc:
        call.error("key", exc)
        return False
    active = _active.get()
    if key is not None and key in active:
        return False
    token: contextvars.Token[frozenset[str]] | bool = _active.set(active | {key}) if key is not None else True
    try:
        opened = call.open()
    except Exception as exc:
        call.error("open", exc)
        opened = None
    if opened is None:
        _close(call)
        if token is not True:
            _active.reset(token)  # type: ignore[arg-type]
        return False
    call.stage = opened
    if opened.recording:
        if call.findable:
            try:
                calls = dict(_calls.get())
                calls[id(call.instance)] = call
                call.set_var(_calls, calls)
            except Exception as exc:  # pragma: no cover - defensive
                call.error("register", exc)
        try:
            call.before(opened)
        except Exception as exc:
            call.error("before", exc)
    return token


def _close(call: Call) -> None:
    """End a stage left open and reset the call's context variables (newest first)."""
    if call.stage is not None:
        call.stage.finish()
    _reset(call)


def _reset(call: Call) -> None:
    resets = call._resets
    while resets:
        var, token = resets.pop()
        try:  # noqa: SIM105 - the hot path: contextlib.suppress would allocate a context manager per reset
            var.reset(token)
        except ValueError:  # ended in another context: nothing of ours is left there
            pass


def _end(call: Call, token: contextvars.Token[frozenset[str]] | bool, result: Any = None, exc: BaseException | None = None) -> None:
    s = call.stage
    try:
        if exc is not None:
            try:
                call.failed(s, exc)  # type: ignore[arg-type]
            except Exception as error:
                call.error("failed", error)
        elif call.records():
            try:
                call.after(s, result)  # type: ignore[arg-type]
            except Exception as error:
                call.error("after", error)
        elif s is not None and counted(s):
            _hand_over_outputs(call, s, result)
    finally:
        try:
            s.finish(exc)  # type: ignore[union-attr]
            try:
                call.cleanup()
            except Exception as error:
                call.error("cleanup", error)
        finally:
            _reset(call)
            if token is not True:
                _active.reset(token)  # type: ignore[arg-type]


def _hand_over_outputs(call: Call, s: Stage, result: Any) -> None:
    """A sampled-out, counted stage: the number of the outputs the hook says are its whole outcome."""
    try:
        outputs = call.counted_outputs(result)
        if outputs is not None:
            s.outputs(outputs)
    except Exception as error:
        call.error("counted_outputs", error)


def run(call: Call) -> Any:
    """Run ``call.wrapped`` as the stage ``call`` describes (or straight through)."""
    token = _begin(call)
    if token is False:
        return call.wrapped(*call.args, **call.kwargs)
    try:
        result = call.wrapped(*call.args, **call.kwargs)
    except BaseException as exc:
        _end(call, token, exc=exc)
        raise
    _end(call, token, result)
    return result


async def run_async(call: Call) -> Any:
    """:func:`run` for a coroutine function: the stage covers the awaited work."""
    token = _begin(call)
    if token is False:
        return await call.wrapped(*call.args, **call.kwargs)
    try:
        result = await call.wrapped(*call.args, **call.kwargs)
    except BaseException as exc:
        _end(call, token, exc=exc)
        raise
    _end(call, token, result)
    return result


def decorated(fn: Callable[..., Any], make_call: Callable[[Args, Kwargs], Call]) -> Callable[..., Any]:
    """A decorator's wrapper for ``fn``: :func:`run` written out in the wrapper itself, so a
    decorated call costs one frame more than the bare call and no more (a recursive decorated
    function keeps its recursion headroom). Near the recursion limit the stage machinery may find
    no room: that is caught and counted inside it, and the call runs unrecorded."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        call = make_call(args, kwargs)
        token = _begin(call)
        if token is False:
            return fn(*args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            _end(call, token, exc=exc)
            raise
        _end(call, token, result)
        return result

    return wrapper


def decorated_async(fn: Callable[..., Any], make_call: Callable[[Args, Kwargs], Call]) -> Callable[..., Any]:
    """:func:`decorated` for a coroutine function (a real coroutine function: the stage covers the
    awaited work)."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        call = make_call(args, kwargs)
        token = _begin(call)
        if token is False:
            return await fn(*args, **kwargs)
        try:
            result = await fn(*args, **kwargs)
        except BaseException as exc:
            _end(call, token, exc=exc)
            raise
        _end(call, token, result)
        return result

    return wrapper


CallFactory = Callable[[Any, Callable[..., Any], Any, Args, Kwargs], Call]


def sync_wrapper(call_cls: CallFactory, tracer_of: Callable[[], Any]) -> Callable[..., Any]:
    """A wrapt wrapper recording each call of a sync method as ``call_cls`` says."""

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        return run(call_cls(tracer_of(), wrapped, instance, args, kwargs))

    return wrapper


def async_wrapper(call_cls: CallFactory, tracer_of: Callable[[], Any]) -> Callable[..., Awaitable[Any]]:
    """A wrapt wrapper (a real coroutine function) for an ``async def`` method."""

    async def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        return await run_async(call_cls(tracer_of(), wrapped, instance, args, kwargs))

    return wrapper


__all__ = [
    "Args",
    "Call",
    "CallFactory",
    "Kwargs",
    "active_call",
    "argument",
    "async_wrapper",
    "bind",
    "component_name",
    "decorated",
    "decorated_async",
    "enabled",
    "guard",
    "is_active",
    "run",
    "run_async",
    "sync_wrapper",
]
