"""``SentenceWindowRetriever``: a ``retrieve`` stage without a query.

It reads the neighbours of each hit from the document store (the documents of the hit's source with a
``split_id`` within ``window_size`` of the hit's, one filter for all the windows) and hands on the
windows' documents, the hits' own stored copies among them. Each is a unit read from the corpus, so
the stage records them as its outputs: a neighbour that reaches the prompt is then read, not "of
unknown origin" (docs/semconv.md §1). The hits are its inputs; a neighbour keeps the hop of the hit
whose window holds it when the hits share one. The component hands on a document once per window
that holds it, and so does the stage.
"""

from __future__ import annotations

from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.recorder.candidates import Candidate, adapt
from ragtrail.recorder.stage import Stage

from ._common import HaystackCall, snapshot


class SentenceWindow(HaystackCall):
    """``SentenceWindowRetriever.run(retrieved_documents, window_size)``."""

    inputs: list[Candidate] | None = None

    def before(self, s: Stage) -> None:
        bound = self.arguments
        window = bound.get("window_size")
        self.window = getattr(self.instance, "window_size", None) if window is None else window
        docs = bound.get("retrieved_documents")
        inputs = snapshot(docs)
        if inputs is None:
            s.finding(f"retrieved_documents is a {type(docs).__name__}, not a list: inputs not snapshotted")
            return
        s.score_kind = sc.SCORE_NONE
        s.inputs(inputs)
        self.inputs = inputs

    def after(self, s: Stage, result: Any) -> None:
        docs = result.get("context_documents") if isinstance(result, dict) else None
        inputs = self.inputs
        if not isinstance(docs, (list, tuple)) or inputs is None:
            s.finding(f"run returned a {type(result).__name__} without a context_documents list")
            return
        hops = {c.id: c.hop for c in inputs}
        shared = set(hops.values())
        one_hop = next(iter(shared)) if len(shared) == 1 else None
        outputs = []
        for doc in docs:
            candidate = adapt(doc)
            candidate.hop = hops.get(candidate.id, one_hop)
            outputs.append(candidate)
        s.outputs(outputs)
        beside = len({c.id for c in outputs} - set(hops))
        s.finding(
            f"a window of {self.window} split(s) either side of each of the {len(inputs)} hit(s), read from the "
            f"document store by split_id: {beside} document(s) beside the hits"
        )
