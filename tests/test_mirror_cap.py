"""``RAGTRAIL_MIRROR_DOCUMENTS`` (docs/semconv.md §6): each mirrored document list carries at most N
documents, the first N in the list's order, whole; a cut list says how many of how many; unset,
``all`` or an N beyond the list writes exactly what it writes without the setting. Real SDK, exact
attributes: every expected mirror attribute is popped, nothing else may be left."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import mirrorutil
import ragtrail
from fixtures.ragtrail_traces import all_spans, attr, rag_run, record, rewrite_store, store_lines
from ragtrail import settings
from ragtrail.contract import semconv as sc
from ragtrail.inspect.manifest import build
from ragtrail.inspect.sources import FileSource

HITS = [{"id": f"d{i}", "content": f"text {i}", "score": round(0.9 - i / 10, 2)} for i in range(5)]
ENV = sc.ENV_MIRROR_DOCUMENTS


@pytest.fixture(autouse=True)
def _no_cap_in_environment(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    settings.reset()


def _provider(limits: SpanLimits | None = None) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=limits) if limits is not None else TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _retrieve(hits: list[dict[str, Any]] = HITS, limits: SpanLimits | None = None) -> ReadableSpan:
    provider, exporter = _provider(limits)
    with ragtrail.stage("retrieve", "app.search", top_k=len(hits), tracer=provider.get_tracer("t")) as s:
        s.query("q")
        s.outputs([dict(h) for h in hits])
    (span,) = exporter.get_finished_spans()
    return span


def _rerank() -> ReadableSpan:
    """A rerank of 5 inputs keeping 3 (the two it drops are excluded with a reason)."""
    provider, exporter = _provider()
    with ragtrail.stage("rerank", "app.rerank", top_k=3, tracer=provider.get_tracer("t")) as s:
        s.query("q")
        s.inputs([dict(h) for h in HITS])
        s.exclude(HITS[3], "below_rank_cutoff")
        s.exclude(HITS[4], "below_rank_cutoff")
        s.outputs([dict(HITS[2], score=0.99), dict(HITS[0], score=0.8), dict(HITS[1], score=0.7)], score_kind="rerank")
    (span,) = exporter.get_finished_spans()
    return span


def _mirror_attributes(span: ReadableSpan) -> dict[str, Any]:
    """Every mirror attribute: the non-ragtrail keys and ragtrail's mirrored/total pairs."""
    return {k: v for k, v in span.attributes.items() if not k.startswith("ragtrail.") or k.startswith("ragtrail.mirror.")}


def _cards(prefix: str, docs: list[tuple[str, float, str | None]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, (ident, score, meta) in enumerate(docs):
        out[f"{prefix}.{i}.document.id"] = ident
        out[f"{prefix}.{i}.document.score"] = score
        out[f"{prefix}.{i}.document.content"] = f"text {ident[1:]}"
        if meta is not None:
            out[f"{prefix}.{i}.document.metadata"] = meta
    return out


def _pop_exactly(span: ReadableSpan, expected: dict[str, Any], against_events: bool = True) -> None:
    """Pop every expected mirror attribute (with its value), then check nothing else is a mirror."""
    a = _mirror_attributes(span)
    for key, value in expected.items():
        assert a.pop(key) == value, key
    assert a == {}
    if not against_events:  # mirrorutil reads the pair as OpenInference's count
        return
    # and the mirrors say what ragtrail's own events say (mirrorutil rebuilds them from the events)
    left = dict(span.attributes)
    mirrorutil.pop_mirrors(left, span)
    assert not [k for k in left if not k.startswith("ragtrail.") or k.startswith("ragtrail.mirror.")]


def _retrieve_expected(n: int | None) -> dict[str, Any]:
    shown = HITS if n is None else HITS[:n]
    expected: dict[str, Any] = {
        sc.OPENINFERENCE_SPAN_KIND: "RETRIEVER",
        sc.OI_INPUT_VALUE: "q",
        sc.OI_INPUT_MIME_TYPE: "text/plain",
        sc.GEN_AI_OPERATION_NAME: "retrieval",
        sc.GEN_AI_DATA_SOURCE_ID: "app.search",
        sc.GEN_AI_RETRIEVAL_TOP_K: 5,
        sc.GEN_AI_RETRIEVAL_QUERY_TEXT: "q",
        sc.GEN_AI_RETRIEVAL_DOCUMENTS: json.dumps(
            [{"content": h["content"], "id": h["id"], "score": h["score"]} for h in shown], separators=(",", ":")
        ),
        **_cards(sc.OI_RETRIEVAL_DOCUMENTS, [(h["id"], h["score"], None) for h in shown]),
    }
    if n is not None and n < len(HITS):
        expected[sc.MIRROR_OUTPUT_DOCUMENTS_MIRRORED] = n
        expected[sc.MIRROR_OUTPUT_DOCUMENTS_TOTAL] = len(HITS)
    return expected


def test_a_retrieve_list_carries_the_first_n_and_says_so(monkeypatch):
    monkeypatch.setenv(ENV, "2")
    settings.reset()
    ragtrail.set_capture(content="full")
    span = _retrieve()
    expected = _retrieve_expected(2)
    assert json.loads(expected[sc.GEN_AI_RETRIEVAL_DOCUMENTS]) == [
        {"id": "d0", "score": 0.9, "content": "text 0"},
        {"id": "d1", "score": 0.8, "content": "text 1"},
    ]
    assert (expected[sc.MIRROR_OUTPUT_DOCUMENTS_MIRRORED], expected[sc.MIRROR_OUTPUT_DOCUMENTS_TOTAL]) == (2, 5)
    _pop_exactly(span, expected)
    # ragtrail's own columns and events still hold every candidate
    assert span.attributes[sc.COLUMN_IDS] == ("d0", "d1", "d2", "d3", "d4")
    assert span.dropped_attributes == 0


_REASON = json.dumps({sc.EXCLUSION_REASON: "below_rank_cutoff"}, separators=(",", ":"))


def _rerank_expected(n: int | None) -> dict[str, Any]:
    outputs = [("d2", 0.99, None), ("d0", 0.8, None), ("d1", 0.7, None)]
    inputs = [("d0", 0.9, None), ("d1", 0.8, None), ("d2", 0.7, None), ("d3", 0.6, _REASON), ("d4", 0.5, _REASON)]
    expected: dict[str, Any] = {
        sc.OPENINFERENCE_SPAN_KIND: "RERANKER",
        sc.OI_INPUT_VALUE: "q",
        sc.OI_INPUT_MIME_TYPE: "text/plain",
        sc.OI_RERANKER_QUERY: "q",
        sc.OI_RERANKER_TOP_K: 3,
        sc.OI_OUTPUT_VALUE: "kept 3 of 5; excluded: d3 below_rank_cutoff; d4 below_rank_cutoff",
        sc.OI_OUTPUT_MIME_TYPE: "text/plain",
        sc.GEN_AI_RERANK_CANDIDATE_COUNT: 5,
        sc.GEN_AI_RERANK_TOP_N: 3,
        sc.GEN_AI_RERANK_SCORES: (0.99, 0.8, 0.7),
        **_cards(sc.OI_RERANKER_OUTPUT_DOCUMENTS, outputs if n is None else outputs[:n]),
        **_cards(sc.OI_RERANKER_INPUT_DOCUMENTS, inputs if n is None else inputs[:n]),
    }
    if n is not None and n < 3:
        expected[sc.MIRROR_OUTPUT_DOCUMENTS_MIRRORED], expected[sc.MIRROR_OUTPUT_DOCUMENTS_TOTAL] = n, 3
    if n is not None and n < 5:
        expected[sc.MIRROR_INPUT_DOCUMENTS_MIRRORED], expected[sc.MIRROR_INPUT_DOCUMENTS_TOTAL] = n, 5
    return expected


def test_a_rerank_stage_cuts_both_lists_and_says_so_for_each():
    ragtrail.set_capture(content="full", mirror_documents=2)
    span = _rerank()
    expected = _rerank_expected(2)
    assert [
        expected[k]
        for k in (
            sc.MIRROR_OUTPUT_DOCUMENTS_MIRRORED,
            sc.MIRROR_OUTPUT_DOCUMENTS_TOTAL,
            sc.MIRROR_INPUT_DOCUMENTS_MIRRORED,
            sc.MIRROR_INPUT_DOCUMENTS_TOTAL,
        )
    ] == [2, 3, 2, 5]
    assert "reranker.input_documents.2.document.id" not in expected
    _pop_exactly(span, expected)
    assert span.attributes[sc.CANDIDATES_IN] == 5 and span.attributes[sc.COLUMN_IDS] == ("d2", "d0", "d1")


def test_zero_writes_no_document_and_keeps_every_other_mirror():
    ragtrail.set_capture(content="full", mirror_documents=0)
    retrieve, rerank = _retrieve(), _rerank()
    expected = _retrieve_expected(0)
    assert expected[sc.GEN_AI_RETRIEVAL_DOCUMENTS] == "[]"
    assert not [k for k in expected if k.startswith(sc.OI_RETRIEVAL_DOCUMENTS)]
    _pop_exactly(retrieve, expected)
    expected = _rerank_expected(0)
    assert not [k for k in expected if k.startswith("reranker.") and ".document." in k]
    assert [
        expected[k]
        for k in (
            sc.MIRROR_OUTPUT_DOCUMENTS_MIRRORED,
            sc.MIRROR_OUTPUT_DOCUMENTS_TOTAL,
            sc.MIRROR_INPUT_DOCUMENTS_MIRRORED,
            sc.MIRROR_INPUT_DOCUMENTS_TOTAL,
        )
    ] == [0, 3, 0, 5]
    _pop_exactly(rerank, expected)


def _everything(span: ReadableSpan) -> dict[str, Any]:
    """The span's attributes and events as they would be compared between two runs."""
    return {"attributes": dict(span.attributes), "events": [(e.name, dict(e.attributes)) for e in span.events]}


@pytest.mark.parametrize("n", ["5", "6", "100", "all", "ALL", ""])
def test_a_cap_beyond_every_list_writes_what_no_cap_writes(monkeypatch, n):
    ragtrail.set_capture(content="full")
    unset = [_everything(_retrieve()), _everything(_rerank())]
    _pop_exactly(_retrieve(), _retrieve_expected(None))
    monkeypatch.setenv(ENV, n)
    settings.reset()
    ragtrail.set_capture(content="full")
    assert settings.get().invalid == ()
    assert [_everything(_retrieve()), _everything(_rerank())] == unset  # no pair, same bytes
    _pop_exactly(_rerank(), _rerank_expected(None))


@pytest.mark.parametrize("raw", ["ten", "-1", "2.5", "1e3", "two,three"])
def test_an_invalid_value_is_reported_once_and_means_no_cap(monkeypatch, caplog, raw):
    monkeypatch.setenv(ENV, raw)
    settings.reset()
    config = settings.get()
    assert config.mirror_documents is None
    assert config.invalid == (f"{ENV}={raw!r}",)
    assert f"ignoring invalid settings {ENV}={raw!r}" in caplog.text
    ragtrail.set_capture(content="full")
    _pop_exactly(_retrieve(), _retrieve_expected(None))


def test_the_environment_value_is_read_as_the_other_settings_are(monkeypatch):
    monkeypatch.setenv(ENV, " 3 ")
    settings.reset()
    assert settings.get().mirror_documents == 3 and settings.get().invalid == ()
    monkeypatch.setenv(ENV, "0")
    settings.reset()
    assert settings.get().mirror_documents == 0


def test_in_code_the_cap_is_set_and_lifted_and_a_bad_one_raises():
    assert settings.get().mirror_documents is None
    assert ragtrail.set_capture(mirror_documents=4).mirror_documents == 4
    assert ragtrail.set_capture(content="full").mirror_documents == 4  # unspecified: kept
    assert ragtrail.set_capture(mirror_documents="all").mirror_documents is None
    for bad in (-1, "ten", "3", True, 2.0):
        with pytest.raises(ValueError):
            ragtrail.set_capture(mirror_documents=bad)  # type: ignore[arg-type]
    assert settings.get().mirror_documents is None


def test_the_genai_mirror_alone_is_cut_the_same_way():
    ragtrail.set_capture(content="full", mirror_openinference=False, mirror_documents=2)
    expected = {k: v for k, v in _retrieve_expected(2).items() if k.startswith(("gen_ai.", "ragtrail.mirror."))}
    _pop_exactly(_retrieve(), expected, against_events=False)


@pytest.mark.parametrize("n, mirrored", [(5, 5), (9, 9), (10, 9), (20, 9), (None, 9)])
def test_the_cap_and_the_room_together_the_smaller_wins(n, mirrored):
    """The room of an 80-attribute span holds 9 cards of 3 (test_mirrors.py's arithmetic): a smaller
    cap wins, a larger one changes nothing; ragtrail's own attributes are never evicted."""
    hits = [{"id": f"d{i}", "content": f"text {i}", "score": 1 - i / 100} for i in range(40)]
    if n is not None:
        ragtrail.set_capture(mirror_documents=n)
    ragtrail.set_capture(content="full")
    span = _retrieve(hits, SpanLimits(max_span_attributes=80))
    a = dict(span.attributes)
    assert (a[sc.MIRROR_OUTPUT_DOCUMENTS_MIRRORED], a[sc.MIRROR_OUTPUT_DOCUMENTS_TOTAL]) == (mirrored, 40)
    assert [a[f"retrieval.documents.{i}.document.id"] for i in range(mirrored)] == [f"d{i}" for i in range(mirrored)]
    assert f"retrieval.documents.{mirrored}.document.id" not in a
    assert [d["id"] for d in json.loads(a[sc.GEN_AI_RETRIEVAL_DOCUMENTS])] == [f"d{i}" for i in range(mirrored)]
    assert span.dropped_attributes == 0 and len(a[sc.COLUMN_IDS]) == 40
    assert sc.STAGE_RECEIPT in a and sc.EVENTS_DIGEST in a
    mirrorutil.pop_mirrors(a, span)
    assert not [k for k in a if not k.startswith("ragtrail.")]


def _fidelity(store, trace_id):
    f = build(FileSource(store).get(trace_id)).as_dict()["fidelity"]
    return {
        k: f[k]
        for k in (
            "intact",
            "changed_cited",
            "changed_uncited",
            "unverifiable",
            "not_captured",
            "missing_events",
            "missing_spans",
            "dropped_events",
            "dropped_attributes",
            "partial",
            "alarms",
            "notes",
        )
    }


def test_verify_reads_a_capped_trace_as_it_reads_an_uncapped_one(tmp_path):
    """The document lists are not in the stage receipt (``stage_fields`` takes only ``ragtrail.*``
    span attributes): verify finds a capped trace intact, and stays so with every document mirror
    stripped. The mirrored/total pair is a ``ragtrail.*`` attribute, covered like the others."""
    ragtrail.set_capture(content="preview")
    uncapped = _fidelity(tmp_path / "a", record(tmp_path / "a", rag_run))
    ragtrail.set_capture(mirror_documents=1)
    store = tmp_path / "b"
    trace_id = record(store, rag_run)
    assert _fidelity(store, trace_id) == uncapped
    assert uncapped["alarms"] == [] and uncapped["intact"] > 0
    (rerank,) = [s for doc in store_lines(store) for s in all_spans(doc) if s["name"] == "rerank rerank"]
    fields = attr(rerank, sc.STAGE_RECEIPT_FIELDS)["stringValue"]
    assert "mirror.input_documents.mirrored" in fields and "reranker." not in fields

    def strip(span):
        span["attributes"] = [
            kv for kv in span["attributes"] if not kv["key"].startswith(("retrieval.documents.", "reranker.", "gen_ai.retrieval.documents"))
        ]

    assert _fidelity(rewrite_store(store, strip), trace_id) == uncapped
