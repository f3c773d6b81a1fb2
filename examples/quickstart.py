"""The 10-line example from the README: a retriever, a freshness filter and a reranker, traced."""

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

import ragtrail

DOCS = [
    {"id": "policy-2024-11", "content": "Enterprise refunds: 30 days.", "score": 0.86, "status": "current"},
    {"id": "policy-2026-05", "content": "Enterprise refunds: 45 days.", "score": 0.78, "status": "current"},
    {"id": "policy-2026-05-draft", "content": "Draft: 60 days.", "score": 0.74, "status": "superseded"},
    {"id": "sales-deck-q1", "content": "Priority support for enterprise.", "score": 0.41, "status": "current"},
]


@ragtrail.retriever(score_kind="similarity")
def search(query: str) -> list[dict]:
    return DOCS


@ragtrail.filter
def drop_superseded(candidates: list[dict]) -> list[dict]:
    for doc in candidates:
        if doc["status"] == "superseded":
            ragtrail.current_stage().exclude(doc, "superseded", "replaced by policy-2026-05")
    return [d for d in candidates if d["status"] != "superseded"]


@ragtrail.reranker(top_k=2)
def rerank(query: str, candidates: list[dict]) -> list[dict]:
    return sorted(candidates, key=lambda d: d["score"], reverse=True)[:2]


@ragtrail.pipeline
def answer(query: str) -> list[dict]:
    context = rerank(query, drop_superseded(search(query)))
    ragtrail.cite([context[0]["id"]])
    return context


if __name__ == "__main__":
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)
    print([d["id"] for d in answer("what is our refund window for enterprise?")])
