"""The rankers (``SentenceTransformersSimilarityRanker``, ``SentenceTransformersDiversityRanker``,
``LostInTheMiddleRanker``, ``MetaFieldRanker``): ``rerank`` stages whose every exclusion is classified by re-deriving the
component's own rule (duplicate id, ``top_k``, score threshold, word budget, missing meta field)
from the snapshotted inputs, never by guessing."""

from __future__ import annotations

from typing import Any

from ragtrail import settings
from ragtrail.contract import semconv as sc
from ragtrail.recorder.candidates import Candidate
from ragtrail.recorder.stage import Stage

from ._common import HaystackCall, best_copies, documents_of, exclude_missing, outputs_like_inputs, snapshot


class Ranker(HaystackCall):
    """Shared by the rankers: snapshot the input documents, adapt the output keeping hops."""

    kind = sc.KIND_RERANK
    output_kind: str | None = sc.SCORE_RERANK
    inputs: list[Candidate] | None = None  # the snapshot of the input documents, once recorded

    def snapshot(self, s: Stage, bound: dict[str, Any]) -> list[Candidate] | None:
        docs = bound.get("documents")
        inputs = snapshot(docs)
        if inputs is None:
            s.finding(f"documents is a {type(docs).__name__}, not a list: inputs not snapshotted")
            return None
        s.inputs(inputs)
        return inputs

    def outputs(self, s: Stage, result: Any, kind: str | None) -> list[Candidate] | None:
        docs = documents_of(result)
        if docs is None:
            s.finding(f"run returned a {type(result).__name__} without a documents list")
            return None
        outputs = outputs_like_inputs(docs, self.inputs or [], kind)
        s.outputs(outputs)
        return outputs


class SimilarityRanker(Ranker):
    """``SentenceTransformersSimilarityRanker``: dedup by id, keep ``score >= score_threshold``, then
    ``top_k``. Its scores are sorted, so when fewer than ``top_k`` survive every other document fell
    below the threshold; otherwise each was at least cut by rank."""

    def before(self, s: Stage) -> None:
        instance, bound = self.instance, self.arguments
        top_k = bound.get("top_k")
        top_k = getattr(instance, "top_k", None) if top_k is None else top_k
        threshold = bound.get("score_threshold")
        threshold = getattr(instance, "score_threshold", None) if threshold is None else threshold
        s.score_kind = sc.SCORE_RERANK
        s.set(top_k=top_k, threshold=threshold)
        query = bound.get("query")
        if isinstance(query, str):
            s.query(query)
        model = getattr(instance, "model", None)
        if isinstance(model, str) and settings.get().mirror_openinference:
            s.set_attribute(sc.OI_RERANKER_MODEL_NAME, model)
        inputs = self.snapshot(s, bound)
        self.top_k, self.threshold, self.inputs = top_k, threshold, inputs

    def after(self, s: Stage, result: Any) -> None:
        outputs = self.outputs(s, result, sc.SCORE_RERANK)
        inputs = self.inputs
        if outputs is None or inputs is None:
            return
        top_k, threshold = self.top_k, self.threshold

        def reason(candidate: Candidate) -> tuple[str, str | None]:
            if threshold is not None and (top_k is None or len(outputs) < top_k):
                return sc.REASON_BELOW_SCORE_THRESHOLD, f"rerank score < score_threshold={threshold:g}"
            return sc.REASON_BELOW_RANK_CUTOFF, f"top_k={top_k}"

        exclude_missing(s, inputs, outputs, reason)


class LostInTheMiddle(Ranker):
    """``LostInTheMiddleRanker``: dedup by id, then ``top_k``, then a word budget that keeps documents
    until the running word count reaches ``word_count_threshold`` (the one that reaches it is kept).
    Each exclusion is classified by replaying that rule on the snapshotted inputs."""

    def before(self, s: Stage) -> None:
        instance, bound = self.instance, self.arguments
        top_k = bound.get("top_k") or getattr(instance, "top_k", None)
        words = bound.get("word_count_threshold") or getattr(instance, "word_count_threshold", None)
        s.set(top_k=top_k)
        if words:
            s.set(budget_limit=words, budget_unit="words")
        inputs = self.snapshot(s, bound)
        self.top_k, self.words, self.inputs = top_k, words, inputs

    def after(self, s: Stage, result: Any) -> None:
        outputs = self.outputs(s, result, None)
        inputs = self.inputs
        if outputs is None or inputs is None:
            return
        top_k, limit = self.top_k, self.words
        unique = list(best_copies(inputs).values())
        reorder = unique[:top_k] if top_k else unique
        reasons: dict[str, tuple[str, str | None]] = {c.id: (sc.REASON_BELOW_RANK_CUTOFF, f"top_k={top_k}") for c in unique[len(reorder) :]}
        if limit and len(reorder) > 1:
            used = 0
            cut_at = len(reorder)
            for index, candidate in enumerate(reorder):
                text = candidate.content if isinstance(candidate.content, str) else ""
                if text:
                    used += len(text.split())
                if used >= limit:
                    cut_at = index + 1
                    break
            s.set(budget_used=used)
            for candidate in reorder[cut_at:]:
                reasons[candidate.id] = (sc.REASON_BUDGET_EXCEEDED, f"{used} words >= word_count_threshold={limit} before this document")
        exclude_missing(s, inputs, outputs, lambda c: reasons.get(c.id, (sc.REASON_UNEXPLAINED, None)))


class MetaField(Ranker):
    """``MetaFieldRanker``: dedup by id; with ``missing_meta="drop"`` a document without the meta
    field is dropped; the rest is ranked (``rrf`` or ``linear_score``) and cut at ``top_k``. When the
    meta values cannot be sorted (or none has the field) Haystack returns the input order instead:
    recorded as ``degraded`` with fallback ``input_order``."""

    def before(self, s: Stage) -> None:
        instance, bound = self.instance, self.arguments
        top_k = bound.get("top_k")
        top_k = getattr(instance, "top_k", None) if top_k is None else top_k
        weight = bound.get("weight")
        weight = getattr(instance, "weight", None) if weight is None else weight
        mode = bound.get("ranking_mode") or getattr(instance, "ranking_mode", None)
        missing = bound.get("missing_meta") or getattr(instance, "missing_meta", None)
        field: Any = getattr(instance, "meta_field", None)
        s.set(top_k=top_k)
        snapshotted = self.snapshot(s, bound)
        self.top_k, self.weight, self.mode, self.missing, self.field = top_k, weight, mode, missing, field
        self.inputs = snapshotted

    def after(self, s: Stage, result: Any) -> None:
        docs = documents_of(result)
        inputs = self.inputs or []
        ranked = self.weight != 0
        fallback = False
        if ranked and docs:
            originals = {id(c.raw) for c in inputs}
            # a ranked run returns rescored copies; the input objects themselves mean no ranking ran
            fallback = all(id(doc) in originals for doc in docs)
        kind = None
        if ranked and not fallback:
            kind = sc.SCORE_RRF if self.mode == "reciprocal_rank_fusion" else sc.SCORE_RERANK
        s.score_kind = kind
        outputs = self.outputs(s, result, kind)
        if outputs is None or self.inputs is None:
            return
        field, drop = self.field, self.missing == "drop"
        if fallback:
            present = any((c.metadata or {}).get(field) is not None for c in inputs)
            s.set_status(sc.STATUS_DEGRADED, failure_class="meta_not_sortable" if present else "meta_field_missing", fallback="input_order")

        def reason(candidate: Candidate) -> tuple[str, str | None]:
            meta = candidate.metadata or {}
            if ranked and drop and meta.get(field) is None:
                return sc.REASON_FILTERED_BY_METADATA, f"meta field {field!r} missing (missing_meta=drop)"
            if ranked and not fallback and self.missing == "bottom" and meta.get(field) is None:
                # what put it below the cut: Haystack ranks a document without the field last
                return sc.REASON_BELOW_RANK_CUTOFF, f"top_k={self.top_k} (meta field {field!r} missing: ranked last, missing_meta=bottom)"
            return sc.REASON_BELOW_RANK_CUTOFF, f"top_k={self.top_k}"

        exclude_missing(s, inputs, outputs, reason)


class DiversityRanker(Ranker):
    """``SentenceTransformersDiversityRanker`` (``haystack_integrations``): dedup by id, then order
    for diversity (``greedy_diversity_order``) or pick by maximal marginal relevance
    (``maximum_margin_relevance``, with its ``lambda_threshold``), then ``top_k``. It gives no
    score: the documents keep the scores they came with, so the stage has no score kind of its own.
    Every document not kept was cut by ``top_k`` on the ranker's own order (the MMR pick, or the
    diversity order), which the detail names."""

    def before(self, s: Stage) -> None:
        instance, bound = self.instance, self.arguments
        top_k = bound.get("top_k")
        top_k = getattr(instance, "top_k", None) if top_k is None else top_k
        strategy = str(getattr(instance, "strategy", ""))
        lam = bound.get("lambda_threshold")
        lam = getattr(instance, "lambda_threshold", None) if lam is None else lam
        s.score_kind = None
        s.set(top_k=top_k)
        self.mmr = strategy == "maximum_margin_relevance"
        if self.mmr and isinstance(lam, (int, float)) and not isinstance(lam, bool):
            s.set_attribute(sc.STAGE_MMR_LAMBDA, float(lam))
        query = bound.get("query")
        if isinstance(query, str):
            s.query(query)
        self.top_k, self.lam, self.strategy = top_k, lam, strategy
        self.inputs = self.snapshot(s, bound)

    def after(self, s: Stage, result: Any) -> None:
        outputs = self.outputs(s, result, None)
        inputs = self.inputs
        if outputs is None or inputs is None:
            return
        if self.mmr:
            detail = f"top_k={self.top_k}: not picked by maximum_margin_relevance (lambda_threshold={self.lam})"
        else:
            detail = f"top_k={self.top_k} after {self.strategy or 'the diversity order'}"
        exclude_missing(s, inputs, outputs, lambda c: (sc.REASON_BELOW_RANK_CUTOFF, detail))
