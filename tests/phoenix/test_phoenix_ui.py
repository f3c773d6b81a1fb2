"""Phoenix's own UI in headless Chromium: a retriever span shows its document cards (content and
metadata), the demo's budget stage shows its input and output documents and why the current policy
left. Screenshots go to test-artifacts/; with RAGTRAIL_UPDATE_DOCS_SCREENSHOTS=1 also to docs/."""

from __future__ import annotations

import os
from pathlib import Path

import cdp
import phoenix_server as ps
import pytest

import ragtrail
from ragtrail import settings
from ragtrail.demo.pipeline import QUESTION, load_corpus, make_pipeline

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
CORPUS = {d["id"]: d for d in load_corpus()}

pytestmark = pytest.mark.skipif(
    cdp.CHROMIUM is None,
    reason="LOUD SKIP: headless Chromium is not installed, so Phoenix's UI was NOT tested in a browser (scripts/test.sh installs Debian's chromium)",
)


@pytest.fixture(scope="module")
def demo_spans(phoenix):
    settings.reset()
    ragtrail.set_capture(content="full", metadata=["status", "version", "updated_at"])
    try:
        with ps.sending(phoenix, "ui") as (provider, memory):
            result = make_pipeline(load_corpus(), tracer=provider.get_tracer("demo"))(QUESTION)
            sent = len(memory.get_finished_spans())
    finally:
        settings.reset()
    return phoenix.wait_for_spans("ui", result["trace_id"], sent)


@pytest.fixture
def browser(tmp_path):
    b = cdp.Browser(tmp_path / "profile")
    yield b
    b.close()


def _save(browser: cdp.Browser, name: str) -> None:
    browser.screenshot(ARTIFACTS / name)
    if os.environ.get("RAGTRAIL_UPDATE_DOCS_SCREENSHOTS"):
        browser.screenshot(REPO / "docs" / name)


def test_retriever_span_shows_document_cards(phoenix, demo_spans, browser):
    first = [s for s in ps.by_name(demo_spans, "retrieve bm25") if s["attributes"]["ragtrail.query.hop"] == 1][0]
    browser.open(f"{phoenix.url}/redirects/spans/{first['context']['span_id']}")
    top = CORPUS["policy-2024-11"]
    page = browser.wait_for_text("retrieve bm25", "document policy-2024-11", "Document Metadata")
    assert top["text"][:60] in page  # the card's content (Phoenix folds long text: the start is shown)
    assert '"updated_at": "2024-11-04"' in page and '"status": "active"' in page
    assert "refund window enterprise policy" in page  # the query, as the retriever's input
    _save(browser, "phoenix-retriever.png")


def test_budget_stage_shows_what_went_in_came_out_and_why(phoenix, demo_spans, browser):
    budget = ps.one(demo_spans, "budget context_budget")
    browser.open(f"{phoenix.url}/redirects/spans/{budget['context']['span_id']}")
    browser.wait_for_text("budget context_budget", "3 documents", "document sales-deck-q1")
    assert browser.click_text("Documents")  # Phoenix folds a reranker's input documents: open them
    page = browser.wait_for_text("document policy-2026-01", '"ragtrail.exclusion.reason": "budget_exceeded"')
    assert CORPUS["policy-2026-01"]["text"][:60] in page
    assert '"ragtrail.exclusion.detail": "limit=90 words used=90"' in page
    _save(browser, "phoenix-budget.png")
