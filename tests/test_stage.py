"""The stage recorder on the real SDK: exact attributes and events per docs/semconv.md §1-3 and §6."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import importlib
import json

import pytest
from google.protobuf.json_format import MessageToJson
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import mirrorutil
import ragtrail
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import receipt, sorted_events_digest
from spanutil import attrs, by_name, content_part, events, pop_all, records

DOCS = [
    {"id": "policy-2024-11", "content": "Refunds within 30 days.", "score": 0.86, "metadata": {"updated_at": "2024-11-01", "status": "current"}},
    {"id": "policy-2026-05", "content": "Refunds within 45 days.", "score": 0.78, "metadata": {"updated_at": "2026-05-01", "status": "current"}},
    {"id": "policy-2026-05-draft", "content": "Draft: refunds within 60 days.", "score": 0.74, "metadata": {"status": "superseded"}},
    {"id": "sales-deck-q1", "content": "Enterprise plans include priority support.", "score": 0.41, "metadata": {}},
]


def _sha(text: str) -> str:
    return receipt(text).sha256


def _candidate_event(doc: dict, rank: int, kind: str, hop: int | None = 0) -> dict:
    event = {
        sc.CANDIDATE_ID: doc["id"],
        sc.CANDIDATE_RANK: rank,
        sc.CANDIDATE_SCORE: doc["score"],
        sc.CANDIDATE_SCORE_KIND: kind,
        sc.CANDIDATE_CONTENT_CHARS: len(doc["content"]),
        sc.CANDIDATE_CONTENT_BYTES: len(doc["content"].encode()),
        sc.CANDIDATE_CONTENT_SHA256: _sha(doc["content"]),
    }
    if hop is not None:
        event[sc.CANDIDATE_HOP] = hop
    return event


def _digest(span) -> str:
    items = []
    for name, a in records(span):
        if name == sc.EVENT_QUERY:
            items.append((name, f"hop:{a[sc.QUERY_HOP]}", a.get(sc.QUERY_SHA256, "")))
        else:
            items.append((name, a[sc.CANDIDATE_ID], content_part(a)))
    return sorted_events_digest(items)


def test_retrieve_stage_exact_attributes_and_events(span_exporter):
    query = "what is our refund window for enterprise?"
    with ragtrail.stage("retrieve", "my_app.search", top_k=4, score_kind="similarity") as s:
        assert s.query(query) == 0
        s.outputs(DOCS)
    (span,) = span_exporter.get_finished_spans()
    assert span.name == "retrieve search"
    assert span.kind == trace.SpanKind.CLIENT
    # schema 3: the candidates are columns on the stage span, one homogeneous array per field, what
    # is the same for every candidate said once; no per-candidate event
    columns = {
        k: v
        for k, v in span.attributes.items()
        if k.startswith(sc.COLUMNS_PREFIX) and k not in (sc.CANDIDATES_IN, sc.CANDIDATES_OUT, sc.CANDIDATES_EXCLUDED)
    }
    assert columns == {
        sc.COLUMN_IDS: tuple(d["id"] for d in DOCS),
        sc.COLUMN_SCORES: tuple(d["score"] for d in DOCS),
        sc.COLUMN_SCORE_KIND: "similarity",
        sc.COLUMN_HOP: 0,
        sc.COLUMN_CONTENT_CHARS: tuple(len(d["content"]) for d in DOCS),
        # schema 5: ASCII content, so each row's bytes are its chars, said once
        sc.COLUMN_CONTENT_ENCODING: sc.CONTENT_ASCII,
        sc.COLUMN_CONTENT_SHA256: tuple(_sha(d["content"]) for d in DOCS),
    }
    assert [len(d["content"].encode()) for d in DOCS] == [len(d["content"]) for d in DOCS]
    a = attrs(span)
    pop_all(
        a,
        {
            sc.SCHEMA: 5,
            sc.STAGE_KIND: "retrieve",
            sc.STAGE_COMPONENT: "my_app.search",
            sc.STAGE_STATUS: "ok",
            sc.STAGE_TOP_K: 4,
            sc.QUERY_HOP: 0,
            sc.QUERY_TRANSFORM: "none",
            sc.QUERY_TEXT: query,
            sc.QUERY_CHARS: len(query),
            sc.QUERY_BYTES: len(query),
            sc.QUERY_SHA256: _sha(query),
            sc.CANDIDATES_IN: 0,
            sc.CANDIDATES_OUT: 4,
            sc.CANDIDATES_EXCLUDED: 0,
            sc.EVENTS_COUNT: 4,
            sc.EVENTS_DIGEST: _digest(span),
            # mirrors (docs/semconv.md §6)
            sc.GEN_AI_OPERATION_NAME: "retrieval",
            sc.GEN_AI_DATA_SOURCE_ID: "my_app.search",
            sc.GEN_AI_RETRIEVAL_TOP_K: 4,
            sc.OPENINFERENCE_SPAN_KIND: "RETRIEVER",
            sc.OI_INPUT_VALUE: query,
        },
    )
    for i, doc in enumerate(DOCS):
        pop_all(a, {f"retrieval.documents.{i}.document.id": doc["id"], f"retrieval.documents.{i}.document.score": doc["score"]})
    mirrorutil.pop_mirrors(a, span)
    assert a == {}
    assert span.events == ()
    assert events(span) == [_candidate_event(d, i, "similarity") for i, d in enumerate(DOCS)]
    # the count and digest, then the stage receipt, are the LAST attributes written (the last to be evicted)
    assert list(span.attributes)[-4:] == [sc.EVENTS_COUNT, sc.EVENTS_DIGEST, sc.STAGE_RECEIPT, sc.STAGE_RECEIPT_FIELDS]


def test_filter_stage_explicit_and_derived_exclusions(span_exporter):
    with ragtrail.stage("filter", "my_app.freshness") as s:
        s.inputs(DOCS)
        s.exclude(DOCS[2], "superseded", "policy-2026-05 replaces it")
        s.outputs([DOCS[0], DOCS[1]])
    (span,) = span_exporter.get_finished_spans()
    a = attrs(span)
    pop_all(a, {sc.CANDIDATES_IN: 4, sc.CANDIDATES_OUT: 2, sc.CANDIDATES_EXCLUDED: 2, sc.STAGE_STATUS: "ok"})
    exclusions = events(span, sc.EVENT_EXCLUSION)
    assert [(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_RANK], e[sc.EXCLUSION_REASON], e.get(sc.EXCLUSION_DETAIL)) for e in exclusions] == [
        ("policy-2026-05-draft", 2, "superseded", "policy-2026-05 replaces it"),
        ("sales-deck-q1", 3, "unexplained", None),
    ]
    assert [e[sc.CANDIDATE_ID] for e in events(span, sc.EVENT_CANDIDATE)] == ["policy-2024-11", "policy-2026-05"]


def test_reasons_derived_from_the_knobs(span_exporter):
    with ragtrail.stage("rerank", "r", top_k=2, score_kind="rerank") as s:
        s.inputs(DOCS)
        # the reranker's own scores (handing on the inputs' scores is a pass-through: see
        # tests/test_reason_truth.py)
        s.outputs([{**DOCS[1], "score": 0.93}, {**DOCS[0], "score": 0.88}])
    with ragtrail.stage("filter", "t", threshold=0.5) as s:
        s.inputs(DOCS, score_kind="similarity")
        s.outputs(DOCS[:3])
    with ragtrail.stage("budget", "b", budget_limit=12, budget_unit="tokens") as s:
        s.set(budget_used=11)
        s.inputs(DOCS[:2])
        s.outputs(DOCS[:1])
    rerank, threshold, budget = span_exporter.get_finished_spans()
    assert [(e[sc.CANDIDATE_ID], e[sc.EXCLUSION_REASON], e[sc.EXCLUSION_DETAIL]) for e in events(rerank, sc.EVENT_EXCLUSION)] == [
        ("policy-2026-05-draft", "below_rank_cutoff", "top_k=2"),
        ("sales-deck-q1", "below_rank_cutoff", "top_k=2"),
    ]
    assert [(e[sc.CANDIDATE_ID], e[sc.EXCLUSION_REASON], e[sc.EXCLUSION_DETAIL]) for e in events(threshold, sc.EVENT_EXCLUSION)] == [
        ("sales-deck-q1", "below_score_threshold", "score=0.41 < threshold=0.5")
    ]
    assert [(e[sc.CANDIDATE_ID], e[sc.EXCLUSION_REASON], e[sc.EXCLUSION_DETAIL]) for e in events(budget, sc.EVENT_EXCLUSION)] == [
        ("policy-2026-05", "budget_exceeded", "limit=12 tokens used=11")
    ]
    assert attrs(budget)[sc.STAGE_BUDGET_USED] == 11 and attrs(budget)[sc.STAGE_BUDGET_UNIT] == "tokens"
    # output scores of a reranker are rerank scores; its excluded inputs keep no borrowed kind
    assert {e[sc.CANDIDATE_SCORE_KIND] for e in events(rerank, sc.EVENT_CANDIDATE)} == {"rerank"}
    assert {e[sc.CANDIDATE_SCORE_KIND] for e in events(rerank, sc.EVENT_EXCLUSION)} == {"none"}


def test_distance_threshold_is_upper_bound(span_exporter):
    hits = [{"id": "a", "content": "a", "score": 0.1}, {"id": "b", "content": "b", "score": 0.9}]
    with ragtrail.stage("retrieve", "chroma", threshold=0.5, score_kind="distance") as s:
        s.inputs(hits, score_kind="distance")
        s.outputs(hits[:1])
    (span,) = span_exporter.get_finished_spans()
    assert [(e[sc.CANDIDATE_ID], e[sc.EXCLUSION_REASON], e[sc.EXCLUSION_DETAIL]) for e in events(span, sc.EVENT_EXCLUSION)] == [
        ("b", "below_score_threshold", "score=0.9 > threshold=0.5")
    ]


def test_duplicates_by_id_and_by_content_are_deduplicated(span_exporter):
    a = {"id": "a", "content": "same text"}
    a_again = {"id": "a", "content": "same text"}
    b_copy = {"id": "b", "content": "same text"}
    with ragtrail.stage("filter", "dedupe") as s:
        s.inputs([a, a_again, b_copy])
        s.outputs([a])
    (span,) = span_exporter.get_finished_spans()
    assert [(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_RANK], e[sc.EXCLUSION_REASON], e[sc.EXCLUSION_DETAIL]) for e in events(span, sc.EVENT_EXCLUSION)] == [
        ("a", 1, "deduplicated", "duplicate id of a"),
        ("b", 2, "deduplicated", "same content as a"),
    ]
    assert attrs(span)[sc.CANDIDATES_IN] == attrs(span)[sc.CANDIDATES_OUT] + attrs(span)[sc.CANDIDATES_EXCLUDED]


def test_query_hops_chain_through_a_pipeline(span_exporter):
    @ragtrail.query_transform(transform="rewrite")
    def rewrite(query):
        return "enterprise refund window policy"

    @ragtrail.query_transform(transform="multi_query")
    def variants(query):
        return [query + " 2026", query + " current"]

    @ragtrail.retriever(score_kind="similarity")
    def search(query):
        return [d for d in DOCS if d["score"] > 0.7]

    @ragtrail.pipeline
    def answer(query):
        q = rewrite(query)
        for v in variants(q):
            search(v)
        search("an untracked rewrite")
        return "answer"

    assert answer("refund window?") == "answer"
    spans = span_exporter.get_finished_spans()
    pipe = by_name(spans, "pipeline answer")
    assert (pipe.attributes[sc.QUERY_HOP], pipe.attributes[sc.QUERY_TRANSFORM]) == (0, "none")
    rw = by_name(spans, "query_transform rewrite")
    assert rw.attributes[sc.QUERY_HOP] == 0
    assert events(rw, sc.EVENT_QUERY) == [
        {
            sc.QUERY_HOP: 1,
            sc.QUERY_PARENT_HOP: 0,
            sc.QUERY_TRANSFORM: "rewrite",
            sc.QUERY_TEXT: "enterprise refund window policy",
            **receipt("enterprise refund window policy").as_attributes("ragtrail.query"),
        }
    ]
    mq = by_name(spans, "query_transform variants")
    assert [(e[sc.QUERY_HOP], e[sc.QUERY_PARENT_HOP], e[sc.QUERY_TRANSFORM]) for e in events(mq, sc.EVENT_QUERY)] == [
        (2, 1, "multi_query"),
        (3, 1, "multi_query"),
    ]
    searches = [s for s in spans if s.name == "retrieve search"]
    # the untracked hop's parent is not known (issue 12: never "the previous hop", here variant 3)
    assert [(s.attributes[sc.QUERY_HOP], s.attributes.get(sc.QUERY_PARENT_HOP), s.attributes[sc.QUERY_TRANSFORM]) for s in searches] == [
        (2, 1, "multi_query"),
        (3, 1, "multi_query"),
        (4, None, "untracked"),
    ]
    assert [s.attributes.get(sc.STAGE_FINDINGS) for s in searches] == [
        None,
        None,
        ("query hop 4 was changed by no instrumented transform (untracked)",),
    ]
    assert [{e[sc.CANDIDATE_HOP] for e in events(s, sc.EVENT_CANDIDATE)} for s in searches] == [{2}, {3}, {4}]
    # every stage is a child of the pipeline span, in one trace
    assert {s.context.trace_id for s in spans} == {pipe.context.trace_id}
    assert all(s.parent.span_id == pipe.context.span_id for s in spans if s is not pipe)


def test_pipeline_coverage_and_citations(span_exporter):
    @ragtrail.retriever(score_kind="similarity")
    def search(query):
        return DOCS

    @ragtrail.budgeter(limit=2, unit="documents")
    def fit(query, docs):
        return docs[:2]

    @ragtrail.pipeline
    def answer(query):
        with ragtrail.stage("retrieve", "store") as s:
            s.corpus_size(1003)
        context = fit(query, search(query))
        ragtrail.cite([context[0]["id"]])
        return context

    answer("q")
    spans = span_exporter.get_finished_spans()
    pipe = by_name(spans, "pipeline answer")
    a = attrs(pipe)
    pop_all(
        a,
        {sc.COVERAGE_CORPUS_SIZE: 1003, sc.COVERAGE_RETRIEVED: 4, sc.COVERAGE_IN_CONTEXT: 2, sc.COVERAGE_CITED: 1, sc.CITED_IDS: ["policy-2024-11"]},
    )
    cite = by_name(spans, "cite cite")
    assert [e[sc.CANDIDATE_ID] for e in events(cite, sc.EVENT_CANDIDATE)] == ["policy-2024-11"]
    budget = by_name(spans, "budget fit")
    assert [e[sc.EXCLUSION_REASON] for e in events(budget, sc.EVENT_EXCLUSION)] == ["budget_exceeded"] * 2


def test_statuses_empty_failed_degraded(span_exporter):
    with ragtrail.stage("retrieve", "empty") as s:
        s.outputs([])
    with pytest.raises(KeyError, match="boom") as raised, ragtrail.stage("rerank", "api"):
        raise KeyError("boom")
    with ragtrail.stage("rerank", "llm") as s:
        s.inputs(DOCS[:2])
        s.outputs(DOCS[:2])
        s.set_status("degraded", failure_class="parse_error", fallback="input_order")
    with pytest.raises(TimeoutError), ragtrail.stage("retrieve", "slow"):
        raise TimeoutError()
    empty, failed, degraded, timeout = span_exporter.get_finished_spans()
    assert empty.attributes[sc.STAGE_STATUS] == "empty" and sc.STAGE_FAILURE_CLASS not in empty.attributes
    assert (failed.attributes[sc.STAGE_STATUS], failed.attributes[sc.STAGE_FAILURE_CLASS]) == ("failed", "exception:KeyError")
    assert failed.status.status_code == StatusCode.ERROR
    assert [e.name for e in failed.events] == ["exception"]
    assert raised.type is KeyError
    a = attrs(degraded)
    pop_all(a, {sc.STAGE_STATUS: "degraded", sc.STAGE_FAILURE_CLASS: "parse_error", sc.STAGE_FALLBACK: "input_order"})
    assert (timeout.attributes[sc.STAGE_STATUS], timeout.attributes[sc.STAGE_FAILURE_CLASS]) == ("failed", "timeout")


def test_capture_modes_content_and_metadata(span_exporter):
    long = "x" * 300
    ragtrail.set_capture(content="preview", metadata=["updated_at", "nested"])
    with ragtrail.stage("retrieve", "r") as s:
        s.outputs([{"id": "a", "content": long, "metadata": {"updated_at": "2024-11-01", "nested": {"k": [1]}, "secret": "no"}}])
    ragtrail.set_capture(content="full", metadata=[])
    with ragtrail.stage("retrieve", "r") as s:
        s.outputs([{"id": "a", "content": long}])
    preview, full = span_exporter.get_finished_spans()
    (e,) = events(preview)
    assert e[sc.CANDIDATE_CONTENT_PREVIEW] == "x" * 256
    assert e["ragtrail.candidate.meta.updated_at"] == "2024-11-01"
    assert e["ragtrail.candidate.meta.nested"] == '{"k":[1]}'
    assert "ragtrail.candidate.meta.secret" not in e
    (e,) = events(full)
    assert e[sc.CANDIDATE_CONTENT_TEXT] == long and sc.CANDIDATE_CONTENT_PREVIEW not in e


def _otlp_bytes(spans) -> bytes:
    return MessageToJson(encode_spans(spans)).encode() + encode_spans(spans).SerializeToString()


def test_hash_mode_keeps_the_query_out_of_every_exported_byte(span_exporter, monkeypatch):
    monkeypatch.setenv("RAGTRAIL_CAPTURE_QUERY", "hash")
    ragtrail.settings.reset()
    secret = "patient 4471 refund dispute"

    @ragtrail.query_transform
    def rewrite(query):
        return query + " policy"

    @ragtrail.retriever
    def search(query):
        raise ValueError(f"index rejected {query}")

    @ragtrail.reranker(top_k=1)
    def rerank(query, candidates):
        return candidates[:1]

    @ragtrail.pipeline
    def answer(query):
        q = rewrite(query)
        rerank(q, DOCS)
        with contextlib.suppress(ValueError):
            search(q)

    answer(secret)
    spans = span_exporter.get_finished_spans()
    wire = _otlp_bytes(spans)
    for needle in (secret, "patient 4471", json.dumps(secret)[1:-1]):
        assert needle.encode() not in wire
    pipe = by_name(spans, "pipeline answer")
    assert pipe.attributes[sc.QUERY_SHA256] == _sha(secret) and sc.QUERY_TEXT not in pipe.attributes
    failed = by_name(spans, "retrieve search")
    assert failed.status.description == "ValueError" and failed.events == ()


def test_query_off_mode_writes_no_receipt(span_exporter, monkeypatch):
    monkeypatch.setenv("RAGTRAIL_CAPTURE_QUERY", "off")
    ragtrail.settings.reset()
    with ragtrail.stage("retrieve", "r") as s:
        s.query("hidden")
    (span,) = span_exporter.get_finished_spans()
    assert not any(k.startswith("ragtrail.query.") and k not in (sc.QUERY_HOP, sc.QUERY_TRANSFORM) for k in span.attributes)
    assert sc.OI_INPUT_VALUE not in span.attributes


def test_mirrors_can_be_switched_off(span_exporter, monkeypatch):
    monkeypatch.setenv("RAGTRAIL_MIRROR_GENAI", "false")
    monkeypatch.setenv("RAGTRAIL_MIRROR_OPENINFERENCE", "0")
    ragtrail.settings.reset()
    with ragtrail.stage("retrieve", "r") as s:
        s.outputs(DOCS)
    (span,) = span_exporter.get_finished_spans()
    assert not [k for k in span.attributes if not k.startswith("ragtrail.")]


def test_invalid_environment_falls_back_to_private_defaults(monkeypatch, caplog):
    monkeypatch.setenv("RAGTRAIL_CAPTURE_QUERY", "verbose")
    monkeypatch.setenv("RAGTRAIL_CAPTURE_CONTENT", "everything")
    ragtrail.settings.reset()
    config = ragtrail.settings.get()
    assert (config.query, config.content) == ("hash", "off")
    assert "RAGTRAIL_CAPTURE_QUERY='verbose'" in caplog.text
    with pytest.raises(ValueError):
        ragtrail.set_capture(query="verbose")


def _provider(limits: SpanLimits | None = None) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=limits) if limits else TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def test_thousand_candidates_are_columns_on_one_span_and_nothing_is_lost():
    provider, exporter = _provider()
    tracer = provider.get_tracer("t")
    hits = [{"id": f"doc-{i}", "content": f"chunk {i}", "score": 1 - i / 1000} for i in range(1000)]
    with ragtrail.stage("retrieve", "store", tracer=tracer, score_kind="similarity") as s:
        s.query("q")
        s.outputs(hits)
    (main,) = exporter.get_finished_spans()  # schema 3: no continuation span is needed
    assert main.dropped_events == 0 and main.events == ()
    assert main.attributes[sc.EVENTS_COUNT] == 1000 and sc.EVENTS_SPANS not in main.attributes
    stitched = events(main)
    assert [e[sc.CANDIDATE_ID] for e in stitched] == [h["id"] for h in hits]
    assert [e[sc.CANDIDATE_RANK] for e in stitched] == list(range(1000))
    assert [e[sc.CANDIDATE_SCORE] for e in stitched] == [h["score"] for h in hits]
    digest = sorted_events_digest((sc.EVENT_CANDIDATE, e[sc.CANDIDATE_ID], e[sc.CANDIDATE_CONTENT_SHA256]) for e in stitched)
    assert main.attributes[sc.EVENTS_DIGEST] == digest
    # the OpenInference mirror is capped so it never evicts ragtrail's own attributes (columns included)
    assert main.dropped_attributes == 0


def test_many_exclusion_reasons_spill_into_continuation_spans_and_nothing_is_lost():
    """One exclusion event per reason: 300 distinct reasons do not fit one span's 128 events, so
    they spill into continuation spans, in order, and the stage's count and digest cover them all."""
    provider, exporter = _provider()
    tracer = provider.get_tracer("t")
    hits = [{"id": f"doc-{i}", "content": f"chunk {i}", "score": 0.5} for i in range(301)]
    with ragtrail.stage("filter", "rules", tracer=tracer) as s:
        s.inputs(hits)
        for i, hit in enumerate(hits[1:], start=1):
            s.exclude(hit, f"custom:rule_{i:03d}", f"rule {i}")
        s.outputs(hits[:1])
    spans = exporter.get_finished_spans()
    main = [x for x in spans if not x.attributes.get(sc.STAGE_CONTINUATION)][0]
    continuations = sorted((x for x in spans if x.attributes.get(sc.STAGE_CONTINUATION)), key=lambda x: x.attributes[sc.STAGE_CONTINUATION_INDEX])
    assert all(x.dropped_events == 0 for x in spans)
    assert main.attributes[sc.EVENTS_COUNT] == 301
    assert main.attributes[sc.EVENTS_SPANS] == 1 + len(continuations) == 3
    assert all(c.parent.span_id == main.context.span_id and c.name == main.name for c in continuations)
    stitched = records(main, continuations)
    assert [(n, e[sc.CANDIDATE_ID], e.get(sc.CANDIDATE_RANK), e.get(sc.EXCLUSION_REASON), e.get(sc.EXCLUSION_DETAIL)) for n, e in stitched] == [
        (sc.EVENT_CANDIDATE, "doc-0", 0, None, None)
    ] + [(sc.EVENT_EXCLUSION, f"doc-{i}", i, f"custom:rule_{i:03d}", f"rule {i}") for i in range(1, 301)]
    digest = sorted_events_digest((n, e[sc.CANDIDATE_ID], e[sc.CANDIDATE_CONTENT_SHA256]) for n, e in stitched)
    assert main.attributes[sc.EVENTS_DIGEST] == digest
    assert main.dropped_attributes == 0


def test_hostile_limits_leave_the_loss_detectable():
    provider, exporter = _provider(SpanLimits(max_events=5, max_span_attributes=8, max_attribute_length=20))
    tracer = provider.get_tracer("t")
    hits = [{"id": f"doc-{i}", "content": f"chunk number {i}", "score": 0.5} for i in range(12)]
    with ragtrail.stage("retrieve", "store", tracer=tracer) as s:
        s.query("a query longer than twenty characters")
        s.outputs(hits)
    spans = exporter.get_finished_spans()
    main = [x for x in spans if not x.attributes.get(sc.STAGE_CONTINUATION)][0]
    # count and digest were written last, so they survive the attribute cap...
    assert main.attributes[sc.EVENTS_COUNT] == 12
    assert main.dropped_attributes > 0  # ...and the evicted rest is counted by the SDK
    # the digest itself was cut to 20 characters: a reader sees it is not 64 hex digits
    assert len(main.attributes[sc.EVENTS_DIGEST]) == 20
    # the columns were evicted with the rest: 12 stamped, none arrived, which a reader counts
    assert sc.COLUMN_IDS not in main.attributes and records(main) == []
    assert all(x.dropped_events == 0 for x in spans)


def test_sampled_out_stage_does_no_recording_work(monkeypatch):
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    provider = TracerProvider(sampler=ALWAYS_OFF)
    tracer = provider.get_tracer("t")
    calls = []
    recorder = importlib.import_module("ragtrail.recorder.stage")
    monkeypatch.setattr(recorder, "receipt", lambda v: calls.append(v))
    monkeypatch.setattr(recorder, "adapt", lambda v: calls.append(v))

    @ragtrail.reranker(top_k=1, tracer=tracer)
    def rerank(query, candidates):
        return candidates[:1]

    result = rerank("q", DOCS)
    assert result == DOCS[:1] and calls == []


def test_context_crosses_threads_and_tasks(span_exporter):
    @ragtrail.retriever
    def search(query):
        return [{"id": query, "content": query}]

    @ragtrail.retriever
    async def asearch(query):
        await asyncio.sleep(0)
        return [{"id": query, "content": query}]

    @ragtrail.pipeline
    def threaded(query):
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(contextvars.copy_context().run, search, f"{query}-{i}") for i in range(4)]
            return [f.result() for f in futures]

    @ragtrail.pipeline
    async def gathered(query):
        return await asyncio.gather(*(asearch(f"{query}-{i}") for i in range(10)))

    threaded("t")
    asyncio.run(gathered("a"))
    spans = span_exporter.get_finished_spans()
    for root_name, n in (("pipeline threaded", 4), ("pipeline gathered", 10)):
        root = by_name(spans, root_name)
        children = [s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id]
        assert len(children) == n
        assert {c.context.trace_id for c in children} == {root.context.trace_id}
        # hops are numbered per pipeline, shared across the threads/tasks of that pipeline
        assert sorted(c.attributes[sc.QUERY_HOP] for c in children) == list(range(1, n + 1))


def test_a_budget_trim_is_recorded_with_its_rule_and_lineage(span_exporter):
    from ragtrail.contract.receipts import CHANGED_CITED, classify
    from ragtrail.recorder.candidates import Candidate

    original = {"id": "long", "content": "word " * 50}
    trimmed = Candidate(id="long", content="word " * 20, transform_rule="budget_trim@1", derived_from=receipt(original["content"]).sha256)
    with ragtrail.stage("budget", "trim", budget_limit=20, budget_unit="words") as s:
        s.inputs([original])
        s.outputs([trimmed])
    (span,) = span_exporter.get_finished_spans()
    (e,) = events(span, sc.EVENT_CANDIDATE)
    assert e[sc.CANDIDATE_TRANSFORM_RULE] == "budget_trim@1"
    assert e[sc.CANDIDATE_TRANSFORM_DERIVED_FROM] == receipt(original["content"]).sha256
    assert e[sc.CANDIDATE_CONTENT_SHA256] == receipt(trimmed.content).sha256
    assert span.attributes[sc.CANDIDATES_EXCLUDED] == 0
    # the reader can check the trim against the original's receipt with the cited rule
    assert classify(trimmed.content, receipt(original["content"]), [e[sc.CANDIDATE_TRANSFORM_RULE]]) == CHANGED_CITED
    assert trimmed.hop is None  # the caller's Candidate object was not touched


def test_the_copy_that_left_is_matched_by_object_then_score(span_exporter):
    low = {"id": "a", "content": "same", "score": 0.2}
    high = {"id": "a", "content": "same", "score": 0.9}
    with ragtrail.stage("fuse", "joiner") as s:
        s.inputs([low, high, {"id": "b", "content": "b", "score": 0.1}, {"id": "b", "content": "b", "score": 0.1}])
        s.outputs([high])  # the best-scored copy (a later one) is kept, as Haystack's joiner does
    (span,) = span_exporter.get_finished_spans()
    assert [
        (e[sc.CANDIDATE_ID], e[sc.CANDIDATE_RANK], e.get(sc.CANDIDATE_SCORE), e[sc.EXCLUSION_REASON]) for e in events(span, sc.EVENT_EXCLUSION)
    ] == [("a", 0, 0.2, "deduplicated"), ("b", 2, 0.1, "unexplained"), ("b", 3, 0.1, "deduplicated")]


def test_a_failed_stage_excluded_nothing(span_exporter):
    with pytest.raises(RuntimeError), ragtrail.stage("rerank", "api", top_k=2) as s:
        s.inputs(DOCS)
        s.exclude(DOCS[3], "not_permitted")
        raise RuntimeError("HTTP 500")
    (span,) = span_exporter.get_finished_spans()
    a = attrs(span)
    assert (a[sc.CANDIDATES_IN], a[sc.CANDIDATES_OUT], a[sc.CANDIDATES_EXCLUDED], a[sc.STAGE_STATUS]) == (4, 0, 1, "failed")
    assert [(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_RANK], e[sc.EXCLUSION_REASON]) for e in events(span, sc.EVENT_EXCLUSION)] == [
        ("sales-deck-q1", 3, "not_permitted")
    ]


def test_a_produced_query_that_is_already_known_keeps_its_hop(span_exporter):
    @ragtrail.query_transform(transform="multi_query")
    def variants(query):
        return [query, query + " 2026"]

    @ragtrail.retriever
    def search(query):
        return [{"id": query}]

    @ragtrail.pipeline
    def answer(query):
        for v in variants(query):
            search(v)

    answer("refunds")
    spans = span_exporter.get_finished_spans()
    mq = by_name(spans, "query_transform variants")
    assert [(e[sc.QUERY_HOP], e[sc.QUERY_PARENT_HOP]) for e in events(mq, sc.EVENT_QUERY)] == [(1, 0)]
    searches = [s for s in spans if s.name == "retrieve search"]
    assert [(s.attributes[sc.QUERY_HOP], s.attributes[sc.QUERY_TRANSFORM]) for s in searches] == [(0, "none"), (1, "multi_query")]


def test_exclusions_in_later_stages_carry_the_hop_that_found_them(span_exporter):
    @ragtrail.retriever
    def search(query):
        return [{"id": "a"}, {"id": "b"}]

    @ragtrail.reranker(top_k=1)
    def rerank(query, candidates):
        return candidates[:1]

    @ragtrail.pipeline
    def answer(query):
        return rerank(query, search(query + " rewritten"))

    answer("q")
    rr = by_name(span_exporter.get_finished_spans(), "rerank rerank")
    assert [(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_HOP]) for e in events(rr)] == [("a", 1), ("b", 1)]


def test_the_fast_event_path_exports_exactly_what_add_event_would():
    """ragtrail skips the SDK's per-attribute re-check only where its result is known in advance;
    the exported events (OTLP) must be identical to the public add_event path's."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    ragtrail.set_capture(content="preview", metadata=["tags", "updated_at"])
    docs = [
        {"id": f"d{i}", "content": f"chunk é {i}", "score": i / 7, "metadata": {"tags": ["a", "b"], "updated_at": "2026-01-01"}} for i in range(300)
    ]

    def exported(limits: SpanLimits | None) -> list:
        provider, exporter = _provider(limits)
        with ragtrail.stage("rerank", "r", top_k=100, tracer=provider.get_tracer("t")) as s:
            s.inputs(docs)
            for i, doc in enumerate(docs[100:]):  # one event per reason: 200 events
                s.exclude(doc, f"custom:rule_{i}")
            s.outputs(docs[:100])
        spans = sorted(exporter.get_finished_spans(), key=lambda x: x.attributes.get(sc.STAGE_CONTINUATION_INDEX, 0))
        return [(e.name, dict(e.attributes), e.dropped_attributes, type(e.attributes).__name__) for span in spans for e in span.events], encode_spans(
            spans
        )

    fast_events, fast_otlp = exported(None)  # default limits: the fast path
    slow_events, slow_otlp = exported(SpanLimits(max_attribute_length=10**9))  # a length limit: add_event
    assert len(fast_events) == 200 and fast_events == slow_events
    assert fast_events[0][3] == "BoundedAttributes" and fast_events[0][1]["ragtrail.candidates.meta.tags"] == ('["a","b"]',)

    def strip(request):
        return [
            [(e.name, list(e.attributes), e.dropped_attributes_count) for e in span.events]
            for rs in request.resource_spans
            for ss in rs.scope_spans
            for span in ss.spans
        ]

    assert strip(fast_otlp) == strip(slow_otlp)

    # the span attributes too (sdk_events.set_attributes: columns, mirrors, counts, receipt)
    def spans_of(request):
        return [(list(span.attributes), span.dropped_attributes_count) for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans]

    assert spans_of(fast_otlp) == spans_of(slow_otlp)


def test_the_fast_attribute_path_evicts_and_counts_exactly_as_set_attributes_would():
    """Under a tight attribute count limit the SDK evicts the oldest attributes and counts them; the
    fast path stores through the SDK's own method, so the exported span is the same."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    docs = [{"id": f"d{i}", "content": f"chunk {i}", "score": i / 7} for i in range(30)]

    def exported(limits: SpanLimits) -> list:
        provider, exporter = _provider(limits)
        with ragtrail.stage("rerank", "r", top_k=10, tracer=provider.get_tracer("t")) as s:
            s.query("q")
            s.inputs(docs)
            s.outputs(docs[:10])
        request = encode_spans(exporter.get_finished_spans())
        return [(list(span.attributes), span.dropped_attributes_count) for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans]

    fast = exported(SpanLimits(max_span_attributes=20))
    slow = exported(SpanLimits(max_span_attributes=20, max_attribute_length=10**9))  # the public path
    assert fast == slow and fast[0][1] > 0  # the same attributes kept, the same number evicted


def test_the_fast_attribute_path_on_an_ended_span_writes_nothing_and_never_hangs():
    """An ended span takes the SDK's own answer (a warning, nothing written), outside the span's lock:
    the SDK's lock is not reentrant, so calling ``set_attributes`` under it would hang the host."""
    import threading

    from ragtrail.recorder import sdk_events

    provider, exporter = _provider(SpanLimits())
    span = provider.get_tracer("t").start_span("s")
    span.end()
    # the race: another thread ended the span after the fast path's checks (the SDK freezes the
    # attributes at end, so only that window reaches the locked branch); reopen the window by hand
    span._attributes._immutable = False
    done = threading.Event()
    worker = threading.Thread(target=lambda: (sdk_events.set_attributes(span, {"k": "v"}), done.set()), daemon=True)
    worker.start()
    worker.join(30)  # a hang guard, not a speed target: it returns at once or never
    assert done.is_set()
    assert "k" not in (span.attributes or {}) and "k" not in (exporter.get_finished_spans()[0].attributes or {})


def test_a_tight_event_attribute_limit_still_counts_drops():
    provider, exporter = _provider(SpanLimits(max_event_attributes=3))
    hits = [{"id": "a", "content": "x", "score": 0.5}, {"id": "b", "content": "y", "score": 0.4}]
    with ragtrail.stage("filter", "r", tracer=provider.get_tracer("t")) as s:
        s.inputs(hits)
        s.outputs(hits[:1])
    (span,) = exporter.get_finished_spans()
    (event,) = span.events  # the one exclusion reason's event
    # 8 written (ids, first rank, scores, score kind, content chars/encoding/sha256, reason), the oldest 5
    # evicted; the reason is written last, so it is the one that stays searchable
    assert len(event.attributes) == 3 and event.dropped_attributes == 5
    assert list(event.attributes) == [sc.COLUMN_CONTENT_ENCODING, sc.COLUMN_CONTENT_SHA256, sc.EXCLUSION_REASON]
