"""``BaseNodePostprocessor.postprocess_nodes/apostprocess_nodes``: filters, rerankers, reorderers.

Which stage a postprocessor is, and why a node did not leave it, follows from its class and its
knobs (:data:`POLICIES`, resolved along the MRO by class name so subclasses inherit it):

- ``SimilarityPostprocessor``: ``filter`` with ``threshold = similarity_cutoff`` → ``below_score_threshold``
- ``KeywordNodePostprocessor``: ``filter`` → ``custom:missing_required_keyword`` or
  ``custom:excluded_keyword`` (the keyword found), re-derived as it matches (spaCy whole tokens, required first)
  (content rules, not metadata)
- ``FixedRecencyPostprocessor``: ``filter`` keeping the ``top_k`` newest → ``stale`` (the dates as detail)
- ``EmbeddingRecencyPostprocessor``: ``filter`` → ``superseded`` (an older near-duplicate of a newer node)
- ``SentenceTransformerRerank``, ``LLMRerank``, ``StructuredLLMRerank``, ``TimeWeightedPostprocessor``:
  ``rerank`` with new ``rerank`` scores and ``top_k = top_n`` → ``below_rank_cutoff``; a node the LLM
  did not choose at all → ``custom:not_selected_by_llm``
- ``RankGPTRerank``, ``LongContextReorder``: ``rerank`` that keeps the input scores
- ``SentenceEmbeddingOptimizer``: ``budget`` that shortens node text (rule ``budget_trim@1``)
- ``MetadataReplacementPostProcessor``, PII maskers: ``filter`` that changes content (``derived_from``,
  rule ``replace@1``)
- ``PrevNextNodePostprocessor``/``AutoPrevNextNodePostprocessor``: ``retrieve`` (adds neighbours)
- anything else: ``rerank`` when its class name says so, else ``filter``; ``top_n``/``top_k`` as knobs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import BUDGET_TRIM_RULE, receipt
from ragtrail.hooks import Args, Kwargs, active_call, argument
from ragtrail.recorder.candidates import adapt, hand_over, is_candidate_list
from ragtrail.recorder.stage import Stage

from ._calls import LlamaCall
from ._nodes import Snap, adapt_snapped, node_content, node_id, query_text, snap
from ._retrieve import record_kept

Explain = Callable[["PostprocessCall", Stage, list[Snap], list[Any]], None]
REASON_NOT_SELECTED = sc.REASON_CUSTOM_PREFIX + "not_selected_by_llm"


@dataclass(frozen=True)
class Policy:
    kind: str
    rescores: bool = False  # outputs carry new scores (of ``sc.SCORE_RERANK``)
    top_k: tuple[str, ...] = ()
    threshold: str | None = None
    explain: Explain | None = None
    content_rule: str | None = None


def _excluded(inputs: list[Snap], outputs: list[Any]) -> list[Snap]:
    kept = {node_id(n) for n in outputs}
    return [c for c in inputs if c.id not in kept]


def _similarity(call: PostprocessCall, s: Stage, inputs: list[Snap], outputs: list[Any]) -> None:
    # numeric scores are explained by the recorder from the threshold; a missing score is said here
    cutoff = getattr(call.instance, "similarity_cutoff", None)
    if cutoff is None:
        return
    for candidate in _excluded(inputs, outputs):
        if candidate.score is None:
            s.exclude(candidate.id, sc.REASON_BELOW_SCORE_THRESHOLD, f"score=None, threshold={cutoff:g}")


def _keywords(call: PostprocessCall, s: Stage, inputs: list[Snap], outputs: list[Any]) -> None:
    """KeywordNodePostprocessor filters on the node's content, not its metadata: the reason says
    which rule fired, re-derived by the component's own rule on the content snapshot taken before
    the call (spaCy phrase matching of whole tokens, case-sensitive, as the component does; the
    required rule first, then the exclude rule). A substring is not a match ("Monthly" is not the
    token "Month"), so no substring test stands in for it; when spaCy cannot be loaded, the reason
    names both lists."""
    inst = call.instance
    required = [str(k) for k in (getattr(inst, "required_keywords", None) or [])]
    excluded = [str(k) for k in (getattr(inst, "exclude_keywords", None) or [])]
    matchers = _keyword_matchers(str(getattr(inst, "lang", "en")), required, excluded)
    for candidate in _excluded(inputs, outputs):
        text = candidate.content if isinstance(candidate.content, str) else None
        reason, detail = _keyword_reason(matchers, text, required, excluded)
        s.exclude(candidate.id, sc.REASON_CUSTOM_PREFIX + reason, detail)


def _keyword_matchers(lang: str, required: list[str], excluded: list[str]) -> tuple[Any, Any, Any] | None:
    """(nlp, required matcher, exclude matcher) as KeywordNodePostprocessor builds them, or None."""
    try:
        from spacy.matcher import PhraseMatcher

        nlp = _blank(lang)
    except Exception:  # spaCy missing or the language unknown: the component failed the same way
        return None
    need, avoid = PhraseMatcher(nlp.vocab), PhraseMatcher(nlp.vocab)
    need.add("RequiredKeywords", list(nlp.pipe(required)))
    avoid.add("ExcludeKeywords", list(nlp.pipe(excluded)))
    return nlp, need, avoid


@functools.lru_cache(maxsize=4)
def _blank(lang: str) -> Any:
    import spacy

    return spacy.blank(lang)


def _keyword_reason(matchers: tuple[Any, Any, Any] | None, text: str | None, required: list[str], excluded: list[str]) -> tuple[str, str]:
    """The rule that dropped a node of ``text``, in the component's order."""
    if matchers is not None and text is not None:
        nlp, need, avoid = matchers
        doc = nlp(text)
        if required and not need(doc):
            return "missing_required_keyword", f"none of required_keywords={required}"
        found = avoid(doc) if excluded else []
        if found:
            _, start, end = found[0]
            return "excluded_keyword", f"contains {doc[start:end].text!r} (exclude_keywords)"
    return "keyword_rule", f"required_keywords={required} exclude_keywords={excluded}"


def _by_class_name(call: PostprocessCall, s: Stage, inputs: list[Snap], outputs: list[Any]) -> None:
    detail = f"filtered by {type(call.instance).__name__}"
    for candidate in _excluded(inputs, outputs):
        s.exclude(candidate.id, sc.REASON_FILTERED_BY_METADATA, detail)


def _meta(metadata: Any, key: str) -> Any:
    return metadata.get(key) if isinstance(metadata, dict) else None


def _recency(call: PostprocessCall, s: Stage, inputs: list[Snap], outputs: list[Any]) -> None:
    inst = call.instance
    key = getattr(inst, "date_key", "date")
    top_k = getattr(inst, "top_k", None)
    oldest_kept = _meta(outputs[-1].node.metadata, key) if outputs else None
    for candidate in _excluded(inputs, outputs):
        s.exclude(
            candidate.id,
            sc.REASON_STALE,
            f"{key}={_meta(candidate.metadata, key)} older than the {top_k} most recent kept (oldest kept {key}={oldest_kept})",
        )


def _embedding_recency(call: PostprocessCall, s: Stage, inputs: list[Snap], outputs: list[Any]) -> None:
    inst = call.instance
    key = getattr(inst, "date_key", "date")
    cutoff = getattr(inst, "similarity_cutoff", None)
    for candidate in _excluded(inputs, outputs):
        s.exclude(
            candidate.id, sc.REASON_SUPERSEDED, f"{key}={_meta(candidate.metadata, key)}: embedding similarity > {cutoff} to a more recent node"
        )


def _llm_choice(call: PostprocessCall, s: Stage, inputs: list[Snap], outputs: list[Any]) -> None:
    if call.selected is None:
        return
    top_n = getattr(call.instance, "top_n", None)
    batch = getattr(call.instance, "choice_batch_size", None)
    for candidate in _excluded(inputs, outputs):
        if candidate.id in call.selected:
            s.exclude(candidate.id, sc.REASON_BELOW_RANK_CUTOFF, f"top_n={top_n}")
        else:
            s.exclude(candidate.id, REASON_NOT_SELECTED, f"not chosen by the LLM in its batch (choice_batch_size={batch})")


_RERANK = Policy(sc.KIND_RERANK, rescores=True, top_k=("top_n",))
POLICIES: dict[str, Policy] = {
    "SimilarityPostprocessor": Policy(sc.KIND_FILTER, threshold="similarity_cutoff", explain=_similarity),
    "KeywordNodePostprocessor": Policy(sc.KIND_FILTER, explain=_keywords),
    "FixedRecencyPostprocessor": Policy(sc.KIND_FILTER, top_k=("top_k",), explain=_recency),
    "EmbeddingRecencyPostprocessor": Policy(sc.KIND_FILTER, explain=_embedding_recency),
    "TimeWeightedPostprocessor": Policy(sc.KIND_RERANK, rescores=True, top_k=("top_k",)),
    "SentenceTransformerRerank": _RERANK,
    "LLMRerank": Policy(sc.KIND_RERANK, rescores=True, top_k=("top_n",), explain=_llm_choice),
    "StructuredLLMRerank": Policy(sc.KIND_RERANK, rescores=True, top_k=("top_n",), explain=_llm_choice),
    "RankGPTRerank": Policy(sc.KIND_RERANK, top_k=("top_n",)),
    "LongContextReorder": Policy(sc.KIND_RERANK),
    "SentenceEmbeddingOptimizer": Policy(sc.KIND_BUDGET, content_rule=BUDGET_TRIM_RULE.id),
    "MetadataReplacementPostProcessor": Policy(sc.KIND_FILTER),
    "PIINodePostprocessor": Policy(sc.KIND_FILTER),
    "NERPIINodePostprocessor": Policy(sc.KIND_FILTER),
    "PrevNextNodePostprocessor": Policy(sc.KIND_RETRIEVE),
    "AutoPrevNextNodePostprocessor": Policy(sc.KIND_RETRIEVE),
}
_policy_cache: dict[type, Policy] = {}


def policy_for(cls: type) -> Policy:
    try:
        return _policy_cache[cls]
    except KeyError:
        pass
    found = next((POLICIES[c.__name__] for c in cls.__mro__ if c.__name__ in POLICIES), None)
    if found is None:
        name = cls.__name__.lower()
        if "rerank" in name:
            found = Policy(sc.KIND_RERANK, rescores=True, top_k=("top_n", "top_k"))
        elif "keyword" in name or "metadata" in name:
            found = Policy(sc.KIND_FILTER, top_k=("top_n", "top_k"), explain=_by_class_name)
        else:
            found = Policy(sc.KIND_FILTER, top_k=("top_n", "top_k"))
    _policy_cache[cls] = found
    return found


def _number(value: Any) -> Any:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class PostprocessCall(LlamaCall):
    site = "llama_index.postprocess"
    selected: set[str] | None = None
    snapshot: list[Snap] | None = None

    def open(self) -> Stage:
        self.policy = policy = policy_for(type(self.instance))
        top_k = next((v for v in (_number(getattr(self.instance, a, None)) for a in policy.top_k) if v is not None), None)
        threshold = _number(getattr(self.instance, policy.threshold, None)) if policy.threshold else None
        return self.new_stage(policy.kind, top_k=top_k, threshold=threshold, score_kind=sc.SCORE_RERANK if policy.rescores else None)

    def before(self, s: Stage) -> None:
        bundle = argument(self.args, self.kwargs, 1, "query_bundle")
        text = query_text(bundle) if bundle is not None else self.kwargs.get("query_str")
        if text is not None:
            s.query(text)
        nodes = argument(self.args, self.kwargs, 0, "nodes")
        if is_candidate_list(nodes):
            # adapted (and so snapshotted) now; our snapshot is for reasons and content, and the
            # candidates are made from it when our adapter is the one for every node
            items = list(nodes)
            try:
                snapshot = [snap(n) for n in items]
            except Exception:
                s.inputs(nodes)  # recorded all the same; the hook skeleton counts the error
                raise
            candidates = adapt_snapped(items, snapshot)
            s.inputs(nodes if candidates is None else hand_over(candidates))
            self.snapshot = snapshot
        else:
            s.finding(f"nodes are a {type(nodes).__name__}, not a list: not snapshotted")

    def after(self, s: Stage, result: Any) -> None:
        if not is_candidate_list(result):
            s.finding(f"postprocessor returned a {type(result).__name__}, not a list: outputs not recorded")
            return
        policy = self.policy
        items = list(result)
        if self.snapshot is not None:
            items = self._content_changes(items)
            if policy.explain is not None:
                policy.explain(self, s, self.snapshot, result)
        if policy.rescores:
            s.outputs(items)
        else:
            record_kept(s, items, [node_id(n) for n in result])

    def _content_changes(self, items: list[Any]) -> list[Any]:
        """A node whose text the stage changed (sentence window, PII mask, optimizer) keeps its id and
        says what it was derived from; a shortening under the policy's rule cites that rule, any
        other change ``replace@1``."""
        before = {c.id: c for c in self.snapshot or ()}
        out = items
        for index, item in enumerate(items):
            original = before.get(node_id(item))
            if original is None or original.content is None:
                continue
            content = node_content(item.node)
            if content is None or content is original.content or content == original.content:
                continue
            candidate = adapt(item)
            source = receipt(original.content)
            candidate.derived_from = source.sha256
            rule = self.policy.content_rule
            # a shortening under the policy's own rule cites it; any other change is a declared
            # replacement, accepted by readers because derived_from names the upstream receipt
            # the item has content (it was compared above), so its receipt is never None
            if rule and (stamped := candidate.receipt) is not None and stamped.chars < source.chars:
                candidate.transform_rule = rule
            else:
                candidate.transform_rule = sc.RULE_REPLACE
            if out is items:
                out = list(items)
            out[index] = candidate
        return out


def selection_hook(wrapped: Any, instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """Around an LLM reranker's per-batch parse: remember which nodes the LLM chose at all, so a node
    cut by ``top_n`` is told apart from one the LLM never picked."""
    result = wrapped(*args, **kwargs)
    call = active_call(instance)
    if isinstance(call, PostprocessCall) and call.stage is not None and call.stage.recording:
        try:
            if call.selected is None:
                call.selected = set()
            for item in result or ():
                call.selected.add(str(item.node.node_id))
        except Exception as exc:
            call.error("selection", exc)
    return result
