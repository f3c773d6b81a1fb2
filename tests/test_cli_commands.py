"""show / verify / diff / report through the installed console script, on real recorded traces."""

from __future__ import annotations

import json

import ragtrail as rt
from fixtures.backend_server import BackendServer
from fixtures.ragtrail_traces import column, rag_run, record, rewrite_store
from ragtrail.contract import semconv as sc
from test_cli_errors import FIXTURES, TRACE_ID, ragtrail


def test_show_prints_the_manifest(tmp_path):
    trace_id = record(tmp_path, rag_run)
    result = ragtrail("show", trace_id, "--source", str(tmp_path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for expected in (
        f"trace {trace_id}",
        'hop 1  rewrite of hop 0  "enterprise refund window" → index',
        "policy-2026-01-draft",
        "superseded",
        "replaced by policy-2026-01",
        "below_rank_cutoff",
        "Cited: policy-2024-11",
        "Coverage: 2 of 1003 read: an absence claim is not supported",
        "Fidelity: faithful",
        "Sampling: no sampling recorded",
    ):
        assert expected in out, expected
    as_json = json.loads(ragtrail("show", trace_id, "--source", str(tmp_path), "--json").stdout)
    for key in ("trace_id", "query_hops", "stages", "retrieved", "excluded", "cited", "survival", "coverage", "fidelity", "sampling"):
        assert key in as_json
    assert as_json["trace_id"] == trace_id


def test_verify_exits_nonzero_with_one_line_per_alarm(tmp_path):
    rt.set_capture(content="preview")
    trace_id = record(tmp_path, rag_run)
    ok = ragtrail("verify", "last", "--source", str(tmp_path))
    assert ok.returncode == 0 and ok.stdout.startswith(f"ok trace={trace_id}: intact 16, changed_cited 3"), ok.stdout

    def edit(span):
        if span["name"] == "retrieve bm25":  # the last row cut from the ids column, a preview replaced
            column(span, sc.COLUMN_IDS).pop()
            column(span, sc.COLUMN_CONTENT_PREVIEW)[0]["stringValue"] = "tampered"

    path = rewrite_store(tmp_path, edit)
    bad = ragtrail("verify", trace_id, "--source", str(path))
    assert bad.returncode == 1
    lines = bad.stdout.strip().splitlines()
    assert len(lines) == 2
    assert (
        lines[0].startswith(f"ALARM trace={trace_id} span=")
        and "stage=retrieve tests.bm25 candidate=- field=ragtrail.events.count: event count mismatch (4 received, 5 stamped)" in lines[0]
    )
    assert "candidate=policy-2024-11 field=ragtrail.candidate.content.preview: changed_uncited" in lines[1]
    as_json = json.loads(ragtrail("verify", trace_id, "--source", str(path), "--json").stdout)
    assert [len(r["fidelity"]["alarms"]) for r in as_json] == [2]


def test_verify_search_over_tempo():
    with BackendServer() as server:
        server.route(f"/api/v2/traces/{TRACE_ID}", (FIXTURES / "tempo_v2_partial.json").read_text())
        server.route("/api/search", (FIXTURES / "tempo_search.json").read_text())
        result = ragtrail("verify", "--search", "--source", f"tempo+{server.url}", "--query", '{ span.ragtrail.stage.status = "degraded" }')
    assert result.returncode == 1
    assert result.stdout.strip() == (
        f"ALARM trace={TRACE_ID} span={_root_span_id()} stage=- candidate=- field=status: backend returned a partial "
        "trace (Tempo returned status PARTIAL: trace exceeds max size (max bytes: 5000000), partial trace returned)"
    )


def _root_span_id() -> str:
    """The root (pipeline) span of the recorded Jaeger trace the Tempo fixtures are derived from:
    verify pins a partial-trace alarm on the root, not on whichever span the backend listed first."""
    doc = json.loads((FIXTURES / "jaeger_recorded" / "whole_trace.v3.json").read_text())["result"]
    spans = [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    assert spans[0]["name"] == "query_transform rewrite"  # the backend's order is not the tree's
    (root,) = [s for s in spans if not s.get("parentSpanId")]
    assert root["name"].startswith("pipeline ")
    return root["spanId"]


def test_verify_search_over_the_local_store(tmp_path):
    ids = [record(tmp_path, rag_run) for _ in range(3)]
    result = ragtrail("verify", "--search", "--source", str(tmp_path))
    assert result.returncode == 0
    assert sorted(line.split()[1].split("=")[1].rstrip(":") for line in result.stdout.splitlines()) == sorted(ids)


def test_diff_command(tmp_path):
    a = record(tmp_path, rag_run)
    b = record(tmp_path, lambda t: rag_run(t, rerank_order=["sla-2025", "policy-2024-11", "policy-2026-01", "sales-deck-q1"]))
    result = ragtrail("diff", a, b, "--source", str(tmp_path))
    assert result.returncode == 0
    assert "verdict: evidence first differs at rerank (tests.rerank): +1 -1 candidates, 1 moved, exclusions" in result.stdout
    assert "+ sla-2025 (rank 0, score 1)" in result.stdout
    assert "~ policy-2024-11 rank 0 → 1 (+1)" in result.stdout
    assert ragtrail("diff", a, b, "--source", str(tmp_path), "--exit-code").returncode == 1
    same = ragtrail("diff", a, a, "--source", str(tmp_path), "--exit-code")
    assert same.returncode == 0 and "verdict: same evidence at every stage: look at the model" in same.stdout


def test_report_command(tmp_path):
    trace_id = record(tmp_path, rag_run)
    out = tmp_path / "r" / "report.html"
    result = ragtrail("report", trace_id, "--source", str(tmp_path), "-o", str(out))
    assert result.returncode == 0 and result.stdout.strip() == str(out.resolve())
    html = out.read_text()
    assert 'id="funnel-chart"' in html and trace_id in html
    for forbidden in ("http://", "https://", "<script src", "<link "):
        assert forbidden not in html, forbidden
    embedded = html.split('<script type="application/json" id="manifest">')[1].split("</script>")[0]
    assert json.loads(embedded)["trace_id"] == trace_id


def test_verify_strict_fails_on_findings(tmp_path):
    def run(tracer):
        with rt.stage("pipeline", "tests.p", tracer=tracer):
            docs = [{"id": "a", "content": "x"}, {"id": "b", "content": "y"}]
            with rt.stage("retrieve", "tests.r", tracer=tracer) as s:
                s.query("q")
                s.outputs(docs)
            with rt.stage("rerank", "tests.llm_rerank", tracer=tracer) as s:
                s.inputs(docs)
                s.set_status("degraded", failure_class="parse_error", fallback="input_order")
                s.outputs(docs[:1])

    record(tmp_path, run)
    assert ragtrail("verify", "last", "--source", str(tmp_path)).returncode == 0
    strict = ragtrail("verify", "last", "--source", str(tmp_path), "--strict")
    assert strict.returncode == 1
    findings = [line for line in strict.stdout.splitlines() if line.startswith("FINDING")]
    assert findings[0].endswith("rerank tests.llm_rerank: degraded (parse_error, fallback input_order)")
    assert findings[1].endswith("rerank tests.llm_rerank: 1 candidates vanished unexplained (b)")


def test_show_summarises_huge_stages_and_all_or_json_show_everything(tmp_path):
    """A batch trace: the terminal view cuts each table to --limit rows and to 20 stages, and says so with
    '… N more' lines; --all prints every row and --json keeps every candidate and exclusion."""

    def run(tracer):
        with rt.stage("pipeline", "tests.batch", tracer=tracer):
            docs = [{"id": f"doc-{i:02d}", "content": f"passage {i}", "score": 1 - i / 100} for i in range(30)]
            with rt.stage("rerank", "tests.rerank", top_k=5, tracer=tracer) as s:
                s.query("q")
                s.inputs(docs)
                s.outputs(docs[:5])
            for n in range(22):
                with rt.stage("retrieve", f"tests.retriever{n:02d}", tracer=tracer) as s:
                    s.query("q")
                    s.outputs([{"id": f"r{n:02d}-{i:02d}", "content": f"hit {i}"} for i in range(12)])
            return format(rt_trace.get_current_span().get_span_context().trace_id, "032x")

    from opentelemetry import trace as rt_trace

    trace_id = record(tmp_path, run)
    out = ragtrail("show", trace_id, "--source", str(tmp_path))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "  … 15 more exclusions (--all shows every one)" in text  # rerank: 5 out, 25 excluded, 10 shown
    assert "  … 2 more candidates (--all shows every one)" in text  # each retriever: 12 candidates, 10 shown
    assert text.count("more candidates (--all shows every one)") == 19  # retrievers 00-18 shown, 19-21 cut
    assert "… candidates of 3 more stages not shown (--all shows every one)" in text
    assert "r18-09" in text and "r18-10" not in text and "r19-00" not in text
    assert "doc-14" in text and "doc-15" not in text  # exclusions doc-05..doc-14 shown
    assert ragtrail("show", trace_id, "--source", str(tmp_path), "--limit", "3").stdout.count("  … 9 more candidates (--all shows every one)") == 19

    everything = ragtrail("show", trace_id, "--source", str(tmp_path), "--all").stdout
    assert "--all shows every one" not in everything and "… " not in everything
    for n in range(22):
        for i in range(12):
            assert f"r{n:02d}-{i:02d}" in everything
    for i in range(30):
        assert f"doc-{i:02d}" in everything

    manifest = json.loads(ragtrail("show", trace_id, "--source", str(tmp_path), "--json").stdout)
    rerank = manifest["stages"][0]
    assert [c["id"] for c in rerank["candidates"]] == [f"doc-{i:02d}" for i in range(5)]
    assert [e["id"] for e in rerank["excluded"]] == [f"doc-{i:02d}" for i in range(5, 30)]
    assert [[c["id"] for c in s["candidates"]] for s in manifest["stages"][1:]] == [[f"r{n:02d}-{i:02d}" for i in range(12)] for n in range(22)]


def test_show_says_what_each_stage_ran_against_every_metadata_key_and_the_error(tmp_path):
    """Text mode shows the stage's filter, collection and model, every captured metadata key (not a
    fixed few), the exception message of a failed stage, and the run status next to the pipeline's."""
    rt.set_capture(metadata=["source", "effective_date", "owner"])

    def run(tracer):
        with rt.stage("pipeline", "tests.answer", tracer=tracer) as p:
            p.query("refund window?")
            with rt.stage("retrieve", "tests.qdrant", tracer=tracer) as s:
                s.query("refund window?")
                s.set_attribute(sc.STAGE_FILTER, {"must": [{"key": "region", "match": {"value": "eu"}}]})
                s.set_attribute(sc.STAGE_COLLECTION, "policies")
                s.outputs(
                    [
                        {
                            "id": "p1",
                            "content": "Refunds take 30 days.",
                            "metadata": {"source": "policy.txt", "effective_date": "2026-01-12", "owner": "legal"},
                        }
                    ]
                )
            try:
                with rt.stage("rerank", "tests.cross_encoder", tracer=tracer) as s:
                    s.set_attribute(sc.STAGE_MODEL, "cross-encoder/ms-marco-MiniLM-L-6-v2")
                    raise RuntimeError("model [bold]offline[/bold]\x1b[2J")
            except RuntimeError:
                pass
        return trace_id_of(p)

    def trace_id_of(p):
        return None

    record(tmp_path, run)
    result = ragtrail("show", "last", "--source", str(tmp_path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for expected in (
        'filter {"must":[{"key":"region","match":{"value":"eu"}}]} · collection policies',
        "model cross-encoder/ms-marco-MiniLM-L-6-v2",
        "source=policy.txt effective_date=2026-01-12 owner=legal",
        "error: RuntimeError: model [bold]offline[/bold]\\x1b[2J",
        "pipeline tests.answer ok (run failed)",
        "Stages (run failed)",
    ):
        assert expected in out, (expected, out[:3000])
    assert "\x1b" not in out  # the escape sequence in the message is shown, never sent to the terminal
    manifest = json.loads(ragtrail("show", "last", "--source", str(tmp_path), "--json").stdout)
    retrieve, rerank = manifest["stages"]
    assert (retrieve["filter"], retrieve["collection"], retrieve["model"], retrieve["error"]) == (
        '{"must":[{"key":"region","match":{"value":"eu"}}]}',
        "policies",
        None,
        None,
    )
    assert (rerank["model"], rerank["error"]) == ("cross-encoder/ms-marco-MiniLM-L-6-v2", "RuntimeError: model [bold]offline[/bold]\x1b[2J")
    assert manifest["run_status"] == "failed"
