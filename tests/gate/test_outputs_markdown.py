"""ragtrail.gate.markdown: the pull-request comment, line by line, and hostile trace data rendered
by a real CommonMark + GFM-table renderer (markdown-it-py) to prove it stays inert data."""

from __future__ import annotations

import re
from html import unescape

from markdown_it import MarkdownIt

from ragtrail.gate import markdown
from ragtrail.gate.model import ALL_SLICE, Check, GateReport, Problem, decide
from ragtrail.inspect.safe import plain

from .outputs_reports import HOSTILE, MESSAGE, hostile, inconclusive, passing, regression

RENDERER = MarkdownIt("commonmark").enable("table")


def test_a_regression_says_the_verdict_the_failed_slice_and_the_stage_that_lost_the_evidence():
    assert markdown.render(regression()).splitlines() == [
        "## ❌ ragtrail gate: **REGRESSION**",
        "",
        "`ragtrail gate: REGRESSION (exit 1): 4 checks, 1 failed, 0 problems, 3 cases`",
        "",
        "set `eval.jsonl` · baseline `gate-baseline.json` · pipeline `app.rag:answer`",
        "",
        "### Slice `(all)`: all checks pass",
        "",
        "| metric | value | threshold | baseline | n | result | why |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        "| `recall@retrieve` | 1.000 | ≥ 0.850 | 0.900 | 12 | pass |  |",
        "| `survival@budget app.budget` | 0.900 | ≥ 0.850 | 0.900 | 12 | pass |  |",
        "",
        "Where the relevant documents were lost:",
        "",
        "- `budget app.budget: 2 relevant lost (budget_exceeded ×2)`",
        "",
        "### Slice `tables`: 1 check failed",
        "",
        "| metric | value | threshold | baseline | n | result | why |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        "| `recall@retrieve` | 1.000 | ≥ 0.850 | 0.900 | 12 | pass |  |",
        f"| `survival@budget app.budget` | 0.500 | ≥ 0.800 | 0.850 | 12 | **FAIL** | `{MESSAGE}` |",
        "",
        "Where the relevant documents were lost:",
        "",
        "- `budget app.budget: 2 relevant lost (budget_exceeded ×2)`",
        "",
        "<details>",
        "<summary>Per-case movement (2 cases moved or in doubt; 1 unchanged)</summary>",
        "",
        "| case | slice | query | movement | problems |",
        "| --- | --- | --- | --- | --- |",
        "| `t1` | `tables` | `question t1?` | `rbo 0.620; entered: new-doc; left: tbl-1 (budget app.budget, budget_exceeded)` |  |",
        "| `t2` | `tables` | `question t2?` | `rbo 0.700; entered: new-doc; left: tbl-2 (budget app.budget, budget_exceeded)` |  |",
        "",
        "</details>",
    ]


def test_a_pass_has_the_ceiling_of_the_refusal_rate_and_the_small_slice_warning():
    lines = markdown.render(passing()).splitlines()
    assert lines[0] == "## ✅ ragtrail gate: **PASS**"
    assert "| `refusal_rate` | 0.000 | ≤ 0.100 | 0.150 | 12 | pass |  |" in lines
    start = lines.index("### Slice `tables`: all checks pass")
    assert lines[start + 1 : start + 4] == ["", "⚠️ `slice too small to be statistically boring (n=3)`", ""]
    assert "| `recall@retrieve` | 1.000 | ≥ 0.900 | 0.950 | 3 | pass |  |" in lines
    assert not [x for x in lines if "Where the relevant" in x or "Inconclusive" in x]


def test_inconclusive_names_every_problem_before_the_metrics():
    lines = markdown.render(inconclusive()).splitlines()
    assert lines[0] == "## ⚠️ ragtrail gate: **INCONCLUSIVE**"
    start = lines.index("### Inconclusive evidence (5)")
    assert lines[start : start + 11] == [
        "### Inconclusive evidence (5)",
        "",
        "Each of these makes the verdict INCONCLUSIVE: the gate does not pass on evidence it cannot trust.",
        "",
        "| problem | case | detail | trace |",
        "| --- | --- | --- | --- |",
        "| `sampled_out` | `q3` | `adjusted count 10: the trace was sampled` | `t-q3` |",
        "| `truncated` | `q4` | `2 spans lost of 5` | `t-q4` |",
        "| `receipt_alarm` | `q5` | `stage rerank: content receipt differs` | `t-q5` |",
        "| `receipt_alarm` | `q5` | `stage budget: events digest differs` | `t-q5` |",
        "| `corpus_changed` | (whole run) | `store app.store: 120 documents, baseline 118` | n/a |",
    ]
    assert start < lines.index("### Slice `(all)`: all checks pass")
    assert lines[lines.index("### Warnings") + 2] == "- `baseline frozen from 3 runs only`"
    assert "| `q3` |  | `question q3?` | `rbo 1.000` | `sampled_out` |" in lines  # in doubt: listed
    assert not [x for x in lines if x.startswith("| `q4` |")]  # unchanged and trusted: counted, not listed
    assert "<summary>Per-case movement (1 case moved or in doubt; 1 unchanged)</summary>" in lines


def test_code_spans_survive_backticks_pipes_and_edges():
    assert markdown.code("a`b") == "``a`b``"
    assert markdown.code("``x") == "``` ``x ```"
    assert markdown.code("a|b") == "`a\\|b`"
    assert markdown.code("a|b", table=False) == "`a|b`"
    assert markdown.code("") == "` `"
    for value in ("a`b", "``x", "x`", " lead", "a|b", "a\\|b", "a\\\\|b", "<b>x</b>", "`", "&amp; &#64;"):
        html = RENDERER.render(f"| h |\n|---|\n| {markdown.code(value)} |\n")
        assert [unescape(c) for c in re.findall(r"<code>(.*?)</code>", html, re.S)] == [value], value


def _cells(html: str) -> list[list[str]]:
    return [re.findall(r"<t[dh]>(.*?)</t[dh]>", row, re.S) for row in re.findall(r"<tr>(.*?)</tr>", html, re.S)]


def test_hostile_trace_data_renders_as_inert_code_in_the_right_cells():
    body = markdown.render(hostile())
    html = RENDERER.render(body)
    # the only HTML in the comment is the renderer's own and the one <details> block of the gate
    tags = set(re.findall(r"</?([a-zA-Z][a-zA-Z0-9]*)", html))
    assert tags <= {"h2", "h3", "p", "code", "strong", "table", "thead", "tbody", "tr", "th", "td", "ul", "li", "details", "summary"}
    assert html.count("<details>") == 1 and html.count("</details>") == 1 and "<script" not in html
    shown = plain(HOSTILE)
    # every table row keeps its columns: the hostile pipes did not split a cell
    for table in re.findall(r"<table>(.*?)</table>", html, re.S):
        widths = {len(r) for r in _cells(table)}
        assert len(widths) == 1, widths
    codes = [unescape(c) for c in re.findall(r"<code>(.*?)</code>", html, re.S)]
    assert codes.count(shown) >= 8  # set, pipeline, problem case/detail/trace, slice heading, message, warning, ...
    # outside code spans no hostile text is left to interpret: no mention, no issue link, no forged markup
    outside = re.sub(r"<code>.*?</code>", "", html, flags=re.S)
    for needle in ("@everyone", "#12", "script", "stop-commands", "tick"):
        assert needle not in outside, needle
    # and no line of the comment was started by the hostile newline
    assert len(body.splitlines()) == len(markdown.render(hostile("x")).splitlines())


def test_the_per_case_section_stops_at_the_size_limit_and_says_how_many_it_left_out():
    report = regression()
    report.cases = report.cases * 200
    body = markdown.render(report, max_chars=20_000)
    assert len(body) <= 20_000
    rows = [x for x in body.splitlines() if x.startswith("| `t1` |") or x.startswith("| `t2` |")]
    assert 0 < len(rows) < 400
    assert f"… {400 - len(rows)} more cases not shown (comment size limit); the artifacts have every one." in body.splitlines()
    assert body.rstrip().endswith("</details>")


def test_a_run_where_every_trace_is_missing_still_fits_a_comment():
    problems = [Problem("missing_query", f"case-{i}", "the call recorded no trace") for i in range(1000)]
    problems.append(Problem("corpus_changed", None, "corpus size 12 → 13"))
    report = GateReport(verdict=decide([], problems), checks=[], problems=problems, cases=[])
    body = markdown.render(report)
    assert len(body) < markdown.MAX_CHARS
    lines = body.splitlines()
    assert len([x for x in lines if x.startswith("| `missing_query` |")]) == 50
    assert "… 951 more problems not listed (missing_query ×950, corpus_changed ×1); the JUnit file and the artifacts have every one." in lines


def test_a_report_without_baseline_says_so():
    check = Check(slice=ALL_SLICE, metric="recall@retrieve", value=0.5, threshold=None, baseline_mean=None, n=4, passed=True)
    report = GateReport(verdict="PASS", checks=[check], problems=[], cases=[])
    assert "| `recall@retrieve` | 0.500 | n/a | n/a | 4 | pass |  |" in markdown.render(report).splitlines()
