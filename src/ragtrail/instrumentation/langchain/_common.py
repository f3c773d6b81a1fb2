"""What every LangChain hook shares: its call on the hook skeleton (:mod:`ragtrail.hooks`), one
:class:`LangChainCall` subclass per component family found through a :class:`CallRegistry` keyed by
class, score sinks, the LangChain ``Document`` adapter with pipeline-wide identity, and lazy class
patching.

LangChain computes many scores it does not return (BM25, cross-encoder, RRF, vector similarity).
A stage recovers them through a *sink*: while the stage is open, the lower-level call that
computes the scores (fed by an object the stage names, e.g. its vector store) drops them into the
sink instead of opening a span of its own. Sinks live in a context variable, so they follow
asyncio tasks and LangChain's context-copying executors, and never cross between requests.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import wrapt

from ragtrail import settings
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import receipt
from ragtrail.hooks import Args, Call, Kwargs
from ragtrail.recorder.candidates import Candidate, adapt, lookup_adapter, stamped_candidate
from ragtrail.recorder.errors import record_internal_error
from ragtrail.recorder.pipeline import PipelineState, current_pipeline
from ragtrail.recorder.stage import Stage, counted, current_stage, handed_up, stage


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


class ChainRun:
    """One chain run recorded as a pipeline (see ``_chains``): its stage, and the documents its
    retrievers handed on (each retriever called directly under the pipeline adds its outputs)."""

    __slots__ = ("stage", "offered", "asked", "made", "_lock")

    def __init__(self, stage: Stage, asked: str | None = None) -> None:
        self.stage = stage
        self.offered: list[Candidate] = []
        self.asked = asked  # the question the chain was given (its pipeline's query)
        # text a model call straight under the run wrote before any document was offered -> (the
        # model's component, whether its prompt held the question)
        self.made: dict[str, tuple[str, bool]] = {}
        self._lock = threading.Lock()

    def note_made(self, text: str, component: str, from_question: bool) -> None:
        """A model call that read no document wrote ``text``: if a retriever of this run is then asked
        ``text`` (``create_history_aware_retriever``'s contextualizer), the call rewrote the question."""
        with self._lock:
            self.made.setdefault(text, (component, from_question))

    def made_by(self, text: str) -> tuple[str, bool] | None:
        with self._lock:
            return self.made.pop(text, None)

    def offer(self, candidates: list[Candidate]) -> None:
        with self._lock:
            known = {c.id for c in self.offered}
            self.offered.extend(c for c in candidates if c.id not in known)

    def generates(self) -> bool:
        """Whether a model called straight under this run is a generation (a chain's always is)."""
        return True


chain_run: contextvars.ContextVar[ChainRun | None] = contextvars.ContextVar("ragtrail_langchain_chain", default=None)


def _rewritten_by_model(query: str) -> None:
    """A retriever asked the text a model call of this chain run wrote (having read no document):
    that call rewrote the question. Said as a ``query_transform`` stage named after the model whose
    query is the chain's question (when the model's prompt held it) and whose output hop is the
    retriever's query, a ``rewrite``: the retriever then finds that hop by its text, never
    ``untracked`` (issue 24, principle 3: a query an LLM made is a hop of the question)."""
    chain = chain_run.get()
    made = chain.made_by(query) if chain is not None and chain.stage.recording else None
    if chain is None or made is None:
        return
    component, from_question = made
    with stage(sc.KIND_QUERY_TRANSFORM, component) as t:
        if from_question and chain.asked is not None:
            t.query(chain.asked)
        t.add_query_variant(query, transform=sc.TRANSFORM_REWRITE)


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
def _nothing_to_patch(cls: type) -> None:
    """Before the instrumentor wires the class hooks (never called once it has)."""


class Shared:
    """What every LangChain call of one ``instrument()`` shares: the tracer, the lazy patcher, the
    LangChain classes imported so far (by name, ``None`` until imported), and how to patch a
    compressor or vector-store class first met at run time (set by the wiring)."""

    __slots__ = ("tracer", "patcher", "classes", "compressor_class", "store_class")

    def __init__(self, tracer: Any, patcher: LazyPatcher, classes: dict[str, type | None]) -> None:
        self.tracer = tracer
        self.patcher = patcher
        self.classes = classes
        self.compressor_class: Callable[[type], None] = _nothing_to_patch
        self.store_class: Callable[[type], None] = _nothing_to_patch

    def is_a(self, cls: type, name: str) -> bool:
        """Whether ``cls`` derives from the LangChain class ``name`` (``False`` while not imported)."""
        klass = self.classes.get(name)
        return klass is not None and issubclass(cls, klass)


class LangChainCall(Call):
    """One LangChain call on the hook skeleton: a subclass per component family opens its stage in
    :meth:`open` (with :meth:`open_stage`), may name the objects whose lower-level calls feed it
    scores (:meth:`listen`), and records the library's result in :meth:`after` (run only while
    recording, never touching the result). The suppression key is per (``site``, instance)."""

    site = "lc"

    def __init__(self, shared: Shared, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> None:
        super().__init__(shared.tracer, wrapped, instance, args, kwargs)
        self.shared = shared
        self.sink: Sink | None = None
        self._entered: list[contextlib.AbstractContextManager[Any]] | None = None

    def open_stage(self, kind: str, *, query: Any = None, top_k: Any = None, threshold: Any = None, score_kind: str | None = None) -> Stage:
        """Start the stage (the component is the instance's ``module.Class``); knobs that are not
        numbers are left out, a query that is text is recorded."""
        if kind == sc.KIND_RETRIEVE and isinstance(query, str):
            _rewritten_by_model(query)
        s = self.new_stage(kind, top_k=_int_or_none(top_k), threshold=_float_or_none(threshold), score_kind=score_kind)
        if s.recording and isinstance(query, str):
            s.query(query)
        return s

    def listen(self, feeds: Sequence[Any]) -> None:
        """Open a sink for what calls fed by ``feeds`` compute while this stage is open. Sampled out
        while metrics are counted too: the calls beneath then feed it instead of counting a stage of
        their own, as they do under a recording stage (the same stages are counted sampled in and out)."""
        s = self.stage
        if s is not None and feeds and (s.recording or counted(s)):
            self.sink = Sink(s, feeds)
            self.set_var(_sink, self.sink)

    def sunk(self, key: str) -> Any:
        """What the calls beneath this stage dropped into its sink under ``key`` (``None``: nothing)."""
        sink = self.sink
        return sink.data.get(key) if sink is not None else None

    def enter(self, manager: contextlib.AbstractContextManager[Any]) -> None:
        """Hold ``manager`` open until the stage ends (e.g. faiss's ``row_ids`` around the search)."""
        manager.__enter__()
        if self._entered is None:
            self._entered = []
        self._entered.append(manager)

    def cleanup(self) -> None:
        entered = self._entered
        while entered:
            entered.pop().__exit__(None, None, None)


C = TypeVar("C", bound=LangChainCall)


@dataclass(frozen=True)
class Family(Generic[C]):
    """A LangChain class (by name) and the call that records its instances."""

    base: str
    call: type[C]


class CallRegistry(Generic[C]):
    """Which call records a component: the first family whose LangChain class the component's class
    derives from (most specific first), else ``default`` (``None``: not a stage). Looked up once
    per concrete class; a lookup that fails is counted and the call runs unrecorded."""

    def __init__(self, shared: Shared, families: Sequence[Family[C]], default: type[C] | None) -> None:
        self._shared = shared
        self._families = tuple(families)
        self._default = default
        self._found: dict[type, type[C] | None] = {}

    def call_for(self, cls: type) -> type[C] | None:
        try:
            return self._found[cls]
        except KeyError:
            pass
        try:
            found = next((f.call for f in self._families if self._shared.is_a(cls, f.base)), self._default)
        except Exception as exc:  # pragma: no cover - a class whose subclass check raises
            record_internal_error("langchain.registry", exc)
            return None
        self._found[cls] = found
        return found


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


def _score_value(value: Any) -> float | None:
    """A score a library left in a Document's metadata (``score``, ``relevance_score``) when it is a
    number (numpy scalars too); a string or any other value is not a score."""
    if type(value) is float:  # the common case, first (what float() would return)
        return value
    if value is None or isinstance(value, (bool, str, bytes)):
        return None
    return _float_or_none(value)


# Classes whose ``state`` attribute, when there is one, is in the instance's ``__dict__`` (or a
# pydantic model's extras): a plain ``Document`` has none, and ``getattr(doc, "state", None)`` on
# it went through pydantic's ``__getattr__`` raising AttributeError, once per candidate per stage
# (a tenth of the hooks' time on the users' pipeline). Decided once per class.
_STATE_IN_DICT: dict[type, bool] = {}


def _state_in_dict(cls: type) -> bool:
    """True when ``getattr(doc, "state", None)`` is ``doc.__dict__.get("state")`` (then a pydantic
    model's extra ``state``) for every instance of ``cls``: no class-level ``state`` (field default,
    property, slot) and no ``__getattr__`` but pydantic's own, with no private ``state``."""
    try:
        if hasattr(cls, "state"):
            return False
        hook = getattr(cls, "__getattr__", None)
        if hook is None:
            return True
        pydantic = sys.modules.get("pydantic")
        base = getattr(getattr(pydantic, "BaseModel", None), "__getattr__", None)
        return base is not None and hook is base and "state" not in (getattr(cls, "__private_attributes__", None) or {})
    except Exception:  # pragma: no cover - an exotic metaclass: take the general path
        return False


def _doc_state(doc: Any) -> Any:
    """``getattr(doc, "state", None)`` (where ``EmbeddingsFilter`` leaves its similarity), without
    raising inside pydantic for the classes that have none."""
    cls = type(doc)
    plain = _STATE_IN_DICT.get(cls)
    if plain is None:
        plain = _STATE_IN_DICT[cls] = _state_in_dict(cls)
    if not plain:
        return getattr(doc, "state", None)
    own = getattr(doc, "__dict__", None)
    state = own.get("state") if own is not None else None
    if state is None and "state" not in (own or ()):
        extra = getattr(doc, "__pydantic_extra__", None)
        if extra:
            state = extra.get("state")
    return state


def metadata_scores(candidates: Sequence[Candidate], docs: Sequence[Any]) -> None:
    """The scores LangChain libraries leave in a Document's metadata, for candidates that have none:
    ``relevance_score`` is a reranker's (``rerank``: CohereRerank, FlashrankRerank, Jina ...);
    ``score`` a retriever's own, of the kind an earlier stage of this pipeline gave the candidate,
    else ``none`` (not known); ``query_similarity_score`` in a ``_DocumentWithState``'s state is
    ``EmbeddingsFilter``'s similarity (what a ``ContextualCompressionRetriever`` returns)."""
    state: PipelineState | None = None
    looked = False
    for candidate, doc in zip(candidates, docs, strict=False):  # once per Document per stage: inlined
        if candidate.score is not None:
            continue
        held = _doc_state(doc)
        if isinstance(held, dict):
            similarity = _score_value(held.get("query_similarity_score"))
            if similarity is not None:
                candidate.score, candidate.score_kind = similarity, sc.SCORE_SIMILARITY
                continue
        metadata = getattr(doc, "metadata", None)
        if not isinstance(metadata, dict):
            continue
        relevance = metadata.get("relevance_score")
        if relevance is not None and type(relevance) is not float:
            relevance = _score_value(relevance)
        if relevance is not None:
            candidate.score, candidate.score_kind = relevance, sc.SCORE_RERANK
            continue
        own = metadata.get("score")
        if own is not None and type(own) is not float:
            own = _score_value(own)
        if own is not None:
            if not looked:
                state, looked = current_pipeline(), True
            known = state.candidate_score_kind(candidate.id) if state is not None else None
            candidate.score, candidate.score_kind = own, known or sc.SCORE_NONE


# --- Documents: pipeline-wide identity ----------------------------------------------------------
# Several LangChain stages rebuild Documents without their id (EmbeddingsFilter, the redundant
# filter, Cohere/Flashrank rerankers). Within one pipeline run, an id-less Document whose content
# an earlier stage saw with an id keeps that id, so a candidate is one identity across stages.
# The same content passes through every stage of a run: its receipt is stamped once per run.
class _RunMemory:
    __slots__ = ("ids", "receipts", "texts")

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}  # content sha256 -> first id seen with it
        # id(content str) -> its receipt, and -> the str itself (held, so its id is not reused): two
        # dicts, not a (str, receipt) tuple per content, fewer objects for the host's GC to count
        self.receipts: dict[int, Any] = {}
        self.texts: dict[int, str] = {}


_memory_lock = threading.Lock()
_memories: weakref.WeakKeyDictionary[Any, _RunMemory] = weakref.WeakKeyDictionary()


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
    """LangChain ``Document`` → Candidate: id = ``Document.id``; when absent, the store's own id the
    store left in the metadata (langchain-qdrant's ``_id``), else the id an earlier stage of the same
    pipeline gave the same content, else ``sha256:`` of the content."""
    return _adapt_document(doc, _run_memory(), settings.get().metadata)


def _adapt_document(doc: Any, memory: _RunMemory | None, keep_metadata: Any) -> Candidate:
    content = doc.page_content
    rec = None
    if memory is not None:
        key = id(content)
        held = memory.texts.get(key)
        if held is not None and held is content:  # the very same str object: same receipt
            rec = memory.receipts[key]
    if rec is None:
        rec = receipt(content)
        if memory is not None and isinstance(content, str):
            key = id(content)
            memory.texts[key] = content  # holds the str, so its id is not reused
            memory.receipts[key] = rec
    ident = doc.id
    if type(ident) is str and ident:  # the common case: the Document's own id
        if memory is not None:
            memory.ids.setdefault(rec.sha256, ident)
        return _candidate(doc, ident, content, rec, keep_metadata)
    if ident is None or ident == "":
        ident = _store_id(doc.metadata)
    if ident is None or ident == "":
        ident = _nested_store_id(rec.sha256)
    if ident is not None and ident != "":
        if type(ident) is not str:
            ident = str(ident)
        if memory is not None:
            memory.ids.setdefault(rec.sha256, ident)
    else:
        ident = memory.ids.get(rec.sha256) if memory is not None else None
        if ident is None:
            ident = "sha256:" + rec.sha256
    return _candidate(doc, ident, content, rec, keep_metadata)


def _candidate(doc: Any, ident: str, content: Any, rec: Any, keep_metadata: Any) -> Candidate:
    metadata = doc.metadata if keep_metadata else None
    # snapshot: some compressors edit metadata in place
    return stamped_candidate(ident, content, dict(metadata) if isinstance(metadata, dict) else None, doc, rec)


def _store_id(metadata: Any) -> str | None:
    """The store's own id a vector store left in the metadata of a Document it built without an id:
    langchain-qdrant puts the point id in ``metadata["_id"]`` beside ``metadata["_collection_name"]``
    (so the Document and the Qdrant client's stage name one point by one id, never a content hash)."""
    if not isinstance(metadata, dict) or "_collection_name" not in metadata:
        return None
    found = metadata.get("_id")
    if isinstance(found, bool) or not isinstance(found, (str, int)) or found == "":
        return None
    return str(found)


def _nested_store_id(sha256: str) -> str | None:
    """The id the store gave this content in this very call: langchain-community's ``Chroma`` builds
    its Documents without ids from a chromadb query whose stage (nested in this one) recorded Chroma's
    ids. Taken only when exactly one id handed up carries this content receipt (never a guess between
    duplicates)."""
    stage = current_stage()
    if stage is None:
        return None
    found = {c.id for c in handed_up(stage) if c.receipt is not None and c.receipt.sha256 == sha256}
    return found.pop() if len(found) == 1 else None


def remember_identity(candidate: Candidate) -> None:
    """A Document this stage rebuilt under another id (an LLM's extract, a splitter's chunk): a later
    stage of the same run that meets the same content without an id gives it this id too."""
    memory = _run_memory()
    if memory is not None and candidate.receipt is not None:
        memory.ids[candidate.receipt.sha256] = candidate.id


def adapt_all(items: Iterable[Any]) -> list[Candidate]:
    """``[adapt(item) for item in items]``, with the run's identity memory and the capture
    configuration looked up once per list instead of once per Document (a stage adapts ~100)."""
    memory = _run_memory()
    keep_metadata = settings.get().metadata
    out: list[Candidate] = []
    append = out.append
    documents: type | None = None  # the last class whose adapter is adapt_document
    for item in items:
        cls = type(item)
        if cls is documents or lookup_adapter(cls) is adapt_document:  # what adapt() would pick
            documents = cls
            append(_adapt_document(item, memory, keep_metadata))
        else:
            append(adapt(item))
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
