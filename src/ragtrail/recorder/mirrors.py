"""Mirror attributes for other tools (docs/semconv.md §6): OTel GenAI and OpenInference (Phoenix).

Mirrors are written first on a stage span, so under a tight attribute limit they are the ones the
SDK evicts, and they are capped to leave room for ragtrail's own attributes; the full candidate
list is always in the events.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import finite_or_none
from ragtrail.recorder.candidates import Candidate

STAGE_ATTRIBUTE_RESERVE = 40  # span attributes kept free for ragtrail's own when mirroring documents
_ATTRIBUTES_PER_DOCUMENT = 2
_SPAN_KIND = {sc.KIND_RETRIEVE: sc.OI_RETRIEVER, sc.KIND_RERANK: sc.OI_RERANKER}


def genai(kind: str, component: str, top_k: int | None) -> dict[str, Any]:
    """OTel GenAI's retrieval attributes, on retrieve stages only."""
    if kind != sc.KIND_RETRIEVE:
        return {}
    attributes: dict[str, Any] = {sc.GEN_AI_OPERATION_NAME: sc.GEN_AI_OPERATION_RETRIEVAL,
                                  sc.GEN_AI_DATA_SOURCE_ID: component}
    if top_k is not None:
        attributes[sc.GEN_AI_REQUEST_TOP_K] = int(top_k)
    return attributes


def openinference(kind: str, top_k: int | None, query_text: str | None, limits: Any, extra: int,
                  inputs: Sequence[Candidate] | None, outputs: Sequence[Candidate]) -> dict[str, Any]:
    """OpenInference's span kind, input and document lists. ``query_text`` is ``None`` unless the
    query text may be written; ``extra`` is how many other attributes the stage will carry."""
    attributes: dict[str, Any] = {sc.OPENINFERENCE_SPAN_KIND: _SPAN_KIND.get(kind, sc.OI_CHAIN)}
    if query_text is not None:
        attributes[sc.OI_INPUT_VALUE] = query_text
        if kind == sc.KIND_RERANK:
            attributes[sc.OI_RERANKER_QUERY] = query_text
    if kind == sc.KIND_RERANK and top_k is not None:
        attributes[sc.OI_RERANKER_TOP_K] = int(top_k)
    if kind == sc.KIND_RETRIEVE:
        lists = [(sc.OI_RETRIEVAL_DOCUMENTS, outputs)]
    elif kind == sc.KIND_RERANK:
        lists = [(sc.OI_RERANKER_OUTPUT_DOCUMENTS, outputs), (sc.OI_RERANKER_INPUT_DOCUMENTS, inputs or [])]
    else:
        return attributes
    max_attributes = getattr(limits, "max_span_attributes", None)
    room = None if max_attributes is None else max(0, max_attributes - STAGE_ATTRIBUTE_RESERVE - len(attributes) - extra)
    _documents(attributes, lists, room)
    return attributes


def _documents(attributes: dict[str, Any], lists: list[tuple[str, Sequence[Candidate]]], room: int | None) -> None:
    """``<prefix>.<i>.document.id|score`` for each list, while there is room for a whole document."""
    for prefix, candidates in lists:
        for index, candidate in enumerate(candidates):
            if room is not None and room < _ATTRIBUTES_PER_DOCUMENT:
                return
            attributes[f"{prefix}.{index}.{sc.OI_DOCUMENT_ID}"] = candidate.id
            score = finite_or_none(candidate.score)
            if score is not None:
                attributes[f"{prefix}.{index}.{sc.OI_DOCUMENT_SCORE}"] = score
            if room is not None:
                room -= _ATTRIBUTES_PER_DOCUMENT
