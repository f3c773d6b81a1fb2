"""Shared pieces of the LlamaIndex instrumentation tests (no tests here): a deterministic offline
embedding, a scripted LLM standing in for a paid API, a small corpus, the instrumentor fixture, and
readers for spans and events."""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

import mirrorutil

pytest.importorskip("llama_index.core")

import llama_index.core  # noqa: E402

# tiktoken works offline only from llama-index-core's bundled encodings
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(Path(llama_index.core.__file__).parent / "_static" / "tiktoken_cache"))

from llama_index.core import VectorStoreIndex  # noqa: E402
from llama_index.core.base.embeddings.base import BaseEmbedding  # noqa: E402
from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen, LLMMetadata  # noqa: E402
from llama_index.core.llms.callbacks import llm_completion_callback  # noqa: E402
from llama_index.core.llms.custom import CustomLLM  # noqa: E402
from llama_index.core.schema import TextNode  # noqa: E402

from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.contract.receipts import receipt, sorted_events_digest  # noqa: E402
from ragtrail.instrumentation.llama_index import LlamaIndexInstrumentor  # noqa: E402

DIM = 64
_WORD = re.compile(r"[a-z0-9]+")


def _vector(text: str) -> list[float]:
    """Bag of words hashed into DIM buckets (md5: the same in every process), L2-normalised."""
    vec = [0.0] * DIM
    for word in _WORD.findall(text.lower()):
        digest = hashlib.md5(word.encode()).digest()
        vec[digest[0] % DIM] += 1.0 if digest[1] % 2 else 0.5
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


class WordEmbedding(BaseEmbedding):
    """A real ``BaseEmbedding`` whose similarity follows shared words, so rankings mean something."""

    def _get_query_embedding(self, query: str) -> list[float]:
        return _vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return _vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return _vector(text)


class ScriptedLLM(CustomLLM):
    """Stands in for a hosted LLM (the one thing that cannot run here): a fixed reply per task."""

    rerank_reply: str = "Doc: 2, Relevance: 9\nDoc: 1, Relevance: 6"
    queries_reply: str = "cats that sleep all day\nhow do cats hunt mice"
    context_window: int = 3900

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(context_window=self.context_window, num_output=64, model_name="scripted")

    def _reply(self, prompt: str) -> str:
        if "search queries" in prompt:
            return self.queries_reply
        if "Relevance" in prompt or "relevance score" in prompt:
            return self.rerank_reply
        if "hypothetical" in prompt.lower() or "passage" in prompt.lower():
            return "Cats are small domestic felines that sleep and hunt."
        return "An answer."

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self._reply(prompt))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        yield CompletionResponse(text=self._reply(prompt), delta=self._reply(prompt))


TOPICS = [
    "cats sleep most of the day in warm places",
    "cats hunt mice and birds at night",
    "dogs need daily walks and play",
    "the domestic cat is a small carnivorous mammal",
    "parrots can learn to imitate human speech",
    "kittens are born blind and open their eyes after a week",
    "dogs were domesticated from wolves",
    "a cat purrs when content and sometimes when stressed",
    "goldfish have a memory longer than three seconds",
    "lions are big cats that live in prides",
    "hamsters store food in their cheek pouches",
    "cats groom themselves with rough tongues",
]
DATES = [f"2024-{m:02d}-01" for m in range(1, 13)]


def corpus() -> list[TextNode]:
    return [TextNode(text=text, id_=f"d{i:02d}", metadata={"date": DATES[i], "topic": text.split()[0]}) for i, text in enumerate(TOPICS)]


def build_index() -> VectorStoreIndex:
    return VectorStoreIndex(corpus(), embed_model=WordEmbedding())


@pytest.fixture
def instrumentor(tracer_provider, span_exporter):
    """The instrumentor, NOT yet instrumented (tests compare runs before and after)."""
    inst = LlamaIndexInstrumentor()
    yield inst
    if inst.is_instrumented_by_opentelemetry:
        inst.uninstrument()


@pytest.fixture
def instrumented(instrumentor, tracer_provider, span_exporter):
    instrumentor.instrument(tracer_provider=tracer_provider)
    yield span_exporter


def attrs(span: Any) -> dict[str, Any]:
    import spanutil

    return spanutil.attrs(span)


def events(span: Any, name: str | None = None) -> list[dict[str, Any]]:
    """The stage's records (schema 3: its columns read back, one per candidate)."""
    import spanutil

    return spanutil.events(span, name)


def named(spans: Iterable[Any], name: str) -> list[Any]:
    return [s for s in spans if s.name == name]


def one(spans: Iterable[Any], name: str) -> Any:
    found = named(spans, name)
    assert len(found) == 1, f"expected one {name!r}, got {[s.name for s in spans]}"
    return found[0]


def pop_all(mapping: dict[str, Any], expected: dict[str, Any]) -> None:
    for key, value in expected.items():
        assert key in mapping, f"missing {key}"
        actual = mapping.pop(key)
        if value is not ...:
            assert actual == value, f"{key}: {actual!r} != {value!r}"


def query_attrs(text: str, hop: int, transform: str, parent: int | None = None) -> dict[str, Any]:
    rec = receipt(text)
    expected = {
        sc.QUERY_HOP: hop,
        sc.QUERY_TRANSFORM: transform,
        sc.QUERY_TEXT: text,
        sc.QUERY_CHARS: rec.chars,
        sc.QUERY_BYTES: rec.bytes,
        sc.QUERY_SHA256: rec.sha256,
    }
    if parent is not None:
        expected[sc.QUERY_PARENT_HOP] = parent
    return expected


def content_attrs(text: str) -> dict[str, Any]:
    rec = receipt(text)
    return {sc.CANDIDATE_CONTENT_CHARS: rec.chars, sc.CANDIDATE_CONTENT_BYTES: rec.bytes, sc.CANDIDATE_CONTENT_SHA256: rec.sha256}


def digest_of(span: Any) -> str:
    items = []
    import spanutil

    for name, a in spanutil.records(span):
        if name == sc.EVENT_QUERY:
            items.append((name, f"hop:{a[sc.QUERY_HOP]}", a.get(sc.QUERY_SHA256, "")))
        else:
            items.append((name, a[sc.CANDIDATE_ID], spanutil.content_part(a)))
    return sorted_events_digest(items)


def pop_stage_tail(a: dict[str, Any], span: Any) -> None:
    """The count and digest every stage stamps last, checked against the span's own events."""
    import spanutil

    pop_all(a, {sc.EVENTS_COUNT: len(spanutil.records(span)), sc.EVENTS_DIGEST: digest_of(span)})
    mirrorutil.pop_mirrors(a, span)
