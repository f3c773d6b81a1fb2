"""Check a stage span's mirror attributes (GenAI, OpenInference) against the span's own ragtrail
attributes and events: a mirror must say exactly what ragtrail's events say, in other names.

``pop_mirrors(a, span, spans)`` pops every mirror attribute left in ``a`` (a copy of the span's
attributes; a test may have popped some already with literal values) and asserts each one equals
what is rebuilt here from the events alone — ids, scores, content as captured, allow-listed
metadata, each exclusion's reason and detail, the query text, the cap counts. Nothing in it reads
the recorder's mirror code.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from typing import Any

import spanutil
from ragtrail.contract import semconv as sc

_MIRROR_PREFIXES = ("gen_ai.", "openinference.", "input.", "output.", "retrieval.", "reranker.", "ragtrail.mirror.")
NARROWING = {sc.KIND_RERANK, sc.KIND_FILTER, sc.KIND_FUSE, sc.KIND_BUDGET}
KINDS = {sc.KIND_RETRIEVE: "RETRIEVER", **{k: "RERANKER" for k in NARROWING}}


def _events(span: Any, spans: Iterable[Any] | None) -> list[tuple[str, dict[str, Any]]]:
    if spans is not None:
        return spanutil.stitched(span, spans)
    return spanutil.records(span)


def _content(event: dict[str, Any]) -> str | None:
    return event.get(sc.CANDIDATE_CONTENT_TEXT, event.get(sc.CANDIDATE_CONTENT_PREVIEW))


def _meta(event: dict[str, Any], excluded: bool) -> dict[str, Any]:
    meta = {k[len(sc.CANDIDATE_META_PREFIX) :]: v for k, v in event.items() if k.startswith(sc.CANDIDATE_META_PREFIX)}
    meta = {k: list(v) if isinstance(v, tuple) else v for k, v in meta.items()}
    for k, v in list(meta.items()):
        if isinstance(v, str) and v[:1] in "[{":
            with contextlib.suppress(ValueError):
                meta[k] = json.loads(v)
    if excluded:
        meta[sc.EXCLUSION_REASON] = event[sc.EXCLUSION_REASON]
        if sc.EXCLUSION_DETAIL in event:
            meta[sc.EXCLUSION_DETAIL] = event[sc.EXCLUSION_DETAIL]
    return meta


def summary(kind_in: int, outputs: list[dict[str, Any]], exclusions: list[dict[str, Any]]) -> str:
    text = f"kept {len(outputs)} of {kind_in}"
    if exclusions:
        parts = []
        for e in exclusions[:20]:
            part = f"{e[sc.CANDIDATE_ID]} {e[sc.EXCLUSION_REASON]}"
            if e.get(sc.EXCLUSION_DETAIL):
                part += f" ({e[sc.EXCLUSION_DETAIL]})"
            parts.append(part)
        text += "; excluded: " + "; ".join(parts)
        if len(exclusions) > 20:
            text += f"; and {len(exclusions) - 20} more (every one in ragtrail's events)"
    return text


def _check_documents(
    a: dict[str, Any], own: dict[str, Any], prefix: str, expected: list[tuple[dict[str, Any], bool]], total: int, cap_keys: tuple[str, str]
) -> None:
    """Every document the span carries under ``prefix`` (read from the span's own attributes, so a
    test that already popped some ids is still checked whole) equals its event; pop them from ``a``."""
    written = 0
    while any(k.startswith(f"{prefix}.{written}.") for k in own):
        written += 1
    assert written <= len(expected), (prefix, written, len(expected))
    for index in range(written):
        event, excluded = expected[index]
        if event.get("_unchecked"):
            continue
        base = f"{prefix}.{index}.document."
        keys = [k for k in own if k.startswith(base)]
        doc = {k[len(base) :]: own[k] for k in keys}
        for k in keys:
            a.pop(k, None)
        assert doc.pop("id") == event[sc.CANDIDATE_ID], (prefix, index)
        if "score" in doc or sc.CANDIDATE_SCORE in event:
            assert doc.pop("score", None) == event.get(sc.CANDIDATE_SCORE), (prefix, index)
        content = doc.pop("content", None)
        if not event.get("_content_changed_later"):
            assert content == _content(event), (prefix, index)
        meta = _meta(event, excluded)
        got = doc.pop("metadata", None)
        assert (json.loads(got) if got is not None else {}) == meta, (prefix, index)
        assert doc == {}, (prefix, index, doc)
    mirrored = a.pop(cap_keys[0], None)
    total_written = a.pop(cap_keys[1], None)
    if written < total:
        assert (mirrored, total_written) == (written, total), (prefix, mirrored, total_written, written, total)
    else:
        assert mirrored is None and total_written is None, prefix


def pop_mirrors(a: dict[str, Any], span: Any, spans: Iterable[Any] | None = None) -> None:
    """Pop and check every mirror attribute left in ``a`` (see the module docstring)."""
    own = dict(span.attributes)
    kind = own.get(sc.STAGE_KIND)
    if kind is None:  # not a stage span
        return
    evs = _events(span, spans)
    outputs = [e for name, e in evs if name == sc.EVENT_CANDIDATE]
    exclusions = [e for name, e in evs if name == sc.EVENT_EXCLUSION]
    produced = [e.get(sc.QUERY_TEXT) for name, e in evs if name == sc.EVENT_QUERY]
    query = own.get(sc.QUERY_TEXT)
    oi_kind = KINDS.get(kind, "CHAIN")
    if sc.OPENINFERENCE_SPAN_KIND in a:
        assert a.pop(sc.OPENINFERENCE_SPAN_KIND) == oi_kind
    if sc.OI_INPUT_VALUE in a:
        assert a.pop(sc.OI_INPUT_VALUE) == query
    if sc.OI_INPUT_MIME_TYPE in a:
        assert query is not None and a.pop(sc.OI_INPUT_MIME_TYPE) == "text/plain"
    if sc.OI_RERANKER_QUERY in a:
        assert oi_kind == "RERANKER" and a.pop(sc.OI_RERANKER_QUERY) == query
    if sc.OI_RERANKER_TOP_K in a:
        assert a.pop(sc.OI_RERANKER_TOP_K) == own[sc.STAGE_TOP_K]
    if sc.OI_RERANKER_MODEL_NAME in a:
        assert a.pop(sc.OI_RERANKER_MODEL_NAME) == own[sc.STAGE_MODEL]
    # output.value
    if sc.OI_OUTPUT_VALUE in a:
        value, mime = a.pop(sc.OI_OUTPUT_VALUE), a.pop(sc.OI_OUTPUT_MIME_TYPE)
        if kind in NARROWING:
            assert (value, mime) == (summary(own[sc.CANDIDATES_IN], outputs, exclusions), "text/plain")
        elif kind == sc.KIND_QUERY_TRANSFORM:
            assert value == (produced[0] if len(produced) == 1 else json.dumps(produced, separators=(",", ":")))
        elif kind == sc.KIND_PIPELINE:
            assert value == own.get(sc.ANSWER_TEXT, own.get(sc.ANSWER_PREVIEW)) and mime == "text/plain"
        elif kind == sc.KIND_CITE:
            body = json.loads(value)
            assert body.pop("cited") == [e[sc.CANDIDATE_ID] for e in outputs] and mime == "application/json"
            assert set(body) <= {"answer"}
        else:
            raise AssertionError(f"unexpected output.value on a {kind} stage: {value!r}")
    # documents
    total_out = len(outputs)
    if oi_kind == "RETRIEVER":
        _check_documents(
            a,
            own,
            sc.OI_RETRIEVAL_DOCUMENTS,
            [(e, False) for e in outputs],
            total_out,
            (sc.MIRROR_OUTPUT_DOCUMENTS_MIRRORED, sc.MIRROR_OUTPUT_DOCUMENTS_TOTAL),
        )
    elif oi_kind == "RERANKER":
        _check_documents(
            a,
            own,
            sc.OI_RERANKER_OUTPUT_DOCUMENTS,
            [(e, False) for e in outputs],
            total_out,
            (sc.MIRROR_OUTPUT_DOCUMENTS_MIRRORED, sc.MIRROR_OUTPUT_DOCUMENTS_TOTAL),
        )
        _check_inputs(a, own, outputs, exclusions)
    # GenAI: only the outermost retrieve stage names the retrieval (docs/semconv.md §6)
    if spans is not None and kind == sc.KIND_RETRIEVE and _inside_a_retrieve_stage(span, spans):
        assert [k for k in own if k.startswith("gen_ai.")] == [], span.name
    if sc.GEN_AI_OPERATION_NAME in a:
        assert kind == sc.KIND_RETRIEVE and a.pop(sc.GEN_AI_OPERATION_NAME) == "retrieval"
    if sc.GEN_AI_DATA_SOURCE_ID in a:
        a.pop(sc.GEN_AI_DATA_SOURCE_ID)  # the component or the collection: tests pin it literally
    if sc.GEN_AI_RETRIEVAL_TOP_K in a:
        assert a.pop(sc.GEN_AI_RETRIEVAL_TOP_K) == own[sc.STAGE_TOP_K]
    if sc.GEN_AI_RETRIEVAL_QUERY_TEXT in a:
        assert a.pop(sc.GEN_AI_RETRIEVAL_QUERY_TEXT) == query
    if sc.GEN_AI_RETRIEVAL_DOCUMENTS in a:
        docs = json.loads(a.pop(sc.GEN_AI_RETRIEVAL_DOCUMENTS))
        assert len(docs) <= len(outputs)
        for doc, event in zip(docs, outputs, strict=False):
            want: dict[str, Any] = {"id": event[sc.CANDIDATE_ID]}
            if sc.CANDIDATE_SCORE in event:
                want["score"] = event[sc.CANDIDATE_SCORE]
            if _content(event) is not None:
                want["content"] = _content(event)
            if _meta(event, False):
                want["metadata"] = _meta(event, False)
            assert doc == want
    if sc.GEN_AI_RERANK_CANDIDATE_COUNT in a:
        assert kind == sc.KIND_RERANK and a.pop(sc.GEN_AI_RERANK_CANDIDATE_COUNT) == own[sc.CANDIDATES_IN]
    if sc.GEN_AI_RERANK_TOP_N in a:
        assert a.pop(sc.GEN_AI_RERANK_TOP_N) == own[sc.STAGE_TOP_K]
    if sc.GEN_AI_RERANK_SCORES in a:
        assert tuple(a.pop(sc.GEN_AI_RERANK_SCORES)) == tuple(e[sc.CANDIDATE_SCORE] for e in outputs)
    left = [k for k in a if k.startswith(_MIRROR_PREFIXES)]
    assert left == [], left


def _inside_a_retrieve_stage(span: Any, spans: Iterable[Any]) -> bool:
    """Whether an ancestor of ``span`` among ``spans`` is a retrieve stage."""
    by_id = {s.context.span_id: s for s in spans}
    parent = by_id.get(span.parent.span_id) if span.parent is not None else None
    while parent is not None:
        if (parent.attributes or {}).get(sc.STAGE_KIND) == sc.KIND_RETRIEVE:
            return True
        parent = by_id.get(parent.parent.span_id) if parent.parent is not None else None
    return False


def _check_inputs(a: dict[str, Any], own: dict[str, Any], outputs: list[dict[str, Any]], exclusions: list[dict[str, Any]]) -> None:
    """Input order is not in the events for kept documents (their rank is the output rank), so: an
    excluded document sits at its input rank with its reason; a kept one matches its output event."""
    prefix = sc.OI_RERANKER_INPUT_DOCUMENTS
    by_rank = {e[sc.CANDIDATE_RANK]: e for e in exclusions if sc.CANDIDATE_RANK in e}
    kept = {}
    for e in outputs:
        kept.setdefault(e[sc.CANDIDATE_ID], e)
    expected: list[tuple[dict[str, Any], bool]] = []
    index = 0
    while any(k.startswith(f"{prefix}.{index}.") for k in own):
        if index in by_rank:
            expected.append((by_rank[index], True))
        else:
            ident = own.get(f"{prefix}.{index}.{sc.OI_DOCUMENT_ID}")
            if ident not in kept and own.get(sc.STAGE_STATUS) == sc.STATUS_FAILED and not outputs:
                # a stage that failed before any output excluded nothing: its inputs have no event to
                # compare with, only the count (checked below) says they went in
                for k in [k for k in own if k.startswith(f"{prefix}.{index}.")]:
                    a.pop(k, None)
                expected.append(({sc.CANDIDATE_ID: ident, "_unchecked": True}, False))
                index += 1
                continue
            assert ident in kept, (index, ident)
            event = dict(kept[ident])
            # a kept input's score is its input score (a reranker rescored it): compare it as given
            event.pop(sc.CANDIDATE_SCORE, None)
            if f"{prefix}.{index}.{sc.OI_DOCUMENT_SCORE}" in own:
                event[sc.CANDIDATE_SCORE] = own[f"{prefix}.{index}.{sc.OI_DOCUMENT_SCORE}"]
            if sc.CANDIDATE_TRANSFORM_RULE in event:  # the stage changed it: the input is the original
                event["_content_changed_later"] = True
            expected.append((event, False))
        index += 1
    _check_documents(a, own, prefix, expected, own[sc.CANDIDATES_IN], (sc.MIRROR_INPUT_DOCUMENTS_MIRRORED, sc.MIRROR_INPUT_DOCUMENTS_TOTAL))
