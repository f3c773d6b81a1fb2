"""An example RAG pipeline, instrumented the way a user would instrument theirs.

The story it tells (seed 000): asked for the enterprise refund window, the pipeline answers
"30 days" from a fourteen-month-old policy that outranks the current one (14 days) only because it
is written more cleanly. Along the way a superseded draft is filtered, a mirrored copy is removed
as a duplicate, the query is rewritten and a follow-up hop is searched, a reranker cuts to top-k and
a context budget trims one document and drops another. Nothing in the answer shows any of this;
the manifest shows all of it.

Scoring is plain Python (BM25 and a term-overlap reranker): no model, no network, a few milliseconds.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable
from importlib import resources
from typing import Any

from opentelemetry import trace

import ragtrail
from ragtrail.contract import semconv
from ragtrail.contract.receipts import receipt
from ragtrail.recorder.candidates import Candidate

QUESTION = "What is our refund window for enterprise customers?"
_STOP_WORDS = "a an and are as at be by can do for from how in is it of on or our the to what when which who with within you your customers customer"
_STOP = frozenset(_STOP_WORDS.split())
_WORD = re.compile(r"[a-z0-9]+")


def load_corpus() -> list[dict[str, Any]]:
    """The bundled policy corpus (src/ragtrail/demo/data/policies.json)."""
    text = resources.files("ragtrail.demo").joinpath("data/policies.json").read_text(encoding="utf-8")
    corpus: list[dict[str, Any]] = json.loads(text)
    return corpus


def tokens(text: str) -> list[str]:
    words = _WORD.findall(text.lower())
    return [w[:-1] if w.endswith("s") and len(w) > 4 else w for w in words if w not in _STOP]


class BM25:
    """Okapi BM25 over the corpus texts (k1=1.5, b=0.75)."""

    def __init__(self, docs: list[dict[str, Any]], k1: float = 1.5, b: float = 0.75) -> None:
        self.docs = docs
        self.k1, self.b = k1, b
        self.tf = [Counter(tokens(d["title"] + " " + d["text"])) for d in docs]
        self.len = [sum(tf.values()) for tf in self.tf]
        self.avg = sum(self.len) / len(self.len)
        df = Counter(t for tf in self.tf for t in tf)
        n = len(docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def search(self, query: str, k: int) -> list[tuple[dict[str, Any], float]]:
        q = tokens(query)
        scored = []
        for i, tf in enumerate(self.tf):
            s = 0.0
            for t in q:
                f = tf.get(t, 0)
                if f:
                    s += self.idf[t] * f * (self.k1 + 1) / (f + self.k1 * (1 - self.b + self.b * self.len[i] / self.avg))
            if s > 0:
                scored.append((self.docs[i], s))
        scored.sort(key=lambda p: (-p[1], p[0]["id"]))
        return scored[:k]


def _as_hit(doc: dict[str, Any], score: float) -> dict[str, Any]:
    meta = {k: doc[k] for k in ("updated_at", "version", "status", "source") if k in doc}
    return {"id": doc["id"], "content": doc["text"], "score": round(score, 4), "metadata": meta, "superseded_by": doc.get("superseded_by")}


def make_pipeline(
    corpus: list[dict[str, Any]], tracer: trace.Tracer | None = None, top_k: int = 4, budget_words: int = 90
) -> Callable[[str], dict[str, Any]]:
    """Build the decorated pipeline (``tracer=None`` uses the global TracerProvider)."""
    index = BM25(corpus)

    @ragtrail.query_transform(transform="rewrite", component="demo.keyword_rewrite", tracer=tracer)
    def rewrite(query: str) -> str:
        """Keyword rewrite: drop stop words, name the document type."""
        return " ".join(tokens(query)) + " policy"

    @ragtrail.retriever(component="demo.bm25", top_k=6, score_kind="bm25", tracer=tracer)
    def retrieve(query: str) -> list[dict[str, Any]]:
        stage = ragtrail.current_stage()  # the retrieve stage this decorator opened
        if stage is not None:
            stage.corpus_size(len(corpus))
        return [_as_hit(doc, score) for doc, score in index.search(query, 6)]

    @ragtrail.query_transform(transform="follow_up", component="demo.follow_up", tracer=tracer)
    def follow_up(query: str, hits: list[dict[str, Any]]) -> list[str]:
        """A second hop when a hit points at another document."""
        for hit in hits:
            if "see the exceptions for annual enterprise contracts" in hit["content"]:
                return ["refund exceptions for annual enterprise contracts"]
        return []

    def fuse(lists: list[list[dict[str, Any]]], k: int = 60) -> list[dict[str, Any]]:
        """Reciprocal rank fusion of the hops' results."""
        with ragtrail.stage("fuse", "demo.rrf", score_kind="rrf", tracer=tracer) as s:
            merged = [hit for hits in lists for hit in hits]
            s.inputs(merged)
            scores: dict[str, float] = {}
            first: dict[str, dict[str, Any]] = {}
            for hits in lists:
                for rank, hit in enumerate(hits):
                    scores[hit["id"]] = scores.get(hit["id"], 0.0) + 1.0 / (k + rank + 1)
                    first.setdefault(hit["id"], hit)
            fused = [dict(first[i], score=round(v, 5)) for i, v in sorted(scores.items(), key=lambda p: (-p[1], p[0]))]
            s.outputs(fused, score_kind="rrf")
            return fused

    @ragtrail.filter(component="demo.status_filter", tracer=tracer)
    def drop_superseded(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
        stage = ragtrail.current_stage()
        kept = []
        for doc in candidates:
            if doc["metadata"].get("status") == "superseded":
                if stage is not None:
                    stage.exclude(doc, "superseded", f"replaced by {doc['superseded_by']}")
            else:
                kept.append(doc)
        return kept

    @ragtrail.filter(component="demo.dedupe", tracer=tracer)
    def dedupe(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
        stage = ragtrail.current_stage()
        seen: dict[str, str] = {}
        kept = []
        for doc in candidates:
            key = receipt(doc["content"]).sha256
            if key in seen:
                if stage is not None:
                    stage.exclude(doc, "deduplicated", f"same text as {seen[key]}")
            else:
                seen[key] = doc["id"]
                kept.append(doc)
        return kept

    @ragtrail.reranker(component="demo.overlap_reranker", top_k=top_k, tracer=tracer)
    def rerank(query: str, candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Term overlap with the query, a little credit for density: clean, on-topic prose wins."""
        q = set(tokens(query))
        scored = []
        for doc in candidates:
            words = tokens(doc["content"])
            hits = sum(1 for w in words if w in q)
            overlap = len(q & set(words)) / max(1, len(q))
            scored.append(dict(doc, score=round(0.8 * overlap + 0.2 * min(1.0, 4 * hits / max(1, len(words))), 4)))
        scored.sort(key=lambda d: (-d["score"], d["id"]))
        return scored[:top_k]

    @ragtrail.budgeter(component="demo.context_budget", limit=budget_words, unit="words", tracer=tracer)
    def fit_budget(candidates: list[dict[str, Any]]) -> list[Any]:
        """Whole documents while they fit; trim one to the remaining budget (rule budget_trim@1); drop the rest."""
        used = 0
        context: list[dict[str, Any] | Candidate] = []
        for doc in candidates:
            words = doc["content"].split()
            room = budget_words - used
            if len(words) <= room:
                context.append(doc)
                used += len(words)
            elif room >= 12 and not any(isinstance(c, Candidate) for c in context):
                trimmed = " ".join(words[:room])
                context.append(
                    Candidate(
                        id=doc["id"],
                        content=trimmed,
                        score=doc["score"],
                        metadata=doc["metadata"],
                        transform_rule=semconv.RULE_BUDGET_TRIM,
                        derived_from=receipt(doc["content"]).sha256,
                    )
                )
                used += room
        stage = ragtrail.current_stage()
        if stage is not None:
            stage.set(budget_used=used)
        return context

    def generate(question: str, context: list[Any]) -> tuple[str, list[str]]:
        """A template 'model': answers from the first context passage that states an enterprise window."""
        for item in context:
            text = item.content if isinstance(item, Candidate) else item["content"]
            ident = item.id if isinstance(item, Candidate) else item["id"]
            match = re.search(r"enterprise[^.]*?(\d+) days?", text, re.IGNORECASE)
            if match:
                return (f"Enterprise customers can request a refund within {match.group(1)} days of the invoice [{ident}].", [ident])
        return "I could not find the enterprise refund window.", []

    @ragtrail.pipeline(component="demo.answer", tracer=tracer)
    def answer(question: str) -> dict[str, Any]:
        hop1 = rewrite(question)
        first = retrieve(hop1)
        lists = [first]
        for query in follow_up(hop1, first):
            lists.append(retrieve(query))
        candidates = dedupe(drop_superseded(fuse(lists)))
        context = fit_budget(rerank(hop1, candidates))
        text, cited = generate(question, context)
        ragtrail.answer(text, claim=semconv.CLAIM_PRESENCE if cited else semconv.CLAIM_NONE)
        ragtrail.cite(cited, tracer=tracer)
        trace_id = format(trace.get_current_span().get_span_context().trace_id, "032x")
        return {"answer": text, "cited": cited, "trace_id": trace_id}

    return answer
