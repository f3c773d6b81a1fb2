"""A small decorated RAG pipeline for `ragtrail gate` (offline: no model, no server, no network).

A keyword retriever over twelve documents (policies, some superseded, and pricing/limits tables), a
filter that drops superseded policies, a reranker, a context budget of three documents, and an answer
that cites what it used or refuses. The eval set next to it (eval.jsonl) labels which document answers
each question, in two slices: ``policy`` and ``tables``.

Run from this directory (docs/gate.md explains each step)::

    ragtrail gate baseline --pipeline rag:answer --set eval.jsonl --runs 3 -o gate-baseline.json
    ragtrail gate run --pipeline rag:answer --set eval.jsonl --baseline gate-baseline.json

``RAG_EXAMPLE_CHUNKER=flatten-tables`` simulates the chunking change of seed 000: a new chunker that
flattens tables drops their rows, so the table documents lose the words that matched. The answers
still read fine elsewhere; the ``tables`` slice fails on its own while ``policy`` holds::

    RAG_EXAMPLE_CHUNKER=flatten-tables ragtrail gate run --pipeline rag:answer --set eval.jsonl --baseline gate-baseline.json
"""

from __future__ import annotations

import os
import re
from typing import Any

import ragtrail

DOCS: dict[str, dict[str, str]] = {
    "policy-refund-2026": {"status": "current", "text": "Enterprise refund window: 45 days from invoice."},
    "policy-refund-2024": {"status": "superseded", "text": "Enterprise refund window: 30 days from invoice."},
    "policy-travel-2026": {"status": "current", "text": "Travel: economy class for flights under six hours."},
    "policy-expense-2026": {"status": "current", "text": "Expense reports are due within 30 days of the expense."},
    "policy-security-2026": {"status": "current", "text": "Security: laptops lock after five idle minutes."},
    "policy-leave-2026": {"status": "current", "text": "Parental leave: sixteen weeks paid for every parent."},
    "policy-leave-2023": {"status": "superseded", "text": "Parental leave: twelve weeks paid for the primary parent."},
    "table-pricing": {"status": "current", "text": "Pricing.\n| plan | seat price |\n| team | 12 dollars |\n| enterprise | 30 dollars |"},
    "table-quotas": {"status": "current", "text": "Quotas.\n| plan | api calls per day |\n| team | 10000 |\n| enterprise | 1000000 |"},
    "table-regions": {"status": "current", "text": "Regions.\n| region | data residency |\n| eu | frankfurt |\n| us | virginia |"},
    "table-sla": {"status": "current", "text": "Service levels.\n| plan | uptime sla |\n| team | 99.5 |\n| enterprise | 99.95 |"},
    "table-support": {"status": "current", "text": "Support.\n| plan | support response hours |\n| team | 24 |\n| enterprise | 1 |"},
}
STOP = {"the", "a", "an", "of", "for", "is", "are", "what", "our", "how", "many", "which", "do", "we", "per", "in", "on", "to"}


def _chunk(text: str) -> str:
    """The chunker: ``flatten-tables`` keeps only the prose before a table (the change under test)."""
    if os.environ.get("RAG_EXAMPLE_CHUNKER") == "flatten-tables":
        return "\n".join(line for line in text.splitlines() if not line.startswith("|"))
    return text


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9.]+", text.lower()) if w not in STOP}


@ragtrail.retriever(component="example.keyword_index", score_kind="similarity")
def search(query: str) -> list[dict[str, Any]]:
    ragtrail.current_stage().corpus_size(len(DOCS))
    asked = _words(query)
    hits = []
    for ident, doc in DOCS.items():
        text = _chunk(doc["text"])
        overlap = len(asked & _words(text))
        if overlap:
            hits.append({"id": ident, "content": text, "score": round(overlap / len(asked), 4), "status": doc["status"]})
    hits.sort(key=lambda d: (-d["score"], d["id"]))
    return hits[:8]


@ragtrail.filter(component="example.freshness")
def drop_superseded(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for doc in candidates:
        if doc["status"] == "superseded":
            ragtrail.current_stage().exclude(doc, "superseded", "a newer version exists")
    return [d for d in candidates if d["status"] != "superseded"]


@ragtrail.reranker(component="example.reranker", top_k=4)
def rerank(query: str, candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(candidates, key=lambda d: -d["score"])[:4]


@ragtrail.budgeter(component="example.context_budget", limit=3, unit="documents")
def fit(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return candidates[:3]


@ragtrail.pipeline(component="example.answer")
def answer(question: str) -> str:
    context = fit(rerank(question, drop_superseded(search(question))))
    if not context:
        ragtrail.answer("I don't know.", claim="none", refused=True)
        return "I don't know."
    best = context[0]
    ragtrail.cite([best["id"]])
    text = f"{best['content']} (source: {best['id']})"
    ragtrail.answer(text, claim="presence")
    return text


if __name__ == "__main__":
    print(answer("What is the refund window after an invoice?"))
