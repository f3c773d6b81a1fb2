"""What the reranker instrumentations (sentence-transformers, cohere, rerankers, flashrank) share.

A reranker call is one ``rerank`` stage: the query, the documents in input order (snapshotted
before the call: flashrank sorts the caller's list in place, rerankers rewrites ``doc_id`` on the
caller's Documents), and the ranked list the library returned, with its scores as ``rerank``
scores. A ``top_k``/``top_n`` cut becomes the stage's ``top_k`` so the recorder derives the
dropped documents as ``below_rank_cutoff``.

The library's result object is only read, never changed, and the wrapped call runs outside any
``try`` that could swallow its exception: a failing call ends the span ``failed`` and the same
exception object propagates. A reranker call made while a ``rerank`` stage is already open (a
framework's compressor calling a cross-encoder, rerankers' FlashRankRanker calling flashrank) is
not recorded a second time: the outer stage already is the record of that reranking.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragtrail import settings
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import finite_or_none
from ragtrail.hooks import Args, Call, Kwargs, argument, component_name
from ragtrail.recorder.candidates import Candidate, adapt, is_candidate_list
from ragtrail.recorder.stage import Stage, current_stage


@dataclass
class RerankArgs:
    """What a wrapper read from the call's arguments before running it.

    ``documents`` is the list as the caller passed it (``None`` when it could not be read without
    consuming it); ``inputs`` is filled with the snapshot when the stage records; ``lookup`` is
    library-specific state a wrapper needs to map results back to inputs."""

    component: str
    query: Any = None
    documents: Sequence[Any] | None = None
    top_k: int | None = None
    model: str | None = None
    inputs: list[Candidate] = field(default_factory=list)
    lookup: Any = None
    findings: list[str] = field(default_factory=list)
    snapshot: Callable[[Sequence[Any]], list[Candidate]] | None = None


Prepare = Callable[[Any, Args, Kwargs], "RerankArgs | None"]
Record = Callable[[Stage, "RerankArgs", Any], None]


def inside_rerank_stage() -> bool:
    """True when a ``rerank`` stage is open in this context (its recorder already covers this call)."""
    current = current_stage()
    return current is not None and current.kind == sc.KIND_RERANK


class RerankCall(Call):
    """A reranker call on the hook skeleton: ``prepare(instance, args, kwargs)`` reads the request,
    the stage records query, model and the input snapshot before the call, and ``record`` reads the
    library's result after it. One suppression key per library (``site``), and no stage at all
    inside an open ``rerank`` stage."""

    per_instance = False

    def __init__(
        self, tracer: Any, site: str, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs, prepare: Prepare, record: Record
    ) -> None:
        super().__init__(tracer, wrapped, instance, args, kwargs)
        self.site = site
        self.prepare = prepare
        self.record = record
        self.request: RerankArgs | None = None

    def open(self) -> Stage | None:
        if inside_rerank_stage():
            return None
        request = self.request = self.prepare(self.instance, self.args, self.kwargs)
        if request is None:
            return None
        return self.new_stage(sc.KIND_RERANK, request.component, top_k=request.top_k, score_kind=sc.SCORE_RERANK)

    def before(self, s: Stage) -> None:
        _record_inputs(s, self.request)  # type: ignore[arg-type]

    def after(self, s: Stage, result: Any) -> None:
        self.record(s, self.request, result)  # type: ignore[arg-type]

    def failed(self, s: Stage, exc: BaseException) -> None:
        """``timeout`` for timeout exceptions of any library (e.g. httpx's), else plain ``failed``."""
        if "timeout" in type(exc).__name__.lower():
            s.set_status(sc.STATUS_FAILED, failure_class="timeout")


def snapshot(documents: Sequence[Any]) -> list[Candidate]:
    """Candidates for the documents as they are now (ids, content and receipts frozen before the
    call; metadata copied so a library that edits it in place cannot rewrite the record)."""
    result = []
    for document in documents:
        candidate = adapt(document)
        if isinstance(candidate.metadata, Mapping):
            candidate.metadata = dict(candidate.metadata)
        candidate.receipt  # noqa: B018 - stamp the receipt now, over the content as it entered
        result.append(candidate)
    return result


def plain_score(value: Any) -> Any:
    """A numpy/torch scalar as a Python float; anything else unchanged."""
    if value is None or isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if getattr(value, "ndim", None) == 0 or getattr(value, "shape", None) == ():
        try:
            return float(value)
        except (TypeError, ValueError):
            return value
    return value


def ranked(
    s: Stage,
    request: RerankArgs,
    items: Iterable[tuple[Any, Any, Any]],
    orphan: Callable[[Any], Candidate | None] | None = None,
) -> list[Candidate]:
    """Output candidates from ``(input index, score, raw result)`` triples, in result order.

    An index that points at no input is a finding (the result cannot be tied to a document); when
    ``orphan`` can still identify the raw result it is kept as a candidate that was not an input."""
    inputs = request.inputs
    outputs: list[Candidate] = []
    unmatched = nonfinite = not_numbers = 0
    for index, score, raw in items:
        score = plain_score(score)
        source: Candidate | None = None
        try:
            position = operator.index(index) if index is not None else -1
        except TypeError:
            position = -1
        if 0 <= position < len(inputs):
            source = inputs[position]
        else:
            unmatched += 1
            source = orphan(raw) if orphan is not None else None
            if source is None:
                continue
        if score is not None:
            if not isinstance(score, (int, float)) or isinstance(score, bool):
                not_numbers += 1
            elif finite_or_none(score) is None:
                nonfinite += 1
        outputs.append(source.copy(score=score, score_kind=sc.SCORE_RERANK, raw=raw, transform_rule=None, derived_from=None))
    if unmatched:
        s.finding(f"{unmatched} result(s) pointed at no input document")
    if nonfinite:
        s.finding(f"{nonfinite} non-finite rerank score(s), recorded as {sc.CANDIDATE_SCORE_RAW}")
    if not_numbers:
        s.finding(f"{not_numbers} rerank score(s) that are not a single number")
    return outputs


def _record_inputs(s: Stage, request: RerankArgs) -> None:
    if request.query is not None:
        s.query(request.query)
    if request.model:
        s.set_attribute(sc.STAGE_MODEL, str(request.model))
        if settings.get().mirror_openinference:
            s.set_attribute(sc.OI_RERANKER_MODEL_NAME, str(request.model))
    for text in request.findings:
        s.finding(text)
    if request.documents is None:
        return
    request.inputs = (request.snapshot or snapshot)(request.documents)
    s.inputs(request.inputs)


def document_list(request: RerankArgs, documents: Any) -> Sequence[Any] | None:
    """The documents when they can be snapshotted without consuming anything the library must read."""
    if documents is None:
        request.findings.append("no documents among the arguments")
        return None
    if is_candidate_list(documents):
        listed: Sequence[Any] = documents
        return listed
    request.findings.append(f"documents are a {type(documents).__name__}, not a list: not snapshotted")
    return None


def top_k_of(value: Any) -> int | None:
    """A ``top_k``/``top_n`` argument as an int (``None`` when absent or not a count)."""
    if value is None or value is Ellipsis or isinstance(value, (bool, str, bytes)):
        return None
    try:
        number = operator.index(value)
    except TypeError:
        try:
            as_float = float(value)
        except (TypeError, ValueError):
            return None
        if not math.isfinite(as_float) or as_float != int(as_float):
            return None
        number = int(as_float)
    return number


__all__ = [
    "RerankCall",
    "RerankArgs",
    "argument",
    "component_name",
    "document_list",
    "inside_rerank_stage",
    "plain_score",
    "ranked",
    "snapshot",
    "top_k_of",
]
