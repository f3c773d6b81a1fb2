"""Recording survives hostile SDK limits: every loss is detectable from what arrives.

A real pipeline recorded with ``ragtrail.stage`` runs twice through the whole-trace processor and
the OTLP/HTTP exporter to a real receiver: once under default SDK limits (the reference, which
must arrive with no loss and no false alarm) and once under
``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT=20``, ``OTEL_SPAN_EVENT_COUNT_LIMIT=5`` and
``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT=8``. :func:`damage_signals` is a reader: it looks only at what
arrived (dropped counts, ``ragtrail.events.count``, ``ragtrail.events.digest``, receipts checked
with ``ragtrail.contract.receipts.classify``). The test compares each hostile stage with its reference and
requires that every stage that changed in transit raises at least one signal, and that no receipt
reads ``intact`` for a payload that changed.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider

import ragtrail
import spanutil
from otlp_server import OTLPServer, ReceivedSpan, otlp_server  # noqa: F401  (fixture)
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import (
    CHANGED_CITED,
    CHANGED_UNCITED,
    INTACT,
    PREVIEW_RULE,
    UNVERIFIABLE,
    Receipt,
    classify,
    receipt,
    sorted_events_digest,
)
from ragtrail.export.whole_trace import WholeTraceSpanProcessor
from ragtrail.inspect.columns import expand
from ragtrail.recorder.candidates import Candidate
from ragtrail.sampling import RagtrailSampler

HOSTILE = {
    "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "20",
    "OTEL_SPAN_EVENT_COUNT_LIMIT": "5",
    "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "8",
}
_HEX64 = re.compile(r"[0-9a-f]{64}")
QUERY = "which policy documents describe the 2024 travel reimbursement rules?"
RAGTRAIL_EVENTS = (sc.EVENT_CANDIDATE, sc.EVENT_EXCLUSION, sc.EVENT_QUERY)


def corpus(n: int) -> list[Candidate]:
    docs = []
    for i in range(n):
        doc_id = f"doc-{i}" if i % 2 else f"https://intranet.example.org/policies/travel/{i}"
        docs.append(Candidate(id=doc_id, content=f"Policy text number {i}: " + "reimbursement " * (3 + i % 7), score=round(1.0 - i / (n + 1), 6)))
    return docs


def run_pipeline(tracer: Any, docs: list[Candidate]) -> dict[str, Any]:
    """A pipeline with a query rewrite, retrieval, rerank cut-off and a filter with explicit reasons."""
    with ragtrail.stage("pipeline", "tests.hostile", tracer=tracer) as pipe:
        pipe.query(QUERY)
        with ragtrail.stage("query_transform", "tests.rewriter", tracer=tracer) as qt:
            qt.query(QUERY)
            rewritten = qt.add_query_variant("travel reimbursement policy 2024", transform="rewrite")
        with ragtrail.stage("retrieve", "langchain_community.retrievers.BM25Retriever", tracer=tracer, top_k=len(docs), score_kind="bm25") as r:
            r.query("travel reimbursement policy 2024", transform="rewrite", parent_hop=0)
            r.outputs(docs)
        kept = docs[: max(1, len(docs) // 2)]
        with ragtrail.stage("rerank", "tests.cross_encoder", tracer=tracer, top_k=len(kept)) as rr:
            rr.inputs(docs)
            rr.outputs(kept)
        with ragtrail.stage("filter", "tests.freshness", tracer=tracer) as f:
            f.inputs(kept)
            f.exclude(kept[0], "superseded", "replaced by the 2025 edition of the travel policy")
            f.outputs(kept[1:])
    return {"rewritten_hop": rewritten, "contents": {d.id: d.content for d in docs}}


def record(server: OTLPServer, docs: list[Candidate]) -> tuple[list[ReceivedSpan], dict[str, Any]]:
    server.clear()
    provider = TracerProvider(sampler=RagtrailSampler(1.0))  # span limits come from the environment
    processor = WholeTraceSpanProcessor(OTLPSpanExporter(endpoint=server.traces_url), schedule_delay_millis=20)
    provider.add_span_processor(processor)
    truth = run_pipeline(provider.get_tracer("tests.hostile"), docs)
    provider.shutdown()
    assert processor.loss.total_traces_dropped == processor.loss.total_traces_export_failed == 0
    spans = sorted(server.spans(), key=lambda s: (s.start_time_unix_nano, s.span_id))
    return spans, truth


def stage_groups(spans: list[ReceivedSpan]) -> list[list[ReceivedSpan]]:
    """Each stage span followed by its continuation spans (children carrying only events.count and
    the continuation marker), in continuation order. Works from structure, not from attributes that
    a limit may have evicted: a continuation is a child with the same span name."""
    by_id = {s.span_id: s for s in spans}
    groups: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        parent = by_id.get(span.parent_span_id)
        if parent is not None and parent.name == span.name:
            groups[parent.span_id].append(span)
        else:
            groups[span.span_id] = [span]
    return list(groups.values())


class Record(NamedTuple):
    """One record as a reader decodes it (schema 3: a column row, or a query event)."""

    name: str
    attributes: dict[str, Any]
    dropped_attributes_count: int


def span_records(span: ReceivedSpan, head: bool = True) -> list[Record]:
    """The records one span carries: a stage span its outputs (columns) and its events' records, a
    continuation span (``head`` False) only its events' records (the reader's decoding)."""
    wire = [(e.dropped_attributes_count, e.name, e.attributes) for e in span.events if e.name in RAGTRAIL_EVENTS]
    return [Record(name, dict(a), dropped or 0) for dropped, name, a in expand(span.attributes if head else {}, wire, 0)]


def ragtrail_events(group: list[ReceivedSpan]) -> list[Record]:
    return [r for i, span in enumerate(group) for r in span_records(span, i == 0)]


def damage_signals(group: list[ReceivedSpan]) -> list[str]:
    """What a reader can tell from the received stage alone. Empty means: arrived intact."""
    signals = []
    head = group[0]
    for span in group:
        if span.dropped_attributes_count:
            signals.append(f"{span.name}: {span.dropped_attributes_count} attributes dropped")
        if span.dropped_events_count:
            signals.append(f"{span.name}: {span.dropped_events_count} events dropped")
        for key, value in span.attributes.items():
            if (key.endswith(".sha256") or key == sc.EVENTS_DIGEST) and not _HEX64.fullmatch(str(value)) and key != sc.COLUMN_CONTENT_SHA256:
                signals.append(f"{span.name}: {key} damaged ({len(str(value))} chars)")
        if (
            span is head
            and sc.CANDIDATES_OUT in span.attributes
            and sc.EVENTS_COUNT in span.attributes
            and span.attributes[sc.CANDIDATES_OUT]
            and sc.COLUMN_IDS not in span.attributes
        ):
            signals.append(f"{span.name}: candidate columns missing")
        for event in span_records(span, span is head):
            if event.dropped_attributes_count:
                signals.append(f"{span.name}: event attributes dropped")
            for key, value in event.attributes.items():
                if key.endswith(".sha256") and not _HEX64.fullmatch(str(value)):
                    signals.append(f"{span.name}: event {key} damaged")
            content_receipt = Receipt.from_attributes(event.attributes, "ragtrail.candidate.content")
            for key, rules in ((sc.CANDIDATE_CONTENT_TEXT, ()), (sc.CANDIDATE_CONTENT_PREVIEW, (PREVIEW_RULE,))):
                if key in event.attributes:
                    verdict = classify(event.attributes[key], content_receipt, rules)
                    if verdict not in (INTACT, CHANGED_CITED):
                        signals.append(f"{span.name}: {event.attributes.get(sc.CANDIDATE_ID)} content {verdict}")
    events = ragtrail_events(group)
    count = head.attributes.get(sc.EVENTS_COUNT)
    digest = head.attributes.get(sc.EVENTS_DIGEST)
    if count is None or digest is None:
        signals.append("events.count/digest missing")
    else:
        if count != len(events):
            signals.append(f"events.count {count} != {len(events)} received")
        items = []
        for e in events:
            a = e.attributes
            if e.name == sc.EVENT_QUERY:
                items.append((e.name, f"hop:{a.get(sc.QUERY_HOP)}", a.get(sc.QUERY_SHA256, "")))
            else:
                items.append((e.name, a.get(sc.CANDIDATE_ID, ""), spanutil.content_part(a)))
        if sorted_events_digest(items) != digest:
            signals.append("events.digest does not match the events received")
    # receipted payloads: the query text on the span
    text = head.attributes.get(sc.QUERY_TEXT)
    query_receipt = Receipt.from_attributes(head.attributes, "ragtrail.query")
    if text is not None and classify(text, query_receipt) != INTACT:
        signals.append("query text does not match its receipt")
    return signals


def _differences(reference: list[ReceivedSpan], hostile: list[ReceivedSpan]) -> list[str]:
    """What changed in a stage between the reference and the hostile run (ground truth, not a reader)."""
    ref, got = reference[0], hostile[0]
    assert ref.name == got.name
    diffs = [f"{k} missing" for k in sorted(set(ref.attributes) - set(got.attributes))]
    diffs += [f"{k} changed" for k, v in got.attributes.items() if k in ref.attributes and ref.attributes[k] != v]
    ref_events = [(e.name, e.attributes) for e in ragtrail_events(reference)]
    got_events = [(e.name, e.attributes) for e in ragtrail_events(hostile)]
    if ref_events != got_events:
        diffs.append("events differ")
    return diffs


@pytest.mark.parametrize("content", ["off", "preview"])
def test_every_loss_under_hostile_limits_is_detectable_from_what_arrives(
    otlp_server: OTLPServer,
    monkeypatch: pytest.MonkeyPatch,
    content: str,  # noqa: F811
) -> None:
    ragtrail.set_capture(content=content)
    docs = corpus(12)
    reference, truth = record(otlp_server, docs)
    ref_groups = stage_groups(reference)
    assert [g[0].name.split()[0] for g in ref_groups] == ["pipeline", "query_transform", "retrieve", "rerank", "filter"]
    for group in ref_groups:  # the reference arrives intact, with no false alarm
        assert damage_signals(group) == [], group[0].name

    for name, value in HOSTILE.items():
        monkeypatch.setenv(name, value)
    hostile, _ = record(otlp_server, docs)
    # the trace is still whole: the processor's stamp is not subject to the SDK's limits
    (root,) = [s for s in hostile if s.parent_span_id == ""]
    assert root.attributes[sc.TRACE_SPAN_COUNT] == len(hostile)
    # events were never evicted: the recorder spilled them into continuation spans
    assert all(s.dropped_events_count == 0 and len(s.events) <= 5 for s in hostile)
    hostile_groups = stage_groups(hostile)
    assert [g[0].name for g in hostile_groups] == [g[0].name for g in ref_groups]
    # the candidates are columns on the stage span (schema 3): the 8-attribute cap evicts them (and
    # the SDK counts it); that loss is detected below, from what arrived
    assert all(g[0].dropped_attributes_count > 0 for g in hostile_groups)

    # every stage that changed in transit says so, from what arrived alone
    changed_stages = 0
    for ref_group, group in zip(ref_groups, hostile_groups, strict=False):
        changed = _differences(ref_group, group)
        signals = damage_signals(group)
        if changed:
            changed_stages += 1
            assert signals, f"{group[0].name}: changed ({changed[:3]}) but nothing that arrived says so"
    assert changed_stages == len(ref_groups)  # these limits damage every stage; none goes unnoticed

    # no receipt reads intact for a payload that changed
    by_id = {d.id: d for d in docs}
    for span in hostile:
        for event in span_records(span):
            a = event.attributes
            if sc.CANDIDATE_CONTENT_SHA256 not in a:
                continue
            rec = Receipt.from_attributes(a, "ragtrail.candidate.content")
            original = by_id.get(a[sc.CANDIDATE_ID])
            if original is None:  # the id itself was cut: identity is lost, and the receipt says so
                assert len(a[sc.CANDIDATE_ID]) == 20 and any(d.id.startswith(a[sc.CANDIDATE_ID]) for d in docs)
                assert classify("anything", rec) == UNVERIFIABLE
                continue
            preview = a.get(sc.CANDIDATE_CONTENT_PREVIEW)
            if preview is not None:
                verdict = classify(preview, rec, [PREVIEW_RULE])
                assert verdict in (UNVERIFIABLE, CHANGED_UNCITED), verdict
            assert classify(original.content, rec) == UNVERIFIABLE  # the receipt itself was cut
            assert a[sc.CANDIDATE_CONTENT_CHARS] == receipt(original.content).chars  # ints are never cut
        text = span.attributes.get(sc.QUERY_TEXT)
        if text is not None:
            verdict = classify(text, Receipt.from_attributes(span.attributes, "ragtrail.query"))
            assert verdict in (UNVERIFIABLE, CHANGED_UNCITED)


def test_default_limits_and_a_thousand_candidates_lose_nothing(otlp_server: OTLPServer) -> None:  # noqa: F811
    docs = corpus(1000)
    spans, truth = record(otlp_server, docs)
    (root,) = [s for s in spans if s.parent_span_id == ""]
    assert root.attributes[sc.TRACE_SPAN_COUNT] == len(spans)
    groups = stage_groups(spans)
    for group in groups:
        assert damage_signals(group) == [], group[0].name
    (retrieve,) = [g for g in groups if g[0].name.startswith("retrieve")]
    assert len(retrieve) == 1  # 1000 candidates are one span's columns (schema 3): no continuation needed
    assert len(retrieve[0].attributes[sc.COLUMN_IDS]) == 1000 and retrieve[0].dropped_attributes_count == 0
    events = [e for e in ragtrail_events(retrieve) if e.name == sc.EVENT_CANDIDATE]
    assert [e.attributes[sc.CANDIDATE_ID] for e in events] == [d.id for d in docs]
    assert [e.attributes[sc.CANDIDATE_RANK] for e in events] == list(range(1000))
    for event, doc in zip(events, docs, strict=False):
        rec = Receipt.from_attributes(event.attributes, "ragtrail.candidate.content")
        assert classify(doc.content, rec) == INTACT
    (rerank,) = [g for g in groups if g[0].name.startswith("rerank")]
    exclusions = [e for e in ragtrail_events(rerank) if e.name == sc.EVENT_EXCLUSION]
    assert [e.attributes[sc.CANDIDATE_ID] for e in exclusions] == [d.id for d in docs[500:]]
    assert {e.attributes[sc.EXCLUSION_REASON] for e in exclusions} == {sc.REASON_BELOW_RANK_CUTOFF}


def test_a_backend_that_cuts_values_like_tempo_is_caught_by_the_receipts(otlp_server: OTLPServer) -> None:  # noqa: F811
    """Tempo's distributor stores string values cut to 2,048 bytes (and a Collector's truncate_all
    does the same), counted nowhere in the trace: the producer's receipts make it visible."""
    ragtrail.set_capture(content="full")
    long_doc = Candidate(id="handbook", content="Ünïcode travel handbook. " * 400)  # ~10 KB
    short_doc = Candidate(id="memo", content="A short memo.")
    otlp_server.truncate_strings_over(2048)
    provider = TracerProvider(sampler=RagtrailSampler(1.0))
    provider.add_span_processor(WholeTraceSpanProcessor(OTLPSpanExporter(endpoint=otlp_server.traces_url), schedule_delay_millis=20))
    tracer = provider.get_tracer("tests.backend_cut")
    with ragtrail.stage("retrieve", "tests.store", tracer=tracer) as r:
        r.query("travel handbook " * 200)  # 3,200 characters
        r.outputs([long_doc, short_doc])
    provider.shutdown()
    (span,) = otlp_server.spans()
    text = span.attributes[sc.QUERY_TEXT]
    assert len(text.encode()) <= 2048
    assert classify(text, Receipt.from_attributes(span.attributes, "ragtrail.query")) == CHANGED_UNCITED
    verdicts = {}
    for event in span_records(span):
        a = event.attributes
        rec = Receipt.from_attributes(a, "ragtrail.candidate.content")
        verdicts[a[sc.CANDIDATE_ID]] = classify(a[sc.CANDIDATE_CONTENT_TEXT], rec)
    assert verdicts == {"handbook": CHANGED_UNCITED, "memo": INTACT}
    assert damage_signals([span]) == [
        "retrieve store: handbook content changed_uncited",
        "query text does not match its receipt",
    ]
