"""ls / stats / compare / show --doc / insights / diff's new verdicts, on traces from the real recorder.

Every trace here is made by decorated pipelines (``ragtrail.retriever/reranker/budgeter/pipeline``)
or ``ragtrail.stage``, exported through ragtrail's WholeTraceSpanProcessor and LocalStoreSpanExporter
to a real local store, and read back by the installed console script.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

import ragtrail as rt
from fixtures.backend_server import BackendServer
from fixtures.ragtrail_traces import rag_run, record
from ragtrail.export.local_store import LocalStoreSpanExporter
from ragtrail.export.whole_trace import WholeTraceSpanProcessor
from ragtrail.inspect.search import Filter, query_receipt
from ragtrail.inspect.stream import TraceStream
from test_cli_errors import ragtrail

QUESTIONS = [f"question {i}: how do I configure feature {i}?" for i in range(103)]
NEVER_RETRIEVED = 7  # the one question both runs refuse: its evidence is never retrieved
FALLS_BACK = {i for i in range(103) if i % 5 == 0}  # 21 of 103: the new reranker's output fails to parse


def experiment(store: Path, *, new_reranker: bool, questions: int = 103, version: str | None = None) -> None:
    """103 questions through retrieve → rerank → budget → answer. The new reranker (seed 003) fails to
    parse on 21 questions, falls back to input order and says so; the budget then evicts the evidence."""
    resource = Resource.create({"service.name": "tests.rag", "service.version": version or "0"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(WholeTraceSpanProcessor(LocalStoreSpanExporter(store), schedule_delay_millis=10, grace_millis=10))
    tracer = provider.get_tracer("tests.experiment")

    @rt.retriever(component="exp.hybrid", score_kind="similarity", tracer=tracer)
    def search(query: str, i: int) -> list[dict[str, Any]]:
        docs = [{"id": f"q{i}-filler-{k}", "content": f"filler {k} for {i}", "score": 0.9 - 0.05 * k} for k in range(5)]
        if i != NEVER_RETRIEVED:
            docs.insert(3, {"id": f"q{i}-evidence", "content": f"feature {i} is configured in settings", "score": 0.76})
        return docs

    @rt.reranker(component="exp.llm_rerank", tracer=tracer)
    def rerank(query: str, candidates: list[dict[str, Any]], i: int) -> list[dict[str, Any]]:
        if new_reranker and i in FALLS_BACK:
            rt.current_stage().set_status("degraded", failure_class="parse_error", fallback="input_order")
            return list(candidates)
        ranked = sorted(candidates, key=lambda d: (not d["id"].endswith("evidence"), d["id"]))
        return [{**d, "score": 1.0 - 0.1 * n} for n, d in enumerate(ranked)]

    @rt.budgeter(component="exp.budget", limit=3, unit="documents", tracer=tracer)
    def budget(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return candidates[:3]

    @rt.pipeline(component="exp.answer", tracer=tracer)
    def answer(query: str, i: int) -> str:
        context = budget(rerank(query, search(query, i), i))
        evidence = [d["id"] for d in context if d["id"].endswith("evidence")]
        if not evidence:
            rt.answer("I don't know.", claim="none", refused=True)
            return "I don't know."
        rt.cite(evidence, tracer=tracer)
        text = f"Feature {i} is configured in settings."
        rt.answer(text, claim="presence")
        return text

    try:
        for i, q in enumerate(QUESTIONS[:questions]):
            answer(q, i)
    finally:
        provider.force_flush()
        provider.shutdown()


def test_compare_finds_the_refusals_and_names_the_stage_per_question(tmp_path):
    old, new = tmp_path / "baseline", tmp_path / "hop"
    experiment(old, new_reranker=False)
    experiment(new, new_reranker=True)

    result = json.loads(ragtrail("compare", str(old), str(new), "--json").stdout)
    assert (result["a"]["refused"], result["a"]["refusal_known"]) == (1, 103)
    assert (result["b"]["refused"], result["b"]["refusal_known"]) == (22, 103)
    assert (result["a"]["degraded"], result["b"]["degraded"]) == (0, 21)
    assert (result["a"]["fallback"], result["b"]["fallback"]) == (0, 21)
    assert result["paired"] == 103 and result["only_in_a"] == [] and result["only_in_b"] == []
    assert result["verdicts"] == {"different evidence": 21, "same evidence, same answer": 82}
    assert result["newly_refused"] == 21
    assert result["newly_refused_first_difference"] == {"rerank exp.llm_rerank": 21}
    by_query = {p["query_sha256"]: p for p in result["questions"]}
    for i in FALLS_BACK:
        p = by_query[query_receipt(QUESTIONS[i])]
        assert p["refused_a"] is False and p["refused_b"] is True
        rerank, budget = p["chain"][0], p["chain"][1]
        assert rerank["stage"] == "rerank exp.llm_rerank"
        assert rerank["status"] == "ok → degraded (parse_error, fallback input_order)"
        assert rerank["order"] == "same documents, other order"
        assert budget["stage"] == "budget exp.budget"
        assert budget["left"] == [{"id": f"q{i}-evidence", "reason": "budget_exceeded"}]
        assert p["cause"].startswith(
            "rerank exp.llm_rerank ok → degraded (parse_error, fallback input_order); "
            "same documents, other order → budget exp.budget left: 1 budget_exceeded"
        )
    # survival: A's cited evidence is all there after retrieval in B, 82 of 102 after B's budget
    survival = {s["stage"]: s for s in result["b"]["survival"]}
    assert survival["retrieve exp.hybrid"]["other_cited_present"] == 1.0
    assert survival["budget exp.budget"]["other_cited_present"] == round(81 / 102, 4)

    terminal = ragtrail("compare", str(old), str(new))
    assert terminal.returncode == 0, terminal.stderr
    assert "refused in B, answered in A: 21 (evidence first differs: 21 at rerank exp.llm_rerank)" in terminal.stdout
    assert "22/103 (21.4%)" in terminal.stdout and "1/103 (1.0%)" in terminal.stdout
    md = ragtrail("compare", str(old), str(new), "--markdown").stdout
    assert md.startswith("# ragtrail compare\n") and "| refused | 1 | 22 |" in md
    assert md.count("REFUSED") == 0 and md.count("| True → ") == 0 and md.count("| False → True |") == 21

    stats = json.loads(ragtrail("stats", "--source", str(new), "--json").stdout)
    rerank = next(s for s in stats["stages"] if s["kind"] == "rerank")
    assert rerank["statuses"] == {"ok": 82, "degraded": 21}
    assert rerank["failure_classes"] == {"parse_error": 21} and rerank["fallbacks"] == {"input_order": 21}
    assert rerank["fallback_rate"] == round(21 / 103, 4)
    budget = next(s for s in stats["stages"] if s["kind"] == "budget")
    assert budget["exclusion_reasons"] == {"budget_exceeded": 103 * 3 - 1}  # question 7 retrieved 5, not 6
    assert stats["refusal_rate"] == round(22 / 103, 4)
    assert stats["run_statuses"] == {"available": 82, "degraded": 21}
    assert stats["sampling"] == "103 traces, none carries a sampling record: each counts once (figures are trace counts)"

    # ls: pushed-down filters done locally on the store, and the query receipt typed in as text
    ls = ragtrail("ls", "--source", str(new), "--status", "degraded")
    assert ls.returncode == 0 and len(ls.stdout.splitlines()) == 21
    assert all(
        "run=degraded" in line and "rerank exp.llm_rerank=degraded (parse_error, fallback input_order)" in line for line in ls.stdout.splitlines()
    )
    one = json.loads(ragtrail("ls", "--source", str(new), "--query-text", QUESTIONS[10], "--json").stdout)
    assert [r["refused"] for r in one] == [True] and one[0]["query_sha256"] == query_receipt(QUESTIONS[10])
    doc = json.loads(ragtrail("ls", "--source", str(old), "--doc", "q5-evidence", "--json").stdout)
    assert len(doc) == 1 and doc[0]["cited"] == ["q5-evidence"]

    # one document's fate in the refused run: kept at retrieval and rerank, evicted by the budget
    fate = json.loads(ragtrail("show", one[0]["trace_id"], "--source", str(new), "--doc", "q10-evidence", "--json").stdout)
    assert [(s["stage"], s["state"], s.get("rank"), s.get("reason")) for s in fate["steps"]] == [
        ("retrieve exp.hybrid", "kept", 3, None),
        ("rerank exp.llm_rerank", "kept", 3, None),
        ("budget exp.budget", "excluded", 3, "budget_exceeded"),
    ]
    assert fate["verdict"] == "excluded at budget exp.budget (budget_exceeded)" and fate["cited"] is False


def test_compare_two_service_versions_in_one_store(tmp_path):
    experiment(tmp_path, new_reranker=False, questions=10, version="1.3.0")
    experiment(tmp_path, new_reranker=True, questions=12, version="1.4.0")
    result = json.loads(ragtrail("compare", "version:1.3.0", "version:1.4.0", "--source", str(tmp_path), "--json").stdout)
    assert (result["a"]["name"], result["b"]["name"]) == ("version:1.3.0", "version:1.4.0")
    assert (result["a"]["traces"], result["b"]["traces"]) == (10, 12)
    assert result["paired"] == 10 and result["only_in_a"] == []
    assert [q["query_sha256"] for q in result["only_in_b"]] == [query_receipt(QUESTIONS[10]), query_receipt(QUESTIONS[11])]
    assert result["newly_refused_first_difference"] == {"rerank exp.llm_rerank": 2}  # questions 0 and 5
    missing = ragtrail("compare", "version:1.3.0", "version:9", "--source", str(tmp_path))
    assert missing.returncode == 3 and missing.stderr.strip() == (
        "ragtrail: error: side B (version:9) has no ragtrail trace: check the source or selection"
    )
    assert ragtrail("compare", "tag:nokey", "version:9", "--source", str(tmp_path)).returncode == 2


def test_ls_local_store_filters_and_one_line_errors(tmp_path):
    rt.set_capture(metadata=["updated_at", "status"])
    ids = [record(tmp_path, rag_run) for _ in range(2)]
    out = ragtrail("ls", "--source", str(tmp_path), "--reason", "superseded")
    assert out.returncode == 0 and [line.split()[0] for line in out.stdout.splitlines() if not line.startswith(" ")] == ids
    none = ragtrail("ls", "--source", str(tmp_path), "--reason", "stale")
    assert none.returncode == 3 and none.stderr.strip() == (
        "ragtrail: error: no trace matches: loosen the filters (ragtrail ls --help) or check --source"
    )
    bad = ragtrail("ls", "--source", str(tmp_path), "--reason", "nope")
    assert bad.returncode == 2 and "unknown exclusion reason 'nope'" in bad.stderr
    assert ragtrail("ls", "--source", str(tmp_path), "--limit", "1", "--json").stdout.count('"trace_id"') == 1
    # --query on a local store is refused, not ignored; --lookback works there
    refused = ragtrail("verify", "--search", "--source", str(tmp_path), "--query", "ragtrail.stage.status=degraded")
    assert refused.returncode == 2 and "--query is a Jaeger or Tempo search" in refused.stderr
    assert ragtrail("verify", "--search", "--source", str(tmp_path), "--lookback", "1h").returncode == 0


def test_insight_stale_citation_seed_000(tmp_path):
    rt.set_capture(metadata=["updated_at", "status"])
    trace_id = record(tmp_path, rag_run)
    (row,) = json.loads(ragtrail("ls", "--source", str(tmp_path), "--finding", "stale_citation", "--json").stdout)
    (stale,) = [i for i in row["insights"] if i["insight"] == "stale_citation"]
    assert row["trace_id"] == trace_id
    assert stale["said"] == (
        "cited policy-2024-11 (updated_at 2024-11-04, rank 0) outranked the newer policy-2026-01 "
        "(updated_at 2026-01-12, rank 1) at retrieve tests.bm25, which was not cited"
    )
    # the date key is configurable; a key no candidate carries finds nothing (and guesses nothing)
    assert ragtrail("ls", "--source", str(tmp_path), "--finding", "stale_citation", "--date-key", "reviewed_at").returncode == 3


def test_insight_echo_seed_001_and_self_citation(tmp_path):
    rt.set_capture(metadata=["author"])
    question = "why does the deploy bot fail on arm64?"

    def run(tracer):
        with rt.stage("pipeline", "chat.answer", tracer=tracer) as p:
            p.query(question)
            with rt.stage("retrieve", "chat.history", score_kind="similarity", tracer=tracer) as s:
                s.query(question)
                s.outputs(
                    [
                        {"id": "msg-991", "content": question, "score": 0.99, "metadata": {"author": "user"}},
                        {"id": "msg-512", "content": "arm64 images need qemu", "score": 0.71, "metadata": {"author": "assistant"}},
                    ]
                )
            rt.cite(["msg-512"], tracer=tracer)

    record(tmp_path, run)
    (row,) = json.loads(ragtrail("ls", "--source", str(tmp_path), "--finding", "echo", "--json", "--self-author", "author=assistant").stdout)
    found = {i["insight"]: i["said"] for i in row["insights"]}
    assert found == {
        "echo": "candidate msg-991 (rank 0 at retrieve chat.history) has the same content sha256 as query hop 0: "
        "the question came back as its own evidence",
        "self_citation": "the answer cited msg-512, whose author is assistant: content the system wrote itself",
    }
    plain_ls = json.loads(ragtrail("ls", "--source", str(tmp_path), "--json").stdout)
    assert [i["insight"] for i in plain_ls[0]["insights"]] == ["echo"]  # self-citation needs --self-author


def test_insight_silent_fallback_only_when_order_and_scores_are_handed_on(tmp_path):
    docs = [{"id": f"d{k}", "content": f"doc {k}", "score": 0.9 - 0.1 * k} for k in range(4)]

    def run(tracer, rescore: bool):
        @rt.retriever(component="t.r", tracer=tracer)
        def search(q):
            return [dict(d) for d in docs]

        @rt.reranker(component="t.rerank", tracer=tracer)
        def rerank(q, cands):
            return [{**d, "score": 5.0 - n} for n, d in enumerate(cands)] if rescore else list(cands)

        @rt.pipeline(component="t.p", tracer=tracer)
        def pipe(q):
            return rerank(q, search(q))

        pipe("q")

    record(tmp_path / "silent", lambda t: run(t, rescore=False))
    record(tmp_path / "agrees", lambda t: run(t, rescore=True))
    (row,) = json.loads(ragtrail("ls", "--source", str(tmp_path / "silent"), "--json").stdout)
    assert [i["said"] for i in row["insights"]] == [
        "rerank t.rerank handed on its input order from retrieve t.r unchanged, scores too (4 of 4 kept) and "
        "reported no fallback: a reranker that fell back silently looks exactly like this"
    ]
    (row,) = json.loads(ragtrail("ls", "--source", str(tmp_path / "agrees"), "--json").stdout)
    assert row["insights"] == []  # the same order with its own scores is a reranker that agrees


def test_insight_silent_fallback_not_on_a_reorderer_that_gives_no_scores(tmp_path):
    """A stage that gives no scores of its own (an MMR pick, lost-in-the-middle) and keeps the top of its
    input hands on its input order and scores by design: only a stage that claims rerank scores and
    hands on its inputs (the recorder's ``rerank_is_identity`` finding) is evidence of a fallback."""
    docs = [{"id": f"d{k}", "content": f"doc {k}", "score": 0.9 - 0.1 * k} for k in range(4)]

    def run(tracer):
        @rt.retriever(component="t.r", tracer=tracer)
        def search(q):
            return [dict(d) for d in docs]

        @rt.reranker(component="t.mmr", score_kind=None, top_k=2, tracer=tracer)
        def pick(q, cands):
            return list(cands)[:2]

        @rt.pipeline(component="t.p", tracer=tracer)
        def pipe(q):
            return pick(q, search(q))

        pipe("q")

    record(tmp_path, run)
    (row,) = json.loads(ragtrail("ls", "--source", str(tmp_path), "--json").stdout)
    assert row["insights"] == []


def test_diff_says_status_answer_and_the_retriever_under_a_fuse(tmp_path):
    def run(tracer, *, degraded: bool, answer: str, vector_ids: list[str]):
        with rt.stage("pipeline", "t.answer", tracer=tracer) as p:
            p.query("q")
            with rt.stage("fuse", "t.rrf", score_kind="rrf", tracer=tracer) as f:
                with rt.stage("retrieve", "t.bm25", tracer=tracer) as s:
                    s.query("q")
                    s.outputs([{"id": "a", "content": "A"}, {"id": "b", "content": "B"}])
                with rt.stage("retrieve", "t.vector", tracer=tracer) as s:
                    s.query("q")
                    s.outputs([{"id": i, "content": i.upper()} for i in vector_ids])
                fused = [{"id": i, "content": i.upper()} for i in dict.fromkeys(["a", "b", *vector_ids])]
                f.outputs(fused)
            with rt.stage("rerank", "t.rerank", tracer=tracer) as s:
                s.inputs(fused)
                if degraded:
                    s.set_status("degraded", failure_class="parse_error", fallback="input_order")
                s.outputs(fused)
            rt.answer(answer)

    record(tmp_path / "a", lambda t: run(t, degraded=False, answer="yes", vector_ids=["c"]))
    record(tmp_path / "b", lambda t: run(t, degraded=True, answer="yes", vector_ids=["d"]))
    record(tmp_path / "c", lambda t: run(t, degraded=False, answer="no", vector_ids=["c"]))
    d = json.loads(ragtrail("diff", "last", "last", "--source", str(tmp_path / "a"), "--source-b", str(tmp_path / "b"), "--json").stdout)
    assert d["status_changes"] == ["rerank t.rerank: ok → degraded (parse_error, fallback input_order)"]
    assert d["first_difference"] == {"kind": "retrieve", "component": "t.vector", "under": {"kind": "fuse", "component": "t.rrf"}}
    assert d["verdict"] == (
        "rerank t.rerank: ok → degraded (parse_error, fallback input_order); evidence first differs "
        "at retrieve (t.vector): +1 -1 candidates, underneath fuse (t.rrf); same answer"
    )
    d = json.loads(ragtrail("diff", "last", "last", "--source", str(tmp_path / "a"), "--source-b", str(tmp_path / "c"), "--json").stdout)
    assert d["same_evidence"] and d["verdict"] == "same evidence, different answer: look at the model"


def test_stats_weights_by_adjusted_count(tmp_path):
    for _ in range(30):
        record(tmp_path, rag_run, probability=0.5)
    stats = json.loads(ragtrail("stats", "--source", str(tmp_path), "--json").stdout)
    n = stats["traces"]
    assert n > 0 and stats["weighted_traces"] == n and stats["requests"] == 2 * n
    assert stats["sampling"] == (f"{n} traces standing for {2 * n:g} requests: weighted by ragtrail.sampling.adjusted_count ({n} traces carry it)")
    rerank = next(s for s in stats["stages"] if s["kind"] == "rerank")
    assert rerank["traces"] == 2 * n and rerank["spans"] == n
    assert rerank["exclusion_reasons"] == {"below_rank_cutoff": 2 * 2 * n}


def test_stream_reads_a_trace_split_far_apart_as_parts_and_says_so(tmp_path):
    first = record(tmp_path, rag_run)
    (path,) = list(tmp_path.glob("*.jsonl"))
    content = path.read_bytes().splitlines(keepends=True)
    filler = [record(tmp_path / "other", rag_run) for _ in range(3)]
    other = [
        line
        for p in sorted((tmp_path / "other").glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
        for line in p.read_bytes().splitlines(keepends=True)
    ]
    # the first trace's segment, then the others, then the first again (a duplicate late segment)
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "traces-1.jsonl").write_bytes(b"".join(content + other + content))
    stream = TraceStream(str(tmp_path / "mixed"), window=1)
    got = [t.trace_id for t in stream]
    assert got == [first, *filler, first]
    assert stream.split_traces == 1
    assert stream.notes() == ["1 traces arrived in parts far apart and were read as separate parts"]


def test_tempo_and_jaeger_push_down():
    f = Filter(run_status="degraded", reason="budget_exceeded", query_sha256="ab" * 32)
    assert f.traceql() == (
        '{ span.ragtrail.run.status = "degraded" } && { span.ragtrail.query.sha256 = "'
        + "ab" * 32
        + '" } && { event.ragtrail.exclusion.reason = "budget_exceeded" }'
    )
    assert json.loads(f.jaeger_tags()) == {"ragtrail.run.status": "degraded", "ragtrail.query.sha256": "ab" * 32}
    with BackendServer() as server:
        server.route("/api/search", {"traces": []})
        result = ragtrail("ls", "--source", f"tempo+{server.url}", "--stage-status", "degraded")
    assert result.returncode == 3
    (search,) = [r for r in server.requests if r.startswith("/api/search")]
    assert "q=%7B+span.ragtrail.stage.status+%3D+%22degraded%22+%7D" in search


def test_jaeger_push_down_sends_every_tag():
    with BackendServer() as server:
        server.route("/api/services", {"data": ["rag"]})
        server.route("/api/traces", {"data": []})
        result = ragtrail("ls", "--source", f"jaeger+{server.url}", "--status", "degraded", "--component", "exp.budget")
    assert result.returncode == 3
    (search,) = [r for r in server.requests if r.startswith("/api/traces?")]
    params = parse_qs(urlsplit(search).query)
    assert json.loads(params["tags"][0]) == {"ragtrail.run.status": "degraded", "ragtrail.stage.component": "exp.budget"}
    assert params["service"] == ["rag"] and params["lookback"] == ["1h"]


def test_hostile_ids_stay_on_one_line_and_print_no_escape(tmp_path):
    hostile = "evil\n\x1b[2J[bold]id\u202e"

    def run(tracer):
        with rt.stage("pipeline", "t.p", tracer=tracer) as p:
            p.query("q")
            with rt.stage("retrieve", "t.r", tracer=tracer) as s:
                s.query("q")
                s.outputs([{"id": hostile, "content": "q"}, {"id": "ok", "content": "fine"}])
            rt.cite([hostile], tracer=tracer)

    record(tmp_path, run)
    out = ragtrail("ls", "--source", str(tmp_path), "--doc", hostile)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2 and lines[1] == (
        "    echo: candidate evil\\n\\x1b[2J[bold]id\\u202e (rank 0 at retrieve t.r) has the same content sha256 as "
        "query hop 0: the question came back as its own evidence"
    )
    fate = ragtrail("show", "last", "--source", str(tmp_path), "--doc", hostile)
    assert fate.returncode == 0 and "\x1b" not in fate.stdout and "\u202e" not in fate.stdout
    assert fate.stdout.splitlines()[0] == "document evil\\n\\x1b[2J[bold]id\\u202e  in trace " + out.stdout.split()[0]
    assert fate.stdout.splitlines()[-1] == "fate: cited by the answer"
