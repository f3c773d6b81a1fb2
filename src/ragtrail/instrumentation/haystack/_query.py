"""The query side: ``QueryExpander`` (a ``query_transform`` stage whose expansions become ``expand``
hops) and ``Pipeline.run`` / ``run_async`` (the ``pipeline`` root: hop numbering and coverage are per
pipeline run, unless an outer ragtrail stage already is the root)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.hooks import guard
from ragtrail.recorder.pipeline import current_pipeline
from ragtrail.recorder.stage import Stage

from ._common import HaystackCall, pipeline_query, produced_kinds
from ._generate import HaystackRun, current_patcher, run_state

_QUERY_KEYS = ("query", "question", "text", "query_str", "prompt")


class Expander(HaystackCall):
    """``QueryExpander``: each expansion is a new ``expand`` hop whose parent is the query's hop; the
    original query, when kept, keeps its own hop. No expansion at all is a degraded stage (Haystack
    swallows the generator's error and returns the original query)."""

    kind = sc.KIND_QUERY_TRANSFORM

    def before(self, s: Stage) -> None:
        instance, bound = self.instance, self.arguments
        query = bound.get("query")
        n = bound.get("n_expansions")
        n = getattr(instance, "n_expansions", None) if n is None else n
        if isinstance(query, str):
            s.query(query)
        self.query, self.n = query, n
        self.original = getattr(instance, "include_original_query", True)

    def after(self, s: Stage, result: Any) -> None:
        queries = result.get("queries") if isinstance(result, Mapping) else None
        if not isinstance(queries, (list, tuple)):
            s.finding(f"run returned a {type(result).__name__} without a queries list")
            return
        query = self.query
        if not isinstance(query, str) or not query.strip():
            s.finding("empty query: nothing expanded")
            return
        expansions = [q for q in queries if isinstance(q, str) and q != query]
        for text in expansions:
            s.add_query_variant(text, transform=sc.TRANSFORM_EXPAND)
        if not expansions:
            s.set_status(sc.STATUS_DEGRADED, failure_class="no_expansion", fallback="original_query" if self.original else "no_query")


class PipelineRun(HaystackCall):
    """``Pipeline.run`` / ``run_async``: the root that numbers the hops, unless a ragtrail stage is
    already open around it (then that one is the root)."""

    kind = sc.KIND_PIPELINE

    def key(self) -> str:
        return "haystack:pipeline"  # one root per run, whichever Pipeline object runs inside it

    def skip(self) -> bool:
        # an indexing pipeline (converters, splitters, a writer) reads nothing: no root, so no
        # empty ``pipeline`` trace that ``show last`` would land on
        return current_pipeline() is not None or not _reads_documents(self.instance)

    def before(self, s: Stage) -> None:
        self.set_var(run_state, HaystackRun())  # what the run's generators are offered (see _generate)
        self.set_var(produced_kinds, {})  # the kind of each retrieved score (see _common)
        classes = current_patcher()
        if classes is not None:
            guard("haystack.generate.prepare", classes.prepare, self.instance)
        bound = self.arguments
        text = _pipeline_query(bound.get("data"))
        if text is not None:
            s.query(text)
            self.set_var(pipeline_query, text)


# the component families that read documents (what this package records)
_READER_SUFFIXES = ("Retriever", "Ranker", "Joiner", "QueryExpander")


def _reads_documents(pipeline: Any) -> bool:
    """Whether any component of ``pipeline`` retrieves, ranks or fuses documents; True when the
    pipeline cannot be walked (then it keeps its root as before)."""
    walk = getattr(pipeline, "walk", None)
    if not callable(walk):
        return True
    try:
        return any(type(component).__name__.endswith(_READER_SUFFIXES) for _, component in walk())
    except Exception:  # pragma: no cover - another Haystack version
        return True


def _pipeline_query(data: Any) -> str | None:
    """The user's query in ``Pipeline.run(data=...)``: flat ``{"query": ...}`` or per component
    ``{"retriever": {"query": ...}}``, first match in order."""
    if not isinstance(data, Mapping):
        return None
    for key in _QUERY_KEYS:
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            return value
    for key in _QUERY_KEYS:
        for inputs in data.values():
            if isinstance(inputs, Mapping):
                value = inputs.get(key)
                if isinstance(value, str) and value.strip():
                    return value
    return None
