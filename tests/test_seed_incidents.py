"""Seeds 001 and 002 rebuilt as small real pipelines (decorated app code on the real SDK, read back
by the inspector's manifest), and exactly what the manifest must say for each.

Seed 001 (chat RAG bot): the raw top hit is the asking message itself (an echo of the query) and the
bot's own earlier reply is retrieved as evidence (self-citation); the app strips both and a
similarity floor, keeps 3 as context, and gates on ``kept[0]`` (not ``hits[0]``): below 0.5 it
refuses in code.

Seed 002 (hybrid search, rerank fallback): keyword + vector retrieval fused by RRF, fitted into a
context budget, then reranked by an LLM whose answer does not parse: the code keeps the input
order. Silently, that must not read as a normal rerank; declared, the run is ``degraded``."""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

import pytest

import ragtrail
from ragtrail.contract import semconv as sc
from ragtrail.export.otlp_json import spans_to_dict
from ragtrail.inspect.manifest import build
from ragtrail.inspect.model import Trace
from ragtrail.inspect.otlp import decode_document
from ragtrail.recorder import corpus as corpus_registry


def manifest_of(exporter: Any) -> dict[str, Any]:
    spans = list(decode_document(spans_to_dict(exporter.get_finished_spans())))
    [trace_id] = {s.trace_id for s in spans}
    return build(Trace(trace_id=trace_id, spans=spans, source="memory")).as_dict()


def stage_of(m: dict[str, Any], kind: str, component: str) -> dict[str, Any]:
    [found] = [s for s in m["stages"] if s["kind"] == kind and s["component"].endswith(component)]
    return found


def rows(entries: list[dict[str, Any]], *keys: str) -> list[tuple]:
    return [tuple(e.get(k) for k in keys) for e in entries]


@pytest.fixture(autouse=True)
def _no_user_sizes():
    corpus_registry.clear()
    yield
    corpus_registry.clear()


def _words(text: str) -> Counter:
    return Counter(re.findall(r"[a-z0-9@]+", text.lower()))


def cosine(a: str, b: str) -> float:
    """Bag-of-words cosine: a real similarity, deterministic, no model."""
    x, y = _words(a), _words(b)
    dot = sum(x[w] * y[w] for w in x)
    norm = math.sqrt(sum(v * v for v in x.values())) * math.sqrt(sum(v * v for v in y.values()))
    return round(dot / norm, 4) if norm else 0.0


# --- seed 001 ---------------------------------------------------------------------------------------
ROOM = [
    ("m1", "omkar", "the persister is down intentionally now bro!"),
    ("m2", "omkar", "okay so i think the persister is configured now, right?"),
    ("m3", "omkar", "@bot what happened with the persister?"),
    ("m4", "bot", "The persister was intentionally turned off by Omkar."),
    ("m5", "omkar", "yup 2nd msg after i intenionally shut down that mfer persister!"),
    ("m6", "omkar", "this is another new message btw!"),
    ("m7", "omkar", "kafka keeps the log for seven days"),
]
FLOOR = 0.2
MIN_TOP = 0.5


class ChatBot:
    """The seed's bot: every message goes into the log the indexer reads, its own replies too."""

    def __init__(self, annotate: bool = True) -> None:
        self.log = [{"id": i, "author": a, "text": t} for i, a, t in ROOM]
        self.annotate = annotate

        @ragtrail.retriever(component="chat.search", top_k=10, score_kind=sc.SCORE_SIMILARITY)
        def search(query: str) -> list[dict[str, Any]]:
            ragtrail.current_stage().corpus_size(len(self.log), store="room-1")
            hits = [{**m, "content": m["text"], "score": cosine(query, m["text"])} for m in self.log]
            hits.sort(key=lambda h: (-h["score"], h["id"]))
            return hits[:10]

        @ragtrail.filter(component="chat.keep", threshold=FLOOR)
        def keep(candidates: list[dict[str, Any]], asking_id: str) -> list[dict[str, Any]]:
            s = ragtrail.current_stage()
            kept = []
            for hit in candidates:
                if hit["id"] == asking_id:
                    if self.annotate:
                        s.exclude(hit, sc.REASON_SELF_REFERENCE, "the asking message: an echo of the query")
                elif hit["author"] == "bot":
                    if self.annotate:
                        s.exclude(hit, sc.REASON_SELF_REFERENCE, "the bot's own reply")
                elif hit["score"] >= FLOOR:
                    kept.append(hit)
            return kept

        @ragtrail.filter(component="chat.context")
        def context(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
            ragtrail.current_stage().set(top_k=3)
            return candidates[:3]

        @ragtrail.pipeline(component="chat.ask")
        def ask(query: str) -> str:
            asking = {"id": f"m{len(self.log) + 1}", "author": "omkar", "text": query}
            self.log.append(asking)  # the question is indexed before the bot searches: the echo
            kept = context(keep(search(query), asking["id"]))
            if not kept or kept[0]["score"] < MIN_TOP:  # the gate reads kept[0], not hits[0]
                text = "I don't have enough in this room's history to answer that confidently."
                ragtrail.answer(text, claim="none", refused=True)
                return text
            ragtrail.cite([kept[0]["id"]])
            text = f"Yes: {kept[0]['text']}"
            ragtrail.answer(text, claim="presence")
            return text

        self.ask = ask


def test_seed_001_echo_and_self_citation_are_said_and_the_gate_reads_kept0(span_exporter):
    bot = ChatBot()
    assert bot.ask("is the persister down btw?") == "Yes: the persister is down intentionally now bro!"
    m = manifest_of(span_exporter)
    search = stage_of(m, "retrieve", "chat.search")
    # the raw top hit is the question itself (score 1.0), the bot's reply is retrieved as evidence
    assert rows(search["candidates"], "id", "score", "score_kind") == [
        ("m8", 1.0, "similarity"),
        ("m1", 0.6761, "similarity"),
        ("m2", 0.4243, "similarity"),
        ("m3", 0.3651, "similarity"),
        ("m6", 0.3651, "similarity"),
        ("m4", 0.3162, "similarity"),
        ("m5", 0.2697, "similarity"),
        ("m7", 0.169, "similarity"),
    ]
    assert (search["in"], search["out"], m["coverage"]["corpus_size"]) == (0, 8, 8)
    keep = stage_of(m, "filter", "chat.keep")
    assert rows(keep["excluded"], "id", "score", "reason", "detail") == [
        ("m8", 1.0, "self_reference", "the asking message: an echo of the query"),
        ("m4", 0.3162, "self_reference", "the bot's own reply"),
        ("m7", 0.169, "below_score_threshold", "score=0.169 < threshold=0.2"),
    ]
    assert keep["findings"] == []
    context = stage_of(m, "filter", "chat.context")
    # a filter hands the retriever's similarities on: same kind, never "none"
    assert rows(context["candidates"], "id", "score", "score_kind") == [
        ("m1", 0.6761, "similarity"),
        ("m2", 0.4243, "similarity"),
        ("m3", 0.3651, "similarity"),
    ]
    # m6 ties the kept m3 (0.3651) and came after it: a top-3 cut is consistent with every kept output
    assert rows(context["excluded"], "id", "reason", "detail") == [("m6", "below_rank_cutoff", "top_k=3"), ("m5", "below_rank_cutoff", "top_k=3")]
    # the gate passed on kept[0] = m1 (0.61), the best real evidence, not on the echo (1.0)
    assert m["answer"]["claim"] == "presence" and m["answer"]["refused"] is False
    assert m["cited"] == ["m1"]
    assert m["run_status"] == "available"
    assert m["fidelity"]["alarms"] == [] and m["fidelity"]["changed_uncited"] == 0
    assert m["findings"] == []


def test_seed_001_a_question_the_room_cannot_answer_is_refused_in_code(span_exporter):
    bot = ChatBot()
    assert bot.ask("why did the messages survive?").startswith("I don't have enough")
    m = manifest_of(span_exporter)
    search = stage_of(m, "retrieve", "chat.search")
    assert rows(search["candidates"], "id", "score")[:2] == [("m8", 1.0), ("m3", 0.1826)]  # hits[0]: the echo
    keep = stage_of(m, "filter", "chat.keep")
    assert (keep["status"], keep["out"]) == ("empty", 0)
    assert rows(keep["excluded"], "id", "reason") == [
        ("m8", "self_reference"),
        ("m3", "below_score_threshold"),
        ("m1", "below_score_threshold"),
        ("m7", "below_score_threshold"),
        ("m4", "self_reference"),
        ("m2", "below_score_threshold"),
        ("m5", "below_score_threshold"),
        ("m6", "below_score_threshold"),
    ]
    # the gate read kept[0] (nothing real) and refused; gating on hits[0] (1.0) would have answered
    assert (m["answer"]["claim"], m["answer"]["refused"]) == ("none", True)
    assert m["cited"] == []
    assert m["run_status"] == "available"  # retrieval worked: an empty context is not a failed run
    assert m["findings"] == []


def test_seed_001_an_unannotated_self_filter_is_unexplained_not_a_threshold(span_exporter):
    """The app strips its echo (1.0) and its own reply (0.3162) without saying why: both score above
    the floor every kept output passes, so no knob explains them: ``unexplained``, a finding."""
    bot = ChatBot(annotate=False)
    bot.ask("is the persister down btw?")
    m = manifest_of(span_exporter)
    keep = stage_of(m, "filter", "chat.keep")
    assert rows(keep["excluded"], "id", "reason", "detail") == [
        ("m8", "unexplained", None),
        ("m4", "unexplained", None),
        ("m7", "below_score_threshold", "score=0.169 < threshold=0.2"),
    ]
    assert m["findings"] == ["filter chat.keep: 2 candidates vanished unexplained (m8, m4)"]


# --- seed 002 ---------------------------------------------------------------------------------------
DOCS = {
    "kb-1": "Kafka's durable log holds messages while a consumer is down.",
    "kb-2": "The persister writes messages from Kafka into Postgres.",
    "kb-3": "Retention is seven days for the chat topic.",
    "kb-4": "Restarting the persister replays from the committed offset.",
    "kb-5": "Greeting messages are not indexed.",
}


def rrf(lists: list[list[str]], k: int = 60) -> list[tuple[str, float]]:
    scores: dict[str, float] = {}
    for ranked in lists:
        for rank, ident in enumerate(ranked):
            scores[ident] = scores.get(ident, 0.0) + 1.0 / (k + rank + 1)
    return sorted(((i, round(s, 6)) for i, s in scores.items()), key=lambda row: (-row[1], row[0]))


def hybrid_app(declare: bool):
    @ragtrail.retriever(component="search.keyword", top_k=4, score_kind=sc.SCORE_BM25)
    def keyword(query: str) -> list[dict[str, Any]]:
        ragtrail.current_stage().corpus_size(len(DOCS), store="kb")
        words = set(_words(query))
        hits = [{"id": i, "content": t, "score": float(len(words & set(_words(t))))} for i, t in DOCS.items()]
        return sorted([h for h in hits if h["score"] > 0], key=lambda h: (-h["score"], h["id"]))[:4]

    @ragtrail.retriever(component="search.vector", top_k=4, score_kind=sc.SCORE_SIMILARITY)
    def vector(query: str) -> list[dict[str, Any]]:
        ragtrail.current_stage().corpus_size(len(DOCS), store="kb")
        hits = [{"id": i, "content": t, "score": cosine(query, t)} for i, t in DOCS.items()]
        return sorted(hits, key=lambda h: (-h["score"], h["id"]))[:4]

    def hybrid(query: str) -> list[dict[str, Any]]:
        with ragtrail.stage(sc.KIND_FUSE, "search.hybrid", score_kind=sc.SCORE_RRF) as s:
            s.query(query)
            a, b = keyword(query), vector(query)
            s.inputs(a + b)
            fused = rrf([[h["id"] for h in a], [h["id"] for h in b]])
            out = [{"id": i, "content": DOCS[i], "score": score} for i, score in fused]
            s.outputs(out)
            return out

    @ragtrail.budgeter(component="context.budget", limit=180, unit="chars")
    def budget(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
        kept, used = [], 0
        for c in candidates:
            if used + len(c["content"]) > 180:
                break
            kept.append(c)
            used += len(c["content"])
        ragtrail.current_stage().set(budget_used=used)
        return kept

    @ragtrail.reranker(component="rerank.llm", top_k=2)
    def rerank(query: str, candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
        answer = "Sure! The most relevant passages are the first ones."  # the LLM's reply: no JSON
        try:
            order = [int(x) for x in answer.split(",")]
            return [candidates[i] for i in order][:2]
        except ValueError:
            if declare:
                ragtrail.current_stage().set_status(sc.STATUS_DEGRADED, failure_class="rerank_unparsable", fallback="hybrid_order")
            return candidates[:2]  # fall back to the hybrid order, scores as they came

    @ragtrail.pipeline(component="kb.ask")
    def ask(query: str) -> list[dict[str, Any]]:
        return rerank(query, budget(hybrid(query)))

    return ask


IDENTITY = (
    "rerank_is_identity: the stage handed on 2 of its 3 inputs in their input order with their input "
    "scores: nothing was reranked (a silent fallback?); the scores keep their upstream kind (rrf)"
)


def test_seed_002_silent_rerank_fallback_is_a_finding_with_rrf_scores(span_exporter):
    ask = hybrid_app(declare=False)
    out = ask("why did the messages survive while the persister was down")
    assert [d["id"] for d in out] == ["kb-1", "kb-4"]
    m = manifest_of(span_exporter)
    fuse = stage_of(m, "fuse", "search.hybrid")
    assert rows(fuse["candidates"], "id", "score", "score_kind") == [
        ("kb-1", 0.032266, "rrf"),
        ("kb-4", 0.032266, "rrf"),
        ("kb-2", 0.032258, "rrf"),
        ("kb-3", 0.03125, "rrf"),
    ]
    assert {e["reason"] for e in fuse["excluded"]} == {"deduplicated"} and len(fuse["excluded"]) == 4
    budget = stage_of(m, "budget", "context.budget")
    assert rows(budget["candidates"], "id", "score_kind") == [("kb-1", "rrf"), ("kb-4", "rrf"), ("kb-2", "rrf")]
    assert rows(budget["excluded"], "id", "reason", "detail") == [("kb-3", "budget_exceeded", "limit=180 chars used=174")]
    rerank = stage_of(m, "rerank", "rerank.llm")
    assert rerank["status"] == "ok"
    # the upstream RRF values are not relabelled rerank scores
    assert rows(rerank["candidates"], "id", "score", "score_kind") == [("kb-1", 0.032266, "rrf"), ("kb-4", 0.032266, "rrf")]
    assert rows(rerank["excluded"], "id", "reason", "detail") == [("kb-2", "below_rank_cutoff", "top_k=2")]
    assert rerank["findings"] == [IDENTITY]
    assert m["findings"] == [f"rerank rerank.llm: {IDENTITY}"]
    assert m["run_status"] == "available"  # ragtrail cannot know it degraded: the finding says it
    assert m["fidelity"]["alarms"] == []
    assert m["coverage"]["corpus_size"] == 5  # both searches read one store


def test_seed_002_declared_fallback_degrades_the_run(span_exporter):
    ask = hybrid_app(declare=True)
    ask("why did the messages survive while the persister was down")
    m = manifest_of(span_exporter)
    rerank = stage_of(m, "rerank", "rerank.llm")
    assert (rerank["status"], rerank["failure_class"], rerank["fallback"]) == ("degraded", "rerank_unparsable", "hybrid_order")
    assert m["run_status"] == "degraded"
    assert m["findings"] == ["rerank rerank.llm: degraded (rerank_unparsable, fallback hybrid_order)", f"rerank rerank.llm: {IDENTITY}"]
