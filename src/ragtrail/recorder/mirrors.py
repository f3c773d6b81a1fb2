"""Mirror attributes for other tools (docs/semconv.md §6): OTel GenAI and OpenInference (Phoenix).

A mirror says what ragtrail's own events already say, in the names a tool the user already runs
draws: Phoenix draws a RETRIEVER span as document cards and a RERANKER span as its query with
input and output documents. Every stage that narrows a list (rerank, filter, fuse, budget) is
written as a RERANKER, because that is the one view Phoenix has for "these went in, these came
out"; each input document that did not come out carries its exclusion reason in its metadata.

Mirrors follow the capture modes exactly as ragtrail's own attributes do (query text only in
query mode ``text``; content only as ``preview``/``full`` allow; metadata only the allow-listed
keys). They are written first on a stage span, so under a tight attribute limit they are the ones
the SDK evicts, and they are capped to leave room for ragtrail's own attributes; a user may cap
each list further (``RAGTRAIL_MIRROR_DOCUMENTS``: the first N documents, to save encoding the
same list twice). When a document list is cut the span says how many of how many were mirrored.
The full list is always in ragtrail's own columns and events.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import canonical_json, finite_or_none, float_json
from ragtrail.recorder.candidates import Candidate
from ragtrail.recorder.exclusions import Exclusion
from ragtrail.recorder.values import wire_str, wire_text
from ragtrail.settings import CaptureSettings

__all__ = [
    "GENAI_ATTRIBUTES",
    "NARROWING_KINDS",
    "STAGE_ATTRIBUTE_RESERVE",
    "MirrorInput",
    "answer_text",
    "continuation",
    "genai",
    "openinference",
    "span_kind",
    "summary",
]

STAGE_ATTRIBUTE_RESERVE = 40  # span attributes kept free for ragtrail's own when mirroring documents
_CAP_ATTRIBUTES = 4  # the mirrored/total pairs, kept free so a cut list can always say so
GENAI_ATTRIBUTES = 5  # the most attributes the GenAI mirror writes besides the counts (retrieve)
_SUMMARY_EXCLUSIONS = 20  # exclusions named in a narrowing stage's output.value summary
NARROWING_KINDS = frozenset({sc.KIND_RERANK, sc.KIND_FILTER, sc.KIND_FUSE, sc.KIND_BUDGET})
_SPAN_KIND = {sc.KIND_RETRIEVE: sc.OI_RETRIEVER, **{k: sc.OI_RERANKER for k in NARROWING_KINDS}}


def span_kind(kind: str) -> str:
    """The OpenInference span kind of a ragtrail stage kind."""
    return _SPAN_KIND.get(kind, sc.OI_CHAIN)


@dataclass
class MirrorInput:
    """What a stage knows at its end that the mirrors draw from (already capture-filtered where
    it says so)."""

    kind: str
    component: str
    top_k: int | None
    config: CaptureSettings
    limits: Any = None
    extra: int = 0  # how many other attributes the stage will carry
    query_text: str | None = None  # None unless the query text may be written
    produced_queries: list[str] = field(default_factory=list)  # likewise
    inputs: Sequence[Candidate] | None = None
    outputs: Sequence[Candidate] = ()
    exclusions: Sequence[Exclusion] = ()
    answer: Mapping[str, Any] | None = None  # the pipeline's answer attributes (capture-filtered)
    framework_output: str | None = None  # what the framework returned from a pipeline root (capture-filtered)
    model: Any = None
    collection: str | None = None  # the searched collection, when the stage knows it (GenAI's data source)
    within_retrieval: bool = False  # opened inside another retrieve stage: part of that one's retrieval


def answer_text(answer: Mapping[str, Any] | None) -> str | None:
    """The answer as captured (``full``: the text, ``preview``: the preview), else ``None``."""
    if not answer:
        return None
    text = answer.get(sc.ANSWER_TEXT, answer.get(sc.ANSWER_PREVIEW))
    return text if isinstance(text, str) else None


def _content(config: CaptureSettings, candidate: Candidate) -> str | None:
    if candidate.content is None:
        return None
    return config.content_for(wire_text(candidate.content))


def _metadata(config: CaptureSettings, candidate: Candidate, exclusion: Exclusion | None) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if config.metadata and candidate.metadata:
        for key in config.metadata:
            if key in candidate.metadata:
                meta[key] = candidate.metadata[key]
    if exclusion is not None:
        meta[sc.EXCLUSION_REASON] = exclusion.reason
        if exclusion.detail is not None:
            meta[sc.EXCLUSION_DETAIL] = wire_str(exclusion.detail)
    return meta


def _as_json(value: Any) -> str:
    """A JSON object string (canonical: sorted keys, numpy and odd values made JSON)."""
    return canonical_json(value)


# --- OTel GenAI --------------------------------------------------------------------------------------
def genai(m: MirrorInput, max_documents: int | None = None) -> dict[str, Any]:
    """OTel GenAI's retrieval attributes on the outermost retrieve stage; the proposed (experimental)
    rerank attributes on rerank stages. Nothing on other stages: GenAI has no name for them. A retrieve
    stage opened inside another (a store's search under a framework's retriever) is part of that
    retrieval as its caller observes it, so it writes none: a GenAI reader counts one retrieval.

    ``max_documents``: with the OpenInference mirror on, the documents it could write, so both
    mirrors carry the same list and the cap count is true of both (Phoenix merges the two)."""
    attributes: dict[str, Any] = {}
    if m.kind == sc.KIND_RETRIEVE and not m.within_retrieval:
        attributes[sc.GEN_AI_OPERATION_NAME] = sc.GEN_AI_OPERATION_RETRIEVAL
        attributes[sc.GEN_AI_DATA_SOURCE_ID] = m.collection if m.collection is not None else m.component
        if m.top_k is not None:
            attributes[sc.GEN_AI_RETRIEVAL_TOP_K] = int(m.top_k)
        if m.query_text is not None:
            attributes[sc.GEN_AI_RETRIEVAL_QUERY_TEXT] = m.query_text
        documents, written = _genai_documents(m, max_documents)
        attributes[sc.GEN_AI_RETRIEVAL_DOCUMENTS] = documents
        if written < len(m.outputs):
            attributes.update(_cap(sc.MIRROR_OUTPUT_DOCUMENTS_MIRRORED, sc.MIRROR_OUTPUT_DOCUMENTS_TOTAL, written, len(m.outputs)))
    elif m.kind == sc.KIND_RERANK:
        if m.inputs is not None:
            attributes[sc.GEN_AI_RERANK_CANDIDATE_COUNT] = len(m.inputs)
        if m.top_k is not None:
            attributes[sc.GEN_AI_RERANK_TOP_N] = int(m.top_k)
        scores = [finite_or_none(c.score) for c in m.outputs]
        if m.outputs and all(s is not None for s in scores):
            attributes[sc.GEN_AI_RERANK_SCORES] = tuple(float(s) for s in scores)  # type: ignore[arg-type]
    return attributes


def _genai_documents(m: MirrorInput, max_documents: int | None) -> tuple[str, int]:
    """``gen_ai.retrieval.documents``: a JSON array, one object per output in output order, cut
    (whole documents) to ``max_documents``, to the user's cap and to the span's value-length limit so
    it stays valid JSON."""
    most = _fewest(m.config.mirror_documents, max_documents)
    outputs = m.outputs if most is None else m.outputs[:most]
    content_on = m.config.content_for("") is not None  # off: no document carries content
    texts = [_genai_document(m.config, candidate, content_on) for candidate in outputs]
    limit = getattr(m.limits, "max_attribute_length", None)
    text = _json_list(texts)
    while limit is not None and len(text) > limit and texts:
        texts.pop()
        text = _json_list(texts)
    return text, len(texts)


def _genai_document(config: CaptureSettings, candidate: Candidate, content_on: bool) -> str:
    """One document of ``gen_ai.retrieval.documents`` as its JSON object text (sorted keys)."""
    score = finite_or_none(candidate.score)
    ident = candidate.id
    if not content_on and not config.metadata and type(ident) is str:
        # id and score only (content capture off, no metadata kept): the object's text written
        # directly, as the encoder writes it, the score's text as its column's (a stage mirrors a
        # hundred documents on the host's thread; a float's shortest repr is the slowest part)
        head = '{"id":' + _json_str(ident)
        return head + "}" if score is None else f'{head},"score":{float_json(score)}}}'
    item: dict[str, Any] = {"id": ident}
    if score is not None:
        item["score"] = score
    content = _content(config, candidate) if content_on else None
    if content is not None:
        item["content"] = content
    meta = _metadata(config, candidate, None) if config.metadata else None
    if meta:
        item["metadata"] = json.loads(_as_json(meta))  # numpy and odd values made JSON, keys sorted
    return _json_array(item)


def _json_list(texts: list[str]) -> str:
    """The JSON array of items already written as JSON texts."""
    return "[" + ",".join(texts) + "]"


# json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True) with one encoder
# (json.dumps with options builds a new one per call)
_json_array = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode
_json_str = json.encoder.encode_basestring  # what that encoder writes for a str


# --- OpenInference -----------------------------------------------------------------------------------
def openinference(m: MirrorInput) -> dict[str, Any]:
    """OpenInference's span kind, input and output values and document lists."""
    kind = span_kind(m.kind)
    attributes: dict[str, Any] = {sc.OPENINFERENCE_SPAN_KIND: kind}
    if m.query_text is not None:
        attributes[sc.OI_INPUT_VALUE] = m.query_text
        attributes[sc.OI_INPUT_MIME_TYPE] = sc.OI_MIME_TEXT
        if kind == sc.OI_RERANKER:
            attributes[sc.OI_RERANKER_QUERY] = m.query_text
    if kind == sc.OI_RERANKER:
        if m.top_k is not None:
            attributes[sc.OI_RERANKER_TOP_K] = int(m.top_k)
        if m.model is not None:
            attributes[sc.OI_RERANKER_MODEL_NAME] = str(m.model)
    output = _output_value(m)
    if output is not None:
        attributes[sc.OI_OUTPUT_VALUE], attributes[sc.OI_OUTPUT_MIME_TYPE] = output
    if kind == sc.OI_RETRIEVER:
        lists = [(sc.OI_RETRIEVAL_DOCUMENTS, m.outputs, False)]
    elif kind == sc.OI_RERANKER:
        lists = [(sc.OI_RERANKER_OUTPUT_DOCUMENTS, m.outputs, False), (sc.OI_RERANKER_INPUT_DOCUMENTS, m.inputs or [], True)]
    else:
        return attributes
    max_attributes = getattr(m.limits, "max_span_attributes", None)
    room = None if max_attributes is None else max(0, max_attributes - STAGE_ATTRIBUTE_RESERVE - _CAP_ATTRIBUTES - len(attributes) - m.extra)
    excluded = {id(e.candidate): e for e in m.exclusions}
    most = m.config.mirror_documents
    for prefix, candidates, is_input in lists:
        shown = candidates if most is None else candidates[:most]  # no work for documents beyond the cap
        written, room = _documents(attributes, prefix, shown, m.config, excluded if is_input else {}, room)
        if written < len(candidates):
            names = (
                (sc.MIRROR_INPUT_DOCUMENTS_MIRRORED, sc.MIRROR_INPUT_DOCUMENTS_TOTAL)
                if is_input
                else (sc.MIRROR_OUTPUT_DOCUMENTS_MIRRORED, sc.MIRROR_OUTPUT_DOCUMENTS_TOTAL)
            )
            attributes.update(_cap(*names, written, len(candidates)))
    return attributes


def _fewest(a: int | None, b: int | None) -> int | None:
    """The smaller of two caps, ``None`` meaning no cap."""
    return b if a is None else a if b is None else min(a, b)


def _cap(mirrored_key: str, total_key: str, mirrored: int, total: int) -> dict[str, int]:
    return {mirrored_key: mirrored, total_key: total}


def _documents(
    attributes: dict[str, Any],
    prefix: str,
    candidates: Sequence[Candidate],
    config: CaptureSettings,
    excluded: Mapping[int, Exclusion],
    room: int | None,
) -> tuple[int, int | None]:
    """``<prefix>.<i>.document.id|score|content|metadata`` for each candidate while there is room
    for the whole document; returns how many were written and the room left."""
    content_on = config.content_for("") is not None  # off: no document carries content
    with_metadata = bool(config.metadata or excluded)
    metadata_texts: dict[tuple[str, str | None], str] = {}  # an exclusion's metadata text, by reason and detail
    names = _document_names(prefix, len(candidates))
    for index, candidate in enumerate(candidates):
        score = candidate.score
        if type(score) is not float or score - score != 0.0:  # not a finite float: finite_or_none decides
            score = finite_or_none(score)
        content = _content(config, candidate) if content_on else None
        meta_text = None
        if with_metadata:
            exclusion = excluded.get(id(candidate))
            if not config.metadata and exclusion is not None:  # the exclusion's reason and detail alone
                said = (exclusion.reason, exclusion.detail)
                meta_text = metadata_texts.get(said)
                if meta_text is None:
                    meta_text = metadata_texts[said] = _as_json(_metadata(config, candidate, exclusion))
            else:
                meta = _metadata(config, candidate, exclusion)
                meta_text = _as_json(meta) if meta else None
        if room is not None:
            size = 1 + (score is not None) + (content is not None) + (meta_text is not None)
            if room < size:
                return index, room
            room -= size
        id_key, score_key, content_key, metadata_key = names[index]
        attributes[id_key] = candidate.id
        if score is not None:
            attributes[score_key] = score
        if content is not None:
            attributes[content_key] = content
        if meta_text is not None:
            attributes[metadata_key] = meta_text
    return len(candidates), room


_NAMES_CACHED = 4096  # document positions whose attribute names are kept, per prefix
_names: dict[str, list[tuple[str, str, str, str]]] = {}


def _document_names(prefix: str, count: int) -> list[tuple[str, str, str, str]]:
    """``<prefix>.<i>.document.id|score|content|metadata`` for ``i < count``, made once per position
    (a stage mirrors a hundred documents, four names each, on the host's thread)."""
    names = _names.get(prefix, [])
    if len(names) < count:
        names = names + [
            tuple(f"{prefix}.{i}.{key}" for key in _DOCUMENT_KEYS)  # type: ignore[misc]
            for i in range(len(names), count)
        ]
        if count <= _NAMES_CACHED:
            _names[prefix] = names
    return names


_DOCUMENT_KEYS = (sc.OI_DOCUMENT_ID, sc.OI_DOCUMENT_SCORE, sc.OI_DOCUMENT_CONTENT, sc.OI_DOCUMENT_METADATA)


def _output_value(m: MirrorInput) -> tuple[str, str] | None:
    """What Phoenix shows as the span's output: the answer on the pipeline and on generate/cite
    (with what was cited), the produced queries of a query transform, and for a narrowing stage a
    one-line summary of what was kept and why each document left."""
    answer = answer_text(m.answer)
    if m.kind == sc.KIND_PIPELINE:
        said = answer if answer is not None else m.framework_output  # the run's answer has the last word
        return (said, sc.OI_MIME_TEXT) if said is not None else None
    if m.kind in (sc.KIND_CITE, sc.KIND_GENERATE):
        value: dict[str, Any] = {}
        if answer is not None:
            value["answer"] = answer
        if m.kind == sc.KIND_CITE:
            value["cited"] = [c.id for c in m.outputs]
        return (_as_json(value), sc.OI_MIME_JSON) if value else None
    if m.kind == sc.KIND_QUERY_TRANSFORM:
        if not m.produced_queries:
            return None
        if len(m.produced_queries) == 1:
            return m.produced_queries[0], sc.OI_MIME_TEXT
        return _as_json(m.produced_queries), sc.OI_MIME_JSON
    if m.kind in NARROWING_KINDS:
        return summary(m), sc.OI_MIME_TEXT
    return None


def summary(m: MirrorInput) -> str:
    """``kept 4 of 6; excluded: a superseded (replaced by b); c deduplicated (same text as d)``."""
    n_in = len(m.inputs) if m.inputs is not None else len(m.outputs) + len(m.exclusions)
    text = f"kept {len(m.outputs)} of {n_in}"
    if m.exclusions:
        parts = []
        for exclusion in m.exclusions[:_SUMMARY_EXCLUSIONS]:
            part = f"{exclusion.candidate.id} {exclusion.reason}"
            if exclusion.detail:
                part += f" ({exclusion.detail})"
            parts.append(part)
        text += "; excluded: " + "; ".join(parts)
        more = len(m.exclusions) - _SUMMARY_EXCLUSIONS
        if more > 0:
            text += f"; and {more} more (every one in ragtrail's events)"
    return wire_str(text)


def continuation(kind: str, index: int, parts: int, first: int, last: int, total: int) -> dict[str, Any]:
    """A continuation span's mirror: its stage's OpenInference kind and which part it is."""
    return {
        sc.OPENINFERENCE_SPAN_KIND: span_kind(kind),
        sc.OI_OUTPUT_VALUE: (
            f"continuation {index} of {parts - 1}: ragtrail events {first}-{last} of {total} "
            f"of this stage (the stage span holds the rest, its counts and digest)"
        ),
        sc.OI_OUTPUT_MIME_TYPE: sc.OI_MIME_TEXT,
    }
