"""The gate's decision on the terminal (or a CI log): the verdict, the checks per slice, the problems.

Every piece of trace data is a :func:`ragtrail.inspect.safe.text` (shown literally: no rich markup, no
escape sequence, one line, the ``##[`` prefix broken by :func:`ragtrail.inspect.safe.log_inert`): a CI log is parsed for
workflow commands, and a document id holding ``##[stop-commands]`` must not silence the gate's own
annotations that follow. For the same reason a line outside a table is never wrapped by rich: a wrap
at a space would start a log line with whatever the data holds there (``::error::...``).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ragtrail.inspect.safe import text

from . import wording
from .model import GateReport

_STYLE = {"PASS": "bold green", "REGRESSION": "bold red", "INCONCLUSIVE": "bold yellow"}


def _line(console: Console, line: Any) -> None:
    # never wrapped by rich: a wrap at a space could start a log line with a hostile "::error::"; the
    # terminal still folds the long line for the eye (table rows are safe: each starts with a border)
    console.print(line, soft_wrap=True)


def render(report: GateReport, console: Console) -> None:
    """Print the report on ``console``."""
    _line(console, text(wording.verdict_line(report), _STYLE[report.verdict]))
    if report.checks:
        table = Table(title="checks", title_justify="left")
        for col, kw in (
            ("slice", {}),
            ("metric", {}),
            ("value", {"justify": "right"}),
            ("threshold", {"justify": "right"}),
            ("baseline", {"justify": "right"}),
            ("n", {"justify": "right"}),
            ("result", {}),
        ):
            table.add_column(col, overflow="fold", **kw)  # type: ignore[arg-type]
        for c in report.checks:
            bound = ("<= " if wording.is_ceiling(c) else ">= ") + wording.number(c.threshold) if c.threshold is not None else "n/a"
            table.add_row(
                text(c.slice),
                text(wording.check_name(c)),
                text(wording.number(c.value)),
                text(bound),
                text(wording.number(c.baseline_mean)),
                text(c.n),
                text(wording.check_status(c), "green" if c.passed else "bold red"),
            )
        console.print(table)
    for c in wording.failed_first_by_slice(report):
        _line(console, text(f"FAIL {c.slice} {wording.check_name(c)}: {wording.failure_message(c)}", "red"))
    for slice_name in wording.slices(report):
        for loss in wording.losses(report, slice_name):
            _line(console, text(f"{slice_name}: lost at {loss.line()}"))
    if report.problems:
        table = Table(title="inconclusive evidence", title_justify="left")
        for col in ("problem", "case", "detail", "trace"):
            table.add_column(col, overflow="fold")
        for p in report.problems:
            table.add_row(text(p.kind, "yellow"), text(p.case_id if p.case_id is not None else "(whole run)"), text(p.detail), text(p.trace_id or ""))
        console.print(table)
    for w in wording.warnings(report):
        _line(console, text(f"warning: {w}", "yellow"))
