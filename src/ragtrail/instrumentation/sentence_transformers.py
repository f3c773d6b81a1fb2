"""sentence-transformers ``CrossEncoder.rank`` and ``CrossEncoder.predict`` as ``rerank`` stages.

``rank(query, documents, top_k)`` returns ``[{corpus_id, score[, text]}]`` best first, cut at
``top_k``: the outputs are the input documents at ``corpus_id`` with their scores, and what the cut
dropped is ``below_rank_cutoff``. ``rank`` calls ``predict``: one span (the inner call is
suppressed). ``predict(pairs)`` called directly scores pairs without reordering: a stage whose
outputs are the pairs' documents in input order with their scores; the query is recorded when all
pairs share one (several queries in one call are a finding, not a guess).
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
    plain_score,
    ranked,
    top_k_of,
)
from ragtrail.recorder.stage import Stage

_KEY = "sentence_transformers.cross_encoder"


def _model_name(instance: Any) -> str | None:
    for holder in (instance, getattr(instance, "model", None)):
        name = getattr(getattr(holder, "config", None), "_name_or_path", None)
        if isinstance(name, str) and name:
            return name
    return None


def _prepare_rank(instance: Any, args: Args, kwargs: Kwargs) -> RerankArgs:
    request = RerankArgs(component_name(instance), model=_model_name(instance))
    request.query = argument(args, kwargs, 0, "query")
    request.documents = document_list(request, argument(args, kwargs, 1, "documents"))
    request.top_k = top_k_of(argument(args, kwargs, 2, "top_k"))
    return request


def _record_rank(s: Stage, request: RerankArgs, result: Any) -> None:
    if not isinstance(result, list):
        s.finding(f"rank returned a {type(result).__name__}, not a list: outputs not recorded")
        return
    s.outputs(ranked(s, request, ((r.get("corpus_id"), r.get("score"), r) for r in result if isinstance(r, dict))))


def _same(a: Any, b: Any) -> bool:
    try:
        return a is b or bool(a == b)
    except Exception:  # arrays, images: compared by identity only
        return False


def _prepare_predict(instance: Any, args: Args, kwargs: Kwargs) -> RerankArgs:
    request = RerankArgs(component_name(instance), model=_model_name(instance))
    inputs = argument(args, kwargs, 0, "inputs", "sentences")
    if hasattr(inputs, "tolist") and not isinstance(inputs, (list, tuple)):
        inputs = inputs.tolist()  # a numpy array of strings: a copy, nothing consumed
    if isinstance(inputs, (list, tuple)) and inputs and not isinstance(inputs[0], (list, tuple)):
        request.lookup = "single"  # one pair: predict returns one score
        inputs = [inputs]
    pairs = document_list(request, inputs)
    if pairs is None:
        return request
    if not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in pairs):
        request.findings.append("predict inputs are not (query, document) pairs: not snapshotted")
        return request
    queries: list[Any] = []
    for first, _ in pairs:
        if not any(_same(first, q) for q in queries):
            queries.append(first)
    if len(queries) == 1:
        request.query = queries[0]
    elif len(queries) > 1:
        request.findings.append(f"{len(queries)} distinct queries in one predict call: query not recorded")
    request.documents = [second for _, second in pairs]
    return request


def _record_predict(s: Stage, request: RerankArgs, result: Any) -> None:
    if request.documents is None:
        return
    scores = [result] if request.lookup == "single" else list(result)
    multi = 0
    items = []
    for index, score in enumerate(scores):
        score = plain_score(score)
        if score is not None and not isinstance(score, (int, float)):
            multi += 1
            score = None
        items.append((index, score, None))
    outputs = ranked(s, request, items)
    if multi:
        s.finding(f"{multi} multi-label score vector(s) (num_labels > 1): no rerank score recorded")
    s.outputs(outputs)


class SentenceTransformersInstrumentor(RagtrailInstrumentor):
    """``opentelemetry_instrumentor`` entry point ``ragtrail_sentence_transformers``."""

    _instruments = ("sentence-transformers >= 3",)

    def _patch(self, **kwargs: Any) -> None:
        self.when_imported("sentence_transformers", self._patch_now)

    def _patch_now(self) -> None:
        from sentence_transformers import CrossEncoder  # the module path moved across 3.x-6.x

        module = CrossEncoder.__module__
        self.wrap(module, "CrossEncoder.rank", self._rank)
        self.wrap(module, "CrossEncoder.predict", self._predict)

    def _rank(self, wrapped: Any, instance: Any, args: Args, kwargs: Kwargs) -> Any:
        return run(RerankCall(self.tracer, _KEY, wrapped, instance, args, kwargs, _prepare_rank, _record_rank))

    def _predict(self, wrapped: Any, instance: Any, args: Args, kwargs: Kwargs) -> Any:
        return run(RerankCall(self.tracer, _KEY, wrapped, instance, args, kwargs, _prepare_predict, _record_predict))
