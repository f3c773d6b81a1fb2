"""Cohere's rerank endpoint as a ``rerank`` stage, on the v1 and v2 clients, sync and async.

Patched: ``BaseCohere.rerank`` / ``AsyncBaseCohere.rerank`` (``cohere.Client``, ``AsyncClient``, and
``client.v1``) and ``V2Client.rerank`` / ``AsyncV2Client.rerank`` (``cohere.ClientV2``,
``AsyncClientV2`` and ``client.v2``). Cohere answers ``results[{index, relevance_score}]``: each
index points back into the request's ``documents``, so the output candidates are the input
documents (own ``id`` when a document dict has one, else ``sha256:`` of its text) with the
relevance score as a ``rerank`` score; ``top_n`` is the stage's ``top_k``.
"""

from __future__ import annotations

from typing import Any

from ragtrail.hooks import Args, Kwargs, run, run_async
from ragtrail.instrumentation._base import RagtrailInstrumentor
from ragtrail.instrumentation._rerank import (
    RerankArgs,
    RerankCall,
    argument,
    component_name,
    document_list,
    ranked,
    top_k_of,
)
from ragtrail.recorder.stage import Stage

_KEY = "cohere.rerank"
_TARGETS = (
    ("cohere.base_client", "BaseCohere.rerank", False),
    ("cohere.base_client", "AsyncBaseCohere.rerank", True),
    ("cohere.v2.client", "V2Client.rerank", False),
    ("cohere.v2.client", "AsyncV2Client.rerank", True),
)


def _prepare(instance: Any, args: Args, kwargs: Kwargs) -> RerankArgs:
    # every rerank parameter is keyword-only in cohere >= 5
    request = RerankArgs(component_name(instance))
    request.query = argument(args, kwargs, None, "query")
    request.documents = document_list(request, argument(args, kwargs, None, "documents"))
    request.top_k = top_k_of(argument(args, kwargs, None, "top_n"))
    model = argument(args, kwargs, None, "model")
    request.model = model if isinstance(model, str) else None
    return request


def _record(s: Stage, request: RerankArgs, response: Any) -> None:
    results = getattr(response, "results", None)
    if results is None:
        s.finding(f"cohere returned a {type(response).__name__} without results: outputs not recorded")
        return
    s.outputs(ranked(s, request, ((getattr(r, "index", None), getattr(r, "relevance_score", None), r) for r in results)))


class CohereInstrumentor(RagtrailInstrumentor):
    """``opentelemetry_instrumentor`` entry point ``ragtrail_cohere``."""

    _instruments = ("cohere >= 5",)

    def _patch(self, **kwargs: Any) -> None:
        self.when_imported("cohere", self._patch_now)

    def _patch_now(self) -> None:
        for module, name, is_async in _TARGETS:
            self.wrap(module, name, self._async_wrapper if is_async else self._sync_wrapper)

    def _sync_wrapper(self, wrapped: Any, instance: Any, args: Args, kwargs: Kwargs) -> Any:
        return run(RerankCall(self.tracer, _KEY, wrapped, instance, args, kwargs, _prepare, _record))

    async def _async_wrapper(self, wrapped: Any, instance: Any, args: Args, kwargs: Kwargs) -> Any:
        return await run_async(RerankCall(self.tracer, _KEY, wrapped, instance, args, kwargs, _prepare, _record))
