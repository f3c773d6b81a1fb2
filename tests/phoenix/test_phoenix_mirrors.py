"""What a real Phoenix shows for ragtrail's spans, read back through its REST API
(``GET /v1/projects/{project}/spans``): per stage the span kind, the document cards (ids, scores,
content and metadata as the capture modes allow), the reranker view of every narrowing stage with
each excluded document's reason, status, input/output and the cap counts."""

from __future__ import annotations

import json
from typing import Any

import phoenix_server as ps
import pytest
from opentelemetry.sdk.trace import SpanLimits

import ragtrail
from ragtrail import settings
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import preview
from ragtrail.demo.pipeline import BM25, QUESTION, load_corpus, make_pipeline
from spanutil import rec_events

CORPUS = {d["id"]: d for d in load_corpus()}
META = ("status", "version")
KIND = {"retrieve": "RETRIEVER", "rerank": "RERANKER", "filter": "RERANKER", "fuse": "RERANKER", "budget": "RERANKER"}


@pytest.fixture(autouse=True)
def _reset_capture():
    settings.reset()
    yield
    settings.reset()


def run_demo(phoenix: ps.Phoenix, project: str) -> tuple[dict[str, Any], list[dict[str, Any]], list[Any]]:
    with ps.sending(phoenix, project) as (provider, memory):
        result = make_pipeline(load_corpus(), tracer=provider.get_tracer("demo"))(QUESTION)
        sent = list(memory.get_finished_spans())
    shown = phoenix.wait_for_spans(project, result["trace_id"], len(sent))
    assert len(shown) == len(sent)
    return result, shown, sent


def expected_card(
    doc_id: str, score: Any, content_mode: str, *, reason: str | None = None, detail: str | None = None, content: str | None = None
) -> dict[str, Any]:
    """A card as Phoenix must show it, from the corpus itself (not from what ragtrail wrote)."""
    card: dict[str, Any] = {"id": doc_id}
    if score is not None:
        card["score"] = score
    text = CORPUS[doc_id]["text"] if content is None else content
    if content_mode == "full":
        card["content"] = text
    elif content_mode == "preview":
        card["content"] = preview(text)
    meta = {k: CORPUS[doc_id][k] for k in META}
    if reason is not None:
        meta[sc.EXCLUSION_REASON] = reason
        if detail is not None:
            meta[sc.EXCLUSION_DETAIL] = detail
    card["metadata"] = meta
    return card


@pytest.mark.parametrize("content_mode", ["off", "preview", "full"])
def test_demo_every_stage_as_phoenix_shows_it(phoenix, content_mode):
    ragtrail.set_capture(query="text", content=content_mode, metadata=list(META))
    result, shown, sent = run_demo(phoenix, f"demo-{content_mode}")
    by_id = {s["context"]["span_id"]: s for s in shown}

    # every span: the OpenInference kind of its stage, status OK, and the cards ragtrail sent
    for span in sent:
        got = by_id[format(span.context.span_id, "016x")]
        kind = span.attributes[sc.STAGE_KIND]
        assert got["span_kind"] == KIND.get(kind, "CHAIN"), span.name
        assert got["status_code"] == "OK", span.name
        a = got["attributes"]
        if KIND.get(kind) == "RETRIEVER":
            assert ps.documents(a, "retrieval.documents") == ps.sent_cards(span.attributes, "retrieval.documents")
        if KIND.get(kind) == "RERANKER":
            for prefix in ("reranker.input_documents", "reranker.output_documents"):
                assert ps.documents(a, prefix) == ps.sent_cards(span.attributes, prefix), (span.name, prefix)
            assert len(ps.documents(a, "reranker.input_documents")) == span.attributes[sc.CANDIDATES_IN]
            assert len(ps.documents(a, "reranker.output_documents")) == span.attributes[sc.CANDIDATES_OUT]
        assert not any(k.startswith("ragtrail.mirror.") for k in a), span.name  # nothing was capped

    # the retriever's cards, against the corpus: content as captured, the allow-listed metadata
    first = [s for s in ps.by_name(shown, "retrieve bm25") if s["attributes"]["ragtrail.query.hop"] == 1][0]
    cards = ps.documents(first["attributes"], "retrieval.documents")
    truth = BM25(load_corpus()).search("refund window enterprise policy", 6)  # the search itself, uninstrumented
    assert cards == [expected_card(d["id"], round(score, 4), content_mode) for d, score in truth]
    assert first["attributes"]["input.value"] == "refund window enterprise policy"

    # the headline, at a glance: the draft dropped as superseded, the current policy lost to the budget
    status_filter = ps.one(shown, "filter status_filter")["attributes"]
    inputs = ps.documents(status_filter, "reranker.input_documents")
    draft = [c for c in inputs if c["id"] == "policy-2026-01-draft"]
    assert draft == [
        expected_card("policy-2026-01-draft", draft[0].get("score"), content_mode, reason="superseded", detail="replaced by policy-2026-01")
    ]
    assert "policy-2026-01-draft" not in [c["id"] for c in ps.documents(status_filter, "reranker.output_documents")]
    assert status_filter["output.value"] == ("kept 6 of 7; excluded: policy-2026-01-draft superseded (replaced by policy-2026-01)")

    budget = ps.one(shown, "budget context_budget")["attributes"]
    lost = [c for c in ps.documents(budget, "reranker.input_documents") if c["id"] == "policy-2026-01"]
    assert lost == [expected_card("policy-2026-01", lost[0]["score"], content_mode, reason="budget_exceeded", detail="limit=90 words used=90")]
    assert [c["id"] for c in ps.documents(budget, "reranker.output_documents")] == ["policy-2024-11", "sales-deck-q1", "discount-policy"]
    assert budget["output.value"] == "kept 3 of 4; excluded: policy-2026-01 budget_exceeded (limit=90 words used=90)"

    rerank = ps.one(shown, "rerank overlap_reranker")["attributes"]
    assert rerank["reranker.query"] == "refund window enterprise policy"
    assert rerank["reranker.top_k"] == 4
    sent_rerank = [s for s in sent if s.name == "rerank overlap_reranker"][0]
    assert [c["id"] for c in ps.documents(rerank, "reranker.output_documents")] == [
        e.attributes[sc.CANDIDATE_ID] for e in rec_events(sent_rerank) if e.name == sc.EVENT_CANDIDATE
    ]

    # the pipeline: the question in, the answer out (only when content capture allows it)
    root = ps.one(shown, "pipeline answer")["attributes"]
    assert root["input.value"] == QUESTION
    answer = result["answer"]
    cite = ps.one(shown, "cite cite")["attributes"]
    if content_mode == "off":
        assert "output.value" not in root
        assert cite["output.value"] == '{"cited":["policy-2024-11"]}'
    else:
        shown_answer = answer if content_mode == "full" else preview(answer)
        assert root["output.value"] == shown_answer
        assert cite["output.value"] == '{"answer":' + json.dumps(shown_answer) + ',"cited":["policy-2024-11"]}'


def test_query_hash_mode_shows_no_query_text(phoenix):
    ragtrail.set_capture(query="hash", content="off")
    _, shown, _ = run_demo(phoenix, "demo-hash")
    for span in shown:
        a = span["attributes"]
        assert "input.value" not in a and "reranker.query" not in a and "gen_ai.retrieval.query.text" not in a, span["name"]
        assert "output.value" not in a or span["span_kind"] in ("RERANKER", "CHAIN"), span["name"]
        assert QUESTION not in str(a) and "refund window enterprise policy" not in str(a), span["name"]


def _many(provider: Any, n: int, top_n: int) -> None:
    tracer = provider.get_tracer("many")
    hits = [{"id": f"doc-{i:03d}", "content": f"text of document {i}", "score": round(1 - i / 1000, 4)} for i in range(n)]
    with ragtrail.stage("pipeline", "app", tracer=tracer):
        with ragtrail.stage("retrieve", "app.search", top_k=n, tracer=tracer) as s:
            s.query("many documents")
            s.outputs(hits)
        with ragtrail.stage("rerank", "app.rerank", top_k=top_n, tracer=tracer) as s:
            s.query("many documents")
            s.inputs(hits)
            s.outputs([dict(h, score=round(h["score"] / 2, 4)) for h in hits[:top_n]], score_kind="rerank")


def test_many_documents_say_how_many_of_how_many(phoenix):
    ragtrail.set_capture(content="full")
    with ps.sending(phoenix, "many", limits=SpanLimits()) as (provider, memory):  # the SDK's defaults: 128
        _many(provider, 200, 10)
        sent = list(memory.get_finished_spans())
    shown = phoenix.wait_for_spans("many", ps.trace_id_of(memory), len(sent))
    retrieve = [s for s in ps.by_name(shown, "retrieve search") if "ragtrail.stage.continuation" not in s["attributes"]]
    assert len(retrieve) == 1
    a = retrieve[0]["attributes"]
    cards = ps.documents(a, "retrieval.documents")
    assert a["ragtrail.mirror.output_documents.total"] == 200
    assert a["ragtrail.mirror.output_documents.mirrored"] == len(cards) == 25  # docs/phoenix.md says 25
    assert [c["id"] for c in cards] == [f"doc-{i:03d}" for i in range(len(cards))]
    assert a["ragtrail.events.count"] == 200  # ragtrail's own record stays complete

    (rerank,) = [s["attributes"] for s in ps.by_name(shown, "rerank rerank") if "ragtrail.stage.continuation" not in s["attributes"]]
    assert len(ps.documents(rerank, "reranker.output_documents")) == 10
    assert "ragtrail.mirror.output_documents.mirrored" not in rerank
    inputs = ps.documents(rerank, "reranker.input_documents")
    assert rerank["ragtrail.mirror.input_documents.total"] == 200
    assert rerank["ragtrail.mirror.input_documents.mirrored"] == len(inputs) > 0
    assert rerank["gen_ai.rerank.candidate.count"] == 200 and rerank["gen_ai.rerank.top_n"] == 10

    # schema 3: the 200 candidates are columns on the stage span, the 190 exclusions one event: no
    # continuation span (their mirror attributes are pinned in tests/test_mirrors.py)
    parts = [
        s
        for s in shown
        if "ragtrail.stage.continuation" in s["attributes"] or s["attributes"].get("ragtrail", {}).get("stage", {}).get("continuation")
    ]
    assert parts == []
    assert len(a["ragtrail.candidates.ids"]) == 200  # the column arrives whole in Phoenix


def test_a_mirror_document_cap_reaches_phoenix_as_a_cut_list_with_its_counts(phoenix):
    """``RAGTRAIL_MIRROR_DOCUMENTS=2`` (here in code): Phoenix draws the first two cards of each list
    and holds the mirrored/total pairs; ragtrail's own columns in Phoenix still hold every candidate."""
    ragtrail.set_capture(content="full", mirror_documents=2)
    with ps.sending(phoenix, "capped") as (provider, memory):
        _many(provider, 20, 5)
        sent = list(memory.get_finished_spans())
    shown = phoenix.wait_for_spans("capped", ps.trace_id_of(memory), len(sent))
    assert len(shown) == len(sent)
    retrieve = ps.one(shown, "retrieve search")
    assert retrieve["span_kind"] == "RETRIEVER"
    a = retrieve["attributes"]
    assert ps.documents(a, "retrieval.documents") == [
        {"id": "doc-000", "score": 1.0, "content": "text of document 0"},
        {"id": "doc-001", "score": 0.999, "content": "text of document 1"},
    ]
    assert (a["ragtrail.mirror.output_documents.mirrored"], a["ragtrail.mirror.output_documents.total"]) == (2, 20)
    assert a["ragtrail.candidates.ids"] == [f"doc-{i:03d}" for i in range(20)]

    rerank = ps.one(shown, "rerank rerank")
    assert rerank["span_kind"] == "RERANKER"
    r = rerank["attributes"]
    assert ps.documents(r, "reranker.output_documents") == [
        {"id": "doc-000", "score": 0.5, "content": "text of document 0"},
        {"id": "doc-001", "score": 0.4995, "content": "text of document 1"},
    ]
    assert [c["id"] for c in ps.documents(r, "reranker.input_documents")] == ["doc-000", "doc-001"]
    assert (r["ragtrail.mirror.output_documents.mirrored"], r["ragtrail.mirror.output_documents.total"]) == (2, 5)
    assert (r["ragtrail.mirror.input_documents.mirrored"], r["ragtrail.mirror.input_documents.total"]) == (2, 20)
    assert r["output.value"].startswith("kept 5 of 20")
    assert r["ragtrail.candidates.ids"] == [f"doc-{i:03d}" for i in range(5)]


def test_genai_mirror_alone_is_a_retriever_with_query_and_documents(phoenix):
    ragtrail.set_capture(content="full", metadata=list(META), mirror_openinference=False)
    result, shown, _ = run_demo(phoenix, "genai-only")
    first = [s for s in ps.by_name(shown, "retrieve bm25") if s["attributes"]["ragtrail.query.hop"] == 1][0]
    assert first["span_kind"] == "RETRIEVER"
    a = first["attributes"]
    assert a["input.value"] == "refund window enterprise policy"  # Phoenix's conversion of gen_ai.retrieval.query.text
    truth = BM25(load_corpus()).search("refund window enterprise policy", 6)
    assert ps.documents(a, "retrieval.documents") == [expected_card(d["id"], round(score, 4), "full") for d, score in truth]
    rerank = ps.one(shown, "rerank overlap_reranker")["attributes"]
    assert rerank["gen_ai.rerank.top_n"] == 4 and rerank["gen_ai.rerank.candidate.count"] == 5
    # no GenAI name exists for a filter: Phoenix cannot know what it is (docs/phoenix.md says so)
    assert ps.one(shown, "filter status_filter")["span_kind"] == "UNKNOWN"


_RAG_HELPER = """
import json, sys
from phoenix.client import Client
from phoenix.client.helpers.spans import get_retrieved_documents
df = get_retrieved_documents(Client(base_url=sys.argv[1]), project_name=sys.argv[2], timeout=60)
print(json.dumps([{"input": r["input"], "document": r["document"], "score": r["document_score"]}
                  for _, r in df.reset_index().iterrows()]))
"""


def test_phoenix_rag_helper_reads_ragtrail_documents(phoenix):
    """Phoenix's own ``get_retrieved_documents`` (what its document-relevance evals read), run in
    Phoenix's venv against the demo with content ``full``."""
    import subprocess

    ragtrail.set_capture(content="full")
    run_demo(phoenix, "rag-helper")
    python = ps.phoenix_binary().parent / "python"
    out = subprocess.run([str(python), "-c", _RAG_HELPER, phoenix.url, "rag-helper"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out.stdout)
    hop1 = [r for r in rows if r["input"] == "refund window enterprise policy"]
    truth = BM25(load_corpus()).search("refund window enterprise policy", 6)
    assert sorted((r["document"], r["score"]) for r in hop1) == sorted((d["text"], round(score, 4)) for d, score in truth)
    assert len(rows) == 12  # the two retrievals' six documents each


_OI_NAMES = """
import json
from openinference.semconv.trace import DocumentAttributes as D, RerankerAttributes as R, SpanAttributes as S
from openinference.semconv.trace import OpenInferenceSpanKindValues as K, OpenInferenceMimeTypeValues as M
print(json.dumps([S.OPENINFERENCE_SPAN_KIND, S.INPUT_VALUE, S.INPUT_MIME_TYPE, S.OUTPUT_VALUE, S.OUTPUT_MIME_TYPE,
                  S.RETRIEVAL_DOCUMENTS, R.RERANKER_QUERY, R.RERANKER_TOP_K, R.RERANKER_MODEL_NAME,
                  R.RERANKER_INPUT_DOCUMENTS, R.RERANKER_OUTPUT_DOCUMENTS, D.DOCUMENT_ID, D.DOCUMENT_SCORE,
                  D.DOCUMENT_CONTENT, D.DOCUMENT_METADATA, K.RETRIEVER.value, K.RERANKER.value, K.CHAIN.value,
                  M.TEXT.value, M.JSON.value]))
"""


def test_openinference_names_match_the_package_phoenix_ships():
    """OpenInference names as openinference-semantic-conventions (in Phoenix's venv) spells them."""
    import subprocess

    python = ps.require_phoenix().parent / "python"
    out = subprocess.run([str(python), "-c", _OI_NAMES], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == [
        sc.OPENINFERENCE_SPAN_KIND,
        sc.OI_INPUT_VALUE,
        sc.OI_INPUT_MIME_TYPE,
        sc.OI_OUTPUT_VALUE,
        sc.OI_OUTPUT_MIME_TYPE,
        sc.OI_RETRIEVAL_DOCUMENTS,
        sc.OI_RERANKER_QUERY,
        sc.OI_RERANKER_TOP_K,
        sc.OI_RERANKER_MODEL_NAME,
        sc.OI_RERANKER_INPUT_DOCUMENTS,
        sc.OI_RERANKER_OUTPUT_DOCUMENTS,
        sc.OI_DOCUMENT_ID,
        sc.OI_DOCUMENT_SCORE,
        sc.OI_DOCUMENT_CONTENT,
        sc.OI_DOCUMENT_METADATA,
        sc.OI_RETRIEVER,
        sc.OI_RERANKER,
        sc.OI_CHAIN,
        sc.OI_MIME_TEXT,
        sc.OI_MIME_JSON,
    ]
