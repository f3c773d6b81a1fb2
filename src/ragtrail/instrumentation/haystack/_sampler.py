"""``TopPSampler``: a ``filter`` stage. Top-p (nucleus) sampling keeps the highest-scored documents
whose cumulative softmax probability stays within ``top_p``; every exclusion is classified by
replaying that rule on the scores snapshotted before the call, never by guessing.

The replay runs the component's own torch operations (softmax, cumsum, ``isclose`` with
``atol=1e-6`` and torch's default ``rtol``) on the same float32 tensor: a pure-Python softmax would
not round like torch's vectorised kernels, and a document on the edge of ``top_p`` would get the
wrong reason. Torch is taken from the component's module, which already imported it."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.recorder.stage import Stage

from ._common import exclude_missing
from ._rankers import Ranker

MODULE = "haystack.components.samplers.top_p"


def sampled_score(doc: Any, score_field: str | None) -> float | None:
    """``TopPSampler._get_doc_score``: the meta field when one is named, else ``Document.score``;
    only an int or float (not a bool) is a score."""
    if score_field:
        meta = getattr(doc, "meta", None)
        score = meta.get(score_field) if isinstance(meta, dict) else None
    else:
        score = getattr(doc, "score", None)
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        return None
    return float(score)


@dataclass
class TopPCut:
    """What the rule kept (input positions) and why each other input was dropped."""

    kept: set[int]
    reasons: dict[int, tuple[str, str | None]] = field(default_factory=dict)
    used: float | None = None  # the cumulative probability of the kept scored documents


def replay(scores: list[float | None], top_p: float | int, min_top_k: int | None, where: str) -> TopPCut:
    """``TopPSampler.run`` on the snapshotted scores: scoreless documents pass only when none has a
    score; the scored ones are sorted (stable, highest first), kept while the cumulative probability
    is <= top_p (or isclose to it), topped up to ``min_top_k``, and at least the highest one kept."""
    scored = {i: score for i, score in enumerate(scores) if score is not None}
    if not scored:
        return TopPCut(kept=set(range(len(scores))))
    torch = sys.modules[MODULE].torch
    order = sorted(scored, key=scored.__getitem__, reverse=True)
    probs = torch.nn.functional.softmax(torch.tensor([scored[i] for i in order], dtype=torch.float32), dim=-1)
    cumulative = torch.cumsum(probs, dim=-1)
    close = torch.isclose(cumulative, torch.tensor(top_p, device=cumulative.device), atol=1e-6)
    within = ((cumulative <= top_p) | close).tolist()
    cum = [float(c) for c in cumulative.tolist()]
    positions = [k for k, ok in enumerate(within) if ok]
    note = ""
    if min_top_k and len(positions) < min_top_k:
        positions = list(range(min(min_top_k, len(order))))
        note = f"; min_top_k={min_top_k} kept the {len(positions)} highest-scored"
    if not positions:
        positions = [0]
        note = f"; none within top_p={top_p:g}: the highest-scored one kept"
    kept = {order[k] for k in positions}
    cut = TopPCut(kept=kept)
    last = cum[max(positions)]
    cut.used = last if math.isfinite(last) else None
    for k, i in enumerate(order):
        if i not in kept:
            cut.reasons[i] = (sc.REASON_BUDGET_EXCEEDED, f"cumulative probability {cum[k]:.6g} > top_p={top_p:g}{note}")
    detail = f"no score in {where} while {len(scored)} of {len(scores)} documents have one"
    for i, score in enumerate(scores):
        if score is None:
            cut.reasons[i] = (sc.REASON_NO_SCORE, detail)
    return cut


class TopPSampler(Ranker):
    """``TopPSampler.run``: the per-call ``top_p`` (else the instance's) is the stage's budget of
    probability mass (``budget.limit``, unit ``probability``; ``budget.used`` the cumulative
    probability of what it kept), recorded once the replay ran. Its outputs are its input objects,
    so they keep their upstream scores and kinds."""

    kind = sc.KIND_FILTER
    output_kind = None

    def before(self, s: Stage) -> None:
        instance, bound = self.instance, self.arguments
        top_p = bound.get("top_p")
        top_p = getattr(instance, "top_p", None) if top_p is None else top_p
        score_field = getattr(instance, "score_field", None)
        s.score_kind = None
        self.top_p, self.min_top_k, self.score_field = top_p, getattr(instance, "min_top_k", None), score_field
        self.inputs = self.snapshot(s, bound)
        self.scores = None if self.inputs is None else [sampled_score(c.raw, score_field) for c in self.inputs]

    def after(self, s: Stage, result: Any) -> None:
        outputs = self.outputs(s, result, None)
        inputs, scores = self.inputs, self.scores
        top_p = self.top_p
        if outputs is None or inputs is None or scores is None or isinstance(top_p, bool) or not isinstance(top_p, (int, float)):
            return
        where = f"meta[{self.score_field!r}]" if self.score_field else "Document.score"
        cut = replay(scores, top_p, self.min_top_k, where)
        # the budget only once the replay explains the cut: a recorded budget alone would make the
        # recorder derive budget_exceeded for every drop, a scoreless one included
        s.set(budget_limit=float(top_p), budget_unit=sc.BUDGET_UNIT_PROBABILITY)
        returned = {id(c.raw) for c in outputs}
        if returned != {id(inputs[i].raw) for i in cut.kept}:
            s.finding("TopPSampler returned other documents than its top-p rule selects: its exclusions are unexplained")
            exclude_missing(s, inputs, outputs, lambda c: (sc.REASON_UNEXPLAINED, None))
            return
        if cut.used is not None:
            s.set(budget_used=cut.used)
        first: dict[str, int] = {}
        for i, candidate in enumerate(inputs):
            first.setdefault(candidate.id, i)
        exclude_missing(s, inputs, outputs, lambda c: cut.reasons.get(first[c.id], (sc.REASON_UNEXPLAINED, None)))
