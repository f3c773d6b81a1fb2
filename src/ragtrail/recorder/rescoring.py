"""Did a reranking stage produce the scores it hands on? (docs/semconv.md §3, seed 002)

A reranker that silently falls back (its model timed out, its LLM's answer did not parse) often
hands on its inputs unchanged: the same candidates, in their input order, with the scores the stage
before gave them. Recorded as is, that reads as a normal rerank, with upstream RRF or similarity
values labelled ``rerank``. Pure derivation from the stage's recorded inputs and outputs: an output
whose score is exactly its input's score was not scored by this stage, so it keeps the upstream
kind (``none`` when that is not known; a filter's kept outputs keep their retriever's kind), and a stage whose every output is such a pass-through, in
input order, is the finding ``rerank_is_identity``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import finite_or_none
from ragtrail.recorder.candidates import Candidate

__all__ = ["unproduced_scores"]


def unproduced_scores(stage_score_kind: str | None, inputs: Sequence[Candidate] | None, outputs: Sequence[Candidate]) -> list[str]:
    """Give every output that claims a ``rerank`` score equal to its own input's (non-rerank) score
    its upstream kind back, and an output of a stage that claims no kind (a filter, a budget) that
    hands its input's score on that score's kind (the candidates are changed in place); return the
    findings. A stage
    that claims rerank scores (its ``score_kind``, or an output's) and hands on nothing but its
    inputs' own scores, in input order, is ``rerank_is_identity``."""
    if not inputs or not outputs:
        return []
    ids = [c.id for c in inputs]
    unique = dict(zip(ids, range(len(ids)), strict=True))
    positions: dict[str, list[int]] | None = None
    if len(unique) != len(ids):  # an id given more than once: its outputs take its positions in turn
        positions = {}
        for index, ident in enumerate(ids):
            positions.setdefault(ident, []).append(index)
    claims = stage_score_kind == sc.SCORE_RERANK
    passed: list[int] = []  # input positions of the outputs that carry their input's score
    relabelled = 0
    for out in outputs:
        rerank = (out.score_kind or stage_score_kind) == sc.SCORE_RERANK
        at = _input_index(out.id, unique, positions)
        source = None if at is None else inputs[at]
        score = finite_or_none(out.score)
        if at is None or source is None or score is None or score != finite_or_none(source.score):
            claims = claims or out.score_kind == sc.SCORE_RERANK
            continue
        # an upstream reranker's score handed on under its own kind is no claim of this stage's
        claims = claims or (out.score_kind == sc.SCORE_RERANK and source.score_kind != sc.SCORE_RERANK)
        passed.append(at)
        if rerank and source.score_kind != sc.SCORE_RERANK:
            out.score_kind = source.score_kind or sc.SCORE_NONE
            relabelled += 1
        elif out.score_kind is None and stage_score_kind is None:
            # a stage that claims no score kind (a filter, a budget) handed the score on: its kind too
            out.score_kind = source.score_kind
    kinds = ", ".join(sorted({inputs[i].score_kind or sc.SCORE_NONE for i in passed}))
    if claims and len(passed) == len(outputs) and passed == sorted(passed):
        return [
            f"{sc.FINDING_RERANK_IS_IDENTITY}: the stage handed on {len(outputs)} of its {len(inputs)} inputs "
            f"in their input order with their input scores: nothing was reranked (a silent fallback?); "
            f"the scores keep their upstream kind ({kinds})"
        ]
    if relabelled:
        return [f"{relabelled} output score(s) are the inputs' own scores, not produced by this stage: recorded with their upstream kind ({kinds})"]
    return []


def _input_index(ident: str, unique: dict[str, int], positions: dict[str, list[int]] | None) -> int | None:
    """The input position an output of this id takes: every id once, the first output of an id takes
    it; an id given more than once: its outputs take its positions in turn."""
    if positions is None:
        return unique.pop(ident, None)
    free = positions.get(ident)
    return free.pop(0) if free else None
