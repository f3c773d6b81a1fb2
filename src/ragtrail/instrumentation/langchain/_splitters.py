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

from collections.abc import Callable
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.hooks import Args, Kwargs, argument, run, run_async
from ragtrail.instrumentation.langchain._common import LangChainCall, Shared, adapt_all, remember_identity, sink_for
from ragtrail.recorder.candidates import Candidate
from ragtrail.recorder.pipeline import current_pipeline
from ragtrail.recorder.stage import Stage

REASON_NO_CHUNKS = "custom:no_chunks"


class SplitCall(LangChainCall):
    """One ``transform_documents`` of a text splitter inside a retrieval: a ``split`` stage that
    listens to its own ``split_text`` calls to pair each chunk with the document it was cut from."""

    site = "lc.split"
    inputs: list[Candidate] | None = None

    def open(self) -> Stage:
        documents = argument(self.args, self.kwargs, 0, "documents")
        s = self.open_stage(sc.KIND_SPLIT)
        if not s.recording:
            return s
        self.shared.patcher.ensure(type(self.instance), "split_text", split_text)
        self.listen((self.instance,))
        if isinstance(documents, (list, tuple)):
            inputs = adapt_all(documents)
            s.inputs(inputs)
            self.inputs = inputs
        else:
            s.finding(f"documents are a {type(documents).__name__}, not a list: not snapshotted")
        return s

    def after(self, s: Stage, result: Any) -> None:
        if not isinstance(result, (list, tuple)):
            s.finding(f"splitter returned a {type(result).__name__}, not a list")
            return
        result = list(result)
        chunks = adapt_all(result)
        inputs = self.inputs
        splits = self.sunk("splits")
        if inputs is None or splits is None or not _paired(inputs, splits, result):
            s.finding("chunks could not be paired with the documents they were cut from: recorded without derived_from")
            s.outputs(chunks)
            return
        state = current_pipeline()
        position = 0
        for parent, (_, texts) in zip(inputs, splits, strict=False):
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


class SplitterWrappers:
    """The wrapt wrappers of the text splitters, bound to one ``instrument()``'s :class:`Shared`:
    a split records only inside a retrieval (a ragtrail pipeline is open)."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    def transform(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if current_pipeline() is None:
            return wrapped(*args, **kwargs)
        return run(SplitCall(self.shared, wrapped, instance, args, kwargs))

    async def atransform(self, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
        if current_pipeline() is None:
            return await wrapped(*args, **kwargs)
        return await run_async(SplitCall(self.shared, wrapped, instance, args, kwargs))


def split_text(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """Around a splitter's ``split_text`` under its split stage: each (text, chunks) into the sink."""
    result = wrapped(*args, **kwargs)
    sink = sink_for(instance)
    if sink is not None:
        sink.data.setdefault("splits", []).append((argument(args, kwargs, 0, "text"), result))
    return result


def _paired(inputs: list[Candidate], splits: Any, result: list[Any]) -> bool:
    """Whether the observed ``split_text`` calls are exactly the documents given, in order, and
    their chunks exactly the returned Documents' texts."""
    if not isinstance(splits, list) or len(splits) != len(inputs):
        return False
    chunks = [text for _, texts in splits if isinstance(texts, list) for text in texts]
    if len(chunks) != len(result) or any(not isinstance(texts, list) for _, texts in splits):
        return False
    if any(text != parent.content for parent, (text, _) in zip(inputs, splits, strict=False)):
        return False
    return all(getattr(doc, "page_content", None) == text for doc, text in zip(result, chunks, strict=False))


__all__ = ["SplitCall", "SplitterWrappers", "split_text"]
