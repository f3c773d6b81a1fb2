"""The gate's decision as a pull-request comment (GitHub-flavoured markdown).

The comment is read by the reviewer who decides whether to merge, so it says, in order: the verdict;
per slice, each metric against its threshold; which stage lost the evidence; the problems that made
the run inconclusive, named; and, collapsed, how each case's top-k moved.

Trace data (ids, queries, reasons, slice names, stage labels, the gate's own messages that quote
them) is untrusted, and a comment is rendered as HTML for everyone who opens the pull request. So
every such value is shown as a **code span**: no markdown, HTML (``<script>``, ``<details>``,
``<img>``), link, ``@mention`` or ``#123`` reference inside it is interpreted. The span's fence is
one backtick longer than the longest run of backticks in the value; control, format and bidi
characters and newlines are written as escapes first (:func:`ragtrail.inspect.safe.plain`), so a
value stays on its line; and inside a table ``|`` is written ``\\|`` (GFM splits the row on pipes
before it reads code spans, and turns ``\\|`` back into ``|`` inside them).

GitHub refuses a comment over 65,536 characters, so the problems table stops at ``MAX_PROBLEMS`` rows
and the per-case section at ``max_chars``, each saying how many it left out (the artifacts have every one).
"""

from __future__ import annotations

import re
from collections import Counter

from ragtrail.inspect.safe import plain

from . import wording
from .model import CaseResult, GateReport

#: GitHub's limit on a comment body is 65,536 characters; stay below it with room for a footer
MAX_CHARS = 60_000
#: problems listed one by one (a run where every trace is missing would otherwise list them all)
MAX_PROBLEMS = 50

_ICON = {"PASS": "✅", "REGRESSION": "❌", "INCONCLUSIVE": "⚠️"}
_BACKTICKS = re.compile("`+")


def code(value: object, table: bool = True) -> str:
    """``value`` as an inert code span (see the module docstring); ``table`` escapes ``|`` for a table cell."""
    s = plain("" if value is None else value)
    if not s:
        return "` `"  # an empty code span would render as two literal backticks
    longest = max((len(m) for m in _BACKTICKS.findall(s)), default=0)
    fence = "`" * (longest + 1)
    # a leading or trailing backtick would merge with the fence, and CommonMark strips one space from
    # each side of a span that starts and ends with one: pad both sides so the value shows as it is
    if s[0] in "` " or s[-1] in "` ":
        s = f" {s} "
    if table:
        s = s.replace("|", "\\|")
    return f"{fence}{s}{fence}"


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def _checks(report: GateReport, slice_name: str) -> list[str]:
    lines = [_row("metric", "value", "threshold", "baseline", "n", "result", "why"), _row(*["---"] * 7)]
    for c in report.checks:
        if c.slice != slice_name:
            continue
        bound = ("≤ " if wording.is_ceiling(c) else "≥ ") + wording.number(c.threshold) if c.threshold is not None else "n/a"
        result = "pass" if c.passed else "**FAIL**"
        why = code(c.message) if c.message else ""
        lines.append(_row(code(wording.check_name(c)), wording.number(c.value), bound, wording.number(c.baseline_mean), str(c.n), result, why))
    return lines


def _slice_section(report: GateReport, slice_name: str) -> list[str]:
    failed = sum(1 for c in report.checks if c.slice == slice_name and not c.passed)
    head = "all checks pass" if not failed else f"{failed} check{'' if failed == 1 else 's'} failed"
    lines = ["", f"### Slice {code(slice_name, table=False)}: {head}", ""]
    said = dict.fromkeys(c.warning for c in report.checks if c.slice == slice_name and c.warning)
    lines += [f"⚠️ {code(w, table=False)}" for w in said] + ([""] if said else [])
    lines += _checks(report, slice_name)
    lost = wording.losses(report, slice_name)
    if lost:
        lines += ["", "Where the relevant documents were lost:", ""]
        lines += [f"- {code(loss.line(), table=False)}" for loss in lost]
    return lines


def _problems(report: GateReport) -> list[str]:
    if not report.problems:
        return []
    lines = [
        "",
        f"### Inconclusive evidence ({len(report.problems)})",
        "",
        "Each of these makes the verdict INCONCLUSIVE: the gate does not pass on evidence it cannot trust.",
        "",
        _row("problem", "case", "detail", "trace"),
        _row(*["---"] * 4),
    ]
    for p in report.problems[:MAX_PROBLEMS]:
        lines.append(
            _row(code(p.kind), code(p.case_id) if p.case_id is not None else "(whole run)", code(p.detail), code(p.trace_id) if p.trace_id else "n/a")
        )
    if len(report.problems) > MAX_PROBLEMS:
        kinds = ", ".join(f"{k} ×{n}" for k, n in Counter(p.kind for p in report.problems[MAX_PROBLEMS:]).most_common())
        lines += ["", f"… {len(report.problems) - MAX_PROBLEMS} more problems not listed ({kinds}); the JUnit file and the artifacts have every one."]
    return lines


def _moved(case: CaseResult) -> bool:
    m = case.movement
    return bool(case.problems) or (m is not None and (m.rbo is None or m.rbo < 1 or bool(m.entered) or bool(m.left)))


def _cases(report: GateReport, budget: int) -> list[str]:
    moved = [c for c in report.cases if _moved(c)]
    if not moved:
        return []
    still = len(report.cases) - len(moved)
    summary = f"Per-case movement ({len(moved)} case{'' if len(moved) == 1 else 's'} moved or in doubt"
    summary += f"; {still} unchanged)" if still else ")"
    head = ["", "<details>", f"<summary>{summary}</summary>", "", _row("case", "slice", "query", "movement", "problems"), _row(*["---"] * 5)]
    rows: list[str] = []
    used = sum(len(x) + 1 for x in head) + 200
    for case in moved:
        problems = ", ".join(sorted({p.kind for p in case.problems}))
        row = _row(
            code(case.case.id),
            code(case.case.slice) if case.case.slice is not None else "",
            code(case.case.query),
            code(wording.movement_line(case)),
            code(problems) if problems else "",
        )
        if used + len(row) + 1 > budget:
            break
        rows.append(row)
        used += len(row) + 1
    tail = []
    if len(rows) < len(moved):
        tail = ["", f"… {len(moved) - len(rows)} more cases not shown (comment size limit); the artifacts have every one."]
    return head + rows + tail + ["", "</details>"]


def render(report: GateReport, max_chars: int = MAX_CHARS) -> str:
    """The report as a markdown comment, at most about ``max_chars`` characters."""
    lines = [f"## {_ICON[report.verdict]} ragtrail gate: **{report.verdict}**", "", code(wording.verdict_line(report), table=False)]
    meta = [
        f"{label} {code(value, table=False)}"
        for label, value in (("set", report.set_path), ("baseline", report.baseline_path), ("pipeline", report.pipeline))
        if value
    ]
    if meta:
        lines += ["", " · ".join(meta)]
    lines += _problems(report)
    for slice_name in wording.slices(report):
        lines += _slice_section(report, slice_name)
    said = {f"{c.slice}: {c.warning}" for c in report.checks if c.warning}  # under each slice's heading already
    others = [w for w in wording.warnings(report) if w not in said]
    if others:
        lines += ["", "### Warnings", ""] + [f"- {code(w, table=False)}" for w in others]
    body = "\n".join(lines)
    return body + "\n" + "\n".join(_cases(report, max_chars - len(body))) + "\n"
