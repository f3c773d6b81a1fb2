"""A text splitter inside a retrieval as a ``split`` stage: documents in, chunks out.

LangChain's ``DocumentCompressorPipeline`` runs its document transformers (a
``CharacterTextSplitter`` first, in the how-to) between the retriever and the filters: the filters
then judge chunks, not the retrieved documents. Without a stage of its own the chunks appear from
nowhere (4 documents in, 15 chunks judged) and the documents vanish.

Which chunk came from which document is never guessed: ``TextSplitter.split_documents`` calls
``split_text`` once per document, in order, and builds one ``Document`` per returned chunk, so the
stage listens to its own ``split_text`` calls (a sink) and pairs them with the documents it was
given. A document's first chunk keeps the document's id, the next ones are ``<id>#<n>``; every
chunk whose text differs from the document's carries rule ``split@1`` and ``derived_from`` the
document's sha256, and a document that gave no chunk is an exclusion. When the calls cannot be
paired (a splitter that does not split through ``split_text``) the chunks are recorded as they
are, with a finding.

Only inside a retrieval (a ragtrail pipeline is open): splitting documents at indexing time is not
a retrieval step and records nothing.
"""

from __future__ import annotations

from typing import Any, Callable

from ragtrail.contract import semconv as sc
from ragtrail.hooks import argument, component_name
from ragtrail.instrumentation.langchain._common import (
    LangChainCall,
    LazyPatcher,
    adapt_all,
    open_stage,
    remember_identity,
    run_async,
    run_sync,
    sink_for,
)
from ragtrail.recorder.candidates import Candidate
from ragtrail.recorder.pipeline import current_pipeline

REASON_NO_CHUNKS = "custom:no_chunks"


class SplitterWrappers:
    def __init__(self, tracer: Any, patcher: LazyPatcher) -> None:
        self.tracer = tracer
        self.patcher = patcher

    def transform(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        if current_pipeline() is None:
            return wrapped(*args, **kwargs)
        return run_sync(self.tracer, "lc.split", self._open, wrapped, instance, args, kwargs)

    async def atransform(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        if current_pipeline() is None:
            return await wrapped(*args, **kwargs)
        return await run_async(self.tracer, "lc.split", self._open, wrapped, instance, args, kwargs)

    def split_text(self, wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        result = wrapped(*args, **kwargs)
        sink = sink_for(instance)
        if sink is not None:
            sink.data.setdefault("splits", []).append((argument(args, kwargs, 0, "text"), result))
        return result

    def _open(self, call: LangChainCall) -> None:
        documents = argument(call.args, call.kwargs, 0, "documents")
        s = open_stage(call, sc.KIND_SPLIT, component_name(call.instance))
        if not s.recording:
            return
        self.patcher.ensure(type(call.instance), "split_text", self.split_text)
        call.listen((call.instance,))
        call.finisher = _finish_split
        if isinstance(documents, (list, tuple)):
            inputs = adapt_all(documents)
            s.inputs(inputs)
            call.memo["inputs"] = inputs
        else:
            s.finding(f"documents are a {type(documents).__name__}, not a list: not snapshotted")


def _paired(inputs: list[Candidate], splits: Any, result: list) -> bool:
    """Whether the observed ``split_text`` calls are exactly the documents given, in order, and
    their chunks exactly the returned Documents' texts."""
    if not isinstance(splits, list) or len(splits) != len(inputs):
        return False
    chunks = [text for _, texts in splits if isinstance(texts, list) for text in texts]
    if len(chunks) != len(result) or any(not isinstance(texts, list) for _, texts in splits):
        return False
    if any(text != parent.content for parent, (text, _) in zip(inputs, splits)):
        return False
    return all(getattr(doc, "page_content", None) == text for doc, text in zip(result, chunks))


def _finish_split(call: LangChainCall, result: Any) -> None:
    s = call.stage
    if s is None:
        return
    if not isinstance(result, (list, tuple)):
        s.finding(f"splitter returned a {type(result).__name__}, not a list")
        return
    result = list(result)
    chunks = adapt_all(result)
    inputs: list[Candidate] | None = call.memo.get("inputs")
    splits = call.sink.data.get("splits") if call.sink is not None else None
    if inputs is None or splits is None or not _paired(inputs, splits, result):
        s.finding("chunks could not be paired with the documents they were cut from: recorded without derived_from")
        s.outputs(chunks)
        return
    state = current_pipeline()
    position = 0
    for parent, (_, texts) in zip(inputs, splits):
        if not texts:
            s.exclude(parent, REASON_NO_CHUNKS, "the splitter cut no chunk from it")
            continue
        hop = state.candidate_hop(parent.id) if state is not None else None
        for n in range(len(texts)):
            chunk = chunks[position]
            position += 1
            chunk.id = parent.id if n == 0 else f"{parent.id}#{n}"
            chunk.hop = hop
            if parent.receipt is not None and chunk.receipt is not None and chunk.receipt.sha256 != parent.receipt.sha256:
                chunk.transform_rule = sc.RULE_SPLIT
                chunk.derived_from = parent.receipt.sha256
            remember_identity(chunk)
    s.outputs(chunks)


__all__ = ["SplitterWrappers"]
