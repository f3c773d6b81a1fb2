"""Shared pieces of the LangChain instrumentation tests (no tests here): a deterministic offline
embedding, a small corpus, the instrumentor fixture, and exact span/event expectations."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

import mirrorutil
import spanutil

pytest.importorskip("langchain_core")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.embeddings import Embeddings  # noqa: E402

from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.contract.receipts import receipt, sorted_events_digest  # noqa: E402


class HashEmbeddings(Embeddings):
    """Bag-of-words vectors from sha256 of each lower-cased word: deterministic, offline, and
    similar texts really are similar (shared words land in the same buckets)."""

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for word in text.lower().split():
            vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        norm = math.sqrt(sum(x * x for x in vector)) or 1.0
        return [x / norm for x in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


TEXTS = [
    "the cat sat on the mat",
    "dogs chase cats in the park",
    "a cat and a dog became friends",
    "stock markets fell sharply today",
    "the red mat lies by the door",
    "cats purr when they are happy",
    "the cat sat on the mat",  # same content as d0 under another id
    "bond yields rose as markets fell",
]


def corpus() -> list[Document]:
    return [Document(page_content=t, id=f"d{i}", metadata={"source": f"s{i}", "n": i}) for i, t in enumerate(TEXTS)]


def sha(text: str) -> str:
    return receipt(text).sha256


def content_receipt(text: str) -> dict[str, Any]:
    rec = receipt(text)
    return {sc.CANDIDATE_CONTENT_CHARS: rec.chars, sc.CANDIDATE_CONTENT_BYTES: rec.bytes, sc.CANDIDATE_CONTENT_SHA256: rec.sha256}


def query_attributes(text: str, hop: int = 0, transform: str = "none", parent: int | None = None) -> dict[str, Any]:
    rec = receipt(text)
    attributes = {
        sc.QUERY_HOP: hop,
        sc.QUERY_TRANSFORM: transform,
        sc.QUERY_CHARS: rec.chars,
        sc.QUERY_BYTES: rec.bytes,
        sc.QUERY_SHA256: rec.sha256,
        sc.QUERY_TEXT: text,
    }
    if parent is not None:
        attributes[sc.QUERY_PARENT_HOP] = parent
    return attributes


def candidate_event(
    ident: str, rank: int, text: str, *, score: float | None = None, score_kind: str = "none", hop: int | None = None
) -> dict[str, Any]:
    event: dict[str, Any] = {sc.CANDIDATE_ID: ident, sc.CANDIDATE_RANK: rank, sc.CANDIDATE_SCORE_KIND: score_kind}
    if score is not None:
        event[sc.CANDIDATE_SCORE] = score
    if hop is not None:
        event[sc.CANDIDATE_HOP] = hop
    event.update(content_receipt(text))
    return event


def exclusion_event(
    ident: str, rank: int, text: str, reason: str, detail: str | None, *, score: float | None = None, score_kind: str = "none", hop: int | None = None
) -> dict[str, Any]:
    event = candidate_event(ident, rank, text, score=score, score_kind=score_kind, hop=hop)
    event[sc.EXCLUSION_REASON] = reason
    if detail is not None:
        event[sc.EXCLUSION_DETAIL] = detail
    return event


def span_events(span: Any) -> list[tuple[str, dict[str, Any]]]:
    """The stage's records (schema 3: its columns read back, one per candidate)."""
    return spanutil.records(span)


def assert_events(span: Any, expected: list[tuple[str, dict[str, Any]]]) -> None:
    """Exact events, in order, with approximate float scores."""
    actual = span_events(span)
    assert [n for n, _ in actual] == [n for n, _ in expected], [n for n, _ in actual]
    for (name, got), (_, want) in zip(actual, expected, strict=False):
        got = dict(got)
        spanutil.pop_pointer(got, want)
        for key, value in want.items():
            assert key in got, f"{name}: missing {key} in {got}"
            value_got = got.pop(key)
            if isinstance(value, float):
                assert value_got == pytest.approx(value, rel=1e-9, abs=1e-12), (key, value_got, value)
            else:
                assert value_got == value, (name, key, value_got, value)
        assert not got, f"{name}: unexpected attributes {got}"


def digest_of(span: Any) -> str:
    items = []
    for name, attributes in span_events(span):
        if name == sc.EVENT_QUERY:
            items.append([name, f"hop:{attributes[sc.QUERY_HOP]}", attributes.get(sc.QUERY_SHA256, "")])
        else:
            items.append([name, attributes[sc.CANDIDATE_ID], spanutil.content_part(attributes)])
    return sorted_events_digest(items)


def pop_stage(span: Any, expected: dict[str, Any]) -> dict[str, Any]:
    """Pop the expected attributes (floats approximately), the event count and the digest
    (recomputed from the span's own events); return what is left (tests assert it is empty)."""
    attributes = spanutil.own(span)
    for key, value in expected.items():
        assert key in attributes, f"{span.name}: missing {key}"
        got = attributes.pop(key)
        if isinstance(value, float):
            assert got == pytest.approx(value), (key, got, value)
        else:
            assert (list(got) if isinstance(got, tuple) else got) == value, (span.name, key, got, value)
    assert attributes.pop(sc.EVENTS_COUNT) == len(spanutil.records(span))
    assert attributes.pop(sc.EVENTS_DIGEST) == digest_of(span)
    mirrorutil.pop_mirrors(attributes, span)
    return attributes


def stage_attributes(kind: str, component: str, *, n_in: int, n_out: int, n_excluded: int, status: str = "ok", **extra: Any) -> dict[str, Any]:
    attributes = {
        sc.SCHEMA: 5,
        sc.STAGE_KIND: kind,
        sc.STAGE_COMPONENT: component,
        sc.STAGE_STATUS: status,
        sc.CANDIDATES_IN: n_in,
        sc.CANDIDATES_OUT: n_out,
        sc.CANDIDATES_EXCLUDED: n_excluded,
    }
    attributes.update(extra)
    return attributes


def retrieval_mirrors(component: str, query: str | None, docs: Iterable[tuple[str, float | None]], top_k: int | None) -> dict[str, Any]:
    """The GenAI and OpenInference mirrors the recorder writes on a retrieve stage."""
    attributes: dict[str, Any] = {sc.GEN_AI_OPERATION_NAME: "retrieval", sc.GEN_AI_DATA_SOURCE_ID: component, sc.OPENINFERENCE_SPAN_KIND: "RETRIEVER"}
    if top_k is not None:
        attributes[sc.GEN_AI_RETRIEVAL_TOP_K] = top_k
    if query is not None:
        attributes[sc.OI_INPUT_VALUE] = query
    for i, (ident, score) in enumerate(docs):
        attributes[f"retrieval.documents.{i}.document.id"] = ident
        if score is not None:
            attributes[f"retrieval.documents.{i}.document.score"] = score
    return attributes


def by_component(spans: Iterable[Any], short: str) -> list[Any]:
    return [s for s in spans if s.name.endswith(" " + short) and not (s.attributes or {}).get(sc.STAGE_CONTINUATION)]


def one(spans: Iterable[Any], short: str) -> Any:
    found = by_component(spans, short)
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


def docs_equal(a: list[Document], b: list[Document]) -> bool:
    return [(d.id, d.page_content, d.metadata, type(d).__name__) for d in a] == [(d.id, d.page_content, d.metadata, type(d).__name__) for d in b]


def run_under_opentelemetry_instrument(script: str, tmp_path: Path, extra_env: dict[str, str] | None = None, timeout: float = 240) -> list[Any]:
    """``script`` under ``opentelemetry-instrument`` with only ``ragtrail_langchain`` enabled; the decoded spans."""
    here = Path(__file__).parent  # the app imports this module, which imports tests/spanutil.py
    env = {"PYTHONPATH": f"{here}:{here.parent}", **(extra_env or {})}
    return spanutil.run_under_opentelemetry_instrument(
        script, tmp_path, "ragtrail_langchain", service="langchain-app", extra_env=env, timeout=timeout
    )[1]
