"""The answer side: ``BaseQueryEngine.query/aquery`` (the ``pipeline`` root), ``BaseSynthesizer
.synthesize/asynthesize`` (``generate``: ``Response.source_nodes`` is what reached synthesis; it is
not a citation list, so nothing is marked cited) and ``PromptHelper.truncate/repack`` (``budget``: the
text chunks cut or packed to fit the LLM's context window).

Budget chunks are strings. Inside a synthesis they are matched back to their node ids through the
text the synthesizer built for each node (``get_content(MetadataMode.LLM)``); a chunk that matches no
node (an already packed chunk) is identified by ``sha256:`` of its text. ``truncate`` keeps each
chunk's identity and stamps the shortened text with rule ``budget_trim@1`` and ``derived_from``.
"""

from __future__ import annotations

import contextvars
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.recorder.candidates import Candidate, is_candidate_list
from ragtrail.contract.receipts import BUDGET_TRIM_RULE, content_id, truncate_rule
from ragtrail.recorder.pipeline import current_pipeline
from ragtrail.recorder.stage import Stage

from ._calls import Call, active_call, argument
from ._nodes import node_id, query_text
from ._retrieve import record_kept

_synthesis: contextvars.ContextVar["SynthesizeCall | None"] = contextvars.ContextVar("ragtrail_llama_index_synthesis", default=None)


class QueryEngineCall(Call):
    """The outermost query engine call is the ``pipeline`` root; a nested engine (a transform engine's
    inner engine, a sub-question engine) or a pipeline the user opened keeps the existing root."""

    prefix = "llama_index.query_engine"

    def open(self) -> Stage | None:
        if current_pipeline() is not None:
            return None
        return self.new_stage(sc.KIND_PIPELINE)

    def before(self, s: Stage) -> None:
        s.query(query_text(argument(self.args, self.kwargs, 0, "str_or_query_bundle", "query_bundle")))


class ChatCall(QueryEngineCall):
    """``BaseChatEngine.chat/achat/stream_chat/astream_chat``: the turn is the ``pipeline`` root; its
    query is the user's message (a condensed standalone question becomes a ``rewrite`` hop)."""

    prefix = "llama_index.chat_engine"

    def before(self, s: Stage) -> None:
        message = argument(self.args, self.kwargs, 0, "message")
        s.query(message if isinstance(message, str) else query_text(message))


class SynthesizeCall(Call):
    """``BaseSynthesizer.synthesize/asynthesize``: a ``generate`` stage whose inputs are the nodes
    handed to the synthesizer and whose outputs are ``Response.source_nodes``. While it runs, the
    budget stages inside it can match text chunks back to these nodes."""

    prefix = "llama_index.synthesize"
    _chunk_ids: dict[str, str] | None = None
    _llm_texts: list[tuple[str, str]] | None = None

    def open(self) -> Stage:
        return self.new_stage(sc.KIND_GENERATE)

    def start(self) -> bool:
        started = super().start()
        if started:
            self._synth_token = _synthesis.set(self)
        return started

    def end(self, result: Any = None, exc: BaseException | None = None) -> None:
        token = getattr(self, "_synth_token", None)
        if token is not None:
            try:
                _synthesis.reset(token)
            except ValueError:  # pragma: no cover - ended in another context
                pass
        super().end(result, exc)

    def before(self, s: Stage) -> None:
        s.query(query_text(argument(self.args, self.kwargs, 0, "query")))
        nodes = argument(self.args, self.kwargs, 1, "nodes")
        extra = argument(self.args, self.kwargs, 2, "additional_source_nodes")
        if not is_candidate_list(nodes):
            s.finding(f"nodes are a {type(nodes).__name__}, not a list: not snapshotted")
            return
        self.nodes = list(nodes) + (list(extra) if is_candidate_list(extra) else [])
        s.inputs(self.nodes)

    def after(self, s: Stage, result: Any) -> None:
        source = getattr(result, "source_nodes", None)
        if is_candidate_list(source):
            record_kept(s, source, [node_id(n) for n in source])
        else:
            s.finding(f"response has no source_nodes list ({type(result).__name__}): outputs not recorded")

    def llm_texts(self) -> list[tuple[str, str]]:
        """(node id, the text the synthesizer builds for it: ``get_content(MetadataMode.LLM)``) in
        input order, built once, on the first budget stage."""
        if self._llm_texts is None:
            from llama_index.core.schema import MetadataMode

            texts: list[tuple[str, str]] = []
            for item in getattr(self, "nodes", ()):
                node = getattr(item, "node", item)
                try:
                    texts.append((str(node.node_id), node.get_content(metadata_mode=MetadataMode.LLM)))
                except Exception:
                    continue
            self._llm_texts = texts
        return self._llm_texts

    def chunk_ids(self) -> dict[str, str]:
        if self._chunk_ids is None:
            ids: dict[str, str] = {}
            for ident, text in self.llm_texts():
                ids.setdefault(text, ident)
            self._chunk_ids = ids
        return self._chunk_ids


def _recording_synthesis() -> "SynthesizeCall | None":
    synthesis = _synthesis.get()
    if synthesis is not None and synthesis.stage is not None and synthesis.stage.recording:
        return synthesis
    return None


def _chunk_candidates(chunks: list[Any]) -> list[Candidate]:
    synthesis = _recording_synthesis()
    ids = synthesis.chunk_ids() if synthesis is not None else {}
    candidates = []
    for chunk in chunks:
        ident = ids.get(chunk) if isinstance(chunk, str) else None
        candidates.append(Candidate(id=ident or content_id(chunk), content=chunk, raw=chunk))
    return candidates


def _joined_nodes(chunks: list[Any]) -> list[tuple[str, str]] | None:
    """SimpleSummarize joins every node's text with newlines into ONE chunk before truncating it:
    when the chunk is exactly that join, the nodes it was made of (so the cut can be said per node)."""
    synthesis = _recording_synthesis()
    if synthesis is None or len(chunks) != 1 or not isinstance(chunks[0], str):
        return None
    texts = synthesis.llm_texts()
    if len(texts) > 1 and "\n".join(t for _, t in texts) == chunks[0]:
        return texts
    return None


def _cut(candidate: Candidate, original: Candidate) -> None:
    """Stamp a shortened chunk: ``truncate@1:<n>`` when it is a prefix of what it came from,
    ``budget_trim@1`` for any other shortening; always ``derived_from``."""
    candidate.derived_from = original.receipt.sha256
    text, source = candidate.content, original.content
    if isinstance(text, str) and isinstance(source, str) and len(text) < len(source):
        candidate.transform_rule = truncate_rule(len(text)).id if source.startswith(text) else BUDGET_TRIM_RULE.id


class BudgetCall(Call):
    """``PromptHelper.truncate`` / ``repack``. Knobs: ``budget.limit`` = tokens available for context
    in one LLM call; ``budget.used`` = tokens of chunk text in the fullest call (all chunks for
    ``truncate``, the largest packed chunk for ``repack``)."""

    prefix = "llama_index.budget"
    method = "truncate"
    joined: list[tuple[str, str]] | None = None
    available: int | None = None
    inputs: list[Candidate] | None = None

    def open(self) -> Stage:
        return self.new_stage(sc.KIND_BUDGET, budget_unit="tokens")

    def before(self, s: Stage) -> None:
        chunks = argument(self.args, self.kwargs, 1, "text_chunks")
        if not is_candidate_list(chunks):
            s.finding(f"text_chunks are a {type(chunks).__name__}, not a list: not snapshotted")
            return
        self.joined = _joined_nodes(list(chunks)) if self.method == "truncate" else None
        if self.joined is not None:
            self.inputs = [Candidate(id=ident, content=text) for ident, text in self.joined]
        else:
            self.inputs = _chunk_candidates(list(chunks))
        s.inputs(self.inputs)

    def after(self, s: Stage, result: Any) -> None:
        if self.available is not None:
            s.set(budget_limit=self.available)
        if not is_candidate_list(result):
            s.finding(f"{self.method} returned a {type(result).__name__}, not a list")
            return
        counter = getattr(self.instance, "_token_counter", None)
        tokens = [counter.get_string_tokens(t) for t in result if isinstance(t, str)] if counter is not None else []
        if self.method == "truncate" and self.joined is not None and len(result) == 1:
            outputs = self._truncated_join(result[0])
            if tokens:
                s.set(budget_used=sum(tokens))
        elif self.method == "truncate":
            outputs = self._truncated(list(result))
            if tokens:
                s.set(budget_used=sum(tokens))
        else:
            outputs = self._packed()
            if tokens:
                s.set(budget_used=max(tokens))
        s.outputs(outputs)

    def _truncated(self, result: list[Any]) -> list[Candidate]:
        outputs = []
        for original, text in zip(self.inputs or (), result):
            candidate = Candidate(id=original.id, content=text, raw=text)
            if text != original.content:
                _cut(candidate, original)
            outputs.append(candidate)
        return outputs

    def _truncated_join(self, text: Any) -> list[Candidate]:
        """Per node: whole, cut (the node the budget ended in), or ``budget_exceeded``."""
        inputs = self.inputs or []
        joined = "\n".join(c.content for c in inputs)
        if not isinstance(text, str) or not joined.startswith(text):
            # not a plain prefix: say only what is known, the one chunk and what it became
            whole = Candidate(id=content_id(joined), content=joined)
            cut = Candidate(id=whole.id, content=text)
            if text != joined:
                _cut(cut, whole)
            self.stage.inputs([whole])
            return [cut]
        outputs: list[Candidate] = []
        position = 0
        limit = f"limit={self.available} tokens" if self.available is not None else "context window"
        for index, original in enumerate(inputs):
            end = position + len(original.content)
            if end <= len(text):
                outputs.append(Candidate(id=original.id, content=original.content))
            elif position < len(text) and text[position:].strip():
                candidate = Candidate(id=original.id, content=text[position:])
                _cut(candidate, original)
                outputs.append(candidate)
            else:
                self.stage.exclude(original, sc.REASON_BUDGET_EXCEEDED,
                                   f"{limit}: the joined context was cut after {len(outputs)} of {len(inputs)} chunks")
            position = end + 1
        return outputs

    def _packed(self) -> list[Candidate]:
        """Repacking joins the stripped chunks and re-splits them: every non-blank chunk reaches the
        model whole (stripped), spread over the packed chunks; a blank one is dropped."""
        outputs = []
        for original in self.inputs or ():
            text = original.content.strip() if isinstance(original.content, str) else original.content
            if not text:
                self.stage.exclude(original, sc.REASON_CUSTOM_PREFIX + "blank_chunk", "repack drops blank chunks")
                continue
            candidate = Candidate(id=original.id, content=text, raw=original.raw)
            if text != original.content:
                candidate.derived_from = original.receipt.sha256
                candidate.transform_rule = BUDGET_TRIM_RULE.id
            outputs.append(candidate)
        return outputs


class TruncateCall(BudgetCall):
    method = "truncate"


class RepackCall(BudgetCall):
    """Inside a synthesis, a repack of chunks that are no node's text (refine re-splitting a chunk it
    already packed) is let through unrecorded: it loses no text, and recording it would make an
    already packed chunk look like new evidence."""

    method = "repack"

    def open(self) -> Stage | None:
        synthesis = _recording_synthesis()
        if synthesis is not None:
            chunks = argument(self.args, self.kwargs, 1, "text_chunks")
            ids = synthesis.chunk_ids()
            if is_candidate_list(chunks) and not any(isinstance(c, str) and c in ids for c in chunks):
                return None
        return super().open()


def available_context_hook(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """Around ``PromptHelper._get_available_context_size``: the budget the current truncate/repack
    is fitting into."""
    result = wrapped(*args, **kwargs)
    call = active_call(instance)
    if isinstance(call, BudgetCall) and isinstance(result, int):
        call.available = result
    return result
