"""Rebuild the retrieval manifest from a normalized trace (what it reads: docs/semconv.md §1-5).

The manifest answers, from the trace alone: which query hit the index at each hop, what every stage
took in and handed on, what it dropped and why, what the answer cited, how much of the corpus that
evidence covers, whether the trail arrived as stamped, and how many requests this sampled trace
stands for. Only wire names (``ragtrail.contract.semconv``) and receipt arithmetic are used.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ragtrail.contract import receipts
from ragtrail.contract import semconv as sc
from ragtrail.contract.columns import replaced_ids
from ragtrail.contract.run_status import roll_up

from .coverage import coverage, survival
from .gc_pause import gc_paused
from .manifest_model import (
    META,
    PREVIEW,
    REASON,
    SCORE_RAW,
    SHA256,
    TRANSFORM_RULE,
    Answer,
    Coverage,
    Excluded,
    FidelityReport,
    Hop,
    Manifest,
    PipelineSummary,
    QueryHop,
    Retrieved,
    Row,
    Sampling,
    Stage,
)
from .model import Span, Trace
from .stages import StageView, Stitched, stage_tree, stitch
from .verify import Fidelity, check
from .weight import trace_weight

_CANDIDATE_KEYS = frozenset(
    {
        sc.CANDIDATE_ID,
        sc.CANDIDATE_RANK,
        sc.CANDIDATE_SCORE,
        sc.CANDIDATE_SCORE_KIND,
        sc.CANDIDATE_HOP,
        sc.CANDIDATE_CONTENT_CHARS,
        sc.CANDIDATE_CONTENT_BYTES,
        sc.CANDIDATE_TRANSFORM_DERIVED_FROM,
        sc.EXCLUSION_DETAIL,
    }
)
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


def candidate_entry(attributes: dict[str, Any]) -> Row:
    """One candidate or exclusion event as a manifest row."""
    a = attributes
    score = a.get(sc.CANDIDATE_SCORE)
    rank = a.get(sc.CANDIDATE_RANK)
    hop = a.get(sc.CANDIDATE_HOP)
    row = Row(
        id=str(a.get(sc.CANDIDATE_ID, "")),
        rank=rank if type(rank) is int else _int(rank),
        score=score if isinstance(score, (int, float)) and not isinstance(score, bool) else None,
        score_kind=a.get(sc.CANDIDATE_SCORE_KIND),
        hop=hop if type(hop) is int else _int(hop),
    )
    keys: list[str] = []
    meta: dict[str, Any] | None = None
    for key, value in a.items():
        if key in _CANDIDATE_KEYS:
            continue
        if key.startswith(_META):
            if meta is None:
                meta = row.meta = {}
                keys.append(META)
            meta[key[_META_LEN:]] = value
        elif key == sc.CANDIDATE_CONTENT_SHA256:
            row.sha256, row.chars = value, a.get(sc.CANDIDATE_CONTENT_CHARS)
            keys.append(SHA256)
        elif key == sc.CANDIDATE_CONTENT_PREVIEW:
            if PREVIEW not in keys:
                keys.append(PREVIEW)
            row.preview = value
        elif key == sc.CANDIDATE_CONTENT_TEXT and PREVIEW not in keys:
            row.preview = receipts.preview(str(value))
            keys.append(PREVIEW)
        elif key == sc.CANDIDATE_SCORE_RAW and row.score is None:
            row.score_raw = value
            keys.append(SCORE_RAW)
        elif key == sc.CANDIDATE_TRANSFORM_RULE:
            row.transform_rule, row.derived_from = value, a.get(sc.CANDIDATE_TRANSFORM_DERIVED_FROM)
            keys.append(TRANSFORM_RULE)
        elif key == sc.EXCLUSION_REASON:
            row.reason, row.detail = value, a.get(sc.EXCLUSION_DETAIL)
            keys.append(REASON)
    row.keys = tuple(keys)
    return row


def _hop(attributes: dict[str, Any]) -> Hop:
    return Hop(
        hop=_int(attributes.get(sc.QUERY_HOP)),
        parent_hop=_int(attributes.get(sc.QUERY_PARENT_HOP)),
        transform=attributes.get(sc.QUERY_TRANSFORM, sc.TRANSFORM_NONE),
        text=attributes.get(sc.QUERY_TEXT),
        sha256=attributes.get(sc.QUERY_SHA256),
        chars=attributes.get(sc.QUERY_CHARS),
    )


_KNOBS = (
    ("top_k", sc.STAGE_TOP_K),
    ("threshold", sc.STAGE_THRESHOLD),
    ("budget_limit", sc.STAGE_BUDGET_LIMIT),
    ("budget_used", sc.STAGE_BUDGET_USED),
    ("budget_unit", sc.STAGE_BUDGET_UNIT),
    ("mmr_lambda", sc.STAGE_MMR_LAMBDA),
)


def stage_entry(view: StageView) -> Stage:
    """A stage as the manifest shows it: counts, knobs, the query it saw, candidates, exclusions."""
    a = view.attributes
    candidates: list[Row] = []
    excluded: list[Row] = []
    variants: list[Hop] = []
    for _, event in view.events():
        if event.name == sc.EVENT_CANDIDATE:
            candidates.append(candidate_entry(event.attributes))
        elif event.name == sc.EVENT_EXCLUSION:
            excluded.append(candidate_entry(event.attributes))
        else:
            variants.append(_hop(event.attributes))
    n_in, n_out, n_ex = _int(a.get(sc.CANDIDATES_IN)), _int(a.get(sc.CANDIDATES_OUT)), _int(a.get(sc.CANDIDATES_EXCLUDED))
    return Stage(
        span_id=view.span.span_id,
        parent_span_id=view.span.parent_span_id,
        kind=view.kind,
        component=view.component,
        status=a.get(sc.STAGE_STATUS),
        failure_class=a.get(sc.STAGE_FAILURE_CLASS),
        fallback=a.get(sc.STAGE_FALLBACK),
        n_in=n_in if n_in is not None else len(candidates) + len(excluded),
        n_out=n_out if n_out is not None else len(candidates),
        excluded_count=n_ex if n_ex is not None else len(excluded),
        knobs={name: a[key] for name, key in _KNOBS if key in a},
        query=_hop(a) if sc.QUERY_HOP in a else None,
        embedding_hops=[h for h in (_int(x) for x in _as_list(a.get(sc.QUERY_EMBEDDING_HOPS))) if h is not None],
        query_variants=variants,
        candidates=candidates,
        excluded=excluded,
        findings=[str(f) for f in _as_list(a.get(sc.STAGE_FINDINGS))],
        filter=a.get(sc.STAGE_FILTER),
        collection=a.get(sc.STAGE_COLLECTION),
        model=a.get(sc.STAGE_MODEL),
        # the span's error status: "<Type>: <message>" when the producer let the message leave
        error=view.span.status_message if view.span.status_code == "ERROR" else None,
        start_ns=view.span.start_ns,
        duration_ms=round((view.span.end_ns - view.span.start_ns) / 1e6, 3),
    )


_HOP_FIELDS = ("hop", "parent_hop", "transform", "text", "sha256", "chars")


def _add_hop(hops: dict[tuple[str, int], QueryHop], run: str, entry: Hop | None, used_by: str | None, produced_by: str | None) -> None:
    """Fold one statement of a hop into ``hops``: the first statement sets its fields, later ones fill
    gaps (a field a bare hop gains joins its keys then, as the dict it was had it)."""
    if entry is None or entry.hop is None:
        return
    hop = hops.get((run, entry.hop))
    if hop is None:
        hop = hops[run, entry.hop] = QueryHop(
            entry.hop, entry.parent_hop, entry.transform, entry.text, entry.sha256, entry.chars, keys=(*_HOP_FIELDS, "used_by", "produced_by")
        )
    for key in ("text", "sha256", "parent_hop", "chars"):
        if getattr(hop, key) is None and getattr(entry, key) is not None:
            _fill(hop, key, getattr(entry, key))
    if hop.transform in (None, sc.TRANSFORM_NONE) and entry.transform not in (None, sc.TRANSFORM_NONE):
        _fill(hop, "transform", entry.transform)
    if used_by and used_by not in hop.used_by:
        hop.used_by.append(used_by)
    if produced_by and not hop.produced_by:
        hop.produced_by = produced_by


def _fill(hop: QueryHop, key: str, value: Any) -> None:
    setattr(hop, key, value)
    if key not in hop.keys:
        hop.keys = (*hop.keys, key)


def _add_embedding_hop(hops: dict[tuple[str, int], QueryHop], run: str, number: int, used_by: str) -> None:
    """A hop embedded together with others (HyDE with the original): known by its number only."""
    hop = hops.get((run, number))
    if hop is None:
        hop = hops[run, number] = QueryHop(number, keys=("hop", "used_by", "produced_by"))
    if used_by not in hop.used_by:
        hop.used_by.append(used_by)


def query_hops(stages: list[Stage], pipeline: Stage | None, run_of: Callable[[str], str] | None = None) -> list[QueryHop]:
    """Every hop once, in hop order, with the stages that ran on it (``used_by``) and produced it.
    ``run_of`` names the run that numbers a stage's hops (:meth:`StageTree.question`): hops of two
    runs in one trace (two questions under one span of the app's) are kept apart, each numbered in
    the order its run first appears as ``question``; a trace of one run reads as before."""
    hops: dict[tuple[str, int], QueryHop] = {}
    searched: set[tuple[str, Any]] = set()
    run = run_of or (lambda _span_id: "")
    if pipeline:
        _add_hop(hops, run(pipeline.span_id), pipeline.query, None, None)
    for stage in stages:
        label, at = stage.label, run(stage.span_id)
        _add_hop(hops, at, stage.query, label, None)
        for variant in stage.query_variants:
            _add_hop(hops, at, variant, None, label)
        # hops embedded together (HyDE with the original): every one of them reached the index
        for number in stage.embedding_hops or ():
            _add_embedding_hop(hops, at, number, label)
        # only a retrieve stage reads an index: a fuse stage merges what its inner retrievals (on their
        # own hops) read, and a retrieve stage that made a query of its own (a self-query's constructed
        # query) searched with that one, not with the question it was given
        if stage.kind == sc.KIND_RETRIEVE and not stage.query_variants:
            searched.update((at, n) for n in (stage.query.hop if stage.query else None, *(stage.embedding_hops or ())) if n is not None)
    for (at, number), hop in hops.items():
        hop.hit_index = (at, number) in searched
        hop.keys = (*hop.keys, "hit_index")
    order = {at: i for i, at in enumerate(dict.fromkeys(at for at, _ in hops))}
    if len(order) > 1:
        for (at, _), hop in hops.items():
            hop.question = order[at] + 1
            hop.keys = ("question", *hop.keys)
    return [hops[k] for k in sorted(hops, key=lambda k: (order[k[0]], k[1]))]


def answer_entry(attributes: dict[str, Any]) -> Answer | None:
    """The answer receipt the app stamped on the pipeline span (``None`` when it said nothing)."""
    if not any(k.startswith(sc.ANSWER_RECEIPT_PREFIX + ".") for k in attributes):
        return None
    refused = attributes.get(sc.ANSWER_REFUSED)
    return Answer(
        sha256=attributes.get(sc.ANSWER_SHA256),
        chars=_int(attributes.get(sc.ANSWER_CHARS)),
        refused=refused if isinstance(refused, bool) else None,
        claim=attributes.get(sc.ANSWER_CLAIM),
        preview=attributes.get(sc.ANSWER_PREVIEW) or (receipts.preview(str(attributes[sc.ANSWER_TEXT])) if sc.ANSWER_TEXT in attributes else None),
    )


def _head_sampling(trace: Trace, stitched: Stitched) -> Sampling:
    """The head sampler's record: span attributes first (ragtrail's, or Jaeger's), then tracestate."""
    candidates: list[Span] = (
        [v.span for v in stitched.pipelines] + sorted((s for s in trace.spans if not s.parent_span_id), key=lambda s: s.start_ns) + list(trace.spans)
    )
    for span in candidates:
        a = span.attributes
        p = a.get(sc.SAMPLING_PROBABILITY)
        if p is None and a.get(sc.JAEGER_SAMPLER_TYPE) == "probabilistic":
            p = a.get(sc.JAEGER_SAMPLER_PARAM)
        if isinstance(p, (int, float)) and 0 < p <= 1:
            adjusted = a.get(sc.SAMPLING_ADJUSTED_COUNT)
            if isinstance(adjusted, bool) or not isinstance(adjusted, (int, float)) or not adjusted > 0:
                adjusted = 1 / p
            return Sampling(p, adjusted, "span attributes", f"sampled at p={p:g}: this trace stands for {_requests(adjusted)}")
    for span in candidates:
        p = _threshold_probability(span.trace_state)
        if p is not None:
            return Sampling(p, 1 / p, "tracestate ot=th", f"sampled at p={p:g} (tracestate): this trace stands for {_requests(1 / p)}")
    return Sampling(
        None,
        None,
        None,
        "no sampling recorded: kept unsampled, or by a sampler that does not say; this trace stands for itself only as far as anyone can tell",
    )


def _sampling(trace: Trace, stitched: Stitched) -> Sampling:
    """The head record and the gateway's tail stamp (the first span that carries one), weighed by THE rule."""
    head = _head_sampling(trace, stitched)
    stamped = next((s.attributes for s in trace.spans if sc.SAMPLING_TAIL_POLICY in s.attributes), None)
    if stamped is None:  # a tail sampler kept it (record-policy gate) but no gateway said with what probability
        policy = next((s.scope_attributes[sc.TAILSAMPLING_POLICY] for s in trace.spans if sc.TAILSAMPLING_POLICY in s.scope_attributes), None)
        stamped = {sc.SAMPLING_TAIL_POLICY: policy} if policy is not None else {}
    w = trace_weight(head.adjusted_count, stamped.get(sc.SAMPLING_TAIL_POLICY), stamped.get(sc.SAMPLING_TAIL_PROBABILITY))
    head.tail_policy, head.tail_probability, head.weight, head.basis = w.tail_policy, w.tail_probability, w.weight, w.basis
    if w.basis == "unknown_policy":
        before = f"sampled at p={head.probability:g}, then " if head.probability is not None else ""
        head.statement = (
            f"{before}kept by the tail sampler's policy {w.tail_policy!r}, which records no probability: "
            "how many requests this trace stands for is unknown (counted once)"
        )
    elif w.tail_probability is not None:
        before = f"sampled at p={head.probability:g}" if w.basis == "sampled" else "no head sampling record"
        head.statement = (
            f"{before}, kept by the tail sampler's policy {w.tail_policy!r} at p={w.tail_probability:g}: this trace stands for {_requests(w.weight)}"
        )
    return head


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


def _cited(stitched: Stitched, stages: list[Stage]) -> dict[str, None]:
    """Every id the trace says was cited, in first-said order: stamped ids, then cite stages' outputs."""
    cited: dict[str, None] = {}
    for view in [*stitched.pipelines, *stitched.stages]:
        for ident in _as_list(view.attributes.get(sc.CITED_IDS)):
            cited[str(ident)] = None
    for stage in stages:
        if stage.kind == sc.KIND_CITE:
            for c in stage.candidates:
                cited[c.id] = None
    return cited


def _retrieved(stages: list[Stage], cited: dict[str, None]) -> dict[str, Retrieved]:
    """Each document the first retrieve or fuse stage that handed it on."""
    retrieved: dict[str, Retrieved] = {}
    for stage in stages:
        if stage.kind in (sc.KIND_RETRIEVE, sc.KIND_FUSE):
            for c in stage.candidates:
                if c.id not in retrieved:
                    retrieved[c.id] = Retrieved(c.id, c.score, c.hop, stage.kind, stage.component, meta=c.meta)
    for row in retrieved.values():
        row.cited = row.id in cited
    return retrieved


_CONTEXT_KINDS = (sc.KIND_RERANK, sc.KIND_FILTER, sc.KIND_BUDGET, sc.KIND_GENERATE)
_READ_KINDS = (sc.KIND_RETRIEVE, sc.KIND_FUSE, sc.KIND_SPLIT)


def _context(stages: list[Stage], pipeline: Stage | None) -> list[str] | None:
    """What reached the model, only from what defines it: the last rerank, filter or budget stage, or
    generate stage that recorded its inputs (with every earlier generate stage's: each was a model
    call); else the documents the pipeline returned; else ``None``
    (unknown: never "every retrieved id", which would call a cut document read)."""
    defining = [s for s in stages if s.kind in _CONTEXT_KINDS and (s.kind != sc.KIND_GENERATE or s.n_in or s.candidates or s.excluded)]
    if defining:
        # each earlier generate stage was a model call too (a sub-question's answer): its inputs reached a model
        earlier = [c.id for s in defining[:-1] if s.kind == sc.KIND_GENERATE for c in s.candidates]
        return list(dict.fromkeys([c.id for c in defining[-1].candidates] + earlier))
    if pipeline is not None and pipeline.candidates:
        return [c.id for c in pipeline.candidates]
    return None


@dataclass(frozen=True)
class ContextUnits:
    """What reached the model, counted against the corpus: units read, and ids of unknown origin."""

    read: int
    unknown_origin: tuple[str, ...] = ()


def _corpus_units(in_context: list[str] | None, stages: list[Stage]) -> ContextUnits | None:
    """(corpus units read, ids of unknown origin) among the in-context ids. When the trace records its
    reads (a retrieve, fuse or split stage), an id in the context that none of them handed on (nor one
    it was derived from) is of unknown origin: text made in the run (a sub-answer) or a unit an
    unrecorded component read from the store (a sentence window). The trace cannot tell which, so it
    is counted apart, never as read and never as "no corpus unit"."""
    if in_context is None:
        return None
    read = {c.id for s in stages if s.kind in _READ_KINDS for c in s.candidates}
    if not read:
        return ContextUnits(len(in_context))
    derived = {c.id for s in stages for c in s.candidates if c.derived_from is not None and {str(d) for d in _as_list(c.derived_from)} & read}
    # a replacement (a parent for its chunks, a merged node for its leaves) holds the units it replaced,
    # each one a candidate the replacing stage read
    merged = {c.id: replaced_ids(c.derived_from) for s in stages for c in s.candidates if c.transform_rule == sc.RULE_MERGE}
    units: set[str] = set()
    unknown: list[str] = []
    for ident in dict.fromkeys(in_context):
        if ident in merged and merged[ident]:
            units.update(merged[ident])
        elif ident in read or ident in derived:
            units.add(ident)
        else:
            unknown.append(ident)
    return ContextUnits(len(units), tuple(unknown))


def _coverage(stitched: Stitched, pa: dict[str, Any], counts: tuple[int, ContextUnits | None, int, int]) -> Coverage:
    """The coverage block from the pipeline's stamps (``pa``) and the manifest's own ``counts`` (retrieved,
    corpus units in context and ids of unknown origin there, or ``None`` when what reached the model is
    unknown; cited, excluded): the other counts stand in for a
    stamp the trace does not carry; what reached the model is the manifest's own (the recorder stamps
    every retrieved id when no stage defined the context)."""
    retrieved, units, cited, excluded = counts
    corpus = _int(pa.get(sc.COVERAGE_CORPUS_SIZE))
    if corpus is None:
        stated = [_int(v.attributes.get(sc.COVERAGE_CORPUS_SIZE)) for v in stitched.stages]
        sizes = [s for s in stated if s is not None]
        corpus = max(sizes) if sizes else None
    n_retrieved = _int(pa.get(sc.COVERAGE_RETRIEVED))
    n_cited = _int(pa.get(sc.COVERAGE_CITED))
    claim = pa.get(sc.ANSWER_CLAIM)
    run_status = pa.get(sc.RUN_STATUS)
    if run_status is None:
        # no pipeline stamped the run: the same rule over the stages the trace recorded (their
        # failure is never "an empty result, not a failure")
        run_status = roll_up((str(v.attributes.get(sc.STAGE_STATUS)) for v in stitched.stages), raised=False, retrieved=bool(retrieved))
    approximate = pa.get(sc.COVERAGE_CORPUS_APPROXIMATE) is True or (
        sc.COVERAGE_CORPUS_SIZE not in pa and any(v.attributes.get(sc.COVERAGE_CORPUS_APPROXIMATE) is True for v in stitched.stages)
    )
    return coverage(
        corpus,
        n_retrieved if n_retrieved is not None else retrieved,
        units.read if units is not None else None,
        n_cited if n_cited is not None else cited,
        claim=claim if isinstance(claim, str) else None,
        run_status=run_status if isinstance(run_status, str) else None,
        approximate=approximate,
        stores=_int(pa.get(sc.COVERAGE_STORES)),
        excluded=excluded,
        unknown_origin=len(units.unknown_origin) if units is not None else 0,
    )


def _unknown_origin_finding(units: ContextUnits | None) -> list[str]:
    """Ids in the context that no recorded stage read are named: coverage counts them apart."""
    if units is None or not units.unknown_origin:
        return []
    named = ", ".join(units.unknown_origin[:3]) + (", …" if len(units.unknown_origin) > 3 else "")
    return [
        f"{len(units.unknown_origin)} in the context of unknown origin ({named}): no recorded stage read them "
        "(text made in the run, or a component ragtrail does not record read them); coverage counts them apart"
    ]


def _runs_finding(runs: int, pipeline: Stage | None) -> list[str]:
    """A trace holding several runs (questions asked under one span of the app's) says so: its hops
    are apart, but the summary lines count the runs together."""
    if runs < 2:
        return []
    first = f"the pipeline line is the first run's ({pipeline.label}); " if pipeline else ""
    return [f"this trace holds {runs} runs (q1 … q{runs}, each with its own hops): {first}coverage and what reached the context count them together"]


def _findings(stages: list[Stage]) -> list[str]:
    """Degraded or failed stages, unexplained exclusions, and what each stage said of itself."""
    findings: list[str] = []
    for s in stages:
        label = s.label
        if s.status in (sc.STATUS_DEGRADED, sc.STATUS_FAILED):
            extra = f", fallback {s.fallback}" if s.fallback else ""
            findings.append(f"{label}: {s.status} ({s.failure_class}{extra})")
        unexplained = [e.id for e in s.excluded if e.reason == sc.REASON_UNEXPLAINED]
        if unexplained:
            findings.append(f"{label}: {len(unexplained)} candidates vanished unexplained ({', '.join(unexplained[:3])})")
        findings.extend(f"{label}: {f}" for f in s.findings)
    return findings


@gc_paused()
def build(trace: Trace, key: bytes | None = None) -> Manifest:
    """The manifest, from the stage spans, hops, events, receipts and sampling of docs/semconv.md
    §1-5 (plus the detail the terminal and HTML views need); ``key`` checks
    keyed stage receipts."""
    stitched = stitch(trace)
    fidelity: Fidelity = check(trace, stitched, key)
    stages = [stage_entry(v) for v in stitched.stages]
    pipeline = stage_entry(stitched.pipelines[0]) if stitched.pipelines else None
    pa = stitched.pipelines[0].attributes if stitched.pipelines else {}

    cited = _cited(stitched, stages)
    retrieved = _retrieved(stages, cited)
    excluded = [Excluded(e.id, s.kind, s.component, e.reason, e.detail) for s in stages for e in s.excluded]
    in_context_ids = _context(stages, pipeline)
    if not pa:
        # no pipeline span: a retrieval root that wrote the run's coverage speaks for it
        pa = next((v.attributes for v in stitched.stages if v.span.parent_span_id is None and sc.COVERAGE_RETRIEVED in v.attributes), {})
    units = _corpus_units(in_context_ids, stages)
    cover = _coverage(stitched, pa, (len(retrieved), units, len(cited), len(excluded)))
    run_of = stage_tree(trace.spans, [*stitched.pipelines, *stitched.stages]).question
    runs = len({run_of(v.span.span_id) for v in [*stitched.pipelines, *stitched.stages]})
    return Manifest(
        trace_id=trace.trace_id,
        source=trace.source,
        schema=pa.get(sc.SCHEMA, stitched.stages[0].attributes.get(sc.SCHEMA) if stitched.stages else None),
        pipeline=PipelineSummary(pipeline.component, pipeline.status, pipeline.duration_ms) if pipeline else None,
        query_hops=query_hops(stages, pipeline, run_of),
        stages=stages,
        retrieved=list(retrieved.values()),
        excluded=excluded,
        cited=list(cited),
        in_context=in_context_ids,
        survival=survival(stages),
        coverage=cover,
        fidelity=fidelity,
        findings=_runs_finding(runs, pipeline) + _unknown_origin_finding(units) + _findings(([pipeline] if pipeline else []) + stages),
        run_status=pa.get(sc.RUN_STATUS),
        answer=answer_entry(pa),
        sampling=_sampling(trace, stitched),
        span_count=len(trace.spans),
    )


@gc_paused()
def fidelity_only(trace: Trace, key: bytes | None = None) -> FidelityReport:
    """What ``verify`` needs and nothing more (no candidate tables): the trace's fidelity and sizes."""
    stitched = stitch(trace)
    fidelity = check(trace, stitched, key)
    events = sum(len(v.events()) for v in [*stitched.pipelines, *stitched.stages])
    return FidelityReport(trace_id=trace.trace_id, source=trace.source, fidelity=fidelity, span_count=len(trace.spans), events_checked=events)
