"""Coverage that tells the truth on small real pipelines (decorated code on the real SDK, read back
with the inspector): seed 004's incident (6 of 1,003 read cannot support an absence claim), the
corpus summed over every store behind the pipeline (each store once), a retriever that trims its
inner retriever's hits, a decorated pipeline called from another, and the different words for an
empty result, a failed retrieval and a context failure."""

from __future__ import annotations

import contextlib
import re
from typing import Any

import pytest

import ragtrail
from ragtrail.contract import semconv as sc
from ragtrail.export.otlp_json import spans_to_dict
from ragtrail.inspect.manifest import build
from ragtrail.inspect.model import Trace
from ragtrail.inspect.otlp import decode_document
from ragtrail.recorder import corpus as corpus_registry

UNKNOWN = "what reached the model is unknown: no budget, context or generate stage recorded it"


def manifest_of(exporter: Any) -> dict[str, Any]:
    spans = list(decode_document(spans_to_dict(exporter.get_finished_spans())))
    [trace_id] = {s.trace_id for s in spans}
    return build(Trace(trace_id=trace_id, spans=spans, source="memory")).as_dict()


class Store:
    """A small keyword index: chunks of text, scored by shared words (a real ranking, no stub)."""

    def __init__(self, name: str, chunks: list[str]) -> None:
        self.name = name
        self.chunks = {f"{name}-{i:04d}": text for i, text in enumerate(chunks)}

    def search(self, query: str, k: int) -> list[dict[str, Any]]:
        words = set(re.findall(r"\w+", query.lower()))
        scored = [(len(words & set(re.findall(r"\w+", text.lower()))), ident, text) for ident, text in self.chunks.items()]
        scored.sort(key=lambda row: (-row[0], row[1]))
        return [{"id": ident, "text": text, "score": float(score)} for score, ident, text in scored[:k] if score > 0]


def portfolio(n: int, name: str = "portfolio") -> Store:
    topics = ["travel expenses", "remote work equipment", "security training", "parental leave", "office hours"]
    return Store(name, [f"Policy {i}: {topics[i % len(topics)]} rules, section {i // 5}." for i in range(n)])


@pytest.fixture(autouse=True)
def _no_user_sizes():
    corpus_registry.clear()
    yield
    corpus_registry.clear()


def test_seed_004_six_of_1003_cannot_support_absence(span_exporter):
    store = portfolio(1003)

    @ragtrail.retriever(top_k=6)
    def retrieve(query: str) -> list[dict[str, Any]]:
        ragtrail.current_stage().corpus_size(len(store.chunks), store=store)
        return store.search(query, 6)

    @ragtrail.pipeline
    def ask(query: str) -> str:
        retrieve(query)
        text = "There is no remote-work reimbursement policy in the corpus."
        ragtrail.answer(text, claim="absence")
        return text

    ask("remote work reimbursement policy")
    m = manifest_of(span_exporter)
    c = m["coverage"]
    # issue 24: no budget, context or generate stage: what reached the model is unknown, not "the 6 retrieved"
    assert (c["corpus_size"], c["retrieved"], c["in_context"], c["exhaustive"], c["stores"]) == (1003, 6, None, False, None)
    assert c["statement"] == f"the answer claims absence: not supported (6 retrieved of 1003; {UNKNOWN})"
    assert c["answer_claim"]["supported"] is False
    assert {x["claim"]: x["supported"] for x in c["claims"]}["quote"] is False  # nothing cited, nothing known read


def test_absence_is_supported_only_when_every_store_was_read_whole(span_exporter):
    small = portfolio(3, "small")

    @ragtrail.retriever(top_k=10)
    def retrieve(query: str) -> list[dict[str, Any]]:
        ragtrail.current_stage().corpus_size(len(small.chunks), store=small)
        return [{"id": i, "text": t, "score": 1.0} for i, t in small.chunks.items()]

    @ragtrail.pipeline
    def ask(query: str) -> None:
        retrieve(query)
        ragtrail.answer("No such policy.", claim="absence")

    ask("reimbursement")
    c = manifest_of(span_exporter)["coverage"]
    # issue 24: all 3 retrieved is not all 3 read: no stage said what reached the model
    assert c["statement"] == f"the answer claims absence: not supported (3 retrieved of 3; {UNKNOWN})"

    @ragtrail.budgeter(limit=10, unit="chunks")
    def fit(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return candidates

    @ragtrail.pipeline
    def ask_with_context(query: str) -> None:
        fit(retrieve(query))
        ragtrail.answer("No such policy.", claim="absence")

    span_exporter.clear()
    ask_with_context("reimbursement")
    c = manifest_of(span_exporter)["coverage"]
    assert c["statement"] == "the answer claims absence: supported (all 3 of 3 read)"


def test_corpus_is_the_sum_over_stores_each_counted_once(span_exporter):
    compliance, portfolio_store = portfolio(2431, "compliance"), portfolio(1003, "portfolio")

    def searcher(store: Store):
        @ragtrail.retriever(component=f"search.{store.name}", top_k=7)
        def search(query: str) -> list[dict[str, Any]]:
            ragtrail.current_stage().corpus_size(len(store.chunks), store=store)
            return store.search(query, 7)

        return search

    first, second = searcher(compliance), searcher(portfolio_store)
    again = searcher(compliance)  # another stage over the same store

    @ragtrail.pipeline
    def ask(query: str) -> None:
        first(query), second(query), again("remote work equipment")

    ask("remote work reimbursement")
    c = manifest_of(span_exporter)["coverage"]
    assert (c["corpus_size"], c["stores"]) == (3434, 2)
    assert c["retrieved"] == 14
    # issue 24: not "14 of 3434 read"; and the sum over two stores is said as such (they may overlap)
    of = "3434 (the sum over 2 stores, which may hold the same documents)"
    assert c["statement"] == f"{UNKNOWN} (14 retrieved of {of}): an absence claim is not supported"


def test_a_retriever_that_trims_its_inner_hits_excludes_them(span_exporter):
    store = portfolio(50)

    @ragtrail.retriever(component="bm25", top_k=5)
    def bm25(query: str) -> list[dict[str, Any]]:
        ragtrail.current_stage().corpus_size(len(store.chunks), store=store)
        return store.search(query, 5)

    @ragtrail.retriever(component="permitted")
    def permitted(query: str) -> list[dict[str, Any]]:
        hits = bm25(query)
        return [h for h in hits if int(h["id"][-4:]) % 2 == 0]  # the user may not see odd ones

    @ragtrail.pipeline
    def ask(query: str) -> None:
        permitted(query)

    ask("remote work equipment rules")
    m = manifest_of(span_exporter)
    inner = [h["id"] for h in store.search("remote work equipment rules", 5)]
    kept = [i for i in inner if int(i[-4:]) % 2 == 0]
    trimmed = [i for i in inner if i not in kept]
    assert trimmed and kept  # the data does trim, and keeps some
    [outer] = [s for s in m["stages"] if s["component"] == "permitted"]
    assert (outer["in"], outer["out"], outer["excluded_count"]) == (5, len(kept), len(trimmed))
    assert sorted((e["id"], e["reason"]) for e in outer["excluded"]) == sorted((i, "unexplained") for i in trimmed)
    assert m["coverage"]["retrieved"] == len(kept)
    assert {r["id"] for r in m["retrieved"]} >= set(kept)


def test_a_retriever_that_trims_every_inner_hit_excludes_them_all(span_exporter):
    store = portfolio(50)

    @ragtrail.retriever(component="bm25", top_k=4)
    def bm25(query: str) -> list[dict[str, Any]]:
        return store.search(query, 4)

    @ragtrail.retriever(component="permitted")
    def permitted(query: str) -> list[dict[str, Any]]:
        bm25(query)
        return []  # nothing this user may see

    @ragtrail.pipeline
    def ask(query: str) -> None:
        permitted(query)

    ask("parental leave")
    m = manifest_of(span_exporter)
    [outer] = [s for s in m["stages"] if s["component"] == "permitted"]
    found = [h["id"] for h in store.search("parental leave", 4)]
    assert (outer["in"], outer["out"]) == (4, 0)
    assert [(e["id"], e["reason"]) for e in outer["excluded"]] == [(i, "unexplained") for i in found]
    assert m["coverage"]["retrieved"] == 0
    assert m["coverage"]["statement"] == (
        "nothing handed on: 4 found, all excluded before they were retrieved (not an empty result): no claim is supported"
    )


def test_a_pipeline_called_from_another_rolls_its_reads_into_the_outer_one(span_exporter):
    store = portfolio(20)

    @ragtrail.retriever(top_k=3)
    def retrieve(query: str) -> list[dict[str, Any]]:
        ragtrail.current_stage().corpus_size(len(store.chunks), store=store)
        return store.search(query, 3)

    @ragtrail.pipeline(component="inner")
    def inner(query: str) -> list[dict[str, Any]]:
        hits = retrieve(query)
        ragtrail.cite([hits[0]["id"]])
        return hits

    @ragtrail.pipeline(component="outer")
    def outer(query: str) -> None:
        inner(query)
        ragtrail.answer("Travel is reimbursed per section 2.", claim="presence")

    outer("travel expenses rules")
    m = manifest_of(span_exporter)
    assert m["pipeline"]["component"] == "outer"
    c = m["coverage"]
    # issue 24: the pipelines return their hits, but a pipeline's return is not recorded: what reached the model is unknown
    assert (c["corpus_size"], c["retrieved"], c["in_context"], c["cited"]) == (20, 3, None, 1)
    assert c["statement"] == f"the answer claims presence: supported by what it cited (1 cited; 3 retrieved of 20; {UNKNOWN})"


def test_empty_failed_and_context_failure_runs_get_different_words(span_exporter):
    store = portfolio(10)

    @ragtrail.retriever(top_k=3)
    def retrieve(query: str) -> list[dict[str, Any]]:
        ragtrail.current_stage().corpus_size(len(store.chunks), store=store)
        if query == "boom":
            raise ConnectionError("index unreachable")
        return store.search(query, 3)

    @ragtrail.filter(threshold=99.0)
    def strict(query: str, candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [c for c in candidates if c["score"] >= 99.0]

    @ragtrail.pipeline
    def ask(query: str) -> None:
        strict(query, retrieve(query))

    statements = {}
    for query in ("zzz qqq", "boom", "travel expenses"):
        span_exporter.clear()
        with contextlib.suppress(ConnectionError):
            ask(query)
        m = manifest_of(span_exporter)
        statements[query] = (
            m["coverage"]["statement"],
            [s.attributes[sc.RUN_STATUS] for s in span_exporter.get_finished_spans() if sc.RUN_STATUS in s.attributes],
        )
    assert statements == {
        "zzz qqq": ("empty result: the search found nothing (not a failure): no claim is supported", ["empty"]),
        "boom": ("retrieval failed: nothing retrieved: no claim is supported", ["failed"]),
        "travel expenses": (
            f"context failure: {len(store.search('travel expenses', 3))} retrieved, none reached the model: no claim is supported",
            ["available"],
        ),
    }


def test_stages_that_failed_with_no_pipeline_around_them_are_no_empty_result(span_exporter):
    """No pipeline span stamps a run status when retrievers run bare (LangChain's MergerRetriever
    over two vector store retrievers, called by the app): the reader once took the missing stamp for
    "not a failure" and said "empty result: the search found nothing (not a failure)" of a run
    whose every stage raised. It applies the recorder's own rule to the stages recorded instead."""
    store = portfolio(10)

    @ragtrail.retriever(top_k=3)
    def leg(query: str) -> list[dict[str, Any]]:
        if query == "boom":
            raise TypeError("Collection.query() got an unexpected keyword argument 'include_metadata'")
        return store.search(query, 3)

    @ragtrail.retriever
    def merged(query: str) -> list[dict[str, Any]]:
        return leg(query) + leg(query)

    statements = {}
    for query in ("boom", "zzz qqq"):
        span_exporter.clear()
        with contextlib.suppress(TypeError):
            merged(query)
        m = manifest_of(span_exporter)
        assert m["run_status"] is None  # nothing stamped it: the manifest does not make one up
        statements[query] = m["coverage"]["statement"]
    assert statements == {
        "boom": "retrieval failed: nothing retrieved: no claim is supported",
        "zzz qqq": "empty result: the search found nothing (not a failure): no claim is supported",
    }


def test_a_size_the_user_set_wins_and_approximate_never_supports_absence(span_exporter):
    store = portfolio(4)
    ragtrail.corpus_size(store, 4, approximate=True)

    @ragtrail.retriever(top_k=10)
    def retrieve(query: str) -> list[dict[str, Any]]:
        ragtrail.current_stage().corpus_size(999, store=store)  # the user's figure wins
        return [{"id": i, "text": t, "score": 1.0} for i, t in store.chunks.items()]

    @ragtrail.pipeline
    def ask(query: str) -> None:
        retrieve(query)
        ragtrail.answer("None.", claim="absence")

    ask("anything")
    spans = span_exporter.get_finished_spans()
    [pipeline] = [s for s in spans if s.attributes.get(sc.STAGE_KIND) == sc.KIND_PIPELINE]
    assert pipeline.attributes[sc.COVERAGE_CORPUS_SIZE] == 4
    assert pipeline.attributes[sc.COVERAGE_CORPUS_APPROXIMATE] is True
    c = manifest_of(span_exporter)["coverage"]
    assert c["statement"] == f"the answer claims absence: not supported (4 retrieved of ~4 (approximate); {UNKNOWN})"  # issue 24


def test_an_absence_claim_over_summed_stores_counts_no_unread_units():
    """Two stores may hold the same documents (BM25 and a vector index over one collection): their
    sum is no count of distinct documents, so "N never read" would be made up from it."""
    from ragtrail.inspect.coverage import coverage

    of = "12 (the sum over 2 stores, which may hold the same documents)"
    c = coverage(12, 6, 6, 0, claim="absence", stores=2)
    assert c.statement == f"the answer claims absence: not supported (6 of {of} read)"
    why = "asserts something about units never read (how many is unknown: 2 stores may hold the same documents)"
    assert [v.why for v in c.claims if v.claim == "absence"] == [why]
    one = coverage(12, 6, 6, 0, claim="absence")
    assert one.statement == "the answer claims absence: not supported (6 of 12 read, 6 never read)"
