"""LangGraph runs as one ragtrail pipeline (issue 24, principle 4: an agent run is one trace).

LangGraph is LangChain's agent runtime: a graph's nodes call LangChain retrievers, tools and chat
models, which the LangChain hooks already record. What the graph adds, recorded here:

- ``Pregel.invoke/ainvoke`` and ``stream/astream`` (every compiled graph) → the ``pipeline`` root
  (unless a ragtrail stage is already open around it), so every retrieval, grade and generation of
  one agent run is one trace with one hop numbering. The run's first user message is hop 0.
- **The questions the run made** (observed when a node's task finishes, from the writes it made):
  a tool call a model node emitted with a string ``query`` argument (the agent's search query) and a
  user-role message a node wrote after the first (a rewritten question) are ``rewrite`` hops of the
  latest question, recorded on the pipeline span. So a retrieval for the rewritten question is hop
  N ``rewrite`` of the previous one, never a fresh hop 0 or an ``untracked`` one.
- **A grader** is a conditional edge (a router) out of the node that retrieved: its run is a
  ``filter`` stage (component = the router function) over the documents that node's retrievals
  handed on. The decision is read from the graph itself, not guessed from the router's words: when
  the router sends the run to a node from which the graph can come back to the retrieving node (the
  tutorial's ``rewrite_question`` → ``generate_query_or_respond`` → ``retrieve``), it did not accept
  the documents: each is excluded ``custom:graded_irrelevant`` and no longer offered to a
  generation. A route that cannot come back (``generate_answer`` → END) keeps them all. When a
  branch's targets are unknown (a router without a path map or a ``Literal`` return type), the
  stage says so in a finding and keeps them.
- A chat model called by a node while documents are offered → a ``generate`` stage (``_chains``);
  model calls with nothing offered (the agent deciding to search, a rewrite) are not generations.

Why the graph's own hooks rather than a decorator for the app's grade function: an app copied from
the documentation must run unchanged, and the graph already says where each route leads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.hooks import Args, Kwargs, argument, component_name, enabled, guard, run, run_async
from ragtrail.instrumentation.langchain._common import ChainRun, LangChainCall, Shared, chain_run
from ragtrail.recorder.candidates import Candidate
from ragtrail.recorder.pipeline import current_pipeline
from ragtrail.recorder.stage import Stage, current_stage, stage

REASON_GRADED_IRRELEVANT = "custom:graded_irrelevant"
_END = "__end__"
_START = "__start__"


class GraphRun(ChainRun):
    """A graph run: the chain run (documents offered to a generation) plus, per graph node, the
    documents its retrievals handed on since the last grade, and the hop of the latest question."""

    __slots__ = ("graph", "pending", "question")

    def __init__(self, stage: Stage, graph: Any, question: str | None) -> None:
        super().__init__(stage)
        self.graph = graph
        self.pending: dict[str, list[Candidate]] = {}
        self.question = question  # the latest question of the run (hop 0 first)

    def offer(self, candidates: list[Candidate]) -> None:
        super().offer(candidates)
        node = _current_node()
        if node is not None:
            with self._lock:
                self.pending.setdefault(node, []).extend(candidates)

    def generates(self) -> bool:
        return bool(self.offered)

    def take_pending(self, node: str) -> list[Candidate]:
        with self._lock:
            return self.pending.pop(node, [])

    def withdraw(self, ids: set[str]) -> None:
        """Documents a grader rejected are no longer offered to a generation."""
        with self._lock:
            self.offered[:] = [c for c in self.offered if c.id not in ids]


def _current_node() -> str | None:
    """The LangGraph node running in this context (LangChain's child config carries its name)."""
    try:
        from langchain_core.runnables.config import var_child_runnable_config
    except ImportError:  # pragma: no cover - langchain-core is what runs the graph
        return None
    return _node_of(var_child_runnable_config.get())


def _node_of(config: Any) -> str | None:
    metadata = config.get("metadata") if isinstance(config, Mapping) else None
    node = metadata.get("langgraph_node") if isinstance(metadata, Mapping) else None
    return node if isinstance(node, str) else None


def graph_run() -> GraphRun | None:
    run_ = chain_run.get()
    return run_ if isinstance(run_, GraphRun) else None


# --- the root ------------------------------------------------------------------------------------
def _first_question(payload: Any) -> str | None:
    """The first user message of a graph's input (``{"messages": [...]}`` or a list of messages)."""
    messages = payload.get("messages") if isinstance(payload, Mapping) else payload
    if not isinstance(messages, (list, tuple)):
        return None
    for message in messages:
        text = user_text(message)
        if text is not None:
            return text
    return None


def user_text(message: Any) -> str | None:
    """The text of a user-role message in any of LangGraph's message shapes (a ``HumanMessage``, a
    ``{"role": "user"}`` dict, a ``("user", text)`` tuple); ``None`` for anything else."""
    if isinstance(message, Mapping):
        role, content = message.get("role"), message.get("content")
    elif isinstance(message, tuple) and len(message) == 2:
        role, content = message
    else:
        role, content = getattr(message, "type", None), getattr(message, "content", None)
    return content if role in ("user", "human") and isinstance(content, str) else None


class GraphCall(LangChainCall):
    """``Pregel.invoke/ainvoke``: the ``pipeline`` root of one graph run."""

    site = "lg.graph"

    question: str | None = None

    def open(self) -> Stage:
        self.question = _first_question(argument(self.args, self.kwargs, 0, "input"))
        return self.open_stage(sc.KIND_PIPELINE, query=self.question)

    def before(self, s: Stage) -> None:
        self.set_var(chain_run, GraphRun(s, self.instance, self.question))


# --- what a node's task wrote: the run's questions --------------------------------------------------
def note_task(task: Any) -> None:
    """After a node's task ran: its tool-call queries and rewritten questions become hops, each
    recorded by a ``query_transform`` stage named after the node (its function) whose query is the
    latest question."""
    graph = graph_run()
    name = getattr(task, "name", None)
    if graph is None or not graph.stage.recording or name == _START:  # the input itself: hop 0
        return
    made: list[tuple[str, bool]] = []  # (text, is a new question)
    for channel, value in list(getattr(task, "writes", ()) or ()):
        if channel == "messages":
            for message in value if isinstance(value, list) else [value]:
                made.extend(q for q in _questions(message) if q[0] != graph.question)
    if not made:
        return
    with stage(sc.KIND_QUERY_TRANSFORM, _node_component(graph.graph, name)) as s:
        s.query(graph.question)
        for text, question in made:
            hop = s.add_query_variant(text, transform=sc.TRANSFORM_REWRITE)
            if question and hop is not None:
                graph.question = text


def _questions(message: Any) -> list[tuple[str, bool]]:
    """What a message a node wrote asks: a user-role text (a new question) or the ``query`` of
    each tool call (the agent's search)."""
    text = user_text(message)
    if text is not None:
        return [(text, True)]
    found = []
    for tool_call in getattr(message, "tool_calls", None) or ():
        args = tool_call.get("args") if isinstance(tool_call, Mapping) else None
        query = args.get("query") if isinstance(args, Mapping) else None
        if isinstance(query, str):
            found.append((query, False))
    return found


def _node_component(graph: Any, name: Any) -> str:
    """The node's function (``module.function``), else ``langgraph.node.<name>``."""
    nodes = getattr(getattr(graph, "builder", None), "nodes", None)
    spec = nodes.get(name) if isinstance(nodes, Mapping) else None
    runnable = getattr(spec, "runnable", None)
    func = getattr(runnable, "func", None)
    return component_name(func) if func is not None else f"langgraph.node.{name}"


# --- the grader: a router out of the retrieving node ------------------------------------------------
class GradeCall(LangChainCall):
    """``BranchSpec._route``: a ``filter`` stage when the node it routes from handed on documents."""

    site = "lg.grade"

    def open(self) -> Stage | None:
        graph = graph_run()
        config = argument(self.args, self.kwargs, 1, "config")
        node = _node_of(config)
        if graph is None or node is None or current_stage() is not graph.stage:
            return None
        docs = graph.take_pending(node)
        if not docs:
            return None
        path = getattr(self.instance, "path", None)
        router = getattr(path, "func", None) or getattr(path, "afunc", None) or path
        s = self.new_stage(sc.KIND_FILTER, component_name(router))
        self.graph, self.node, self.docs = graph, node, docs
        self.router = getattr(router, "__name__", None) or component_name(router)
        routes.set_for(self, [])
        return s

    def before(self, s: Stage) -> None:
        inputs = [c.copy() for c in self.docs]
        for candidate in inputs:
            if candidate.score is None:
                candidate.score_kind = sc.SCORE_NONE  # the tool hands on texts: no score reaches the grader
        self.docs = inputs
        s.inputs([c.copy() for c in inputs])

    def after(self, s: Stage, result: Any) -> None:
        destinations = routes.pop(self)
        back = _comes_back(getattr(self.graph.graph, "builder", None), destinations, self.node)
        if back is None:
            s.finding(f"the targets of {self.router}'s routes are not all known: its decision is not read")
            s.outputs([c.copy() for c in self.docs])
            return
        if not back:
            s.outputs([c.copy() for c in self.docs])
            return
        s.outputs([])
        where = ", ".join(sorted(d for d in destinations))
        for candidate in self.docs:
            s.exclude(candidate.id, REASON_GRADED_IRRELEVANT, f"{self.router} routed to {where}, which leads back to {self.node}")
        self.graph.withdraw({c.id for c in self.docs})

    def cleanup(self) -> None:
        routes.pop(self)


class _Routes:
    """The destinations ``BranchSpec._finish`` computed for the grade being recorded (per thread:
    ``_finish`` runs inside ``_route``, on the same thread)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def set_for(self, call: GradeCall, into: list[str]) -> None:
        self._local.current = (call, into)

    def add(self, destinations: Sequence[Any]) -> None:
        current = getattr(self._local, "current", None)
        if current is not None:
            current[1].extend(d if isinstance(d, str) else str(getattr(d, "node", d)) for d in destinations)

    def pop(self, call: GradeCall) -> list[str]:
        current = getattr(self._local, "current", None)
        if current is None or current[0] is not call:
            return []
        self._local.current = None
        found: list[str] = current[1]
        return found


routes = _Routes()


def _successors(builder: Any, node: str) -> set[str] | None:
    """Where the graph can go after ``node``; ``None`` when a branch's targets are unknown."""
    found = {end for start, end in getattr(builder, "edges", ()) if start == node}
    for branch in (getattr(builder, "branches", {}) or {}).get(node, {}).values():
        ends = getattr(branch, "ends", None)
        if ends is None:
            return None
        found.update(ends.values())
    return found


def _comes_back(builder: Any, destinations: Sequence[str], node: str) -> bool | None:
    """Whether every destination can lead back to ``node`` (``None``: the graph cannot say)."""
    if builder is None or not destinations:
        return None
    for destination in destinations:
        seen: set[str] = set()
        stack = [destination]
        reached = False
        while stack and not reached:
            current = stack.pop()
            if current in seen or current == _END:
                continue
            seen.add(current)
            nexts = _successors(builder, current)
            if nexts is None:
                return None
            reached = node in nexts
            stack.extend(nexts)
        if not reached:
            return False
    return True


# --- the wrappers ----------------------------------------------------------------------------------
class GraphWrappers:
    """The wrapt wrappers of LangGraph's run methods, bound to one ``instrument()``'s :class:`Shared`."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    def invoke(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if current_pipeline() is not None or not enabled():
            return wrapped(*args, **kwargs)
        return run(GraphCall(self.shared, wrapped, instance, args, kwargs))

    async def ainvoke(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if current_pipeline() is not None or not enabled():
            return await wrapped(*args, **kwargs)
        return await run_async(GraphCall(self.shared, wrapped, instance, args, kwargs))

    def stream(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        """``stream`` returns a generator: the root is open while the graph runs, from the first
        item asked for to the last (between items the caller's own code runs inside it)."""
        if current_pipeline() is not None or not enabled():
            return wrapped(*args, **kwargs)
        return self._stream(GraphCall(self.shared, wrapped, instance, args, kwargs))

    def _stream(self, call: GraphCall) -> Iterator[Any]:
        items = call.wrapped(*call.args, **call.kwargs)
        straddle = _Straddle(call)
        guard("lg.stream.open", straddle.open_now)
        try:
            yield from items
        except BaseException as exc:
            straddle.close_now(exc)
            raise
        straddle.close_now(None)

    def astream(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if current_pipeline() is not None or not enabled():
            return wrapped(*args, **kwargs)
        return self._astream(GraphCall(self.shared, wrapped, instance, args, kwargs))

    async def _astream(self, call: GraphCall) -> Any:
        items = call.wrapped(*call.args, **call.kwargs)
        straddle = _Straddle(call)
        guard("lg.stream.open", straddle.open_now)
        try:
            async for item in items:
                yield item
        except BaseException as exc:
            straddle.close_now(exc)
            raise
        straddle.close_now(None)

    def route(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if graph_run() is None:
            return wrapped(*args, **kwargs)
        return run(GradeCall(self.shared, wrapped, instance, args, kwargs))

    async def aroute(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if graph_run() is None:
            return await wrapped(*args, **kwargs)
        return await run_async(GradeCall(self.shared, wrapped, instance, args, kwargs))

    def task(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        """``run_with_retry(task, ...)``: after a node's task, its writes name the run's questions."""
        result = wrapped(*args, **kwargs)
        if graph_run() is not None:
            guard("lg.task", note_task, argument(args, kwargs, 0, "task"))
        return result

    async def atask(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        result = await wrapped(*args, **kwargs)
        if graph_run() is not None:
            guard("lg.task", note_task, argument(args, kwargs, 0, "task"))
        return result


def finish(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """``BranchSpec._finish(writer, input, result, config)``: hand the router's destinations to the
    grade being recorded."""
    result = argument(args, kwargs, 2, "result")
    guard("lg.finish", _hand_destinations, instance, result)
    return wrapped(*args, **kwargs)


def _hand_destinations(branch: Any, result: Any) -> None:
    items = result if isinstance(result, (list, tuple)) else [result]
    ends = getattr(branch, "ends", None)
    routes.add([ends.get(r, r) if isinstance(ends, Mapping) and isinstance(r, str) else r for r in items])


class _Straddle:
    """Opens a :class:`GraphCall`'s stage now and closes it later: the root of a streamed run, whose
    iteration no single call frame covers. The stage is started and finished through the recorder's
    public ``Stage`` calls; the context variables the call set are reset when it closes."""

    def __init__(self, call: GraphCall) -> None:
        self.call = call
        self.stage: Stage | None = None
        self.tokens: list[Any] = []

    def open_now(self) -> None:
        s = self.call.open()
        self.stage = s
        if s.recording:
            self.tokens.append(chain_run.set(GraphRun(s, self.call.instance, self.call.question)))

    def close_now(self, exc: BaseException | None) -> None:
        s = self.stage
        if s is None:
            return
        self.stage = None
        while self.tokens:
            token = self.tokens.pop()
            try:  # noqa: SIM105 - another context: nothing of ours is left there
                chain_run.reset(token)
            except ValueError:
                pass
        guard("lg.stream.close", s.finish, exc)


__all__ = ["GradeCall", "GraphCall", "GraphRun", "GraphWrappers", "REASON_GRADED_IRRELEVANT", "finish", "graph_run", "note_task", "user_text"]
