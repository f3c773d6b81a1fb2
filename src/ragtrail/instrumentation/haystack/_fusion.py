"""``DocumentJoiner`` (every join mode) and the multi-query retrievers: ``fuse`` stages whose inputs
are the concatenated input lists, each candidate with the hop of the query that found it.

The multi-query retrievers run the inner retriever on a plain ``ThreadPoolExecutor`` that does not
carry the caller's context, so the inner spans would start new traces: the module's
``ThreadPoolExecutor`` name is wrapped to build a subclass that runs each submitted callable in a
copy of the submitter's context."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import receipt
from ragtrail.hooks import Args, Kwargs
from ragtrail.recorder.candidates import Candidate
from ragtrail.recorder.pipeline import current_pipeline
from ragtrail.recorder.stage import Stage

from ._common import HaystackCall, collector, documents_of, exclude_missing, outputs_like_inputs, query_text, snapshot

# the kind of the score each rescoring join mode writes: RRF's; distribution-based fusion normalises
# each list (mean +- 3 standard deviations) before it sums: a normalised fusion score; merge sums the
# input scores times their weights as they are (BM25 and cosine added): no kind (see _merge_words)
_RESCORED = {"reciprocal_rank_fusion": sc.SCORE_RRF, "merge": sc.SCORE_NONE, "distribution_based_rank_fusion": sc.SCORE_RELATIVE}


def _merge_words(weights: Any, inputs: list[Candidate]) -> str:
    """What a ``merge`` score is: a weighted sum of the raw input scores, never normalised."""
    kinds = sorted({c.score_kind for c in inputs if c.score_kind})
    weighted = f"weights {list(weights)}" if weights else "equal weights"
    added = ", ".join(kinds) if kinds else "unknown"
    return (
        f"join_mode=merge: each score is the sum of the document's input scores times their list's weight "
        f"({weighted}), not normalised: scores of kind {added} added as they are (score kind none)"
    )


class Joiner(HaystackCall):
    """``DocumentJoiner``: every join mode keeps one document per id; ``top_k`` cuts the rest."""

    kind = sc.KIND_FUSE
    mode: str | None = None
    inputs: list[Candidate] | None = None

    def before(self, s: Stage) -> None:
        instance, bound = self.instance, self.arguments
        top_k = bound.get("top_k")
        top_k = getattr(instance, "top_k", None) if top_k is None else top_k
        s.set(top_k=top_k)
        mode = getattr(getattr(instance, "join_mode", None), "value", None)
        lists = bound.get("documents")
        inputs = None
        if isinstance(lists, (list, tuple)) and all(isinstance(item, (list, tuple)) for item in lists):
            inputs = snapshot([doc for item in lists for doc in item])
            s.inputs(inputs)
        else:
            s.finding(f"documents is a {type(lists).__name__}, not a list of lists: inputs not snapshotted")
        if mode == "reciprocal_rank_fusion":
            s.score_kind = sc.SCORE_RRF
        self.mode, self.top_k, self.inputs = mode, top_k, inputs

    def after(self, s: Stage, result: Any) -> None:
        docs = documents_of(result)
        if docs is None:
            s.finding(f"run returned a {type(result).__name__} without a documents list")
            return
        snapshotted = self.inputs
        inputs = snapshotted or []
        mode = self.mode
        # concatenate keeps the input objects (and their scores); the other modes rescore copies
        kind = _RESCORED.get(mode) if mode is not None else None
        outputs = outputs_like_inputs(docs, inputs, kind)
        s.outputs(outputs)
        if mode == "merge":
            s.finding(_merge_words(getattr(self.instance, "weights", None), inputs))
        if snapshotted is not None:
            top_k = self.top_k
            exclude_missing(s, inputs, outputs, lambda c: (sc.REASON_BELOW_RANK_CUTOFF, f"top_k={top_k}"))


class MultiQuery(HaystackCall):
    """The multi-query retrievers: a ``fuse`` stage over the inner retriever's per-query results (the
    inner retriever records its own ``retrieve`` stage, a child of this one); each candidate carries
    the hop of the query that found it; duplicates across queries are ``deduplicated``."""

    kind = sc.KIND_FUSE

    def before(self, s: Stage) -> None:
        instance, bound = self.instance, self.arguments
        queries = bound.get("queries")
        state = current_pipeline()
        if isinstance(queries, (list, tuple)) and state is not None and not state.has_hops():
            # the first queries this run sees are the application's own (``run(queries=[...])``):
            # each a hop of its own. After a recorded query, an unknown one is still untracked
            # (something unrecorded produced it).
            for query in queries:
                if isinstance(query, str):
                    state.given_hop(receipt(query).sha256)
        bucket: list[tuple[Any, Any]] = []
        self.queries = list(queries) if isinstance(queries, (list, tuple)) else None
        self.bucket = bucket  # (query, documents) of each per-query retrieval, filled by its worker
        self.set_var(collector, (id(instance), bucket))

    def after(self, s: Stage, result: Any) -> None:
        docs = documents_of(result)
        if docs is None:
            s.finding(f"run returned a {type(result).__name__} without a documents list")
            return
        state = current_pipeline()
        by_query: dict[Any, list[Any]] = {}
        for query, found in list(self.bucket):
            by_query.setdefault(query, []).append(found)
        order = self.queries if self.queries is not None else [q for q, _ in self.bucket]
        inputs: list[Candidate] = []
        for query in order:
            results = by_query.get(query)
            if not results:
                continue
            found = results.pop(0)
            hop = None
            if isinstance(query, str) and state is not None:
                hop = state.untracked_hop(receipt(query).sha256).number
            for candidate in snapshot(found, with_hops=False) or []:
                candidate.hop = hop
                inputs.append(candidate)
        s.inputs(inputs)
        outputs = outputs_like_inputs(docs, inputs, None)
        s.outputs(outputs)


class _ContextThreadPoolExecutor(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` that runs each task in a copy of the submitting context (as
    ``asyncio.to_thread`` does), so spans opened by the task have the submitter's span as parent."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return super().submit(contextvars.copy_context().run, fn, *args, **kwargs)


def executor_factory(wrapped: Any, instance: Any, args: Args, kwargs: Kwargs) -> Any:
    return _ContextThreadPoolExecutor(*args, **kwargs)


def per_query_sync(wrapped: Any, instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """``_run_on_thread(query, ...)``: name the query for the inner stage, hand the result to the
    multi-query stage."""
    query = args[0] if args else kwargs.get("query")
    token = query_text.set(query) if isinstance(query, str) else None
    try:
        result = wrapped(*args, **kwargs)
    finally:
        if token is not None:
            query_text.reset(token)
    _collect(instance, query, result)
    return result


async def per_query_async(wrapped: Any, instance: Any, args: Args, kwargs: Kwargs) -> Any:
    query = args[0] if args else kwargs.get("query")
    token = query_text.set(query) if isinstance(query, str) else None
    try:
        result = await wrapped(*args, **kwargs)
    finally:
        if token is not None:
            query_text.reset(token)
    _collect(instance, query, result)
    return result


def _collect(instance: Any, query: Any, result: Any) -> None:
    target = collector.get()
    if target is not None and target[0] == id(instance) and isinstance(result, (list, tuple)):
        target[1].append((query, list(result)))
