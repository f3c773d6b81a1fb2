"""A real Haystack RAG script, unchanged, run under ``opentelemetry-instrument``: the ``ragtrail_haystack``
entry point instruments it with no code change and ragtrail's local store receives the spans."""

from __future__ import annotations

from pathlib import Path

import pytest

import spanutil
from spanutil import rec_events

pytest.importorskip("haystack")

from ragtrail.contract import semconv as sc  # noqa: E402

APP = """
    import asyncio

    from haystack import Document, Pipeline, component
    from haystack.components.joiners import DocumentJoiner
    from haystack.components.query import QueryExpander
    from haystack.components.rankers import LostInTheMiddleRanker
    from haystack.components.retrievers import MultiQueryTextRetriever
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.dataclasses import ChatMessage
    from haystack.document_stores.in_memory import InMemoryDocumentStore


    @component
    class ScriptedChatGenerator:
        @component.output_types(replies=list[ChatMessage])
        def run(self, messages: list[ChatMessage]):
            return {"replies": [ChatMessage.from_assistant('{"queries": ["sunlight power", "wind turbines"]}')]}


    store = InMemoryDocumentStore()
    store.write_documents([
        Document(id="solar", content="Solar panels convert sunlight into electricity"),
        Document(id="wind", content="Wind turbines convert wind into electricity"),
        Document(id="hydro", content="Hydropower uses flowing water to make electricity"),
        Document(id="coal", content="Coal and gas are fossil fuels"),
    ])

    p = Pipeline()
    p.add_component("expander", QueryExpander(chat_generator=ScriptedChatGenerator(), n_expansions=2))
    p.add_component("multi", MultiQueryTextRetriever(retriever=InMemoryBM25Retriever(store, top_k=2)))
    p.add_component("bm25", InMemoryBM25Retriever(store, top_k=3))
    p.add_component("joiner", DocumentJoiner(top_k=4))
    p.add_component("litm", LostInTheMiddleRanker(top_k=2))
    p.connect("expander.queries", "multi.queries")
    p.connect("multi", "joiner")
    p.connect("bm25", "joiner")
    p.connect("joiner", "litm")
    query = "solar electricity"
    out = p.run({"expander": {"query": query}, "bm25": {"query": query}})
    print("KEPT", ",".join(d.id for d in out["litm"]["documents"]))
    out = asyncio.run(p.run_async({"expander": {"query": query}, "bm25": {"query": query}}))
    print("KEPT", ",".join(d.id for d in out["litm"]["documents"]))
    print("APP-OK")
"""


def run_app(tmp_path: Path) -> tuple[str, list]:
    return spanutil.run_under_opentelemetry_instrument(
        APP, tmp_path, "ragtrail_haystack", service="haystack-app", extra_env={"HAYSTACK_TELEMETRY_ENABLED": "False"}, timeout=300
    )


def test_unchanged_app_under_opentelemetry_instrument(tmp_path):
    stdout, spans = run_app(tmp_path)
    kept = [line for line in stdout.splitlines() if line.startswith("KEPT")]
    assert len(kept) == 2 and kept[0] == kept[1]  # sync and async runs agree
    spans = [s for s in spans if s.attributes.get(sc.STAGE_KIND)]
    traces: dict[str, list] = {}
    for s in spans:
        traces.setdefault(s.trace_id, []).append(s)
    assert len(traces) == 2
    for trace_spans in traces.values():
        names = sorted(s.name for s in trace_spans)
        assert names == sorted(
            [
                "pipeline Pipeline",
                "query_transform QueryExpander",
                "fuse MultiQueryTextRetriever",
                "retrieve InMemoryBM25Retriever",
                "retrieve InMemoryBM25Retriever",
                "retrieve InMemoryBM25Retriever",
                "retrieve InMemoryBM25Retriever",
                "fuse DocumentJoiner",
                "rerank LostInTheMiddleRanker",
            ]
        )
        by_id = {s.span_id: s for s in trace_spans}
        (root,) = [s for s in trace_spans if s.parent_span_id is None]
        assert root.name == "pipeline Pipeline"
        assert root.attributes[sc.QUERY_TEXT] == "solar electricity"
        assert root.attributes[sc.QUERY_HOP] == 0
        multi = next(s for s in trace_spans if s.name == "fuse MultiQueryTextRetriever")
        inner = [s for s in trace_spans if s.name == "retrieve InMemoryBM25Retriever" and s.parent_span_id == multi.span_id]
        assert sorted(s.attributes[sc.QUERY_TEXT] for s in inner) == ["solar electricity", "sunlight power", "wind turbines"]
        for s in inner:
            hop = s.attributes[sc.QUERY_HOP]
            expected = {"solar electricity": 0, "sunlight power": 1, "wind turbines": 2}[s.attributes[sc.QUERY_TEXT]]
            assert hop == expected
            assert {e.attributes[sc.CANDIDATE_HOP] for e in rec_events(s) if e.name == sc.EVENT_CANDIDATE} == {hop}
        direct = [s for s in trace_spans if s.name == "retrieve InMemoryBM25Retriever" and s.parent_span_id == root.span_id]
        assert len(direct) == 1 and direct[0].attributes[sc.QUERY_HOP] == 0
        for s in trace_spans:
            if s is not root:
                assert s.parent_span_id in by_id
        litm = next(s for s in trace_spans if s.name == "rerank LostInTheMiddleRanker")
        joiner = next(s for s in trace_spans if s.name == "fuse DocumentJoiner")
        joined = [e.attributes[sc.CANDIDATE_ID] for e in rec_events(joiner) if e.name == sc.EVENT_CANDIDATE]
        assert len(joined) == joiner.attributes[sc.CANDIDATES_OUT] == litm.attributes[sc.CANDIDATES_IN] >= 3
        assert litm.attributes[sc.CANDIDATES_OUT] == 2
        assert [(e.attributes[sc.CANDIDATE_ID], e.attributes[sc.EXCLUSION_REASON]) for e in rec_events(litm) if e.name == sc.EVENT_EXCLUSION] == [
            (ident, "below_rank_cutoff") for ident in joined[2:]
        ]
        reasons = {e.attributes[sc.EXCLUSION_REASON] for e in rec_events(joiner) if e.name == sc.EVENT_EXCLUSION}
        assert reasons <= {"deduplicated", "below_rank_cutoff"} and "deduplicated" in reasons
        assert root.attributes[sc.COVERAGE_CORPUS_SIZE] == 4
        assert root.attributes[sc.COVERAGE_IN_CONTEXT] == 2
