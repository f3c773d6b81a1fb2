"""Cases + baseline -> the gate's decision (:class:`~ragtrail.gate.model.GateReport`).

Errors never pass. Before any metric is compared, everything that makes the comparison meaningless
is named as a problem (the verdict is then INCONCLUSIVE, whatever the numbers say): a case without
its trace, a pipeline error, a failed, sampled-out or truncated trace, a receipt alarm, a corpus, an
index or a component version that changed since the baseline, a baseline frozen from another set.
Cases with a problem are left out of the metrics (their numbers describe evidence nobody can trust).

Then each (slice, metric) of the baseline is one :class:`~ragtrail.gate.model.Check`. A failed
survival check says which stage lost the relevant evidence (the ids excluded there, by reason), and
what happened upstream (recall before it rising, a stage degraded into a fallback): seed 002's
shape, where recall before the budget went up while the answers refused, is told as it happened.
"""

from __future__ import annotations

import io
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from . import metrics as m
from .evalset import EvalSet
from .model import CaseResult, Check, GateReport, Movement, Problem, StageSurvival, decide
from .observation import Observation, as_manifest
from .runner import CaseRun, sampling_warning

_EPS = 1e-9
_LIST = 3  # ids or cases named in one line


def _names(items: list[str]) -> str:
    shown = ", ".join(items[:_LIST])
    return shown + (f" and {len(items) - _LIST} more" if len(items) > _LIST else "")


# --- identity --------------------------------------------------------------------------------------
def identity_problems(runs: list[CaseRun], baseline: dict[str, Any]) -> list[Problem]:
    """What was searched, against the baseline: corpus, index, versions. One problem per kind of change."""
    changes: dict[str, dict[str, list[str]]] = {"corpus_changed": {}, "index_changed": {}, "version_changed": {}}
    for run in runs:
        row = baseline.get("cases", {}).get(run.case.id)
        if row is None or run.observation is None:
            continue
        was = Observation.from_dict(row["observation"])
        now = run.observation
        if was.corpus_size is not None and now.corpus_size is not None and was.corpus_size != now.corpus_size:
            changes["corpus_changed"].setdefault(f"corpus size {was.corpus_size} → {now.corpus_size}", []).append(run.case.id)
        if was.stores is not None and now.stores is not None and was.stores != now.stores:
            changes["corpus_changed"].setdefault(f"stores {was.stores} → {now.stores}", []).append(run.case.id)
        for ident, sha in was.content.items():
            other = now.content.get(ident)
            if other is not None and other != sha:
                changes["corpus_changed"].setdefault(f"content of {ident} changed (sha256 {sha[:12]}… → {other[:12]}…)", []).append(run.case.id)
        if was.index and now.index and was.index != now.index:
            changes["index_changed"].setdefault(f"retrieve components {', '.join(was.index)} → {', '.join(now.index)}", []).append(run.case.id)
        for name in sorted(set(was.versions) | set(now.versions)):
            a, b = was.versions.get(name), now.versions.get(name)
            if a != b:
                changes["version_changed"].setdefault(f"{name} {a or '(none)'} → {b or '(none)'}", []).append(run.case.id)
    problems = []
    for kind, found in changes.items():
        for detail, case_ids in found.items():
            problems.append(
                Problem(
                    kind=kind,
                    case_id=case_ids[0] if len(case_ids) == 1 else None,
                    detail=f"{detail} in {len(case_ids)} case{'s' if len(case_ids) != 1 else ''} ({_names(case_ids)})",
                )
            )
    return problems


def _unknown_relevance(runs: list[CaseRun], baseline: dict[str, Any]) -> list[Problem]:
    out = []
    for run in runs:
        if run.observation is None or run.observation.corpus_size is not None:
            continue
        row = baseline.get("cases", {}).get(run.case.id)
        seen = run.observation.seen() | (Observation.from_dict(row["observation"]).seen() if row else set())
        never = [r for r in run.case.relevant if r not in seen]
        if never and len(never) == len(run.case.relevant):
            out.append(
                Problem(
                    "unknown_relevance",
                    run.case.id,
                    f"no stage ever saw {_names(never)} (baseline or now) and the corpus size is not "
                    "recorded: whether these documents exist in the index cannot be told",
                    run.trace_id,
                )
            )
    return out


# --- per case --------------------------------------------------------------------------------------
def survival_rows(case_relevant: tuple[str, ...], obs: Observation) -> list[StageSurvival]:
    rel = set(case_relevant)
    rows = []
    held_before: set[str] | None = None
    for s in obs.stages:
        out = set(s.ids)
        reasons = {e.id: e.reason for e in s.excluded}
        kept = tuple(r for r in case_relevant if r in out)
        if s.kind == "retrieve":
            lost: tuple[tuple[str, str | None], ...] = ()
        else:
            before = held_before if held_before is not None else set()
            lost = tuple((r, reasons.get(r)) for r in case_relevant if r not in out and (r in reasons or r in before))
        rows.append(
            StageSurvival(
                index=s.index,
                kind=s.kind,
                component=s.component,
                k=len(s.ids),
                relevant_kept=kept,
                relevant_lost=lost,
                status=s.label_status(),
                key=s.key,
            )
        )
        held_before = (held_before or set()) | (out & rel) if s.kind == "retrieve" else out & rel
    return rows


def _removed_by(ident: str, obs: Observation) -> tuple[str | None, str | None]:
    for s in obs.stages:
        for e in s.excluded:
            if e.id == ident:
                return s.key, e.reason
    held = [s for s in obs.stages if ident in s.ids]
    if held:
        after = [s for s in obs.stages if s.index > held[-1].index]
        return (after[0].key if after else None), None
    return None, None


def movement(obs: Observation, top: list[str] | None) -> Movement:
    if top is None or obs.in_context is None:
        return Movement(rbo=None)
    now = list(obs.in_context)
    left = tuple((i, *_removed_by(i, obs)) for i in top if i not in now)
    return Movement(rbo=round(m.rbo(now, top), 6), entered=tuple(i for i in now if i not in top), left=left)


def _diff_text(was: Observation, now: Observation) -> str | None:
    from rich.console import Console

    from ragtrail.inspect import diff, render

    d = diff.diff(as_manifest(was), as_manifest(now))
    if d["same_evidence"]:
        return None
    buf = io.StringIO()
    render.diff(Console(file=buf, width=120, color_system=None, force_terminal=False, highlight=False), d, limit=50)
    return buf.getvalue()


# --- checks ----------------------------------------------------------------------------------------
def metric_order(rows: dict[str, Any], stages: list[str]) -> list[str]:
    """Metrics in pipeline order (recall, each stage's survival, context, citations, refusal, movement):
    the order the evidence flows, so the first failed survival is the stage that lost it."""
    rank = {m.RECALL: 0, **{m.survival_metric(k): 1 + i for i, k in enumerate(stages)}}
    tail = {m.IN_CONTEXT: 1000, m.CITED: 1001, m.REFUSAL: 1002, m.RBO: 1003}
    return sorted(rows, key=lambda name: (rank.get(name, tail.get(name, 999)), name))


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _stage_loss(results: list[CaseResult], stage_key: str) -> tuple[int, Counter[str]]:
    lost = 0
    reasons: Counter[str] = Counter()
    for r in results:
        for s in r.stages:
            if s.key == stage_key:
                for _, reason in s.relevant_lost:
                    lost += 1
                    reasons[reason or "no reason recorded"] += 1
    return lost, reasons


def _degraded_upstream(runs: list[CaseRun], stage_key: str) -> list[str]:
    counts: Counter[str] = Counter()
    for run in runs:
        if run.observation is None:
            continue
        target = run.observation.stage(stage_key)
        for s in run.observation.stages:
            if target is not None and s.index >= target.index:
                break
            if s.status not in (None, "ok", "empty"):
                counts[f"{s.key} {s.label_status()}"] += 1
    return [f"{what} in {n} case{'s' if n != 1 else ''}" for what, n in counts.most_common(2)]


@dataclass
class _Checking:
    """What every check of one gate run reads: the baseline, the run's values, the stages that ran, the cases."""

    baseline: dict[str, Any]
    values: dict[tuple[str, str], m.SliceValue]
    present: set[str]
    results: list[CaseResult]


@dataclass
class _Slice:
    """One slice's cases and frozen rows, and the first stage where it lost relevant ids (named once, then pointed at)."""

    name: str
    rows: dict[str, Any]
    results: list[CaseResult]
    runs: list[CaseRun]
    first_loss: str | None = None


def _stage_warnings(good: list[CaseRun], baseline: dict[str, Any], present: set[str]) -> list[str]:
    warnings: list[str] = []
    for key in baseline.get("stages", []):
        if good and key not in present:
            warnings.append(f"stage {key} is in the baseline but did not run now")
    for key in sorted(present - set(baseline.get("stages", []))):
        warnings.append(f"stage {key} is new since the baseline (no floor for it)")
    return warnings


def _checks(
    evalset: EvalSet, good: list[CaseRun], results: list[CaseResult], baseline: dict[str, Any], values: dict[tuple[str, str], m.SliceValue]
) -> tuple[list[Check], list[str]]:
    present = {s.key for r in good if r.observation for s in r.observation.stages}
    warnings = _stage_warnings(good, baseline, present)
    by_slice: dict[str, list[CaseResult]] = {}
    for r in results:
        if r.problems:
            continue
        for s in m.slices_of(r.case):
            by_slice.setdefault(s, []).append(r)
    ctx = _Checking(baseline, values, present, results)
    checks: list[Check] = []
    for slice_, rows in baseline["thresholds"].items():
        sl = _Slice(slice_, rows, by_slice.get(slice_, []), [g for g in good if slice_ in m.slices_of(g.case)])
        checks.extend(_check(ctx, sl, metric) for metric in metric_order(rows, baseline.get("stages", [])))
    return checks, warnings


def _check(ctx: _Checking, sl: _Slice, metric: str) -> Check:
    """One slice's metric against its threshold, and what a regression lost and where."""
    row = sl.rows[metric]
    got = ctx.values.get((sl.name, metric))
    value, n = (got.value, got.n) if got else (None, 0)
    thr, mean, stage = row["threshold"], row["mean"], row.get("stage")
    ceiling = row["direction"] == "ceiling"
    if value is None:
        passed = stage is not None and stage not in ctx.present  # a stage gone is a warning, not a measure
        kinds = sorted({p.kind for r in ctx.results if sl.name in m.slices_of(r.case) for p in r.problems})
        message = (
            "stage did not run now"
            if passed
            else "not measured: "
            + (f"every case of the slice has a problem ({', '.join(kinds)})" if kinds else "no case of the slice could be measured")
        )
    else:
        passed = value <= thr + _EPS if ceiling else value >= thr - _EPS
        message = ""
    if not passed and value is not None:
        verb = "rose to" if ceiling else "fell to"
        message = f"{metric} {verb} {_fmt(value)} ({'ceiling' if ceiling else 'floor'} {_fmt(thr)}, baseline {_fmt(mean)})"
        message += _regression(ctx, sl, metric, stage)
    return Check(
        slice=sl.name,
        metric=metric,
        value=None if value is None else round(value, 6),
        threshold=thr,
        baseline_mean=mean,
        n=n,
        passed=passed,
        stage=stage,
        message=message,
        warning=row.get("warning"),
    )


def _regression(ctx: _Checking, sl: _Slice, metric: str, stage: str | None) -> str:
    """What a failed check adds to its message: where relevant ids were lost, or which cases moved."""
    if stage is not None:
        return _stage_regression(ctx, sl, stage)
    if metric in (m.IN_CONTEXT, m.CITED) and sl.first_loss:
        return f"; lost at {sl.first_loss}"
    if metric == m.RECALL:
        sl.first_loss = "retrieval"
        missed = []
        for run in sl.runs:
            frozen = ctx.baseline.get("cases", {}).get(run.case.id)
            if frozen is None or run.observation is None:
                continue
            before = set(frozen["observation"]["retrieved"]) & set(run.case.relevant)
            if before - set(run.observation.retrieved):
                missed.append(run.case.id)
        if missed:
            return (
                f"; relevant ids retrieved in the baseline and not now in {len(missed)} "
                f"case{'s' if len(missed) != 1 else ''} ({_names(sorted(missed))})"
            )
    elif metric == m.RBO:
        moved = sorted((r.movement.rbo, r.case.id) for r in sl.results if r.movement and r.movement.rbo is not None and r.movement.rbo < 1)
        if moved:
            return f"; moved most: {_names([c for _, c in moved])}"
    return ""


def _stage_regression(ctx: _Checking, sl: _Slice, stage: str) -> str:
    """A stage's survival fell: the relevant ids lost there and why, or the stage upstream that lost them."""
    message = ""
    lost, reasons = _stage_loss(sl.results, stage)
    if lost:
        why = ", ".join(f"{reason} ×{k}" for reason, k in reasons.most_common(3))
        message += f"; relevant ids lost at {stage}: {lost} ({why})"
        sl.first_loss = sl.first_loss or stage
    elif sl.first_loss:
        message += f"; lost upstream at {sl.first_loss}"
    recall = ctx.values.get((sl.name, m.RECALL))
    base_recall = sl.rows.get(m.RECALL, {}).get("mean")
    if recall and recall.value is not None and base_recall is not None and recall.value > base_recall + _EPS:
        message += f"; recall@retrieve rose to {_fmt(recall.value)} (baseline {_fmt(base_recall)})"
    degraded = _degraded_upstream(sl.runs, stage)
    if degraded:
        message += "; upstream: " + "; ".join(degraded)
    return message


# --- the decision ----------------------------------------------------------------------------------
def _set_mismatch(evalset: EvalSet, baseline: dict[str, Any]) -> list[Problem]:
    """A baseline frozen from another eval set compares nothing: one problem saying so."""
    if baseline["set"]["digest"] == evalset.digest:
        return []
    return [
        Problem(
            "baseline_mismatch",
            None,
            f"the baseline was frozen from another eval set (digest {baseline['set']['digest'][:12]}…, "
            f"this set {evalset.digest[:12]}…): re-freeze it with `ragtrail gate baseline`",
        )
    ]


def evaluate(
    evalset: EvalSet,
    runs: list[CaseRun],
    baseline: dict[str, Any],
    *,
    pipeline: str | None = None,
    baseline_path: str | None = None,
    started_at: str | None = None,
    duration_s: float | None = None,
) -> GateReport:
    """The report of one gate run against its baseline."""
    problems: list[Problem] = [p for r in runs for p in r.problems]
    problems.extend(_set_mismatch(evalset, baseline))
    clean = [r for r in runs if not r.problems and r.observation is not None]
    problems.extend(identity_problems(clean, baseline))
    problems.extend(_unknown_relevance(clean, baseline))
    bad = {p.case_id for p in problems if p.case_id is not None}
    cases_base = baseline.get("cases", {})
    results: list[CaseResult] = []
    rows: list[dict[str, float | None]] = []
    measured: list[Any] = []
    for run in runs:
        obs = run.observation
        result = CaseResult(case=run.case, trace_id=run.trace_id, problems=[p for p in problems if p.case_id == run.case.id])
        if obs is not None:
            top = cases_base.get(run.case.id, {}).get("top")
            result.stages = survival_rows(run.case.relevant, obs)
            result.in_context, result.cited, result.refused = tuple(obs.in_context or ()), tuple(obs.cited), obs.refused
            result.movement = movement(obs, top)
            was = cases_base.get(run.case.id, {}).get("observation")
            if was is not None and (result.movement.rbo is None or result.movement.rbo < 1 or any(s.relevant_lost for s in result.stages)):
                result.diff_text = _diff_text(Observation.from_dict(was), obs)
            if run.case.id not in bad and not run.problems:
                rows.append(m.case_values(run.case, obs, top))
                measured.append(run.case)
        results.append(result)
    values = m.aggregate(measured, rows)
    checks, warnings = _checks(evalset, [r for r in clean if r.case.id not in bad], results, baseline, values)
    for slice_, per_metric in baseline["thresholds"].items():
        warning = next((row["warning"] for row in per_metric.values() if row.get("warning")), None)
        if warning:
            warnings.append(f"{slice_}: {warning}")
    sampled = sampling_warning(runs)
    warnings += [sampled] if sampled else []
    return GateReport(
        verdict=decide(checks, problems),
        checks=checks,
        problems=problems,
        cases=results,
        warnings=warnings,
        set_path=evalset.path,
        baseline_path=baseline_path,
        pipeline=pipeline,
        started_at=started_at or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        duration_s=duration_s,
    )


__all__ = ["evaluate", "identity_problems", "movement", "survival_rows"]
