"""Trace data is untrusted: ids, queries, components and details are shown as plain text by the real CLI.

Each trace here is recorded by the real recorder (``ragtrail.stage``) and written by the real local-store
exporter; the hostile strings are what anyone who can write a document id, a metadata value or a query
could put there: rich markup (``[/]`` made ``show`` exit 70, ``[black on black]`` hid text), ANSI and OSC
escape sequences (a hyperlink, a screen clear), a newline that forged an ``ok trace=`` line, and a bidi
override that reorders what the eye reads.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

import ragtrail as rt
from fixtures.ragtrail_traces import all_spans, column, record, rewrite_store, store_lines, trace_id_now
from ragtrail.contract import semconv as sc
from ragtrail.inspect import report
from ragtrail.inspect.manifest import build
from ragtrail.inspect.sources import resolve
from test_cli_errors import ragtrail

FORGED = "0" * 31 + "1"
HOSTILE_IDS = [
    "a[/]",
    "[black on black]secret[/]",
    "osc\x1b]8;;http://evil.example\x07click\x1b]8;;\x07",
    "clear\x1b[2J",
    f"nl\n ok trace={FORGED}: intact 9",
    "bidi\u202eevil",
    "tab\there\rcr",
]
# the same ids as the terminal must show them: literally, escapes written out, one line each
SHOWN_IDS = [
    "a[/]",
    "[black on black]secret[/]",
    r"osc\x1b]8;;http://evil.example\x07click\x1b]8;;\x07",
    r"clear\x1b[2J",
    rf"nl\n ok trace={FORGED}: intact 9",
    r"bidi\u202eevil",
    r"tab\there\rcr",
]
QUERY = "[/] [black on black]hidden[/] \x1b[2J \u202eevil"
SHOWN_QUERY = r"[/] [black on black]hidden[/] \x1b[2J \u202eevil"
DETAIL = "see [/] \x1b[31mred\x1b[0m\nFINDING forged"
SHOWN_DETAIL = r"see [/] \x1b[31mred\x1b[0m\nFINDING forged"
RAW_CONTROL = ("\x1b", "\x07", "\u202e", "\r", "\t")


def _run(tracer):
    with rt.stage("pipeline", "tests.p[/]", tracer=tracer) as p:
        p.query(QUERY)
        docs = [{"id": ident, "content": f"text of doc {n}"} for n, ident in enumerate(HOSTILE_IDS)]
        with rt.stage("retrieve", "tests.r[bold]", tracer=tracer) as s:
            s.query(QUERY)
            s.outputs(docs)
        with rt.stage("filter", "tests.f", tracer=tracer) as s:
            s.inputs(docs)
            s.exclude(docs[0], "superseded", DETAIL)
            s.outputs(docs[1:])
        rt.cite(HOSTILE_IDS[3:5], tracer=tracer)
        return trace_id_now()


@pytest.fixture()
def hostile(tmp_path):
    rt.set_capture(content="preview")
    trace_id = record(tmp_path, _run)
    return tmp_path, trace_id


def _no_raw_controls(text: str) -> None:
    for ch in RAW_CONTROL:
        assert ch not in text, repr(ch)


def test_show_prints_hostile_data_literally_one_record_per_line(hostile):
    store, trace_id = hostile
    result = ragtrail("show", trace_id, "--source", str(store), "--all")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    out = result.stdout
    _no_raw_controls(out)
    lines = out.splitlines()
    assert f'  hop 0  none  "{SHOWN_QUERY}" → index' in lines
    assert "0 retrieve tests.r[bold]  in 0 → out 7, excluded 0" in lines
    assert f"Cited: {SHOWN_IDS[3]}, {SHOWN_IDS[4]}" in lines
    assert [line for line in lines if line.startswith(("ok trace=", " ok trace=", "FINDING"))] == []
    # every id on exactly one row per stage that shows it: retrieve, filter (kept or excluded), and for the
    # cited ones the cite stage and the Cited line
    for shown in SHOWN_IDS:
        rows = [line for line in lines if shown in line]
        assert len(rows) == (4 if shown in (SHOWN_IDS[3], SHOWN_IDS[4]) else 2), (shown, rows)
    (excluded_row,) = [line for line in lines if "superseded" in line]
    # issue 24: the cut reads "input rank | cut: reason (detail)", not a rank beside an output cut
    assert excluded_row.split() == ["a[/]", "0", *f"superseded ({SHOWN_DETAIL})".split()]
    assert lines[0] == f"ragtrail manifest trace {trace_id}"


def test_show_json_is_the_same_data_and_inert_for_a_terminal(hostile):
    store, trace_id = hostile
    result = ragtrail("show", trace_id, "--source", str(store), "--json")
    assert result.returncode == 0, result.stderr
    _no_raw_controls(result.stdout)
    manifest = json.loads(result.stdout)
    assert [c["id"] for c in manifest["stages"][0]["candidates"]] == HOSTILE_IDS  # the data itself, unchanged
    assert manifest["query_hops"][0]["text"] == QUERY
    assert manifest["excluded"][0]["detail"] == DETAIL


def test_verify_ok_line_cannot_be_forged(hostile):
    store, trace_id = hostile
    result = ragtrail("verify", trace_id, "--source", str(store))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"ok trace={trace_id}: intact 16, changed_cited 0, not captured 0, 16 events and 4 spans checked"]


def test_verify_names_every_hostile_id_and_still_exits_1(hostile):
    store, trace_id = hostile

    def tamper(span):
        if span["name"].startswith("retrieve "):
            for preview in column(span, sc.COLUMN_CONTENT_PREVIEW):
                preview["stringValue"] = "tampered"

    (span_id,) = [s["spanId"] for d in store_lines(store) for s in all_spans(d) if s["name"].startswith("retrieve ")]
    path = rewrite_store(store, tamper)
    result = ragtrail("verify", trace_id, "--source", str(path))
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stderr == ""
    _no_raw_controls(result.stdout)
    assert result.stdout.splitlines() == [
        f"ALARM trace={trace_id} span={span_id} stage=retrieve tests.r[bold] candidate={shown} "
        f"field=ragtrail.candidate.content.preview: changed_uncited (received 8 chars, receipt 13 chars)"
        for shown in SHOWN_IDS
    ]
    as_json = json.loads(ragtrail("verify", trace_id, "--source", str(path), "--json").stdout)
    assert [a["candidate"] for a in as_json[0]["fidelity"]["alarms"]] == HOSTILE_IDS


def test_verify_strict_findings_are_one_line_each(tmp_path):
    def run(tracer):
        with rt.stage("pipeline", "tests.p", tracer=tracer):
            with rt.stage("rerank", "tests.rr", tracer=tracer) as s:
                s.inputs([{"id": "x"}])
                s.set_status("degraded", failure_class="parse\n ok trace=" + FORGED, fallback="[/]\x1b[2J")
                s.outputs([{"id": "x"}])
            return trace_id_now()

    trace_id = record(tmp_path, run)
    result = ragtrail("verify", trace_id, "--source", str(tmp_path), "--strict")
    assert result.returncode == 1
    assert result.stdout.splitlines()[1:] == [
        f"FINDING trace={trace_id}: rerank tests.rr: degraded (parse\\n ok trace={FORGED}, fallback [/]\\x1b[2J)"
    ]


def test_diff_shows_hostile_ids_literally(tmp_path):
    def run(ids):
        def body(tracer):
            with rt.stage("pipeline", "tests.p", tracer=tracer):
                with rt.stage("retrieve", "tests.r", tracer=tracer) as s:
                    s.query("q")
                    s.outputs([{"id": i, "content": i} for i in ids])
                return trace_id_now()

        return body

    a = record(tmp_path, run(HOSTILE_IDS[:3]))
    b = record(tmp_path, run(HOSTILE_IDS[3:]))
    result = ragtrail("diff", a, b, "--source", str(tmp_path), "--limit", "20")
    assert result.returncode == 0, result.stderr
    _no_raw_controls(result.stdout)
    lines = result.stdout.splitlines()
    for n, shown in enumerate(SHOWN_IDS[3:]):
        assert f"      + {shown} (rank {n}, score )" in lines
    for n, shown in enumerate(SHOWN_IDS[:3]):
        assert f"      - {shown} (was rank {n}, score )" in lines


def test_error_lines_are_escaped(tmp_path):
    bad = tmp_path / "bad\x1b[2J.json"
    bad.write_text("<html>\x1b]8;;x\x07</html>\n")
    result = ragtrail("show", str(bad))
    assert result.returncode == 4
    _no_raw_controls(result.stderr)
    assert result.stderr.splitlines() == [
        f"ragtrail: error: {tmp_path}/bad\\x1b[2J.json is not valid JSON (Expecting value): pass OTLP JSON (lines), Jaeger or Tempo JSON"
    ]


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def test_html_report_keeps_script_and_textarea_payloads_inert(tmp_path):
    payloads = [
        '<script>alert("id")</script>',
        "</textarea><img src=x onerror=alert(1)>",
        "</script><script>alert(2)</script>",
        "\"' onmouseover=alert(3) x='",
    ]

    def run(tracer):
        with rt.stage("pipeline", "tests.p", tracer=tracer) as p:
            p.query(payloads[1])
            with rt.stage("retrieve", "<script>tests.r</script>", tracer=tracer) as s:
                s.query(payloads[1])
                s.outputs([{"id": i, "content": i, "metadata": {"status": i}} for i in payloads])
            return trace_id_now()

    trace_id = record(tmp_path, run)
    manifest = build(resolve(trace_id, str(tmp_path)))
    html = report.render(manifest)
    parsed = _Elements()
    parsed.feed(html)
    assert parsed.tags.count("script") == 1  # only the embedded manifest (type application/json)
    assert "img" not in parsed.tags and "textarea" not in parsed.tags
    for payload in payloads:
        assert payload not in html
    assert json.loads(parsed.scripts[0])["stages"][0]["candidates"][0]["id"] == payloads[0]
    assert "&lt;script&gt;alert(&#34;id&#34;)&lt;/script&gt;" in html
