"""flashrank ``Ranker.rerank`` as a ``rerank`` stage.

``rerank(RerankRequest(query, passages))`` writes a ``score`` into each of the caller's passage
dicts and sorts the caller's list in place, then returns that same list. The wrapper therefore
snapshots the passages (ids, text receipts, metadata, any score they already carried) before the
call, and ties each returned dict back to its input position by object identity. The pairwise
(ONNX cross-encoder) path scores every passage; the listwise (LLM) path only orders them, so its
outputs carry no rerank score.
"""

from __future__ import annotations

from typing import Any

from ragtrail.hooks import Args, Kwargs, run
from ragtrail.instrumentation._base import RagtrailInstrumentor
from ragtrail.instrumentation._rerank import (
    RerankArgs,
    RerankCall,
    argument,
    component_name,
    document_list,
    ranked,
)
from ragtrail.recorder.stage import Stage

_KEY = "flashrank.rerank"


def _model_name(instance: Any) -> str | None:
    model_dir = getattr(instance, "model_dir", None)
    return getattr(model_dir, "name", None) if model_dir is not None else None


def _prepare(instance: Any, args: Args, kwargs: Kwargs) -> RerankArgs:
    request = RerankArgs(component_name(instance), model=_model_name(instance))
    rerank_request = argument(args, kwargs, 0, "request")  # flashrank's RerankRequest
    request.query = getattr(rerank_request, "query", None)
    passages = document_list(request, getattr(rerank_request, "passages", None))
    if passages is not None:
        request.documents = list(passages)  # the caller's list is about to be sorted in place
        positions: dict[int, list[int]] = {}
        for position, passage in enumerate(passages):
            positions.setdefault(id(passage), []).append(position)
        request.lookup = positions
    return request


def _record(s: Stage, request: RerankArgs, result: Any, listwise: bool) -> None:
    if request.lookup is None:
        return
    if not isinstance(result, list):
        s.finding(f"rerank returned a {type(result).__name__}, not a list: outputs not recorded")
        return
    positions: dict[int, list[int]] = request.lookup

    def items() -> Any:
        for passage in result:
            found = positions.get(id(passage))
            index = found.pop(0) if found else None
            score = None if listwise or not isinstance(passage, dict) else passage.get("score")
            yield index, score, passage

    s.outputs(ranked(s, request, items()))


class FlashrankInstrumentor(RagtrailInstrumentor):
    """``opentelemetry_instrumentor`` entry point ``ragtrail_flashrank``."""

    _instruments = ("flashrank >= 0.2",)

    def _patch(self, **kwargs: Any) -> None:
        self.when_imported("flashrank", lambda: self.wrap("flashrank.Ranker", "Ranker.rerank", self._rerank))

    def _rerank(self, wrapped: Any, instance: Any, args: Args, kwargs: Kwargs) -> Any:
        listwise = getattr(instance, "llm_model", None) is not None
        return run(
            RerankCall(self.tracer, _KEY, wrapped, instance, args, kwargs, _prepare, lambda s, request, result: _record(s, request, result, listwise))
        )
