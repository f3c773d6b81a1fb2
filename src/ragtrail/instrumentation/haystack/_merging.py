"""``AutoMergingRetriever``: a ``retrieve`` stage without a query.

It groups the leaf documents a retriever found by their ``__parent_id`` and, where more than
``threshold`` of a parent's children were found, reads the parent from its document store and hands
it on in their place (again one level up, while merges happen). Each parent is a unit read from the
store; the leaves it replaced are exclusions ``custom:merged`` ("into <id>") and the parent names them
(``merge@1``, ``derived_from``: docs/semconv.md §1), so what reached the prompt is read, never "of
unknown origin", and a leaf's fate follows it into its parent.

Which parent holds a leaf is read from the documents themselves, never from the store (ragtrail asks
it nothing): a leaf's ``__parent_id`` when that parent is handed on, or, one level further, the
handed-on document whose ``__children_ids`` holds that parent id. A leaf merged more levels up names
no handed-on document: it is left to the recorder's "vanished unexplained", not guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.instrumentation._replace import record_replacements
from ragtrail.recorder.candidates import Candidate
from ragtrail.recorder.stage import Stage

from ._common import HaystackCall, documents_of, outputs_like_inputs, snapshot


def _meta(candidate: Candidate, key: str) -> Any:
    return candidate.metadata.get(key) if isinstance(candidate.metadata, Mapping) else None


def merged_sources(inputs: list[Candidate], outputs: list[Candidate]) -> dict[str, list[str]]:
    """{handed-on parent id: the input leaf ids it replaced}, from the leaves' ``__parent_id`` and the
    parents' ``__children_ids`` (two levels at most: see the module docstring)."""
    handed = {c.id for c in outputs}
    grandparent: dict[str, str] = {}
    for out in outputs:
        children = _meta(out, "__children_ids")
        for child in children if isinstance(children, (list, tuple)) else ():
            grandparent.setdefault(str(child), out.id)
    sources: dict[str, list[str]] = {}
    for leaf in inputs:
        if leaf.id in handed:
            continue
        parent = _meta(leaf, "__parent_id")
        parent = str(parent) if parent else None
        target = parent if parent in handed else grandparent.get(parent) if parent else None
        if target is not None and leaf.id not in sources.get(target, ()):
            sources.setdefault(target, []).append(leaf.id)
    return sources


class AutoMerging(HaystackCall):
    """``AutoMergingRetriever.run(documents)``."""

    inputs: list[Candidate] | None = None

    def before(self, s: Stage) -> None:
        docs = self.arguments.get("documents")
        inputs = snapshot(docs)
        if inputs is None:
            s.finding(f"documents is a {type(docs).__name__}, not a list: inputs not snapshotted")
            return
        s.inputs(inputs)
        self.inputs = inputs

    def after(self, s: Stage, result: Any) -> None:
        docs = documents_of(result)
        inputs = self.inputs
        if docs is None or inputs is None:
            s.finding(f"run returned a {type(result).__name__} without a documents list")
            return
        outputs = outputs_like_inputs(docs, inputs, None)
        sources = merged_sources(inputs, outputs)
        hops = {c.id: c.hop for c in inputs}
        for out in outputs:
            if out.id in sources:
                # a parent read from the store: no score of its own; the hop its leaves share, if one
                out.score_kind = sc.SCORE_NONE
                shared = {hops[i] for i in sources[out.id]}
                out.hop = next(iter(shared)) if len(shared) == 1 else None
        record_replacements(s, inputs, outputs, sources)
        threshold = getattr(self.instance, "threshold", None)
        s.finding(
            f"{len(sources)} parent(s) read from the document store in place of {sum(map(len, sources.values()))} "
            f"of the {len(inputs)} leaves (more than threshold={threshold} of a parent's children found)"
        )
