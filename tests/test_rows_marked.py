"""Where a row is printed, its damage and its text are printed with it (issue 24, principle 6).

A candidate whose preview was cut on the way is marked in its own row of ``show`` and of the HTML
report, not only in the fidelity footer; the report shows each row's captured text (escaped: trace
data is untrusted), which before lived only inside the page's embedded JSON.
"""

from __future__ import annotations

import io
import re

from markupsafe import escape
from rich.console import Console

import ragtrail
from fixtures.ragtrail_traces import column, rag_run, record, rewrite_store, row
from ragtrail.contract import semconv as sc
from ragtrail.inspect import render, report
from ragtrail.inspect.manifest import build
from ragtrail.inspect.sources import FileSource

CUT = f"DAMAGED (changed_uncited: {sc.CANDIDATE_CONTENT_PREVIEW})"


def _cut_rerank_preview(tmp_path, text=None):
    """A real trace whose rerank row of policy-2026-01 lost its preview's tail in transit."""
    ragtrail.set_capture(content="preview")
    trace_id = record(tmp_path, rag_run)

    def edit(span):
        if span["name"] == "rerank rerank":
            preview = column(span, sc.COLUMN_CONTENT_PREVIEW)[row(span, "policy-2026-01")]
            preview["stringValue"] = text if text is not None else preview["stringValue"][:10]

    return build(FileSource(rewrite_store(tmp_path, edit)).get(trace_id))


def _show(manifest):
    out = io.StringIO()
    render.show(Console(file=out, width=250, color_system=None), manifest, limit=50)
    return out.getvalue()


def test_show_marks_the_damaged_row_where_it_is_printed(tmp_path):
    text = _show(_cut_rerank_preview(tmp_path))
    marked = [line for line in text.splitlines() if CUT in line]
    # exactly one row carries the mark: the rerank's policy-2026-01, in its candidate table
    assert len(marked) == 1
    assert re.search(r"\bpolicy-2026-01\b", marked[0])
    assert text.count("DAMAGED") == 1


def test_an_intact_trace_marks_no_row(tmp_path):
    ragtrail.set_capture(content="preview")
    trace_id = record(tmp_path, rag_run)
    manifest = build(FileSource(tmp_path).get(trace_id))
    assert manifest.fidelity.damaged_rows() == {}
    assert "DAMAGED" not in _show(manifest)
    assert 'class="damaged"' not in report.render(manifest)


def test_the_report_marks_the_damaged_row(tmp_path):
    manifest = _cut_rerank_preview(tmp_path)
    rerank = next(s for s in manifest.stages if s.kind == "rerank")
    assert manifest.fidelity.damaged_rows() == {(rerank.span_id, "policy-2026-01"): f"changed_uncited: {sc.CANDIDATE_CONTENT_PREVIEW}"}
    html = report.render(manifest)
    rows = re.findall(r'<tr class="damaged">.*?</tr>', html, flags=re.S)
    assert len(rows) == 1
    assert "<code>policy-2026-01</code>" in rows[0]
    assert f'<span class="pill damaged">damaged: changed_uncited: {sc.CANDIDATE_CONTENT_PREVIEW}</span>' in rows[0]


def test_the_report_shows_each_row_s_captured_text_escaped(tmp_path):
    manifest = _cut_rerank_preview(tmp_path, text="<script>alert(1)</script> & more")
    html = report.render(manifest)
    cells = re.findall(r'<td class="preview">(.*?)</td>', html, flags=re.S)
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in cells
    assert "<script>alert" not in html
    # every retrieved candidate's captured text is on the page, not only in the embedded JSON
    retrieve = next(s for s in manifest.stages if s.kind == "retrieve")
    for c in retrieve.candidates:
        assert c.preview and str(escape(c.preview))[:40] in html


def test_a_long_preview_is_shortened_on_the_page_and_says_where_the_rest_is(tmp_path):
    manifest = _cut_rerank_preview(tmp_path, text="x" * 300)
    html = report.render(manifest)
    assert "x" * 280 + '<span class="dim">… (20 more characters in the embedded manifest)</span>' in html
    assert "x" * 281 not in html.split('<script type="application/json"')[0]
