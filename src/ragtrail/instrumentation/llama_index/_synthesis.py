"""The answer side: ``BaseQueryEngine.query/aquery`` (the ``pipeline`` root), ``BaseSynthesizer
.synthesize/asynthesize`` (``generate``: ``Response.source_nodes`` is what reached synthesis; it is
not a citation list, so nothing is marked cited) and ``PromptHelper.truncate/repack`` (``budget``: the
text chunks cut or packed to fit the LLM's context window).

Budget chunks are strings. Inside a synthesis they are matched back to their node ids through the
text the synthesizer built for each node (``get_content(MetadataMode.LLM)``); a chunk that matches no
node (an already packed chunk) is identified by ``sha256:`` of its text. That text is the node's
own text with LlamaIndex's metadata header put before it (``file_path: ...``): the budget stage
receipts the text it was given (a later cut is caught against it) and declares the header with rule
``metadata_header@1:<n>`` (n = code points added: the header, less the trailing whitespace LlamaIndex
strips from the whole) derived from the node's own receipt, which the reader checks by arithmetic.
A built text that is not "header + the node's text" carries no rule (an alarm: a change
nobody explained). ``truncate`` keeps each
chunk's identity and stamps the shortened text with rule ``budget_trim@1`` and ``derived_from``.
"""

from __future__ import annotations

import contextvars
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import BUDGET_TRIM_RULE, content_id, metadata_header_rule, receipt, truncate_rule
from ragtrail.hooks import Args, Kwargs, active_call, argument
from ragtrail.recorder.candidates import Candidate, is_candidate_list
from ragtrail.recorder.pipeline import current_pipeline
from ragtrail.recorder.stage import Stage, framework_output

from ._calls import LlamaCall
from ._nodes import node_content, node_id, query_text
from ._retrieve import record_kept

_synthesis: contextvars.ContextVar[SynthesizeCall | None] = contextvars.ContextVar("ragtrail_llama_index_synthesis", default=None)


class QueryEngineCall(LlamaCall):
    """The outermost query engine call is the ``pipeline`` root; a nested engine (a transform engine's
    inner engine, a sub-question engine) or a pipeline the user opened keeps the existing root."""

    site = "llama_index.query_engine"

    def open(self) -> Stage | None:
        if current_pipeline() is not None:
            return None
        return self.new_stage(sc.KIND_PIPELINE)

    def before(self, s: Stage) -> None:
        s.query(query_text(argument(self.args, self.kwargs, 0, "str_or_query_bundle", "query_bundle")))

    def after(self, s: Stage, result: Any) -> None:
        framework_output(s, response_text(result))


class ChatCall(QueryEngineCall):
    """``BaseChatEngine.chat/achat/stream_chat/astream_chat``: the turn is the ``pipeline`` root; its
    query is the user's message (a condensed standalone question becomes a ``rewrite`` hop)."""

    site = "llama_index.chat_engine"

    def before(self, s: Stage) -> None:
        message = argument(self.args, self.kwargs, 0, "message")
        s.query(message if isinstance(message, str) else query_text(message))


def response_text(result: Any) -> str | None:
    """The engine's answer: ``Response.response`` (a query) or ``AgentChatResponse.response`` (a chat
    turn). A streaming response's text does not exist yet when the call returns (reading it would
    consume the user's stream), and a ``PydanticResponse`` holds an object: ``None`` for both."""
    from llama_index.core.base.response.schema import Response
    from llama_index.core.chat_engine.types import AgentChatResponse

    if isinstance(result, (Response, AgentChatResponse)):  # their streaming kin are other classes
        text = result.response
        return text if isinstance(text, str) else None
    return None


class SynthesizeCall(LlamaCall):
    """``BaseSynthesizer.synthesize/asynthesize``: a ``generate`` stage whose inputs are the nodes
    handed to the synthesizer and whose outputs are ``Response.source_nodes``. While it runs, the
    budget stages inside it can match text chunks back to these nodes."""

    site = "llama_index.synthesize"
    _chunk_ids: dict[str, str] | None = None
    _llm_texts: list[tuple[str, str]] | None = None
    _headers: dict[str, tuple[str, str]]

    def open(self) -> Stage:
        return self.new_stage(sc.KIND_GENERATE)

    def before(self, s: Stage) -> None:
        self.set_var(_synthesis, self)  # reset when the stage ends
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
        if source is not None and is_candidate_list(source):
            record_kept(s, source, [node_id(n) for n in source])
        else:
            s.finding(f"response has no source_nodes list ({type(result).__name__}): outputs not recorded")

    def llm_texts(self) -> list[tuple[str, str]]:
        """(node id, the text the synthesizer builds for it: ``get_content(MetadataMode.LLM)``) in
        input order, built once, on the first budget stage."""
        if self._llm_texts is None:
            from llama_index.core.schema import MetadataMode

            texts: list[tuple[str, str]] = []
            headers: dict[str, tuple[str, str]] = {}
            for item in getattr(self, "nodes", ()):
                node = getattr(item, "node", item)
                try:
                    built = node.get_content(metadata_mode=MetadataMode.LLM)
                except Exception:
                    continue
                ident = str(node.node_id)
                texts.append((ident, built))
                own = node_content(node)
                # LlamaIndex strips the built text: a node text ending in a newline loses it
                if (
                    isinstance(own, str)
                    and isinstance(built, str)
                    and built != own
                    and own.rstrip()
                    and built.endswith(own.rstrip())
                    and len(built) > len(own)
                ):
                    rule = metadata_header_rule(len(built) - len(own)).id
                    headers.setdefault(ident, (rule, receipt(own).sha256))
            self._llm_texts = texts
            self._headers = headers
        return self._llm_texts

    def chunk_ids(self) -> dict[str, str]:
        if self._chunk_ids is None:
            ids: dict[str, str] = {}
            for ident, text in self.llm_texts():
                ids.setdefault(text, ident)
            self._chunk_ids = ids
        return self._chunk_ids

    def built(self, ident: str, text: Any, raw: Any = None) -> Candidate:
        """The candidate for a node's built text, with its header rule when the text is the node's
        own text under a metadata header."""
        candidate = Candidate(id=ident, content=text, raw=raw)
        header = self._headers.get(ident) if self._llm_texts is not None else None
        if header is not None:
            candidate.transform_rule, candidate.derived_from = header
        return candidate


def _recording_synthesis() -> SynthesizeCall | None:
    synthesis = _synthesis.get()
    if synthesis is not None and synthesis.stage is not None and synthesis.stage.recording:
        return synthesis
    return None


def _chunk_candidates(chunks: list[Any]) -> list[Candidate]:
    synthesis = _recording_synthesis()
    # two nodes may build the same text (sentence windows overlap): each chunk takes the next node
    # of that text, in input order, so neither node's id is given to the other's chunk
    owners: dict[str, list[str]] = {}
    for ident, text in synthesis.llm_texts() if synthesis is not None else ():
        owners.setdefault(text, []).append(ident)
    candidates = []
    for chunk in chunks:
        queue = owners.get(chunk) if isinstance(chunk, str) else None
        owner = (queue.pop(0) if len(queue) > 1 else queue[0]) if queue else None
        if owner is not None and synthesis is not None:
            candidates.append(synthesis.built(owner, chunk, chunk))
        else:
            candidates.append(Candidate(id=content_id(chunk), content=chunk, raw=chunk))
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
    stamped = original.receipt  # None only for an original without content
    candidate.derived_from = stamped.sha256 if stamped is not None else None
    text, source = candidate.content, original.content
    if isinstance(text, str) and isinstance(source, str) and len(text) < len(source):
        candidate.transform_rule = truncate_rule(len(text)).id if source.startswith(text) else BUDGET_TRIM_RULE.id


def _same(candidate: Candidate, original: Candidate) -> Candidate:
    """An unchanged chunk is handed on under the rule its input carried (the metadata header the
    stage before did not see)."""
    candidate.transform_rule, candidate.derived_from = original.transform_rule, original.derived_from
    return candidate


class BudgetCall(LlamaCall):
    """``PromptHelper.truncate`` / ``repack``. Knobs: ``budget.limit`` = tokens available for context
    in one LLM call; ``budget.used`` = tokens of chunk text in the fullest call (all chunks for
    ``truncate``, the largest packed chunk for ``repack``)."""

    site = "llama_index.budget"
    method = "truncate"
    joined: list[tuple[str, str]] | None = None
    available: int | None = None
    inputs: list[Candidate] | None = None

    def open(self) -> Stage | None:
        return self.new_stage(sc.KIND_BUDGET, budget_unit="tokens")

    def before(self, s: Stage) -> None:
        chunks = argument(self.args, self.kwargs, 1, "text_chunks")
        if not is_candidate_list(chunks):
            s.finding(f"text_chunks are a {type(chunks).__name__}, not a list: not snapshotted")
            return
        self.joined = _joined_nodes(list(chunks)) if self.method == "truncate" else None
        if self.joined is not None:
            synthesis = _recording_synthesis()
            self.inputs = [
                synthesis.built(ident, text) if synthesis is not None else Candidate(id=ident, content=text) for ident, text in self.joined
            ]
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
            outputs = self._truncated_join(s, result[0])
            if tokens:
                s.set(budget_used=sum(tokens))
        elif self.method == "truncate":
            outputs = self._truncated(list(result))
            if tokens:
                s.set(budget_used=sum(tokens))
        else:
            outputs = self._packed(s)
            if tokens:
                s.set(budget_used=max(tokens))
        s.outputs(outputs)

    def _truncated(self, result: list[Any]) -> list[Candidate]:
        outputs = []
        for original, text in zip(self.inputs or (), result, strict=False):
            candidate = Candidate(id=original.id, content=text, raw=text)
            if text != original.content:
                _cut(candidate, original)
            else:
                _same(candidate, original)
            outputs.append(candidate)
        return outputs

    def _truncated_join(self, s: Stage, text: Any) -> list[Candidate]:
        """Per node: whole, cut (the node the budget ended in), or ``budget_exceeded``."""
        inputs = self.inputs or []
        joined = "\n".join(c.content for c in inputs)
        if not isinstance(text, str) or not joined.startswith(text):
            # not a plain prefix: say only what is known, the one chunk and what it became
            whole = Candidate(id=content_id(joined), content=joined)
            cut = Candidate(id=whole.id, content=text)
            if text != joined:
                _cut(cut, whole)
            s.inputs([whole])
            return [cut]
        outputs: list[Candidate] = []
        position = 0
        limit = f"limit={self.available} tokens" if self.available is not None else "context window"
        for original in inputs:
            end = position + len(original.content)
            if end <= len(text):
                outputs.append(_same(Candidate(id=original.id, content=original.content), original))
            elif position < len(text) and text[position:].strip():
                candidate = Candidate(id=original.id, content=text[position:])
                _cut(candidate, original)
                outputs.append(candidate)
            else:
                s.exclude(original, sc.REASON_BUDGET_EXCEEDED, f"{limit}: the joined context was cut after {len(outputs)} of {len(inputs)} chunks")
            position = end + 1
        return outputs

    def _packed(self, s: Stage) -> list[Candidate]:
        """Repacking joins the stripped chunks and re-splits them: every non-blank chunk reaches the
        model whole (stripped), spread over the packed chunks; a blank one is dropped."""
        outputs = []
        for original in self.inputs or ():
            text = original.content.strip() if isinstance(original.content, str) else original.content
            if not text:
                s.exclude(original, sc.REASON_CUSTOM_PREFIX + "blank_chunk", "repack drops blank chunks")
                continue
            candidate = Candidate(id=original.id, content=text, raw=original.raw)
            if text != original.content:
                stamped = original.receipt  # a changed text had content: never None
                candidate.derived_from = stamped.sha256 if stamped is not None else None
                candidate.transform_rule = BUDGET_TRIM_RULE.id
            else:
                _same(candidate, original)
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


def available_context_hook(wrapped: Any, instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """Around ``PromptHelper._get_available_context_size``: the budget the current truncate/repack
    is fitting into."""
    result = wrapped(*args, **kwargs)
    call = active_call(instance)
    if isinstance(call, BudgetCall) and isinstance(result, int):
        call.available = result
    return result
