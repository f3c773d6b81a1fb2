"""The one hook skeleton (ragtrail.hooks) on the real SDK, with a toy component
patched by wrapt exactly as the library instrumentations patch theirs.

A hook's span is checked against the span the recorder writes when the same facts are given to a
``stage()`` by hand: every attribute and event must be equal (only the component differs), so a
skeleton that dropped, doubled or reordered a step fails.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from typing import Any

import pytest
import wrapt
from opentelemetry import trace
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.trace import StatusCode

import ragtrail
from ragtrail import hooks
from ragtrail.contract import semconv as sc
from ragtrail.recorder.stage import current_stage, stage

DOCS = [{"id": "a", "text": "alpha"}, {"id": "b", "text": "beta"}, {"id": "c", "text": "gamma"}]
_marker: contextvars.ContextVar[str | None] = contextvars.ContextVar("test_hook_marker", default=None)


class Store:
    """A component whose public methods call each other (the re-entrancy case)."""

    def __init__(self, inner: Store | None = None) -> None:
        self.inner = inner
        self.seen_spans: list[Any] = []
        self.seen_marker: list[Any] = []
        self.answer = list(DOCS)

    def search(self, query: str, k: int = 2) -> list[dict]:
        self.seen_spans.append(trace.get_current_span())
        self.seen_marker.append(_marker.get())
        if self.inner is not None:
            self.inner.search(query, k)
        return self.search_all(query)[:k]

    def search_all(self, query: str) -> list[dict]:
        return self.answer

    async def asearch(self, query: str, k: int = 2) -> list[dict]:
        await asyncio.sleep(0)
        self.seen_spans.append(trace.get_current_span())
        return list(DOCS)[:k]

    def fail(self, query: str, error: BaseException) -> None:
        raise error


class SearchCall(hooks.Call):
    site = "test.store"
    broken: str | None = None  # the hook step that raises, for the error-path tests

    def open(self) -> Any:
        s = self.new_stage(sc.KIND_RETRIEVE, "test.Store", top_k=self.arguments.get("k"))
        self.set_var(_marker, "inside")
        if self.broken == "open":
            raise RuntimeError("hook bug in open")
        return s

    def before(self, s: Any) -> None:
        if self.broken == "before":
            raise RuntimeError("hook bug in before")
        s.query(self.arguments["query"])

    def after(self, s: Any, result: Any) -> None:
        if self.broken == "after":
            raise RuntimeError("hook bug in after")
        s.outputs(result)


@pytest.fixture
def patched(tracer_provider):
    tracer = tracer_provider.get_tracer("ragtrail")
    wrappers = {
        "search": hooks.sync_wrapper(SearchCall, lambda: tracer),
        "search_all": hooks.sync_wrapper(SearchCall, lambda: tracer),
        "asearch": hooks.async_wrapper(SearchCall, lambda: tracer),
        "fail": hooks.sync_wrapper(SearchCall, lambda: tracer),
    }
    for name, wrapper in wrappers.items():
        wrapt.wrap_function_wrapper(Store, name, wrapper)
    yield tracer
    for name in wrappers:
        setattr(Store, name, getattr(Store, name).__wrapped__)
    SearchCall.broken = None


def reference(tracer: Any, span_exporter: Any, query: str, outputs: list, top_k: int | None) -> Any:
    """The span the recorder writes for the same facts given by hand."""
    with stage(sc.KIND_RETRIEVE, "test.Store", top_k=top_k, tracer=tracer) as s:
        s.query(query)
        s.outputs(outputs)
    span = span_exporter.get_finished_spans()[-1]
    span_exporter.clear()
    return span


def same_record(span: Any, expected: Any) -> None:
    assert span.name == expected.name
    assert dict(span.attributes) == dict(expected.attributes)
    assert [(e.name, dict(e.attributes)) for e in span.events] == [(e.name, dict(e.attributes)) for e in expected.events]
    assert span.status.status_code == expected.status.status_code


def test_sync_call_is_one_stage_with_the_same_result_object(patched, span_exporter) -> None:
    expected = reference(patched, span_exporter, "q", DOCS[:2], top_k=2)
    store = Store()
    result = store.search("q")
    assert result == DOCS[:2]
    (span,) = span_exporter.get_finished_spans()
    same_record(span, expected)  # top_k=2: the binder applied the default of k
    assert store.seen_spans[0].get_span_context() == span.context  # the stage is current inside the call
    assert store.seen_marker == ["inside"] and _marker.get() is None  # set_var reset when the stage ended
    assert trace.get_current_span() is trace.INVALID_SPAN and current_stage() is None


def test_result_is_the_very_object_returned(patched, span_exporter) -> None:
    store = Store()
    assert store.search_all("q") is store.answer
    assert store.answer == DOCS  # read, never changed
    (span,) = span_exporter.get_finished_spans()
    assert span.attributes[sc.CANDIDATES_OUT] == 3


async def test_async_runner_is_a_coroutine_and_the_stage_covers_the_await(patched, span_exporter) -> None:
    assert inspect.iscoroutinefunction(hooks.async_wrapper(SearchCall, lambda: patched))
    expected = reference(patched, span_exporter, "q", DOCS[:1], top_k=1)
    tracer = trace.get_tracer("test")
    store = Store()

    async def request(name: str) -> list[dict]:
        with tracer.start_as_current_span(name):
            return await store.asearch("q", k=1)

    results = await asyncio.gather(request("request-1"), request("request-2"))
    assert results == [DOCS[:1], DOCS[:1]]
    spans = span_exporter.get_finished_spans()
    stages = [s for s in spans if s.name.startswith("retrieve")]
    parents = {s.context.span_id: s.name for s in spans if s.name.startswith("request-")}
    assert len(stages) == 2
    assert sorted(parents[s.parent.span_id] for s in stages) == ["request-1", "request-2"]
    for span in stages:
        same_record(span, expected)
    # inside the awaited work the stage was the current span, in the awaiting task
    assert {s.get_span_context().span_id for s in store.seen_spans} == {s.context.span_id for s in stages}


def test_suppressed_calls_pass_straight_through(patched, span_exporter) -> None:
    store = Store()
    with suppress_instrumentation():
        assert store.search("q") == DOCS[:2]
        assert store.seen_marker == [None]  # no hook step ran
    assert span_exporter.get_finished_spans() == ()


def test_exceptions_pass_through_unchanged_and_end_the_stage_failed(patched, span_exporter) -> None:
    store = Store()
    error = KeyError("missing")
    with pytest.raises(KeyError) as caught:
        store.fail("q", error)
    assert caught.value is error
    (span,) = span_exporter.get_finished_spans()
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes[sc.STAGE_STATUS] == sc.STATUS_FAILED
    assert [e.name for e in span.events if e.name == "exception"] == ["exception"]
    assert trace.get_current_span() is trace.INVALID_SPAN and current_stage() is None and _marker.get() is None

    with pytest.raises(asyncio.CancelledError):  # a BaseException too, not swallowed
        store.fail("q", asyncio.CancelledError())


def test_no_double_record_for_the_same_component_but_each_component_its_own(patched, span_exporter) -> None:
    inner = Store()
    outer = Store(inner=inner)
    outer.search("q")  # search -> search_all on itself (suppressed), and inner.search (its own stage)
    spans = span_exporter.get_finished_spans()
    assert len(spans) == 2
    inner_span, outer_span = spans
    assert inner_span.parent.span_id == outer_span.context.span_id
    assert outer_span.parent is None


def test_errors_in_hook_steps_are_counted_never_raised(patched, span_exporter) -> None:
    store = Store()
    for step in ("before", "after"):
        SearchCall.broken = step
        before = ragtrail.internal_error_count()
        assert store.search("q") == DOCS[:2]
        assert ragtrail.internal_error_count() == before + 1
        (span,) = span_exporter.get_finished_spans()
        assert span.attributes[sc.STAGE_INSTRUMENTATION_ERRORS] == 1
        span_exporter.clear()


def test_a_failing_open_ends_the_half_open_stage_and_restores_the_context(patched, span_exporter) -> None:
    SearchCall.broken = "open"
    store = Store()
    before = ragtrail.internal_error_count()
    assert store.search("q") == DOCS[:2]
    assert ragtrail.internal_error_count() == before + 2  # search and the search_all it calls
    assert store.seen_marker == [None]  # the call ran with the host's context
    assert _marker.get() is None and current_stage() is None and trace.get_current_span() is trace.INVALID_SPAN
    spans = span_exporter.get_finished_spans()
    assert len(spans) == 2 and all(s.parent is None for s in spans)  # started, ended, parent of nothing


def test_a_decorated_function_has_no_suppression_key(tracer_provider, span_exporter) -> None:
    tracer = tracer_provider.get_tracer("test")

    @ragtrail.retriever(tracer=tracer)
    def retrieve(query: str, depth: int = 1) -> list[dict]:
        return retrieve(query, depth - 1) if depth else list(DOCS)

    assert retrieve("q") == DOCS
    assert len(span_exporter.get_finished_spans()) == 2  # recursion: each call is its own stage
    span_exporter.clear()
    with suppress_instrumentation():
        retrieve("q")
    assert span_exporter.get_finished_spans() == ()


def test_bind_applies_defaults_once_for_every_hook() -> None:
    def fn(query: str, k: int = 4, *, where: Any = None, **extra: Any) -> None:
        pass

    assert hooks.bind(fn, ("q",), {}) == {"query": "q", "k": 4, "where": None, "extra": {}}
    assert hooks.bind(fn, ("q", 2), {"where": {"a": 1}, "x": 1}) == {"query": "q", "k": 2, "where": {"a": 1}, "extra": {"x": 1}}
    store = Store()
    assert hooks.bind(store.search, ("q",), {}) == {"query": "q", "k": 2}  # a bound method: no self
    assert hooks.bind(Store.search, (store, "q"), {}) == {"self": store, "query": "q", "k": 2}
    # a missing argument is absent (the call raises its own TypeError)
    assert hooks.bind(fn, (), {"k": 1}) == {"k": 1, "where": None, "extra": {}}
    # arguments that do not fit the signature at all: the keywords as given
    assert hooks.bind(fn, ("q", 1, 2), {"where": 3}) == {"where": 3}
    assert hooks.bind(len, ([1],), {}) == {"obj": [1]}


def test_argument_and_component_name() -> None:
    assert hooks.argument(("q", 3), {}, 1, "k") == 3
    assert hooks.argument(("q",), {"top_k": 5}, 1, "k", "top_k") == 5
    assert hooks.argument((), {}, None, "k", default=7) == 7
    assert hooks.component_name(Store()) == f"{__name__}.Store"
    assert hooks.component_name(Store) == f"{__name__}.Store"
    assert hooks.component_name(reference) == f"{__name__}.reference"
