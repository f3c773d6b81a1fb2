"""faiss: ``search`` of every Index class as ``retrieve`` stages.

faiss's Python classes are SWIG proxies; at import ``faiss/class_wrappers.py`` installs a separate
``replacement_search`` on each Index and IndexBinary class (``handle_Index``/``handle_IndexBinary``),
so patching ``faiss.Index.search`` alone would miss ``IndexFlat``, ``IndexIVF``, ``IndexHNSW`` …
The instrumentor wraps every class in the ``faiss`` module that is an ``Index``/``IndexBinary``
subclass and holds its own ``search`` in ``vars()``; the classes it patched are listed in
``FaissInstrumentor.patched`` (subclasses such as ``IndexFlatL2`` inherit ``IndexFlat``'s).

``search(x, k)`` answers ``n = x.shape[0]`` queries with ``(D, I)`` arrays of shape ``(n, k)``: each
query row is one stage (see :mod:`ragtrail.instrumentation._vectorstore`), its candidates the row's
ids in order, except faiss's ``-1`` padding (an empty slot, not a hit; counted in a finding).
Score kind from ``index.metric_type``: inner product is ``similarity``, L2 and every other metric
``distance``; binary indexes return Hamming distances. ``k`` is ``top_k``, ``index.ntotal`` the
corpus size, an ``IDSelector`` in ``params`` is recorded as the filter (its class name). The query
is a vector: it is recorded as its dimension and sha256, never exported.

Ids: a row position is faiss's own id, but a framework that wraps faiss keeps its documents under
other ids (LangChain's ``FAISS.index_to_docstore_id``, row -> docstore id). The framework's hook
says so with :func:`row_ids` around its search, and the nested faiss stage then records those ids:
one document, one id, in both stages (a row with no mapping keeps its position). The corpus is the
index itself (``store=`` the index), so an outer stage that reports the same index's size counts once.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, SupportsIndex

from ragtrail.contract import semconv as sc
from ragtrail.hooks import Args, Kwargs
from ragtrail.instrumentation._base import RagtrailInstrumentor
from ragtrail.instrumentation._vectorstore import Outcome, Query, Row, StoreStages, call_through, filter_json
from ragtrail.recorder.candidates import Candidate

_KEY = "ragtrail.faiss"
# (the faiss index object, row position -> document id) set by a framework hook around its search
_row_ids: contextvars.ContextVar[tuple[Any, Mapping[Any, Any]] | None] = contextvars.ContextVar("ragtrail_faiss_row_ids", default=None)


@contextlib.contextmanager
def row_ids(index: Any, mapping: Mapping[Any, Any]) -> Iterator[None]:
    """While this is open, searches of ``index`` record ``mapping[row]`` as each hit's id (a
    framework's own document ids) instead of the row position. Never raises into the caller."""
    token = _row_ids.set((index, mapping))
    try:
        yield
    finally:
        _row_ids.reset(token)


def _id_of(row: int, mapped: Mapping[Any, Any] | None) -> str:
    if mapped is not None:
        try:
            found = mapped.get(row)
        except Exception:
            found = None
        if found is not None:
            return str(found)
    return str(row)


class FaissInstrumentor(RagtrailInstrumentor):
    """Records faiss index searches as retrieve stages."""

    _instruments: Collection[str] = ("faiss-cpu >= 1.8",)
    # the same ``faiss`` module ships in several wheels: any one of them will do
    _instruments_any: Collection[str] = ("faiss-cpu >= 1.8", "faiss-gpu >= 1.7", "faiss-gpu-cu11 >= 1.8", "faiss-gpu-cu12 >= 1.8")
    patched: list[str]

    def _check_dependency_conflicts(self) -> Any:
        from opentelemetry.instrumentation.dependencies import get_dependency_conflicts

        return get_dependency_conflicts((), self._instruments_any)

    def _patch(self, **kwargs: Any) -> None:
        self.patched = []
        # patched when the application imports it (faiss and numpy take ~0.2 s to import)
        self.when_imported("faiss", self._patch_now)

    def _patch_now(self) -> None:
        import faiss

        seen: set[int] = set()
        for name, cls in sorted(vars(faiss).items()):
            if not isinstance(cls, type) or id(cls) in seen or cls.__name__ != name:
                continue
            if not issubclass(cls, (faiss.Index, faiss.IndexBinary)) or "search" not in vars(cls):
                continue
            seen.add(id(cls))
            if self.wrap("faiss", f"{name}.search", self._search):
                self.patched.append(name)

    def _uninstrument(self, **kwargs: Any) -> None:
        super()._uninstrument(**kwargs)
        self.patched = []

    def _search(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        return call_through(
            _KEY,
            lambda: _start(self.tracer, instance, args, kwargs),
            wrapped,
            args,
            kwargs,
            lambda stages, result: stages.complete(lambda: _outcome(stages, instance, result)),
        )


class _FaissStages(StoreStages):
    queries: Any = None
    base: Row
    binary: bool = False


def _start(tracer: Any, instance: Any, args: Args, kwargs: Kwargs) -> _FaissStages:
    import faiss

    x = args[0] if args else kwargs.get("x")
    k = args[1] if len(args) > 1 else kwargs.get("k")
    params = kwargs.get("params")
    stages = _FaissStages(tracer, f"faiss.{type(instance).__name__}")
    stages.queries = x if getattr(x, "ndim", None) == 2 else None
    stages.binary = isinstance(instance, faiss.IndexBinary)
    if stages.binary:
        kind = sc.SCORE_DISTANCE
    else:
        inner_product = getattr(instance, "metric_type", None) == faiss.METRIC_INNER_PRODUCT
        kind = sc.SCORE_SIMILARITY if inner_product else sc.SCORE_DISTANCE
    selector = _selector(params)
    stages.base = Row(
        top_k=int(k) if isinstance(k, SupportsIndex) else None,  # an int, or a numpy integer
        score_kind=kind,
        filter=filter_json({"id_selector": type(selector).__name__}) if selector is not None else None,
    )
    return stages.start(_row(stages, 0, ()))


def _selector(params: Any) -> Any:
    """The IDSelector a search was restricted by. ``params.sel`` reads back as the base SWIG class;
    faiss keeps the object that was assigned (its real class, e.g. ``IDSelectorRange``) in
    ``_sp_field_refs``, so prefer that."""
    if params is None:
        return None
    refs = getattr(params, "_sp_field_refs", None)
    if isinstance(refs, dict) and refs.get("sel") is not None:
        return refs["sel"]
    return getattr(params, "sel", None)


def _row(stages: _FaissStages, index: int, candidates: Any) -> Row:
    queries = stages.queries
    query = Query(vector=queries[index], binary=stages.binary) if queries is not None and index < len(queries) else None
    base = stages.base
    return Row(candidates=candidates, query=query, top_k=base.top_k, score_kind=base.score_kind, filter=base.filter)


def _outcome(stages: _FaissStages, instance: Any, result: Any) -> Outcome | None:
    distances, labels = result
    if getattr(labels, "ndim", None) != 2:
        return None

    registered = _row_ids.get()
    mapped = registered[1] if registered is not None and registered[0] is instance else None

    def row(index: int) -> Row:
        ids = labels[index].tolist()
        scores = distances[index].tolist()
        kind = stages.base.score_kind
        candidates = [
            Candidate(id=_id_of(ident, mapped), score=score, score_kind=kind) for ident, score in zip(ids, scores, strict=False) if ident != -1
        ]
        found = _row(stages, index, candidates)
        empty = len(ids) - len(candidates)
        if empty:
            found.findings.append(f"{empty} of {len(ids)} result slots empty (faiss id -1 padding)")
        return found

    return Outcome(rows=int(labels.shape[0]), row=row, corpus_size=lambda: instance.ntotal, store=instance)
