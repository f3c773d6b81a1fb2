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

# stages downstream of the evidence: what the model did with it, not what it was given
_MODEL_KINDS = {sc.KIND_GENERATE, sc.KIND_CITE}


def _key_stages(manifest: dict[str, Any]) -> list[tuple[tuple[str, str, int], dict[str, Any]]]:
    seen: Counter[tuple[str, str]] = Counter()
    out = []
    for stage in manifest["stages"]:
        base = (stage["kind"], stage["component"])
        out.append(((*base, seen[base]), stage))
        seen[base] += 1
    return out


def _query_sig(stage: dict[str, Any]) -> tuple[Any, ...]:
    """The query a stage ran with and the queries it produced (a transform's output is its evidence)."""
    q = stage.get("query")
    own = None if not q else (q.get("sha256") or q.get("text"), q.get("hop"))
    made = tuple((v.get("sha256") or v.get("text"), v.get("hop"), v.get("transform")) for v in stage.get("query_variants", ()))
    return own, made


def stage_diff(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any]:
    """Added, removed and moved candidates (with rank deltas), exclusion changes, query change."""
    base = a or b or {}
    result: dict[str, Any] = {"kind": base.get("kind"), "component": base.get("component"),
                              "only_in": None if (a and b) else ("A" if a else "B")}
    ca = {c["id"]: c for c in (a or {}).get("candidates", [])}
    cb = {c["id"]: c for c in (b or {}).get("candidates", [])}
    result["added"] = [{"id": i, "rank": c["rank"], "score": c["score"]} for i, c in cb.items() if i not in ca]
    result["removed"] = [{"id": i, "rank": c["rank"], "score": c["score"]} for i, c in ca.items() if i not in cb]
    moved = []
    for ident, c in ca.items():
        other = cb.get(ident)
        if other is not None and other["rank"] != c["rank"]:
            ra, rb = c["rank"], other["rank"]
            moved.append({"id": ident, "rank_a": ra, "rank_b": rb,
                          "delta": (rb - ra) if isinstance(ra, int) and isinstance(rb, int) else None,
                          "score_a": c["score"], "score_b": other["score"]})
    result["moved"] = moved
    result["content_changed"] = [
        {"id": ident, "sha256_a": c.get("sha256"), "sha256_b": cb[ident].get("sha256"),
         "rule_a": c.get("transform_rule"), "rule_b": cb[ident].get("transform_rule")}
        for ident, c in ca.items() if ident in cb and c.get("sha256") != cb[ident].get("sha256")]
    ea = {e["id"]: e for e in (a or {}).get("excluded", [])}
    eb = {e["id"]: e for e in (b or {}).get("excluded", [])}
    result["exclusions_new"] = [{"id": i, "reason": e.get("reason"), "detail": e.get("detail")}
                                for i, e in eb.items() if i not in ea]
    result["exclusions_gone"] = [{"id": i, "reason": e.get("reason"), "detail": e.get("detail")}
                                 for i, e in ea.items() if i not in eb]
    result["exclusions_changed"] = [
        {"id": i, "reason_a": e.get("reason"), "reason_b": eb[i].get("reason"),
         "detail_a": e.get("detail"), "detail_b": eb[i].get("detail")}
        for i, e in ea.items() if i in eb and (e.get("reason"), e.get("detail")) != (eb[i].get("reason"), eb[i].get("detail"))]
    if a and b and _status(a) != _status(b):
        result["status_changed"] = {"a": _status_text(a), "b": _status_text(b)}
    qa, qb = _query_sig(a or {}), _query_sig(b or {})
    result["query_changed"] = bool(a and b and qa != qb)
    if result["query_changed"]:
        result["query_a"] = _query_text(a or {})  # both present: query_changed says so
        result["query_b"] = _query_text(b or {})
    result["same"] = not (result["only_in"] or result["added"] or result["removed"] or result["moved"]
                          or result["content_changed"]
                          or result["exclusions_new"] or result["exclusions_gone"] or result["exclusions_changed"]
                          or result["query_changed"])
    return result


def _status(stage: dict[str, Any]) -> tuple[Any, Any, Any]:
    return stage.get("status"), stage.get("failure_class"), stage.get("fallback")


def _status_text(stage: dict[str, Any]) -> str:
    return status_text(*_status(stage))


def status_text(status: Any, failure: Any, fallback: Any) -> str:
    """``ok``, or ``degraded (parse_error, fallback input_order)``: how a stage's status is said everywhere."""
    extra = [x for x in (failure, f"fallback {fallback}" if fallback else None) if x]
    return f"{status or 'unknown'} ({', '.join(extra)})" if extra else str(status or "unknown")


def _under_fuse(first: dict[str, Any], stages: list[dict[str, Any]], span_ids: dict[int, tuple[Any, Any]],
                parents: dict[int, tuple[Any, Any]]) -> dict[str, Any] | None:
    """The first differing stage whose span is a child of the fuse ``first`` (the retriever underneath)."""
    fuse_ids = span_ids[id(first)]
    for s in stages:
        if s is first or s["same"] or s["kind"] in _MODEL_KINDS:
            continue
        pa, pb = parents[id(s)]
        if (pa is not None and pa == fuse_ids[0]) or (pb is not None and pb == fuse_ids[1]):
            return s
    return None


def _answer_verdict(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    sa, sb = (a.get("answer") or {}).get("sha256"), (b.get("answer") or {}).get("sha256")
    if not sa or not sb:
        return None
    return "same answer" if sa == sb else "different answer"


def _query_text(stage: dict[str, Any]) -> str | None:
    variants = [v.get("text") for v in stage.get("query_variants", ()) if v.get("text") is not None]
    if variants:
        return " | ".join(variants)
    return (stage.get("query") or {}).get("text")


def _hop_diff(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    ha = {h["hop"]: h for h in a["query_hops"]}
    hb = {h["hop"]: h for h in b["query_hops"]}
    out = []
    for hop in sorted(set(ha) | set(hb), key=lambda h: (h is None, h)):
        x, y = ha.get(hop), hb.get(hop)
        sig = lambda h: None if h is None else (h.get("sha256") or h.get("text"), h.get("transform"), h.get("parent_hop"))  # noqa: E731
        if sig(x) != sig(y):
            out.append({"hop": hop, "a": None if x is None else {"transform": x.get("transform"), "text": x.get("text")},
                        "b": None if y is None else {"transform": y.get("transform"), "text": y.get("text")}})
    return out


def diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The whole comparison and its one-line verdict."""
    ka, kb = _key_stages(a), _key_stages(b)
    index_b = {k: s for k, s in kb}
    keys_a = {k for k, _ in ka}
    stages: list[dict[str, Any]] = []
    span_ids: dict[int, tuple[Any, Any]] = {}
    parents: dict[int, tuple[Any, Any]] = {}
    for key, stage in ka:
        other = index_b.get(key)
        stages.append(stage_diff(stage, other))
        span_ids[id(stages[-1])] = (stage.get("span_id"), (other or {}).get("span_id"))
        parents[id(stages[-1])] = (stage.get("parent_span_id"), (other or {}).get("parent_span_id"))
    for key, stage in kb:
        if key not in keys_a:
            stages.append(stage_diff(None, stage))
            span_ids[id(stages[-1])] = (None, stage.get("span_id"))
            parents[id(stages[-1])] = (None, stage.get("parent_span_id"))
    first = next((s for s in stages if not s["same"] and s["kind"] not in _MODEL_KINDS), None)
    fuse = None
    if first is not None and first["kind"] == sc.KIND_FUSE:
        underneath = _under_fuse(first, stages, span_ids, parents)
        if underneath is not None:
            fuse, first = first, underneath
    status_changes = [f"{s['kind']} {s['component']}: {s['status_changed']['a']} → {s['status_changed']['b']}"
                      for s in stages if s.get("status_changed")]
    answer = _answer_verdict(a, b)
    hops = _hop_diff(a, b)
    cited_same = list(a["cited"]) == list(b["cited"])
    if first is None:
        if answer == "different answer":
            verdict = "same evidence, different answer: look at the model"
        elif answer == "same answer":
            verdict = "same evidence, same answer"
        else:
            verdict = "same evidence at every stage: look at the model"
        if not cited_same:
            verdict += " (it cited differently)"
    else:
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
    if status_changes:
        verdict = "; ".join(status_changes) + "; " + verdict
    first_difference = None if first is None else {"kind": first["kind"], "component": first["component"]}
    if first_difference is not None and fuse is not None:
        first_difference["under"] = {"kind": fuse["kind"], "component": fuse["component"]}
    return {"a": a["trace_id"], "b": b["trace_id"], "same_evidence": first is None, "verdict": verdict,
            "first_difference": first_difference, "status_changes": status_changes, "answer": answer,
            "query_hops": hops, "cited_a": a["cited"], "cited_b": b["cited"], "stages": stages}
