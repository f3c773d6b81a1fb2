"""Exclusions: which inputs did not leave a stage, and why (docs/semconv.md §3).

Pure derivation from what the stage was given (inputs, outputs, the reasons the caller said, the
stage's knobs): nothing here touches a span or the pipeline state. An explicit reason wins; an
input whose id left the stage again is ``deduplicated``; otherwise the stage's knobs explain the
drop (score threshold, top-k, budget), and what nothing explains is ``unexplained``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import content_id, finite_or_none
from ragtrail.recorder.candidates import Candidate
from ragtrail.recorder.rescoring import unproduced_scores

__all__ = ["Exclusion", "Explicit", "KeptEvidence", "Knobs", "derive", "derive_reason", "kept_evidence", "on_knob_scale", "resolve_string_ids"]


class Explicit(NamedTuple):
    """A reason the caller gave with ``Stage.exclude`` (``candidate`` is ``None`` for a bare id)."""

    reason: str
    detail: str | None
    candidate: Candidate | None


class Exclusion(NamedTuple):
    """One excluded candidate: its input rank (``-1``: not among the recorded inputs), the
    candidate, the reason code and its detail."""

    rank: int
    candidate: Candidate
    reason: str
    detail: str | None


@dataclass(frozen=True)
class Knobs:
    """The stage's knobs as it ran: what a derived reason is explained by."""

    top_k: int | None = None
    threshold: float | None = None
    budget_limit: float | None = None
    budget_used: float | None = None
    budget_unit: str | None = None
    score_kind: str | None = None


def resolve_string_ids(explicit: dict[str, Explicit], strings: set[str], inputs: Sequence[Candidate] | None) -> None:
    """``exclude("text")`` names a string candidate by its content when no input has that id."""
    if not strings or inputs is None:
        return
    ids = {c.id for c in inputs}
    for text in strings:
        if text not in ids and text in explicit:
            alias = content_id(text)
            if alias in ids:
                explicit[alias] = explicit.pop(text)


def derive(
    inputs: Sequence[Candidate] | None, outputs: Sequence[Candidate], explicit: Mapping[str, Explicit], knobs: Knobs, *, failed: bool = False
) -> tuple[list[Exclusion], list[str]]:
    """Every input that did not leave, by identity, and the findings the derivation made (also
    :func:`ragtrail.recorder.rescoring.unproduced_scores`, which gives scores handed on unchanged
    their upstream kind back). A stage that failed before producing output (or whose inputs are
    unknown) excluded nothing: only the explicit exclusions are said."""
    if inputs is None or failed:
        result = []
        for ident, said in explicit.items():
            rank = next((i for i, c in enumerate(inputs or ()) if c.id == ident), -1)
            result.append(Exclusion(rank, said.candidate or Candidate(id=ident), said.reason, said.detail))
        return result, []
    kept = _kept_positions(inputs, outputs)
    exclusions, findings = _dropped(inputs, outputs, kept, explicit, knobs)
    # scores handed on unchanged keep their upstream kind (a reranker's silent fallback is a finding)
    findings.extend(unproduced_scores(knobs.score_kind, inputs, outputs))
    return exclusions, findings


def _kept_positions(inputs: Sequence[Candidate], outputs: Sequence[Candidate]) -> set[int]:
    """The input positions that left. Duplicate ids are matched as a multiset; the copy that left is
    the same object when there is one (libraries keep the best-scored copy, not always the first),
    else the one with the same score, else the first."""
    ids = [c.id for c in inputs]
    first = dict(zip(ids, range(len(ids)), strict=True))
    if len(first) == len(ids):
        # every input id once (the usual case): an output takes its id's one position, a second
        # output of the same id finds it taken (what the multiset matching below does, in C)
        return {first[ident] for ident in [c.id for c in outputs] if ident in first}
    positions: dict[str, list[int]] = {}
    for index, ident in enumerate(ids):
        positions.setdefault(ident, []).append(index)
    kept: set[int] = set()
    for out in outputs:
        free = [i for i in positions.get(out.id, ()) if i not in kept]
        if not free:
            continue
        if len(free) > 1:
            same = [i for i in free if out.raw is not None and inputs[i].raw is out.raw]
            scored = [i for i in free if finite_or_none(inputs[i].score) == finite_or_none(out.score)]
            free = same or scored or free
        kept.add(free[0])
    return kept


def _dropped(
    inputs: Sequence[Candidate], outputs: Sequence[Candidate], kept: set[int], explicit: Mapping[str, Explicit], knobs: Knobs
) -> tuple[list[Exclusion], list[str]]:
    """The inputs not kept, each with its reason; the surplus copies of a kept id are ``deduplicated``."""
    result: list[Exclusion] = []
    findings: list[str] = []
    seen: set[str] = {inputs[i].id for i in kept}
    kept_by_sha = {r.sha256: c.id for c in outputs if c.content is not None and (r := c.receipt) is not None}
    output_ids = {c.id for c in outputs}
    explicit_used: set[str] = set()
    evidence: KeptEvidence | None = None
    for rank, candidate in enumerate(inputs):
        if rank in kept:
            continue
        if candidate.id in explicit and candidate.id not in explicit_used:
            said = explicit[candidate.id]
            reason, detail = said.reason, said.detail
            explicit_used.add(candidate.id)
        elif candidate.id in seen or candidate.id in output_ids:
            reason, detail = sc.REASON_DEDUPLICATED, f"duplicate id of {candidate.id}"
        else:
            if evidence is None:
                evidence = kept_evidence(inputs, outputs, kept, knobs)
                findings.extend(evidence.findings)
            reason, detail = derive_reason(candidate, outputs, kept_by_sha, knobs, rank, evidence)
        seen.add(candidate.id)
        result.append(Exclusion(rank, candidate, reason, detail))
    for ident, said in explicit.items():
        if ident not in explicit_used and ident not in output_ids and ident not in seen:
            # excluded before it was handed to us as input (e.g. a pre-filter): still said
            findings.append(f"exclusion of {ident} that was not among the recorded inputs")
            result.append(Exclusion(-1, said.candidate or Candidate(id=ident), said.reason, said.detail))
    return result, findings


class KeptEvidence(NamedTuple):
    """What the kept outputs say about the stage's knobs: a derived reason must agree with every
    kept output. ``threshold_held``: no kept output scores past the threshold (else the threshold
    did not decide what was kept: a finding); ``kept_scores``: the kept outputs' scores on the
    threshold's scale (``None`` when any is missing or on another scale: the cut's order is then
    unknown); ``kept_ranks``: the input ranks of the kept outputs."""

    threshold_held: bool
    kept_scores: tuple[float, ...] | None
    kept_ranks: tuple[int, ...]
    findings: list[str]


def _lower_is_better(kind: str | None, knobs: Knobs) -> bool:
    return (kind or knobs.score_kind) == sc.SCORE_DISTANCE


def on_knob_scale(candidate: Candidate, knobs: Knobs, *, produced: bool) -> float | None:
    """The candidate's score when it is on the scale the stage's threshold and cut apply to, else
    ``None``. An output (``produced``) carries the stage's own score; an input of a stage that
    produces its own scores (a reranker: ``score_kind=rerank``) carries an upstream score, which
    says nothing about the cut unless it is of that same kind."""
    score = finite_or_none(candidate.score)
    if score is None:
        return None
    kind = candidate.score_kind
    if kind is not None and knobs.score_kind is not None and kind != knobs.score_kind:
        return None
    if not produced and kind is None and knobs.score_kind == sc.SCORE_RERANK:
        return None
    return score


def _fails(score: float, threshold: float, lower_is_better: bool) -> bool:
    return score > threshold if lower_is_better else score < threshold


def kept_evidence(inputs: Sequence[Candidate], outputs: Sequence[Candidate], kept: set[int], knobs: Knobs) -> KeptEvidence:
    """Check the knobs against the kept outputs once per stage (see :class:`KeptEvidence`)."""
    findings: list[str] = []
    scores: list[float] = []
    complete = True
    violators: list[str] = []
    for candidate in outputs:
        score = on_knob_scale(candidate, knobs, produced=True)
        if score is None:
            complete = False
            continue
        scores.append(score)
        if knobs.threshold is not None and _fails(score, knobs.threshold, _lower_is_better(candidate.score_kind, knobs)):
            violators.append(f"{candidate.id}={score:g}")
    held = not violators
    if violators:
        op = ">" if _lower_is_better(None, knobs) else "<"
        findings.append(
            f"{sc.FINDING_KEPT_PAST_THRESHOLD}: {len(violators)} kept output(s) score {op} "
            f"threshold={knobs.threshold:g} ({', '.join(violators[:5])}): the threshold did not "
            "decide what was kept, so no exclusion is explained by it"
        )
    return KeptEvidence(held, tuple(scores) if complete and scores else None, tuple(sorted(kept)), findings)


def _rank_cut_explains(candidate: Candidate, rank: int, outputs: Sequence[Candidate], knobs: Knobs, evidence: KeptEvidence) -> bool:
    """A top-k cut explains a drop when exactly ``top_k`` were kept and the dropped input ranks
    below every kept output in some order the cut could have used: by score (when both are on the
    cut's scale) or by input position. A reranker's own order of the dropped inputs is unknown (their
    rerank scores were not handed on), so its cut is taken as said."""
    if knobs.top_k is None or len(outputs) != int(knobs.top_k):
        return False
    score = on_knob_scale(candidate, knobs, produced=False)
    if score is None or evidence.kept_scores is None:
        return True
    lower = _lower_is_better(candidate.score_kind, knobs)
    by_score = all((kept <= score) if lower else (kept >= score) for kept in evidence.kept_scores)
    by_position = bool(evidence.kept_ranks) and len(evidence.kept_ranks) == len(outputs) and all(kept < rank for kept in evidence.kept_ranks)
    return by_score or by_position


def derive_reason(
    candidate: Candidate,
    outputs: Sequence[Candidate],
    kept_by_sha: Mapping[str, str],
    knobs: Knobs,
    rank: int = -1,
    evidence: KeptEvidence | None = None,
) -> tuple[str, str | None]:
    """Why an input with no explicit reason did not leave, from the stage's knobs, consistent with
    every kept output: a threshold some kept output fails explains nothing, nor does a top-k cut
    that kept fewer than k or kept something that ranks below this input. What no knob explains is
    ``unexplained`` (the reason is not known; never a guess)."""
    stamped = candidate.receipt if candidate.content is not None else None
    if stamped is not None and stamped.sha256 in kept_by_sha:
        return sc.REASON_DEDUPLICATED, f"same content as {kept_by_sha[stamped.sha256]}"
    if evidence is None:
        evidence = kept_evidence((), outputs, set(), knobs)
    threshold = knobs.threshold
    score = on_knob_scale(candidate, knobs, produced=False)
    if threshold is not None and score is not None and evidence.threshold_held:
        lower = _lower_is_better(candidate.score_kind, knobs)
        if _fails(score, threshold, lower):
            return sc.REASON_BELOW_SCORE_THRESHOLD, f"score={score:g} {'>' if lower else '<'} threshold={threshold:g}"
    if _rank_cut_explains(candidate, rank, outputs, knobs, evidence):
        return sc.REASON_BELOW_RANK_CUTOFF, f"top_k={knobs.top_k}"
    if knobs.budget_limit is not None:
        used = "" if knobs.budget_used is None else f" used={knobs.budget_used:g}"
        unit = f" {knobs.budget_unit}" if knobs.budget_unit else ""
        return sc.REASON_BUDGET_EXCEEDED, f"limit={knobs.budget_limit:g}{unit}{used}"
    return sc.REASON_UNEXPLAINED, None
