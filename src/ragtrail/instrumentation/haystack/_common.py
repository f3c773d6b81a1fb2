"""What every Haystack hook shares: the call on the hook skeleton, the ``Document`` adapter, the
snapshot of input documents with the hop and score kind an earlier stage gave them, and the
re-derivation helpers the rankers and joiners use to give every exclusion its reason."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import finite_or_none
from ragtrail.hooks import Call
from ragtrail.recorder.candidates import Candidate, adapt
from ragtrail.recorder.pipeline import current_pipeline
from ragtrail.recorder.stage import Stage

# the text of the query a multi-query embedding retriever is embedding on this thread/task, so the
# inner embedding retriever's stage can name the hop that found its documents
query_text: contextvars.ContextVar[str | None] = contextvars.ContextVar("ragtrail_haystack_query", default=None)
# the user's query of the Haystack pipeline run this call is in (hop 0), so a retriever that only
# sees a vector (the text embedder ran before it) can name the hop it searched for
pipeline_query: contextvars.ContextVar[str | None] = contextvars.ContextVar("ragtrail_haystack_pipeline_query", default=None)
# (id of the multi-query retriever, [(query, documents), ...]) collected by its per-query workers
collector: contextvars.ContextVar[tuple[int, list[tuple[Any, Any]]] | None] = contextvars.ContextVar("ragtrail_haystack_multi_query", default=None)
# (document id, score) -> the score kind of the retriever that gave that document that score, in this
# pipeline run. Haystack copies a component's outputs on their way to the next one, so a joiner
# meets neither the retriever's objects nor its lists: the score itself is what says who made it
# (one id found by BM25 and by an embedding retriever carries two scores of two kinds)
produced_kinds: contextvars.ContextVar[dict[tuple[str, float], str] | None] = contextvars.ContextVar("ragtrail_haystack_score_kinds", default=None)


def note_kinds(candidates: list[Candidate], kind: str) -> None:
    """A retriever's outputs: remember the kind of each score it gave (see ``produced_kinds``)."""
    kinds = produced_kinds.get()
    if kinds is None:
        return
    for candidate in candidates:
        score = finite_or_none(candidate.score)
        if score is not None:
            kinds[(candidate.id, score)] = kind


def _produced_kind(candidate: Candidate) -> str | None:
    kinds = produced_kinds.get()
    score = finite_or_none(candidate.score)
    if kinds is None or score is None:
        return None
    return kinds.get((candidate.id, score))


def document_adapter(doc: Any) -> Candidate:
    """A Haystack ``Document``: its id, text (or blob bytes), score and meta."""
    content = getattr(doc, "content", None)
    if content is None:
        blob = getattr(doc, "blob", None)
        content = getattr(blob, "data", None) if blob is not None else None
    meta = getattr(doc, "meta", None)
    return Candidate(
        id=str(doc.id), content=content, score=getattr(doc, "score", None), metadata=dict(meta) if isinstance(meta, Mapping) and meta else None
    )


def documents_of(result: Any) -> list[Any] | None:
    if isinstance(result, Mapping):
        docs = result.get("documents")
        if isinstance(docs, (list, tuple)):
            return list(docs)
    return None


def snapshot(docs: Any, *, with_hops: bool = True) -> list[Candidate] | None:
    """Adapt the input documents now (rankers may rescore them in place), each with the hop and
    score kind an earlier stage of this pipeline gave it."""
    if not isinstance(docs, (list, tuple)):
        return None
    state = current_pipeline()
    result = []
    for doc in docs:
        candidate = adapt(doc)
        if candidate.score_kind is None:
            candidate.score_kind = _produced_kind(candidate)
        if candidate.score_kind is None and state is not None:
            candidate.score_kind = state.candidate_score_kind(candidate.id)
        if with_hops and candidate.hop is None and state is not None:
            candidate.hop = state.candidate_hop(candidate.id)
        result.append(candidate)
    return result


def best_copies(inputs: list[Candidate]) -> dict[str, Candidate]:
    """Haystack's ``_deduplicate_documents``: one document per id, the first highest-scored copy,
    in first-seen order of the ids."""
    best: dict[str, Candidate] = {}
    for candidate in inputs:
        score = finite_or_none(candidate.score)
        score = float("-inf") if score is None else score
        current = best.get(candidate.id)
        if current is None:
            best[candidate.id] = candidate
            continue
        current_score = finite_or_none(current.score)
        if score > (float("-inf") if current_score is None else current_score):
            best[candidate.id] = candidate
    return best


def outputs_like_inputs(docs: list[Any], inputs: list[Candidate], kind: str | None) -> list[Candidate]:
    """Adapt the output documents; one that is an input object (not a rescored copy) keeps that
    input's hop and score kind, a rescored one takes ``kind``."""
    by_object = {id(c.raw): c for c in inputs if c.raw is not None}
    by_id: dict[str, Candidate] = {}
    for c in inputs:
        by_id.setdefault(c.id, c)
    result = []
    for doc in docs:
        candidate = adapt(doc)
        source = by_object.get(id(doc))
        if source is not None and source.raw is doc:
            candidate.score_kind = source.score_kind
            candidate.hop = source.hop
        else:
            origin = by_id.get(candidate.id)
            candidate.score_kind = kind if kind is not None else (origin.score_kind if origin else None)
            if origin is not None:
                candidate.hop = origin.hop
        result.append(candidate)
    return result


def exclude_missing(s: Stage, inputs: list[Candidate], outputs: list[Candidate], reason_of: Callable[[Candidate], tuple[str, str | None]]) -> None:
    """Give the first copy of every input id that did not leave its reason; surplus copies of an id
    are left to the recorder, which calls them ``deduplicated``."""
    kept = {c.id for c in outputs}
    best = best_copies(inputs)
    done: set[str] = set()
    for candidate in inputs:
        if candidate.id in kept or candidate.id in done:
            continue
        done.add(candidate.id)
        reason, detail = reason_of(best[candidate.id])
        s.exclude(candidate.id, reason, detail)


class HaystackCall(Call):
    """How one component's ``run`` / ``run_async`` maps onto a stage, on the hook skeleton.
    ``before`` keeps what ``after`` needs as attributes of the call; the suppression key is per
    component instance."""

    site = "haystack"
    kind = sc.KIND_RETRIEVE

    def skip(self) -> bool:
        return False

    def open(self) -> Stage | None:
        if self.instance is None or self.skip():
            return None
        return self.new_stage(self.kind)
