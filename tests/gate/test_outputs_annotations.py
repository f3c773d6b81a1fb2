"""ragtrail.gate.annotations: exact workflow command lines, and every line read back the way the
GitHub runner reads it (a port of actions/runner ``ActionCommand.TryParseV2`` and its unescaping)."""

from __future__ import annotations

from ragtrail.gate import annotations
from ragtrail.gate.model import ALL_SLICE, Check, GateReport, Problem, decide
from ragtrail.inspect.safe import log_inert, plain

from .outputs_reports import HOSTILE, MESSAGE, hostile, inconclusive, passing, regression

_PROPERTY = (("\r", "%0D"), ("\n", "%0A"), (":", "%3A"), (",", "%2C"), ("%", "%25"))  # the runner's order
_DATA = (("\r", "%0D"), ("\n", "%0A"), ("%", "%25"))


def _unescape(value: str, mappings: tuple[tuple[str, str], ...]) -> str:
    for token, replacement in mappings:
        value = value.replace(replacement, token)
    return value


def parse(line: str) -> tuple[str, dict[str, str], str] | None:
    """actions/runner src/Runner.Common/ActionCommand.cs TryParseV2, step for step."""
    message = line.lstrip()
    if not message.startswith("::"):
        return None
    end = message.find("::", 2)
    if end < 0:
        return None
    info = message[2:end]
    name, _, props = info.partition(" ")
    properties = {}
    for pair in (p for p in props.strip().split(",") if p):
        key, sep, value = pair.partition("=")
        if sep and key and value:
            properties[key] = _unescape(value, _PROPERTY)
    return name, properties, _unescape(message[end + 2 :], _DATA)


def _parsed(report: GateReport) -> list[tuple[str, dict[str, str], str]]:
    out = annotations.render(report)
    assert out.endswith("\n")
    lines = out.splitlines()
    parsed = [parse(x) for x in lines]
    assert all(p is not None for p in parsed)
    return [p for p in parsed if p is not None]


def test_escaping_follows_the_runner_and_round_trips():
    assert annotations.data("50%\r\nnext: a, b") == "50%25%0D%0Anext: a, b"
    assert annotations.prop("50%\r\nnext: a, b") == "50%25%0D%0Anext%3A a%2C b"
    assert annotations.prop("%3A") == "%253A"  # an escape already in the data stays data
    for value in ("a:b,c", "%0A", "x::error::y", "100%", ":,%\r\n"):
        assert parse(f"::error title={annotations.prop(value)}::{annotations.data(value)}") == ("error", {"title": value}, value)


def test_a_regression_is_one_error_per_failed_check():
    assert annotations.render(regression()) == f"::error title=ragtrail gate FAIL%3A tables survival@budget app.budget::{MESSAGE}\n"


def test_a_pass_is_a_notice_and_its_warnings():
    assert annotations.render(passing()).splitlines() == [
        "::warning title=ragtrail gate warning::tables: slice too small to be statistically boring (n=3)",
        "::notice title=ragtrail gate%3A PASS::ragtrail gate: PASS (exit 0): 3 checks, 0 failed, 0 problems, 2 cases",
    ]


def test_inconclusive_is_one_error_per_problem_named_by_kind_and_case():
    assert annotations.render(inconclusive()).splitlines() == [
        "::error title=ragtrail gate INCONCLUSIVE%3A sampled_out%3A q3::sampled_out: q3: adjusted count 10: the trace was sampled (trace t-q3)",
        "::error title=ragtrail gate INCONCLUSIVE%3A truncated%3A q4::truncated: q4: 2 spans lost of 5 (trace t-q4)",
        "::error title=ragtrail gate INCONCLUSIVE%3A receipt_alarm%3A q5::receipt_alarm: q5: stage rerank: content receipt differs (trace t-q5)",
        "::error title=ragtrail gate INCONCLUSIVE%3A receipt_alarm%3A q5::receipt_alarm: q5: stage budget: events digest differs (trace t-q5)",
        "::error title=ragtrail gate INCONCLUSIVE%3A corpus_changed::corpus_changed: store app.store: 120 documents, baseline 118",
        "::warning title=ragtrail gate warning::baseline frozen from 3 runs only",
    ]


def test_hostile_data_cannot_forge_a_command_a_property_or_a_line():
    shown = plain(HOSTILE)
    assert _parsed(hostile()) == [
        ("error", {"title": f"ragtrail gate INCONCLUSIVE: missing_query: {shown}"}, f"missing_query: {shown}: {shown} (trace {shown})"),
        ("error", {"title": f"ragtrail gate FAIL: {shown} recall@retrieve"}, shown),
        ("warning", {"title": "ragtrail gate warning"}, f"{shown}: {shown}"),  # the slice's warning
        ("warning", {"title": "ragtrail gate warning"}, shown),  # the report's
    ]
    assert "\r" not in annotations.render(hostile()) and "\x00" not in annotations.render(hostile())


def test_a_property_key_cannot_be_forged_from_a_title():
    check = Check(slice="s,file=/etc/passwd,line=1", metric="recall@retrieve", value=0.1, threshold=0.5, baseline_mean=0.6, n=5, passed=False)
    report = GateReport(verdict=decide([check], []), checks=[check], problems=[], cases=[])
    assert _parsed(report) == [
        ("error", {"title": "ragtrail gate FAIL: s,file=/etc/passwd,line=1 recall@retrieve"}, "0.100 < floor 0.500 (baseline 0.600, n=5)")
    ]


def test_a_slice_warning_carried_by_every_check_is_annotated_once():
    checks = [
        Check(
            slice="tables",
            metric=f"m{i}",
            value=1.0,
            threshold=0.5,
            baseline_mean=1.0,
            n=5,
            passed=True,
            warning="slice too small to be statistically boring (n=5 < 20)",
        )
        for i in range(8)
    ]
    report = GateReport(
        verdict="PASS", checks=checks, problems=[], cases=[], warnings=["tables: slice too small to be statistically boring (n=5 < 20)"]
    )
    assert annotations.render(report).splitlines() == [
        "::warning title=ragtrail gate warning::tables: slice too small to be statistically boring (n=5 < 20)",
        "::notice title=ragtrail gate%3A PASS::ragtrail gate: PASS (exit 0): 8 checks, 0 failed, 0 problems, 0 cases",
    ]


def test_more_than_ten_errors_fold_into_one_last_line():
    checks = [Check(slice=ALL_SLICE, metric=f"m{i}", value=0.0, threshold=0.5, baseline_mean=0.6, n=5, passed=False) for i in range(15)]
    parsed = _parsed(GateReport(verdict=decide(checks, []), checks=checks, problems=[], cases=[]))
    assert [p[0] for p in parsed] == ["error"] * 10
    assert [p[1]["title"] for p in parsed[:9]] == [f"ragtrail gate FAIL: (all) m{i}" for i in range(9)]
    assert parsed[9] == (
        "error",
        {"title": "ragtrail gate: 6 more"},
        "6 more errors not annotated here (GitHub shows 10 per step); the JUnit file, the markdown summary and --json have every one",
    )


def test_problems_come_first_then_the_slices_then_the_aggregate():
    checks = [
        Check(slice=s, metric="recall@retrieve", value=0.0, threshold=0.5, baseline_mean=0.6, n=5, passed=False)
        for s in (ALL_SLICE, "long", "tables")
    ]
    problems = [Problem("truncated", "q9", "1 span lost")]
    titles = [p[1]["title"] for p in _parsed(GateReport(verdict=decide(checks, problems), checks=checks, problems=problems, cases=[]))]
    assert titles == [
        "ragtrail gate INCONCLUSIVE: truncated: q9",
        "ragtrail gate FAIL: long recall@retrieve",
        "ragtrail gate FAIL: tables recall@retrieve",
        "ragtrail gate FAIL: (all) recall@retrieve",
    ]


def test_a_verdict_that_is_not_pass_is_always_annotated():
    report = GateReport(verdict="REGRESSION", checks=[], problems=[], cases=[])  # inconsistent on purpose: never silent
    assert annotations.render(report) == (
        "::error title=ragtrail gate%3A REGRESSION::ragtrail gate: REGRESSION (exit 1): 0 checks, 0 failed, 0 problems, 0 cases\n"
    )


def test_the_legacy_command_prefix_is_broken_for_log_lines():
    assert log_inert("id ##[stop-commands]tok") == "id ##\\x5bstop-commands]tok"
    assert log_inert("#[x] ## [y]") == "#[x] ## [y]"
