"""Freeze a baseline: the metrics of N repeated runs, their floors, and what was searched.

A baseline file is meant to be committed next to the eval set. It holds (JSON, sorted keys, stable
rounding, no trace ids, so re-freezing an unchanged pipeline changes nothing but ``created_at``):

* ``set``: the eval set's digest (a run against another set is inconclusive, never compared);
* ``thresholds``: per slice and metric, every run's value, the mean, the worst run, a bootstrap
  bound and the threshold a later run must meet;
* ``cases``: per case the evidence skeleton of the first run (each evidence stage's ids and
  exclusions, context, citations, refusal), the final top-k the movement metric compares with, and
  the identity of what was searched (corpus size and stores, the recorded content sha256 of the
  relevant documents, the retrieve components, resource ``*.version`` attributes).

How a threshold is set (the defaults below are part of the file, so a later reader sees the rule):
the floor sits just below the worst honest run and below the bootstrap's lower 5% bound of the
slice mean (2,000 resamples of the slice's cases, fixed seed: the same baseline gives the same
floor). Repeated runs catch a nondeterministic pipeline's run-to-run spread; the bootstrap gives a
deterministic pipeline the margin its case-to-case spread honestly allows. A slice whose cases all
passed perfectly in every run gets no margin: a deterministic pipeline cannot lose a relevant id by
chance. Rank-biased overlap gets a fixed tolerance on top (``rbo_tolerance``): a rebuilt index
legitimately reorders the tail, and a gate that fails on every reorder gets switched off. A slice of
fewer than ``min_slice`` cases is flagged: its floor is honest but coarse.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timezone
from pathlib import Path
from statistics import fmean
from typing import Any

from ragtrail.inspect.errors import MalformedInput, TraceNotFound

from . import metrics as m
from .evalset import EvalSet
from .model import ALL_SLICE, Problem
from .runner import CaseRun

FORMAT = "ragtrail-gate-baseline"
VERSION = 1
DEFAULTS: dict[str, Any] = {"bootstrap_resamples": 2000, "bootstrap_seed": 16, "quantile": 0.05, "rbo_tolerance": 0.15, "min_slice": 20}
_EPS = 1e-9


class BaselineRefused(Exception):
    """The runs had problems: a baseline frozen from evidence the gate cannot trust would be worthless."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(f"{len(problems)} problems in the baseline runs")
        self.problems = problems


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def _bootstrap(per_case: list[float], q: float, ceiling: bool, resamples: int, seed: int) -> float:
    """The ``q`` (or ``1 - q`` for a ceiling) quantile of the mean over cases resampled with replacement."""
    if len(set(per_case)) <= 1:
        return per_case[0]
    rng = random.Random(seed)
    n = len(per_case)
    means = sorted(fmean(rng.choices(per_case, k=n)) for _ in range(resamples))
    index = int((1 - q) * (resamples - 1)) if ceiling else int(q * (resamples - 1))
    return means[index]


def threshold(run_values: list[float], per_case: list[float], metric: str, defaults: dict[str, Any]) -> tuple[float, float]:
    """(bootstrap bound, threshold) for one slice's metric from its runs and its cases."""
    ceiling = metric in m.CEILINGS
    boot = _bootstrap(per_case, defaults["quantile"], ceiling, defaults["bootstrap_resamples"], defaults["bootstrap_seed"])
    if ceiling:
        return boot, max(max(run_values), boot)
    floor = min(min(run_values), boot)
    if metric == m.RBO:
        floor -= defaults["rbo_tolerance"]
    return boot, max(0.0, floor)


def _wanted(runs: list[list[CaseRun]]) -> tuple[list[str], list[str]]:
    """The evidence stages of the first run in order, and the metrics to freeze (survival per stage,
    citations and refusals only when some run recorded them)."""
    observed = [r.observation for run in runs for r in run if r.observation is not None]
    stage_order: list[str] = []
    for r in runs[0]:
        for s in r.observation.stages if r.observation else ():
            if s.key not in stage_order:
                stage_order.append(s.key)
    wanted = [m.RECALL, *(m.survival_metric(k) for k in stage_order if not k.startswith("retrieve ")), m.IN_CONTEXT]
    if any(o.cites for o in observed):
        wanted.append(m.CITED)
    if any(o.refused is not None for o in observed):
        wanted.append(m.REFUSAL)
    wanted.append(m.RBO)
    return stage_order, wanted


def _frozen(metric: str, run_values: list[float], per_case: list[float], defaults: dict[str, Any]) -> dict[str, Any]:
    """One slice's metric as the file keeps it: every run, mean, worst, bootstrap bound, threshold."""
    boot, thr = threshold(run_values, per_case, metric, defaults)
    n = len(per_case)
    return {
        "runs": [_r(v) for v in run_values],
        "mean": _r(fmean(run_values)),
        "worst": _r(max(run_values) if metric in m.CEILINGS else min(run_values)),
        "bootstrap": _r(boot),
        "threshold": _r(thr),
        "n": n,
        "direction": "ceiling" if metric in m.CEILINGS else "floor",
        "stage": m.stage_of(metric),
        "warning": (f"slice too small to be statistically boring (n={n} < {defaults['min_slice']})" if n < defaults["min_slice"] else None),
    }


def _thresholds(
    evalset: EvalSet,
    wanted: list[str],
    per_run: list[dict[tuple[str, str], m.SliceValue]],
    by_case: dict[str, list[dict[str, float | None]]],
    defaults: dict[str, Any],
) -> dict[str, dict[str, Any]]:
    """Per slice (and the whole set), per metric measured in some run: its frozen row."""
    thresholds: dict[str, dict[str, Any]] = {}
    for slice_ in [*evalset.slices(), ALL_SLICE]:
        members = [c for c in evalset.cases if slice_ in m.slices_of(c)]
        frozen: dict[str, Any] = {}
        for metric in wanted:
            run_values = [v for v in (agg[(slice_, metric)].value for agg in per_run if (slice_, metric) in agg) if v is not None]
            if not run_values:
                continue
            per_case = []
            for case in members:
                seen = [v for row in by_case[case.id] if (v := row.get(metric)) is not None]
                if seen:
                    per_case.append(fmean(seen))
            frozen[metric] = _frozen(metric, run_values, per_case, defaults)
        thresholds[slice_] = frozen
    return thresholds


def freeze(evalset: EvalSet, runs: list[list[CaseRun]], *, pipeline: str | None = None, defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """The baseline document of ``runs`` (one list of case runs per repetition, in the set's order)."""
    defaults = {**DEFAULTS, **(defaults or {})}
    problems = [p for run in runs for r in run for p in r.problems]
    if problems:
        raise BaselineRefused(problems)
    cases = evalset.cases
    first = runs[0]
    top = {r.case.id: list(r.observation.in_context) for r in first if r.observation is not None and r.observation.in_context is not None}
    per_run: list[dict[tuple[str, str], m.SliceValue]] = []
    per_case_rows: list[list[dict[str, float | None]]] = []
    for run in runs:
        measured = [r for r in run if r.observation is not None]
        values = [m.case_values(r.case, r.observation, top.get(r.case.id)) for r in measured if r.observation]
        per_case_rows.append(values)
        per_run.append(m.aggregate([r.case for r in measured], values))
    stage_order, wanted = _wanted(runs)
    by_case: dict[str, list[dict[str, float | None]]] = {c.id: [] for c in cases}
    for run, rows_ in zip(runs, per_case_rows, strict=False):
        for r, row in zip((r for r in run if r.observation is not None), rows_, strict=False):
            by_case[r.case.id].append(row)
    case_rows: dict[str, Any] = {}
    for r in first:
        if r.observation is None:
            continue
        obs = r.observation.to_dict()
        obs["trace_id"] = ""
        case_rows[r.case.id] = {"observation": obs, "top": top.get(r.case.id, [])}
    return {
        "format": FORMAT,
        "version": VERSION,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "pipeline": pipeline,
        "runs": len(runs),
        "defaults": defaults,
        "set": {
            "digest": evalset.digest,
            "path": evalset.path,
            "cases": len(cases),
            "slices": {s: sum(1 for c in cases if c.slice == s) for s in evalset.slices()},
        },
        "stages": stage_order,
        "thresholds": _thresholds(evalset, wanted, per_run, by_case, defaults),
        "cases": case_rows,
    }


def dumps(baseline: dict[str, Any]) -> str:
    """The committed form: sorted keys, two-space indent, a final newline."""
    return json.dumps(baseline, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def write(baseline: dict[str, Any], path: str | Path) -> Path:
    p = Path(path)
    p.write_text(dumps(baseline), encoding="utf-8")
    return p


def load(path: str | Path) -> dict[str, Any]:
    """A baseline file; another format or a newer version is refused by name."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TraceNotFound(f"no baseline at {p}", "freeze one with `ragtrail gate baseline ... -o FILE`") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedInput(f"{p} is not a JSON baseline ({str(exc).split(':')[0]})", "freeze one with `ragtrail gate baseline`") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise MalformedInput(f"{p} is not a ragtrail gate baseline", "freeze one with `ragtrail gate baseline`")
    if data.get("version") != VERSION:
        raise MalformedInput(
            f"{p} is baseline format version {data.get('version')!r}; this ragtrail reads {VERSION}", "re-freeze the baseline with this ragtrail"
        )
    return data


__all__ = ["BaselineRefused", "DEFAULTS", "FORMAT", "VERSION", "dumps", "freeze", "load", "threshold", "write"]
