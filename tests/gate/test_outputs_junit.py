"""ragtrail.gate.junit: the JUnit file parsed back, test case by test case, as a CI test reporter reads it."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from ragtrail.gate import junit
from ragtrail.inspect.safe import plain

from .outputs_reports import HOSTILE, MESSAGE, hostile, inconclusive, passing, regression


def _cases(xml: str) -> list[tuple[str, str, str, str | None, str | None]]:
    """(suite, classname, name, outcome, message, type) for every test case, in file order."""
    root = ET.fromstring(xml)
    out = []
    for suite in root.findall("testsuite"):
        for case in suite.findall("testcase"):
            bad = [e for e in case if e.tag in ("failure", "error", "skipped")]
            assert len(bad) <= 1
            outcome = bad[0].tag if bad else "pass"
            out.append(
                (
                    suite.get("name"),
                    case.get("classname"),
                    case.get("name"),
                    outcome,
                    bad[0].get("message") if bad else None,
                    bad[0].get("type") if bad else None,
                )
            )
    return out


def _shape(xml: str) -> ET.Element:
    """What the consumers need of the file's shape: the declaration, the root, the counts that agree with
    the test cases, the attributes the strictest schemas require, unique (classname, name)."""
    assert xml.startswith('<?xml version="1.0" encoding="UTF-8"?>\n')
    root = ET.fromstring(xml)
    assert root.tag == "testsuites" and root.get("name") == "ragtrail gate"
    for element in [root, *root.findall("testsuite")]:
        cases = list(element.iter("testcase"))
        assert element.get("tests") == str(len(cases))
        assert element.get("failures") == str(sum(c.find("failure") is not None for c in cases))
        assert element.get("errors") == str(sum(c.find("error") is not None for c in cases))
        assert element.get("skipped") == "0"
        float(element.get("time") or "x")
    keys = [(c.get("classname"), c.get("name")) for c in root.iter("testcase")]
    assert len(keys) == len(set(keys))
    for case in root.iter("testcase"):
        assert set(case.attrib) == {"classname", "name", "time"}
        for bad in case.findall("failure") + case.findall("error"):
            assert set(bad.attrib) == {"message", "type"} and bad.text  # GitLab shows only the body
    assert {e.tag for e in root.iter()} <= {"testsuites", "testsuite", "testcase", "failure", "error", "system-out"}
    return root


def test_a_pass_is_one_test_case_per_slice_and_metric_plus_the_evidence():
    xml = junit.render(passing())
    root = _shape(xml)
    assert _cases(xml) == [
        ("ragtrail gate: (all)", "(all)", "recall@retrieve", "pass", None, None),
        ("ragtrail gate: (all)", "(all)", "refusal_rate", "pass", None, None),
        ("ragtrail gate: tables", "tables", "recall@retrieve", "pass", None, None),
        ("ragtrail gate: evidence", "(evidence)", "evidence", "pass", None, None),
    ]
    assert root.get("time") == "1.250"
    assert [s.get("timestamp") for s in root.findall("testsuite")] == ["2026-12-01T23:50:00"] * 3
    warned = root.find("testsuite[@name='ragtrail gate: tables']/testcase/system-out")
    assert warned is not None and warned.text == "warning: slice too small to be statistically boring (n=3)"
    summary = root.find("testsuite[@name='ragtrail gate: evidence']/system-out")
    assert summary is not None
    assert summary.text == "verdict: PASS\nragtrail gate: PASS (exit 0): 3 checks, 0 failed, 0 problems, 2 cases"


def test_a_regression_fails_the_slice_check_with_its_value_threshold_and_the_stage_that_lost_the_evidence():
    xml = junit.render(regression())
    root = _shape(xml)
    assert _cases(xml) == [
        ("ragtrail gate: (all)", "(all)", "recall@retrieve", "pass", None, None),
        ("ragtrail gate: (all)", "(all)", "survival@budget app.budget", "pass", None, None),
        ("ragtrail gate: tables", "tables", "recall@retrieve", "pass", None, None),
        ("ragtrail gate: tables", "tables", "survival@budget app.budget", "failure", MESSAGE, "REGRESSION"),
        ("ragtrail gate: evidence", "(evidence)", "evidence", "pass", None, None),
    ]
    failure = root.find(".//failure")
    assert failure is not None and failure.text == (
        f"tables survival@budget app.budget: FAIL 0.500 < floor 0.800 (baseline 0.850, n=12): {MESSAGE}\nvalue: 0.500\n"
        "threshold: 0.800\nbaseline mean: 0.850\ncases measured: 12\nstage: budget app.budget"
    )
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("5", "1", "0")


def test_inconclusive_evidence_is_an_error_per_problem_named_by_kind_and_case():
    xml = junit.render(inconclusive())
    root = _shape(xml)
    assert _cases(xml) == [
        ("ragtrail gate: (all)", "(all)", "recall@retrieve", "pass", None, None),
        ("ragtrail gate: evidence", "(evidence)", "sampled_out: q3", "error", "adjusted count 10: the trace was sampled", "sampled_out"),
        ("ragtrail gate: evidence", "(evidence)", "truncated: q4", "error", "2 spans lost of 5", "truncated"),
        ("ragtrail gate: evidence", "(evidence)", "receipt_alarm: q5", "error", "stage rerank: content receipt differs", "receipt_alarm"),
        # GitLab keeps only the first of two test cases with the same name: the second alarm is numbered
        ("ragtrail gate: evidence", "(evidence)", "receipt_alarm: q5 #2", "error", "stage budget: events digest differs", "receipt_alarm"),
        ("ragtrail gate: evidence", "(evidence)", "corpus_changed", "error", "store app.store: 120 documents, baseline 118", "corpus_changed"),
    ]
    error = root.find(".//testcase[@name='corpus_changed']/error")
    assert error is not None and error.text == (
        "corpus_changed: store app.store: 120 documents, baseline 118\nkind: corpus_changed\ncase: n/a (the whole run)\n"
        "trace: n/a\nINCONCLUSIVE: this evidence cannot be trusted, the gate cannot pass"
    )
    out = root.find("testsuite[@name='ragtrail gate: evidence']/system-out")
    assert out is not None and out.text is not None and out.text.splitlines()[-1] == "warning: baseline frozen from 3 runs only"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("6", "0", "5")


def test_hostile_strings_stay_data_and_the_file_stays_valid_xml():
    # without the escaping, ElementTree writes a NUL or U+FFFE unchecked and the file cannot be parsed at all
    raw = ET.Element("testcase", name=HOSTILE)
    with pytest.raises(ET.ParseError):
        ET.fromstring(ET.tostring(raw, encoding="unicode"))
    xml = junit.render(hostile())
    root = _shape(xml)
    shown = plain(HOSTILE).replace("\ufffe", "\\ufffe")
    assert "\x00" not in xml and "\ufffe" not in xml and "\u202e" not in xml and "\r" not in xml
    assert _cases(xml) == [
        (f"ragtrail gate: {shown}", shown, "recall@retrieve", "failure", shown, "REGRESSION"),
        ("ragtrail gate: evidence", "(evidence)", f"missing_query: {shown}", "error", shown, "missing_query"),
    ]
    # one line per datum: the hostile newline is an escape, not a second line of the failure body
    failure = root.find(".//failure")
    assert failure is not None and failure.text is not None and len(failure.text.splitlines()) == 6
    assert root.find(".//testcase/system-out") is not None


def test_the_timestamp_is_utc_without_a_zone_and_omitted_when_unknown():
    report = passing()
    report.started_at = "2026-12-02T01:50:00+02:00"
    assert {s.get("timestamp") for s in ET.fromstring(junit.render(report)).findall("testsuite")} == {"2026-12-01T23:50:00"}
    report.started_at = "not a time"
    assert {s.get("timestamp") for s in ET.fromstring(junit.render(report)).findall("testsuite")} == {None}
