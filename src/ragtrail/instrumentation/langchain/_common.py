"""What every LangChain wrapper shares: the call skeleton (sync and async), score sinks, the
LangChain ``Document`` adapter with pipeline-wide identity, and lazy class patching.

LangChain computes many scores it does not return (BM25, cross-encoder, RRF, vector similarity).
A stage recovers them through a *sink*: while the stage is open, the lower-level call that
computes the scores (fed by an object the stage names, e.g. its vector store) drops them into the
sink instead of opening a span of its own. Sinks live in a context variable, so they follow
asyncio tasks and LangChain's context-copying executors, and never cross between requests.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import weakref
from typing import Any, Awaitable, Callable, Iterable, Iterator, Sequence

import wrapt

from ragtrail import settings
from ragtrail.recorder.candidates import Candidate, adapt, lookup_adapter
from ragtrail.instrumentation._base import enabled, guard, suppressed
from ragtrail.contract.receipts import receipt
from ragtrail.recorder.errors import record_internal_error
from ragtrail.recorder.pipeline import current_pipeline
from ragtrail.recorder.stage import Stage, current_stage, stage


# --- sinks: scores a stage recovers from the calls beneath it -------------------------------------
class Sink:
    """Collects what lower-level calls fed by ``feeds`` computed while ``stage`` was open."""

    __slots__ = ("feeds", "stage", "data")

    def __init__(self, stage: Stage, feeds: Sequence[Any]) -> None:
        self.stage = stage
        self.feeds = tuple(feeds)
        self.data: dict[str, Any] = {}

    def accepts(self, obj: Any) -> bool:
        return any(feed is obj for feed in self.feeds)


_sink: contextvars.ContextVar[Sink | None] = contextvars.ContextVar("ragtrail_langchain_sink", default=None)


def sink_for(obj: Any) -> Sink | None:
    """The innermost open sink that ``obj`` feeds, if any."""
    sink = _sink.get()
    if sink is not None and sink.accepts(obj):
        return sink
    return None


def feed(obj: Any, key: str, value: Any) -> bool:
    """Drop ``value`` into the sink ``obj`` feeds (first value wins). True when a sink took it."""
    sink = sink_for(obj)
    if sink is None:
        return False
    sink.data.setdefault(key, value)
    return True


# --- one instrumented call ---------------------------------------------------------------------------
class Call:
    """An open stage plus what its finisher needs. ``finish`` turns the library's result into the
    stage's outputs; it runs guarded, after the library call returned, and never touches the result."""

    __slots__ = ("stage", "sink", "_sink_token", "finisher", "state", "resets")

    def __init__(self, s: Stage, feeds: Sequence[Any] = (), finisher: Callable[["Call", Any], None] | None = None) -> None:
        self.stage = s
        self.finisher = finisher
        self.state: dict[str, Any] = {}
        self.resets: list[tuple[contextvars.ContextVar, contextvars.Token]] = []
        self.sink: Sink | None = None
        self._sink_token: contextvars.Token | None = None
        if s.recording and feeds:
            self.sink = Sink(s, feeds)
            self._sink_token = _sink.set(self.sink)

    def set_var(self, var: contextvars.ContextVar, value: Any) -> None:
        """Set a context variable for the duration of the call (reset however the call ends)."""
        self.resets.append((var, var.set(value)))

    def _close_sink(self) -> None:
        while self.resets:
            var, token = self.resets.pop()
            try:
                var.reset(token)
            except ValueError:  # pragma: no cover - finished in another context
                pass
        if self._sink_token is not None:
            try:
                _sink.reset(self._sink_token)
            except ValueError:  # finished in another context: nothing of ours is left there
                pass
            self._sink_token = None

    def done(self, result: Any) -> None:
        self._close_sink()
        if self.stage.recording and self.finisher is not None:
            guard("langchain.finish", self.finisher, self, result)
        self.stage.finish()

    def fail(self, exc: BaseException) -> None:
        self._close_sink()
        self.stage.finish(exc)


Opener = Callable[[Any, tuple, dict], "Call | None"]

# context variables an opener may set for the duration of a call (a module adds its own here)
SCOPED_VARS: list[contextvars.ContextVar] = [_sink]


def _open(key: str, opener: Opener, instance: Any, args: tuple, kwargs: dict) -> "Call | None":
    """Run the opener; if it fails half-way, close whatever it had opened (the stage's span and
    context, any call-scoped variable) so the host's context is exactly as before."""
    before_stage = current_stage()
    before = [(var, var.get()) for var in SCOPED_VARS]
    try:
        return opener(instance, args, kwargs)
    except Exception as exc:
        record_internal_error(f"langchain.open.{key}", exc)
        for var, value in before:
            if var.get() is not value:
                var.set(value)
        opened = current_stage()
        if opened is not None and opened is not before_stage:
            opened.finish()
        return None


def run_sync(key: str, opener: Opener, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
    """The sync skeleton: call through when disabled or already recorded by an outer wrapper of
    the same object; otherwise open, call (outside any try that could swallow), finish."""
    if not enabled():
        return wrapped(*args, **kwargs)
    with suppressed(f"{key}:{id(instance)}") as inner:
        if inner:
            return wrapped(*args, **kwargs)
        call = _open(key, opener, instance, args, kwargs)
        if call is None:
            return wrapped(*args, **kwargs)
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exc:
            call.fail(exc)
            raise
        call.done(result)
        return result


async def run_async(key: str, opener: Opener, wrapped: Callable[..., Awaitable[Any]], instance: Any, args: tuple, kwargs: dict) -> Any:
    """The async skeleton: a real coroutine; the stage ends when the awaited work ends."""
    if not enabled():
        return await wrapped(*args, **kwargs)
    with suppressed(f"{key}:{id(instance)}") as inner:
        if inner:
            return await wrapped(*args, **kwargs)
        call = _open(key, opener, instance, args, kwargs)
        if call is None:
            return await wrapped(*args, **kwargs)
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as exc:
            call.fail(exc)
            raise
        call.done(result)
        return result


def open_stage(tracer: Any, kind: str, component: str, *, query: Any = None, top_k: Any = None,
               threshold: Any = None, score_kind: str | None = None) -> Stage:
    s = stage(kind, component, top_k=_int_or_none(top_k), threshold=_float_or_none(threshold),
              score_kind=score_kind, tracer=tracer).start()
    if s.recording and isinstance(query, str):
        s.query(query)
    return s


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _float_or_none(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


_components: dict[type, str] = {}


def component(obj: Any) -> str:
    """``module.Class`` of what ran (cached per class)."""
    cls = type(obj)
    name = _components.get(cls)
    if name is None:
        name = f"{cls.__module__}.{cls.__qualname__}"
        _components[cls] = name
    return name


def arg(args: tuple, kwargs: dict, index: int, name: str, default: Any = None) -> Any:
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


# --- Documents: pipeline-wide identity ----------------------------------------------------------
# Several LangChain stages rebuild Documents without their id (EmbeddingsFilter, the redundant
# filter, Cohere/Flashrank rerankers). Within one pipeline run, an id-less Document whose content
# an earlier stage saw with an id keeps that id, so a candidate is one identity across stages.
# The same content passes through every stage of a run: its receipt is stamped once per run.
class _RunMemory:
    __slots__ = ("ids", "receipts")

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}  # content sha256 -> first id seen with it
        self.receipts: dict[int, tuple[str, Any]] = {}  # id(content str) -> (the str, its receipt)


_memory_lock = threading.Lock()
_memories: "weakref.WeakKeyDictionary[Any, _RunMemory]" = weakref.WeakKeyDictionary()


_shared: contextvars.ContextVar[_RunMemory | None] = contextvars.ContextVar("ragtrail_langchain_memory", default=None)


@contextlib.contextmanager
def shared_memory() -> Iterator[None]:
    """One identity memory for stages that are separate ragtrail pipelines (each a root stage,
    e.g. the steps of a compressor pipeline called on its own)."""
    token = _shared.set(_RunMemory())
    try:
        yield
    finally:
        _shared.reset(token)


def _run_memory() -> _RunMemory | None:
    memory = _shared.get()
    if memory is not None:
        return memory
    state = current_pipeline()
    if state is None:
        return None
    memory = _memories.get(state)
    if memory is None:
        with _memory_lock:
            memory = _memories.get(state)
            if memory is None:
                memory = _RunMemory()
                _memories[state] = memory
    return memory


def adapt_document(doc: Any) -> Candidate:
    """LangChain ``Document`` → Candidate: id = ``Document.id``; when absent, the id an earlier
    stage of the same pipeline gave the same content, else ``sha256:`` of the content."""
    return _adapt_document(doc, _run_memory(), settings.get().metadata)


def _adapt_document(doc: Any, memory: _RunMemory | None, keep_metadata: Any) -> Candidate:
    content = doc.page_content
    rec = None
    if memory is not None:
        known = memory.receipts.get(id(content))
        if known is not None and known[0] is content:  # the very same str object: same receipt
            rec = known[1]
    if rec is None:
        rec = receipt(content)
        if memory is not None and isinstance(content, str):
            memory.receipts[id(content)] = (content, rec)  # holds the str, so its id is not reused
    ident = doc.id
    if ident is not None and ident != "":
        if type(ident) is not str:
            ident = str(ident)
        if memory is not None:
            memory.ids.setdefault(rec.sha256, ident)
    else:
        ident = memory.ids.get(rec.sha256) if memory is not None else None
        if ident is None:
            ident = "sha256:" + rec.sha256
    metadata = None
    if keep_metadata and isinstance(doc.metadata, dict):
        metadata = dict(doc.metadata)  # snapshot: some compressors edit metadata in place
    return Candidate(id=ident, content=content, metadata=metadata, raw=doc).with_receipt(rec)


def adapt_all(items: Iterable[Any]) -> list[Candidate]:
    """``[adapt(item) for item in items]``, with the run's identity memory and the capture
    configuration looked up once per list instead of once per Document (a stage adapts ~100)."""
    memory = _run_memory()
    keep_metadata = settings.get().metadata
    out = []
    for item in items:
        if lookup_adapter(type(item)) is adapt_document:  # the adapter adapt() would pick (registry-cached)
            out.append(_adapt_document(item, memory, keep_metadata))
        else:
            out.append(adapt(item))
    return out


# --- lazy patching of classes met at run time ----------------------------------------------------
def defining_owner(cls: type, name: str) -> type | None:
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass
    return None


class LazyPatcher:
    """Wraps a method on a class first met at run time (a user's cross-encoder or vector store),
    once, recording it so ``uninstrument()`` undoes it like any other wrap."""

    def __init__(self, wrapped_list: list[tuple[Any, str]]) -> None:
        self._lock = threading.Lock()
        self._done: set[tuple[int, str]] = set()
        self._seen: set[tuple[type, str]] = set()  # (class, name) already resolved: the per-call fast path
        self._wrapped = wrapped_list

    def mark(self, owner: Any, name: str) -> None:
        self._done.add((id(owner), name))

    def ensure(self, cls: type, name: str, wrapper: Callable[..., Any], skip: Sequence[type] = ()) -> None:
        if (cls, name) in self._seen:
            return
        self._ensure(cls, name, wrapper, skip)
        self._seen.add((cls, name))

    def _ensure(self, cls: type, name: str, wrapper: Callable[..., Any], skip: Sequence[type]) -> None:
        owner = defining_owner(cls, name)
        if owner is None or owner in skip or owner is object:
            return
        key = (id(owner), name)
        if key in self._done:
            return
        with self._lock:
            if key in self._done:
                return
            try:
                wrapt.wrap_function_wrapper(owner, name, wrapper)
            except Exception as exc:  # pragma: no cover - exotic descriptors
                record_internal_error("langchain.lazy_patch", exc)
                return
            self._done.add(key)
            self._wrapped.append((owner, name))
