"""The gate's decision as JUnit XML, for the test reporters of GitHub, GitLab and Jenkins.

Layout: one ``<testsuite>`` per slice, one ``<testcase>`` per check in it (``classname`` = the slice,
``name`` = ``metric@stage``), a ``<failure>`` for a check below its floor; then a ``(evidence)``
suite with one ``<testcase>`` per problem as an ``<error>`` (named ``kind: case``), or one passing
``evidence`` test case when nothing made the run inconclusive. Warnings go to ``<system-out>``.

What the consumers accept, and why the file looks the way it does:

- every ``failure``/``error`` carries both ``message`` and ``type`` (some schemas, e.g. the Jenkins
  ``junit-4.xsd`` variants, require them) and the same text as its body, because GitLab ignores
  ``message`` and shows only the body;
- ``(classname, name)`` is unique: GitLab keeps only the first of duplicate test names, so a second
  problem of the same kind on the same case is numbered (``#2``) rather than silently dropped;
- the counts on ``<testsuites>`` and each ``<testsuite>`` agree with the test cases (dorny/test-reporter
  and Jenkins read them); ``time`` is in seconds; ``timestamp`` has no time zone (xs:dateTime as the
  Ant schema writes it, UTC);
- XML 1.0 cannot carry most control characters even as character references, and ElementTree writes
  them unchecked (a NUL in a document id would make the whole file unparsable, and the gate's failures
  invisible). Every piece of trace data goes through :func:`ragtrail.inspect.safe.plain` first, and the
  two remaining non-characters (U+FFFE, U+FFFF) are escaped the same way.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import datetime, timezone

from ragtrail.inspect.safe import plain

from . import wording
from .model import Check, GateReport, Problem

EVIDENCE = "(evidence)"  # the classname of the evidence test cases; a slice cannot start with "("
_NONCHAR = re.compile("[\ufffe\uffff]")


def _s(value: object) -> str:
    """Untrusted text as XML-1.0-safe, one line."""
    return _NONCHAR.sub(lambda m: f"\\u{ord(m.group(0)):04x}", plain(value))


def _lines(*lines: str) -> str:
    return "\n".join(_s(line) for line in lines)


def _timestamp(started_at: str | None) -> str | None:
    if not started_at:
        return None
    try:
        when = datetime.fromisoformat(started_at.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc).replace(tzinfo=None)
    return when.replace(microsecond=0).isoformat()


class _Names:
    """Keeps ``(classname, name)`` unique within the file."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], int] = {}

    def __call__(self, classname: str, name: str) -> str:
        n = self.seen.get((classname, name), 0) + 1
        self.seen[(classname, name)] = n
        return name if n == 1 else f"{name} #{n}"


def _check_case(suite: ET.Element, check: Check, names: _Names) -> None:
    classname = _s(check.slice)
    case = ET.SubElement(suite, "testcase", classname=classname, name=names(classname, _s(wording.check_name(check))), time="0")
    if not check.passed:
        failure = ET.SubElement(case, "failure", message=_s(wording.failure_message(check)), type="REGRESSION")
        failure.text = _lines(
            wording.check_line(check),
            f"value: {wording.number(check.value)}",
            f"threshold: {wording.number(check.threshold)}",
            f"baseline mean: {wording.number(check.baseline_mean)}",
            f"cases measured: {check.n}",
            f"stage: {check.stage or 'n/a'}",
        )
    if check.warning:
        ET.SubElement(case, "system-out").text = _lines(f"warning: {check.warning}")


def _problem_case(suite: ET.Element, problem: Problem, names: _Names) -> None:
    case = ET.SubElement(suite, "testcase", classname=EVIDENCE, name=names(EVIDENCE, _s(wording.problem_name(problem))), time="0")
    error = ET.SubElement(case, "error", message=_s(problem.detail), type=_s(problem.kind))
    error.text = _lines(
        wording.problem_line(problem),
        f"kind: {problem.kind}",
        f"case: {problem.case_id or 'n/a (the whole run)'}",
        f"trace: {problem.trace_id or 'n/a'}",
        "INCONCLUSIVE: this evidence cannot be trusted, the gate cannot pass",
    )


def _suite(parent: ET.Element, name: str, timestamp: str | None) -> ET.Element:
    suite = ET.SubElement(parent, "testsuite", name=_s(name))
    if timestamp:
        suite.set("timestamp", timestamp)
    return suite


def _count(element: ET.Element, time: float) -> tuple[int, int, int]:
    cases = element.iter("testcase")
    tests = failures = errors = 0
    for case in cases:
        tests += 1
        failures += case.find("failure") is not None
        errors += case.find("error") is not None
    element.set("tests", str(tests))
    element.set("failures", str(failures))
    element.set("errors", str(errors))
    element.set("skipped", "0")
    element.set("time", f"{time:.3f}")
    return tests, failures, errors


def render(report: GateReport) -> str:
    """The report as a JUnit XML document (UTF-8, with its XML declaration)."""
    root = ET.Element("testsuites", name="ragtrail gate")
    timestamp = _timestamp(report.started_at)
    names = _Names()
    suites: list[ET.Element] = []
    for slice_name in wording.slices(report):
        suite = _suite(root, f"ragtrail gate: {slice_name}", timestamp)
        for check in report.checks:
            if check.slice == slice_name:
                _check_case(suite, check, names)
        suites.append(suite)
    evidence = _suite(root, "ragtrail gate: evidence", timestamp)
    if report.problems:
        for problem in report.problems:
            _problem_case(evidence, problem, names)
    else:
        ET.SubElement(evidence, "testcase", classname=EVIDENCE, name="evidence", time="0")
    out = [f"verdict: {report.verdict}", wording.verdict_line(report)]
    out += [f"warning: {w}" for w in report.warnings]
    ET.SubElement(evidence, "system-out").text = _lines(*out)
    suites.append(evidence)
    for suite in suites:
        _count(suite, 0.0)
    _count(root, report.duration_s or 0.0)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=False).join(['<?xml version="1.0" encoding="UTF-8"?>\n', "\n"])
