"""Decorators for custom pipeline code: a thin layer over :mod:`ragtrail.stage`, run by the one
hook skeleton every library instrumentation uses (:mod:`ragtrail.hooks`).

Each decorator opens a stage around the call, records the query and a snapshot of the input
candidates *before* the call (libraries sort and rescore in place), and the output after it.
The decorated function's result (the same object), exceptions and side effects are exactly the
undecorated function's: every recording step is guarded, and a call that returns an iterator or
something that is not a list is left unconsumed and recorded as a finding.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar, overload

from opentelemetry import trace

from ragtrail.contract import semconv as sc
from ragtrail.hooks import Args, Call, Kwargs, component_name, decorated, decorated_async
from ragtrail.recorder.candidates import is_candidate_list
from ragtrail.recorder.errors import record_internal_error
from ragtrail.recorder.stage import Stage, counted, current_stage, stage

F = TypeVar("F", bound=Callable[..., Any])


class StageDecorator(Protocol):
    """What a decorator factory called with options returns: it hands back the function's own type."""

    def __call__(self, fn: F, /) -> F: ...


_QUERY_NAMES = ("query", "query_str", "question", "q", "text", "prompt", "query_text")
_INPUT_NAMES = ("candidates", "documents", "docs", "nodes", "results", "hits", "passages", "chunks", "items", "contexts")


class _Decorated(Call):
    """One call of a decorated function: the stage it is, its query and input snapshot before the
    call, its outputs after. Decorated functions nest freely (no suppression key): each call of
    each decorated function is its own stage."""

    site = "decorator"

    def __init__(self, spec: _Spec, args: Args, kwargs: Kwargs) -> None:
        super().__init__(spec.tracer, spec.fn, None, args, kwargs)
        self.spec = spec

    def key(self) -> None:
        return None

    def records(self) -> bool:
        """Sampled out too when metrics are counted: ``after`` then hands the stage only the number
        of outputs (an empty list is an ``empty`` stage), nothing is adapted."""
        s = self.stage
        return s is not None and (s.recording or counted(s))

    def open(self) -> Stage:
        spec = self.spec
        return self.new_stage(spec.kind, spec.component, **spec.options)

    def before(self, s: Stage) -> None:
        """Record what the call was given: the query and a snapshot of the input candidates."""
        spec, args = self.spec, self.args
        bound = self.arguments if spec.names else {}
        query = bound.get(spec.query_arg) if spec.query_arg else None
        if spec.query_position is not None and args and isinstance(args[0], str):
            query = args[0]
        if query is not None:
            s.query(query)
        if spec.takes_inputs:
            candidates = bound.get(spec.inputs_arg) if spec.inputs_arg else next((a for a in args if is_candidate_list(a)), None)
            if candidates is None:
                s.finding("no candidate list among the arguments")
            elif is_candidate_list(candidates):
                s.inputs(candidates)
            else:
                # an iterator the function still has to read: never consume the host's data
                s.finding(f"inputs are a {type(candidates).__name__}, not a list: not snapshotted")

    def after(self, s: Stage, result: Any) -> None:
        kind = self.spec.kind
        if kind == sc.KIND_QUERY_TRANSFORM:
            variants = [result] if isinstance(result, str) else result if is_candidate_list(result) else None
            if variants is None:
                s.finding(f"query transform returned a {type(result).__name__}, not a query or list of queries")
                return
            for text in variants:
                s.add_query_variant(text, transform=self.spec.transform)
            return
        if kind == sc.KIND_PIPELINE:
            return
        if is_candidate_list(result):
            s.outputs(result)
        elif result is None:
            s.outputs([])
            s.finding("stage returned None")
        else:
            s.finding(f"stage returned a {type(result).__name__}, not a candidate list: outputs not recorded")


class _Spec:
    """How one decorated function maps onto a stage: which argument is the query, which the inputs."""

    def __init__(
        self,
        fn: Callable[..., Any],
        kind: str,
        component: str | None,
        options: dict[str, Any],
        query_arg: str | None,
        inputs_arg: str | None,
        takes_inputs: bool,
        transform: str = sc.TRANSFORM_REWRITE,
    ) -> None:
        self.fn = fn
        self.kind = kind
        self.transform = transform
        self.component = component or component_name(fn)
        self.tracer = options.pop("tracer", None)
        self.options = options
        try:
            names = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):  # builtins without a signature
            names = []
        self.names = names
        self.query_arg = query_arg or next((n for n in names if n in _QUERY_NAMES), None)
        # with no query-like parameter, only a stage that takes no candidates may have its first
        # parameter read as the query (never guess among a filter's other arguments: an API key...)
        self.query_position = 0 if (self.query_arg is None and not takes_inputs and names) else None
        self.inputs_arg = inputs_arg or (next((n for n in names if n in _INPUT_NAMES), None) if takes_inputs else None)
        self.takes_inputs = takes_inputs


def _decorate(fn: Callable[..., Any], spec: _Spec) -> Callable[..., Any]:
    def make_call(args: Args, kwargs: Kwargs) -> _Decorated:
        return _Decorated(spec, args, kwargs)

    if inspect.iscoroutinefunction(fn):
        return decorated_async(fn, make_call)
    return decorated(fn, make_call)


def _factory(
    kind: str,
    takes_inputs: bool,
    fn: Callable[..., Any] | None,
    component: str | None,
    query_arg: str | None,
    inputs_arg: str | None,
    transform: str | None = None,
    **options: Any,
) -> Any:
    options = {k: v for k, v in options.items() if v is not None}

    def decorator(func: F) -> F:
        spec = _Spec(func, kind, component, options, query_arg, inputs_arg, takes_inputs, transform or sc.TRANSFORM_REWRITE)
        return _decorate(func, spec)  # type: ignore[return-value]

    return decorator(fn) if fn is not None else decorator


@overload
def pipeline(fn: F, /) -> F: ...


@overload
def pipeline(
    fn: None = None, *, component: str | None = None, query_arg: str | None = None, tracer: trace.Tracer | None = None
) -> StageDecorator: ...


def pipeline(
    fn: Callable[..., Any] | None = None, *, component: str | None = None, query_arg: str | None = None, tracer: trace.Tracer | None = None
) -> Any:
    """The root of one RAG request: hop numbering, coverage and citations are per pipeline."""
    return _factory(sc.KIND_PIPELINE, False, fn, component, query_arg, None, tracer=tracer)


@overload
def retriever(fn: F, /) -> F: ...


@overload
def retriever(
    fn: None = None,
    *,
    component: str | None = None,
    top_k: int | None = None,
    threshold: float | None = None,
    score_kind: str | None = None,
    query_arg: str | None = None,
    tracer: trace.Tracer | None = None,
) -> StageDecorator: ...


def retriever(
    fn: Callable[..., Any] | None = None,
    *,
    component: str | None = None,
    top_k: int | None = None,
    threshold: float | None = None,
    score_kind: str | None = None,
    query_arg: str | None = None,
    tracer: trace.Tracer | None = None,
) -> Any:
    """A function ``(query, ...) -> list of candidates``: a ``retrieve`` stage."""
    return _factory(sc.KIND_RETRIEVE, False, fn, component, query_arg, None, top_k=top_k, threshold=threshold, score_kind=score_kind, tracer=tracer)


@overload
def reranker(fn: F, /) -> F: ...


@overload
def reranker(
    fn: None = None,
    *,
    component: str | None = None,
    top_k: int | None = None,
    threshold: float | None = None,
    score_kind: str | None = sc.SCORE_RERANK,
    query_arg: str | None = None,
    inputs_arg: str | None = None,
    tracer: trace.Tracer | None = None,
) -> StageDecorator: ...


def reranker(
    fn: Callable[..., Any] | None = None,
    *,
    component: str | None = None,
    top_k: int | None = None,
    threshold: float | None = None,
    score_kind: str | None = sc.SCORE_RERANK,
    query_arg: str | None = None,
    inputs_arg: str | None = None,
    tracer: trace.Tracer | None = None,
) -> Any:
    """A function ``(query, candidates, ...) -> candidates``: a ``rerank`` stage; a top-k cut is
    ``below_rank_cutoff``, a threshold ``below_score_threshold``."""
    return _factory(
        sc.KIND_RERANK, True, fn, component, query_arg, inputs_arg, top_k=top_k, threshold=threshold, score_kind=score_kind, tracer=tracer
    )


@overload
def filter(fn: F, /) -> F: ...  # noqa: A001


@overload
def filter(
    fn: None = None,
    *,
    component: str | None = None,
    threshold: float | None = None,
    query_arg: str | None = None,
    inputs_arg: str | None = None,
    tracer: trace.Tracer | None = None,
) -> StageDecorator: ...  # noqa: A001


def filter(
    fn: Callable[..., Any] | None = None,
    *,
    component: str | None = None,
    threshold: float | None = None,
    query_arg: str | None = None,
    inputs_arg: str | None = None,
    tracer: trace.Tracer | None = None,
) -> Any:  # noqa: A001
    """A function ``(candidates, ...) -> candidates`` that drops some: a ``filter`` stage. Say why
    with ``ragtrail.current_stage().exclude(doc, reason)``; what vanished unexplained is said too."""
    return _factory(sc.KIND_FILTER, True, fn, component, query_arg, inputs_arg, threshold=threshold, tracer=tracer)


@overload
def budgeter(fn: F, /) -> F: ...


@overload
def budgeter(
    fn: None = None,
    *,
    component: str | None = None,
    limit: float | None = None,
    unit: str | None = None,
    query_arg: str | None = None,
    inputs_arg: str | None = None,
    tracer: trace.Tracer | None = None,
) -> StageDecorator: ...


def budgeter(
    fn: Callable[..., Any] | None = None,
    *,
    component: str | None = None,
    limit: float | None = None,
    unit: str | None = None,
    query_arg: str | None = None,
    inputs_arg: str | None = None,
    tracer: trace.Tracer | None = None,
) -> Any:
    """A function ``(candidates, ...) -> candidates`` that fits a context budget: a ``budget`` stage;
    what it drops is ``budget_exceeded``."""
    return _factory(sc.KIND_BUDGET, True, fn, component, query_arg, inputs_arg, budget_limit=limit, budget_unit=unit, tracer=tracer)


@overload
def query_transform(fn: F, /) -> F: ...


@overload
def query_transform(
    fn: None = None,
    *,
    transform: str = sc.TRANSFORM_REWRITE,
    component: str | None = None,
    query_arg: str | None = None,
    tracer: trace.Tracer | None = None,
) -> StageDecorator: ...


def query_transform(
    fn: Callable[..., Any] | None = None,
    *,
    transform: str = sc.TRANSFORM_REWRITE,
    component: str | None = None,
    query_arg: str | None = None,
    tracer: trace.Tracer | None = None,
) -> Any:
    """A function ``(query, ...) -> str | list[str]``: each output query becomes a new hop whose
    parent is the input query's hop."""
    return _factory(sc.KIND_QUERY_TRANSFORM, False, fn, component, query_arg, None, transform=transform, tracer=tracer)


def cite(ids: Iterable[Any], *, component: str = "cite", tracer: trace.Tracer | None = None) -> None:
    """Record which candidates the answer cited: a ``cite`` stage, counted in the pipeline's coverage."""
    try:
        ids = [str(i) for i in ids]
        with stage(sc.KIND_CITE, component, tracer=tracer) as s:
            s.outputs([{"id": i} for i in ids])
            s.cite(ids)
    except Exception as exc:  # pragma: no cover - stage() never raises
        record_internal_error("cite", exc)


__all__ = ["budgeter", "cite", "current_stage", "filter", "pipeline", "query_transform", "reranker", "retriever", "stage"]
