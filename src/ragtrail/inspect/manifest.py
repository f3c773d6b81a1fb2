"""Rebuild the retrieval manifest from a normalized trace (what it reads: docs/semconv.md §1-5).

The manifest answers, from the trace alone: which query hit the index at each hop, what every stage
took in and handed on, what it dropped and why, what the answer cited, how much of the corpus that
evidence covers, whether the trail arrived as stamped, and how many requests this sampled trace
stands for. Only wire names (``ragtrail.contract.semconv``) and receipt arithmetic are used.
"""

from __future__ import annotations

import json
from typing import Any

from ragtrail.contract import receipts
from ragtrail.contract import semconv as sc

from .gc_pause import gc_paused
from .coverage import coverage, survival
from .model import Span, Trace
from .stages import StageView, Stitched, stitch
from .verify import Fidelity, check

_CANDIDATE_KEYS = frozenset({sc.CANDIDATE_ID, sc.CANDIDATE_RANK, sc.CANDIDATE_SCORE, sc.CANDIDATE_SCORE_KIND,
                             sc.CANDIDATE_HOP, sc.CANDIDATE_CONTENT_CHARS, sc.CANDIDATE_CONTENT_BYTES,
                             sc.CANDIDATE_TRANSFORM_DERIVED_FROM, sc.EXCLUSION_DETAIL})
_META = sc.CANDIDATE_META_PREFIX
_META_LEN = len(_META)


def _as_list(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, str) and value.startswith("["):
        try:
            parsed = json.loads(value)
            return parsed if isinstance(parsed, list) else [value]
        except (ValueError, RecursionError):  # not a JSON list (or absurdly nested): one value
            return [value]
    return [] if value is None else [value]


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def candidate_entry(attributes: dict[str, Any]) -> dict[str, Any]:
    """One candidate or exclusion event as a manifest row."""
    a = attributes
    score = a.get(sc.CANDIDATE_SCORE)
    rank = a.get(sc.CANDIDATE_RANK)
    hop = a.get(sc.CANDIDATE_HOP)
    row: dict[str, Any] = {
        "id": str(a.get(sc.CANDIDATE_ID, "")),
        "rank": rank if type(rank) is int else _int(rank),
        "score": score if isinstance(score, (int, float)) and not isinstance(score, bool) else None,
        "score_kind": a.get(sc.CANDIDATE_SCORE_KIND),
        "hop": hop if type(hop) is int else _int(hop),
    }
    meta = None
    for key, value in a.items():
        if key in _CANDIDATE_KEYS:
            continue
        if key.startswith(_META):
            if meta is None:
                meta = row["meta"] = {}
            meta[key[_META_LEN:]] = value
        elif key == sc.CANDIDATE_CONTENT_SHA256:
            row["sha256"] = value
            row["chars"] = a.get(sc.CANDIDATE_CONTENT_CHARS)
        elif key == sc.CANDIDATE_CONTENT_PREVIEW:
            row["preview"] = value
        elif key == sc.CANDIDATE_CONTENT_TEXT and "preview" not in row:
            row["preview"] = receipts.preview(str(value))
        elif key == sc.CANDIDATE_SCORE_RAW and row["score"] is None:
            row["score_raw"] = value
        elif key == sc.CANDIDATE_TRANSFORM_RULE:
            row["transform_rule"] = value
            row["derived_from"] = a.get(sc.CANDIDATE_TRANSFORM_DERIVED_FROM)
        elif key == sc.EXCLUSION_REASON:
            row["reason"] = value
            row["detail"] = a.get(sc.EXCLUSION_DETAIL)
    return row


def _hop(attributes: dict[str, Any]) -> dict[str, Any]:
    return {"hop": _int(attributes.get(sc.QUERY_HOP)), "parent_hop": _int(attributes.get(sc.QUERY_PARENT_HOP)),
            "transform": attributes.get(sc.QUERY_TRANSFORM, sc.TRANSFORM_NONE),
            "text": attributes.get(sc.QUERY_TEXT), "sha256": attributes.get(sc.QUERY_SHA256),
            "chars": attributes.get(sc.QUERY_CHARS)}


def stage_entry(view: StageView) -> dict[str, Any]:
    """A stage as the manifest shows it: counts, knobs, the query it saw, candidates, exclusions."""
    a = view.attributes
    candidates, excluded, variants = [], [], []
    for _, event in view.events():
        if event.name == sc.EVENT_CANDIDATE:
            candidates.append(candidate_entry(event.attributes))
        elif event.name == sc.EVENT_EXCLUSION:
            excluded.append(candidate_entry(event.attributes))
        else:
            variants.append(_hop(event.attributes))
    knobs = {name: a[key] for name, key in (("top_k", sc.STAGE_TOP_K), ("threshold", sc.STAGE_THRESHOLD),
                                             ("budget_limit", sc.STAGE_BUDGET_LIMIT),
                                             ("budget_used", sc.STAGE_BUDGET_USED),
                                             ("budget_unit", sc.STAGE_BUDGET_UNIT)) if key in a}
    n_in, n_out, n_ex = _int(a.get(sc.CANDIDATES_IN)), _int(a.get(sc.CANDIDATES_OUT)), _int(a.get(sc.CANDIDATES_EXCLUDED))
    return {
        "span_id": view.span.span_id,
        "parent_span_id": view.span.parent_span_id,
        "kind": view.kind,
        "component": view.component,
        "status": a.get(sc.STAGE_STATUS),
        "failure_class": a.get(sc.STAGE_FAILURE_CLASS),
        "fallback": a.get(sc.STAGE_FALLBACK),
        "in": n_in if n_in is not None else len(candidates) + len(excluded),
        "out": n_out if n_out is not None else len(candidates),
        "excluded_count": n_ex if n_ex is not None else len(excluded),
        "knobs": knobs,
        "query": _hop(a) if sc.QUERY_HOP in a else None,
        "embedding_hops": [h for h in (_int(x) for x in _as_list(a.get(sc.QUERY_EMBEDDING_HOPS))) if h is not None],
        "query_variants": variants,
        "candidates": candidates,
        "excluded": excluded,
        "findings": [str(f) for f in _as_list(a.get(sc.STAGE_FINDINGS))],
        "filter": a.get(sc.STAGE_FILTER),
        "collection": a.get(sc.STAGE_COLLECTION),
        "model": a.get(sc.STAGE_MODEL),
        # the span's error status: "<Type>: <message>" when the producer let the message leave
        "error": view.span.status_message if view.span.status_code == "ERROR" else None,
        "start_ns": view.span.start_ns,
        "duration_ms": round((view.span.end_ns - view.span.start_ns) / 1e6, 3),
    }


def query_hops(stages: list[dict[str, Any]], pipeline: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every hop once, in hop order, with the stages that ran on it (``used_by``) and produced it."""
    hops: dict[int, dict[str, Any]] = {}

    def add(entry: dict[str, Any] | None, used_by: str | None, produced_by: str | None) -> None:
        if not entry or entry.get("hop") is None:
            return
        hop = hops.setdefault(entry["hop"], {**entry, "used_by": [], "produced_by": None})
        for key in ("text", "sha256", "parent_hop", "chars"):
            if hop.get(key) is None and entry.get(key) is not None:
                hop[key] = entry[key]
        if hop.get("transform") in (None, sc.TRANSFORM_NONE) and entry.get("transform") not in (None, sc.TRANSFORM_NONE):
            hop["transform"] = entry["transform"]
        if used_by and used_by not in hop["used_by"]:
            hop["used_by"].append(used_by)
        if produced_by and not hop["produced_by"]:
            hop["produced_by"] = produced_by

    if pipeline:
        add(pipeline.get("query"), None, None)
    for stage in stages:
        label = f"{stage['kind']} {stage['component']}"
        add(stage["query"], label, None)
        for variant in stage["query_variants"]:
            add(variant, None, label)
        # hops embedded together (HyDE with the original): every one of them reached the index
        for number in stage.get("embedding_hops") or ():
            add({"hop": number}, label, None)
    for hop in hops.values():
        # only a retrieve stage reads an index: a fuse stage merges what its inner retrievals
        # (on their own hops) read, so a hop used only by a fuse never hit the index itself
        hop["hit_index"] = any(u.startswith(sc.KIND_RETRIEVE + " ") for u in hop["used_by"])
    return [hops[k] for k in sorted(hops)]


def answer_entry(attributes: dict[str, Any]) -> dict[str, Any] | None:
    """The answer receipt the app stamped on the pipeline span (``None`` when it said nothing)."""
    if not any(k.startswith(sc.ANSWER_RECEIPT_PREFIX + ".") for k in attributes):
        return None
    refused = attributes.get(sc.ANSWER_REFUSED)
    return {"sha256": attributes.get(sc.ANSWER_SHA256), "chars": _int(attributes.get(sc.ANSWER_CHARS)),
            "refused": refused if isinstance(refused, bool) else None, "claim": attributes.get(sc.ANSWER_CLAIM),
            "preview": attributes.get(sc.ANSWER_PREVIEW) or (receipts.preview(str(attributes[sc.ANSWER_TEXT]))
                                                             if sc.ANSWER_TEXT in attributes else None)}


def _sampling(trace: Trace, stitched: Stitched) -> dict[str, Any]:
    candidates: list[Span] = [v.span for v in stitched.pipelines] + sorted(
        (s for s in trace.spans if not s.parent_span_id), key=lambda s: s.start_ns) + list(trace.spans)
    for span in candidates:
        a = span.attributes
        p = a.get(sc.SAMPLING_PROBABILITY)
        if p is None and a.get(sc.JAEGER_SAMPLER_TYPE) == "probabilistic":
            p = a.get(sc.JAEGER_SAMPLER_PARAM)
        if isinstance(p, (int, float)) and 0 < p <= 1:
            adjusted = a.get(sc.SAMPLING_ADJUSTED_COUNT)
            if isinstance(adjusted, bool) or not isinstance(adjusted, (int, float)) or not adjusted > 0:
                adjusted = 1 / p
            return {"probability": p, "adjusted_count": adjusted, "source": "span attributes",
                    "statement": f"sampled at p={p:g}: this trace stands for {_requests(adjusted)}"}
    for span in candidates:
        p = _threshold_probability(span.trace_state)
        if p is not None:
            return {"probability": p, "adjusted_count": 1 / p, "source": "tracestate ot=th",
                    "statement": f"sampled at p={p:g} (tracestate): this trace stands for {_requests(1 / p)}"}
    return {"probability": None, "adjusted_count": None, "source": None,
            "statement": "no sampling recorded: kept unsampled, or by a sampler that does not say; "
                         "this trace stands for itself only as far as anyone can tell"}


def _requests(n: float) -> str:
    return f"{n:g} request" + ("" if n == 1 else "s")


def _threshold_probability(trace_state: str | None) -> float | None:
    """OTel probability sampling: ``ot=th:<hex>`` (56-bit, trailing zeros stripped) -> p."""
    if not trace_state:
        return None
    for member in trace_state.split(","):
        key, _, value = member.strip().partition("=")
        if key != "ot":
            continue
        for part in value.split(";"):
            name, _, th = part.partition(":")
            if name == "th":
                try:
                    threshold = int(th.ljust(14, "0")[:14], 16) if th else 0
                except ValueError:
                    return None
                return (2**56 - threshold) / 2**56
    return None


@gc_paused()
def build(trace: Trace, key: bytes | None = None) -> dict[str, Any]:
    """The manifest, from the stage spans, hops, events, receipts and sampling of docs/semconv.md
    §1-5 (plus the detail the terminal and HTML views need); ``key`` checks
    keyed stage receipts."""
    stitched = stitch(trace)
    fidelity: Fidelity = check(trace, stitched, key)
    stages = [stage_entry(v) for v in stitched.stages]
    pipeline = stage_entry(stitched.pipelines[0]) if stitched.pipelines else None
    pa = stitched.pipelines[0].attributes if stitched.pipelines else {}

    cited: dict[str, None] = {}
    for view in [*stitched.pipelines, *stitched.stages]:
        for ident in _as_list(view.attributes.get(sc.CITED_IDS)):
            cited[str(ident)] = None
    for stage in stages:
        if stage["kind"] == sc.KIND_CITE:
            for c in stage["candidates"]:
                cited[c["id"]] = None

    retrieved: dict[str, dict[str, Any]] = {}
    for stage in stages:
        if stage["kind"] in (sc.KIND_RETRIEVE, sc.KIND_FUSE):
            for c in stage["candidates"]:
                if c["id"] not in retrieved:
                    retrieved[c["id"]] = {"id": c["id"], "score": c["score"], "hop": c["hop"],
                                          "stage": stage["kind"], "component": stage["component"]}
                    if "meta" in c:
                        retrieved[c["id"]]["meta"] = c["meta"]
    for row in retrieved.values():
        row["cited"] = row["id"] in cited

    excluded = [{"id": e["id"], "stage": s["kind"], "component": s["component"], "reason": e.get("reason"),
                 "detail": e.get("detail")} for s in stages for e in s["excluded"]]

    context_stages = [s for s in stages if s["kind"] in (sc.KIND_RERANK, sc.KIND_FILTER, sc.KIND_BUDGET)]
    in_context_ids = [c["id"] for c in context_stages[-1]["candidates"]] if context_stages else list(retrieved)
    if not pa:
        # no pipeline span: a retrieval root that wrote the run's coverage speaks for it
        pa = next((v.attributes for v in stitched.stages if v.span.parent_span_id is None
                   and sc.COVERAGE_RETRIEVED in v.attributes), {})
    corpus = _int(pa.get(sc.COVERAGE_CORPUS_SIZE))
    if corpus is None:
        stated = [_int(v.attributes.get(sc.COVERAGE_CORPUS_SIZE)) for v in stitched.stages]
        sizes = [s for s in stated if s is not None]
        corpus = max(sizes) if sizes else None
    n_retrieved = _int(pa.get(sc.COVERAGE_RETRIEVED))
    n_in_context = _int(pa.get(sc.COVERAGE_IN_CONTEXT))
    n_cited = _int(pa.get(sc.COVERAGE_CITED))
    claim = pa.get(sc.ANSWER_CLAIM)
    run_status = pa.get(sc.RUN_STATUS)
    approximate = pa.get(sc.COVERAGE_CORPUS_APPROXIMATE) is True or (
        sc.COVERAGE_CORPUS_SIZE not in pa
        and any(v.attributes.get(sc.COVERAGE_CORPUS_APPROXIMATE) is True for v in stitched.stages))
    cover = coverage(corpus,
                     n_retrieved if n_retrieved is not None else len(retrieved),
                     n_in_context if n_in_context is not None else len(in_context_ids),
                     n_cited if n_cited is not None else len(cited),
                     claim=claim if isinstance(claim, str) else None,
                     run_status=run_status if isinstance(run_status, str) else None,
                     approximate=approximate, stores=_int(pa.get(sc.COVERAGE_STORES)),
                     excluded=len(excluded))

    findings: list[str] = []
    for s in ([pipeline] if pipeline else []) + stages:
        label = f"{s['kind']} {s['component']}"
        if s["status"] in (sc.STATUS_DEGRADED, sc.STATUS_FAILED):
            extra = f", fallback {s['fallback']}" if s.get("fallback") else ""
            findings.append(f"{label}: {s['status']} ({s['failure_class']}{extra})")
        unexplained = [e["id"] for e in s["excluded"] if e.get("reason") == sc.REASON_UNEXPLAINED]
        if unexplained:
            findings.append(f"{label}: {len(unexplained)} candidates vanished unexplained ({', '.join(unexplained[:3])})")
        findings.extend(f"{label}: {f}" for f in s["findings"])

    return {
        "trace_id": trace.trace_id,
        "source": trace.source,
        "schema": pa.get(sc.SCHEMA, stitched.stages[0].attributes.get(sc.SCHEMA) if stitched.stages else None),
        "pipeline": {"component": pipeline["component"], "status": pipeline["status"],
                     "duration_ms": pipeline["duration_ms"]} if pipeline else None,
        "query_hops": query_hops(stages, pipeline),
        "stages": stages,
        "retrieved": list(retrieved.values()),
        "excluded": excluded,
        "cited": list(cited),
        "in_context": in_context_ids,
        "survival": survival(stages),
        "coverage": cover,
        "fidelity": fidelity.as_dict(),
        "findings": findings,
        "run_status": pa.get(sc.RUN_STATUS),
        "answer": answer_entry(pa),
        "sampling": _sampling(trace, stitched),
        "span_count": len(trace.spans),
    }


@gc_paused()
def fidelity_only(trace: Trace, key: bytes | None = None) -> dict[str, Any]:
    """What ``verify`` needs and nothing more (no candidate tables): the trace's fidelity and sizes."""
    stitched = stitch(trace)
    fidelity = check(trace, stitched, key)
    events = sum(len(v.events()) for v in [*stitched.pipelines, *stitched.stages])
    return {"trace_id": trace.trace_id, "source": trace.source, "fidelity": fidelity.as_dict(),
            "span_count": len(trace.spans), "events_checked": events}
