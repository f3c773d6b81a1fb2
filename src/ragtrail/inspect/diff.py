"""Diff two manifests stage by stage: is it the evidence, or the model?

Same evidence at every stage and a different answer means the model (or its nondeterminism);
different evidence means retrieval, and the first stage where it differs is where to look. Stages
are matched by kind and component (the n-th ``rerank my_app.rerank`` of A with the n-th of B);
candidates by id, never by text similarity.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ragtrail.contract import semconv as sc

from .manifest_model import Manifest, QueryHop, Stage

# stages downstream of the evidence: what the model did with it, not what it was given
_MODEL_KINDS = {sc.KIND_GENERATE, sc.KIND_CITE}


def _key_stages(manifest: Manifest) -> list[tuple[tuple[str, str, int], Stage]]:
    seen: Counter[tuple[str, str]] = Counter()
    out = []
    for stage in manifest.stages:
        base = (stage.kind, stage.component)
        out.append(((*base, seen[base]), stage))
        seen[base] += 1
    return out


def _query_sig(stage: Stage | None) -> tuple[Any, ...]:
    """The query a stage ran with and the queries it produced (a transform's output is its evidence)."""
    if stage is None:
        return None, ()
    q = stage.query
    own = None if not q else (q.sha256 or q.text, q.hop)
    made = tuple((v.sha256 or v.text, v.hop, v.transform) for v in stage.query_variants)
    return own, made


def _candidate_changes(a: Stage | None, b: Stage | None) -> dict[str, Any]:
    """Added, removed and moved candidates (with rank deltas), and those whose content changed."""
    ca = {c.id: c for c in (a.candidates if a else [])}
    cb = {c.id: c for c in (b.candidates if b else [])}
    moved = []
    for ident, c in ca.items():
        other = cb.get(ident)
        if other is not None and other.rank != c.rank:
            ra, rb = c.rank, other.rank
            moved.append(
                {
                    "id": ident,
                    "rank_a": ra,
                    "rank_b": rb,
                    "delta": (rb - ra) if isinstance(ra, int) and isinstance(rb, int) else None,
                    "score_a": c.score,
                    "score_b": other.score,
                }
            )
    return {
        "added": [{"id": i, "rank": c.rank, "score": c.score} for i, c in cb.items() if i not in ca],
        "removed": [{"id": i, "rank": c.rank, "score": c.score} for i, c in ca.items() if i not in cb],
        "moved": moved,
        "content_changed": [
            {"id": ident, "sha256_a": c.sha256, "sha256_b": cb[ident].sha256, "rule_a": c.transform_rule, "rule_b": cb[ident].transform_rule}
            for ident, c in ca.items()
            if ident in cb and c.sha256 != cb[ident].sha256
        ],
    }


def _exclusion_changes(a: Stage | None, b: Stage | None) -> dict[str, Any]:
    ea = {e.id: e for e in (a.excluded if a else [])}
    eb = {e.id: e for e in (b.excluded if b else [])}
    return {
        "exclusions_new": [{"id": i, "reason": e.reason, "detail": e.detail} for i, e in eb.items() if i not in ea],
        "exclusions_gone": [{"id": i, "reason": e.reason, "detail": e.detail} for i, e in ea.items() if i not in eb],
        "exclusions_changed": [
            {"id": i, "reason_a": e.reason, "reason_b": eb[i].reason, "detail_a": e.detail, "detail_b": eb[i].detail}
            for i, e in ea.items()
            if i in eb and (e.reason, e.detail) != (eb[i].reason, eb[i].detail)
        ],
    }


def stage_diff(a: Stage | None, b: Stage | None) -> dict[str, Any]:
    """Added, removed and moved candidates (with rank deltas), exclusion changes, query change."""
    base = a or b
    result: dict[str, Any] = {
        "kind": base.kind if base else None,
        "component": base.component if base else None,
        "only_in": None if (a and b) else ("A" if a else "B"),
    }
    result.update(_candidate_changes(a, b))
    result.update(_exclusion_changes(a, b))
    if a and b and _status(a) != _status(b):
        result["status_changed"] = {"a": _status_text(a), "b": _status_text(b)}
    result["query_changed"] = bool(a and b and _query_sig(a) != _query_sig(b))
    if result["query_changed"]:
        result["query_a"] = _query_text(a)  # both present: query_changed says so
        result["query_b"] = _query_text(b)
    result["same"] = not (
        result["only_in"]
        or result["added"]
        or result["removed"]
        or result["moved"]
        or result["content_changed"]
        or result["exclusions_new"]
        or result["exclusions_gone"]
        or result["exclusions_changed"]
        or result["query_changed"]
    )
    return result


def _status(stage: Stage) -> tuple[Any, Any, Any]:
    return stage.status, stage.failure_class, stage.fallback


def _status_text(stage: Stage) -> str:
    return status_text(*_status(stage))


def status_text(status: Any, failure: Any, fallback: Any) -> str:
    """``ok``, or ``degraded (parse_error, fallback input_order)``: how a stage's status is said everywhere."""
    extra = [x for x in (failure, f"fallback {fallback}" if fallback else None) if x]
    return f"{status or 'unknown'} ({', '.join(extra)})" if extra else str(status or "unknown")


def _under_fuse(
    first: dict[str, Any], stages: list[dict[str, Any]], span_ids: dict[int, tuple[Any, Any]], parents: dict[int, tuple[Any, Any]]
) -> dict[str, Any] | None:
    """The first differing stage whose span is a child of the fuse ``first`` (the retriever underneath)."""
    fuse_ids = span_ids[id(first)]
    for s in stages:
        if s is first or s["same"] or s["kind"] in _MODEL_KINDS:
            continue
        pa, pb = parents[id(s)]
        if (pa is not None and pa == fuse_ids[0]) or (pb is not None and pb == fuse_ids[1]):
            return s
    return None


def _answer_verdict(a: Manifest, b: Manifest) -> str | None:
    sa, sb = a.answer.sha256 if a.answer else None, b.answer.sha256 if b.answer else None
    if not sa or not sb:
        return None
    return "same answer" if sa == sb else "different answer"


def _query_text(stage: Stage | None) -> str | None:
    if stage is None:
        return None
    variants = [v.text for v in stage.query_variants if v.text is not None]
    if variants:
        return " | ".join(variants)
    return stage.query.text if stage.query else None


def _hop_sig(h: QueryHop | None) -> tuple[Any, ...] | None:
    return None if h is None else (h.sha256 or h.text, h.transform, h.parent_hop)


def _hop_diff(a: Manifest, b: Manifest) -> list[dict[str, Any]]:
    ha = {h.hop: h for h in a.query_hops}
    hb = {h.hop: h for h in b.query_hops}
    out = []
    for hop in sorted(set(ha) | set(hb), key=lambda h: (h is None, h)):
        x, y = ha.get(hop), hb.get(hop)
        if _hop_sig(x) != _hop_sig(y):
            out.append(
                {
                    "hop": hop,
                    "a": None if x is None else {"transform": x.transform, "text": x.text},
                    "b": None if y is None else {"transform": y.transform, "text": y.text},
                }
            )
    return out


def _stage_diffs(a: Manifest, b: Manifest) -> tuple[list[dict[str, Any]], dict[int, tuple[Any, Any]], dict[int, tuple[Any, Any]]]:
    """Every stage of A against its match in B, then B's unmatched ones; with the span ids and parent
    span ids of each pair (by the diff row's ``id``), to find what sits under a fuse."""
    ka, kb = _key_stages(a), _key_stages(b)
    index_b = {k: s for k, s in kb}
    keys_a = {k for k, _ in ka}
    stages: list[dict[str, Any]] = []
    span_ids: dict[int, tuple[Any, Any]] = {}
    parents: dict[int, tuple[Any, Any]] = {}
    for key, stage in ka:
        other = index_b.get(key)
        stages.append(stage_diff(stage, other))
        span_ids[id(stages[-1])] = (stage.span_id, other.span_id if other else None)
        parents[id(stages[-1])] = (stage.parent_span_id, other.parent_span_id if other else None)
    for key, stage in kb:
        if key not in keys_a:
            stages.append(stage_diff(None, stage))
            span_ids[id(stages[-1])] = (None, stage.span_id)
            parents[id(stages[-1])] = (None, stage.parent_span_id)
    return stages, span_ids, parents


def _differs(first: dict[str, Any], fuse: dict[str, Any] | None, answer: str | None) -> str:
    """The verdict when the evidence differs: the first stage that differs and what differs there."""
    what = []
    if first["query_changed"]:
        what.append("query")
    if first["only_in"]:
        what.append(f"stage only in {first['only_in']}")
    if first["added"] or first["removed"]:
        what.append(f"+{len(first['added'])} -{len(first['removed'])} candidates")
    if first["moved"]:
        what.append(f"{len(first['moved'])} moved")
    if first["content_changed"]:
        what.append(f"{len(first['content_changed'])} with other content")
    if first["exclusions_new"] or first["exclusions_gone"] or first["exclusions_changed"]:
        what.append("exclusions")
    verdict = f"evidence first differs at {first['kind']} ({first['component']}): {', '.join(what)}"
    if fuse is not None:
        verdict += f", underneath fuse ({fuse['component']})"
    if answer:
        verdict += f"; {answer}"
    return verdict


def _same(answer: str | None, cited_same: bool) -> str:
    """The verdict when the evidence is the same at every stage."""
    if answer == "different answer":
        verdict = "same evidence, different answer: look at the model"
    elif answer == "same answer":
        verdict = "same evidence, same answer"
    else:
        verdict = "same evidence at every stage: look at the model"
    return verdict if cited_same else verdict + " (it cited differently)"


def diff(a: Manifest, b: Manifest) -> dict[str, Any]:
    """The whole comparison and its one-line verdict."""
    stages, span_ids, parents = _stage_diffs(a, b)
    first = next((s for s in stages if not s["same"] and s["kind"] not in _MODEL_KINDS), None)
    fuse = None
    if first is not None and first["kind"] == sc.KIND_FUSE:
        underneath = _under_fuse(first, stages, span_ids, parents)
        if underneath is not None:
            fuse, first = first, underneath
    status_changes = [
        f"{s['kind']} {s['component']}: {s['status_changed']['a']} → {s['status_changed']['b']}" for s in stages if s.get("status_changed")
    ]
    answer = _answer_verdict(a, b)
    hops = _hop_diff(a, b)
    verdict = _same(answer, list(a.cited) == list(b.cited)) if first is None else _differs(first, fuse, answer)
    if status_changes:
        verdict = "; ".join(status_changes) + "; " + verdict
    first_difference = None if first is None else {"kind": first["kind"], "component": first["component"]}
    if first_difference is not None and fuse is not None:
        first_difference["under"] = {"kind": fuse["kind"], "component": fuse["component"]}
    return {
        "a": a.trace_id,
        "b": b.trace_id,
        "same_evidence": first is None,
        "verdict": verdict,
        "first_difference": first_difference,
        "status_changes": status_changes,
        "answer": answer,
        "query_hops": hops,
        "cited_a": a.cited,
        "cited_b": b.cited,
        "stages": stages,
    }
