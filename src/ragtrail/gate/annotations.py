"""The gate's decision as GitHub Actions workflow commands (``::error title=...::message``).

Printed on a step's stdout, each line becomes an annotation on the workflow run (and on the pull
request's checks). One ``::error`` per failed check and per problem, one ``::warning`` per warning,
and a ``::notice`` with the verdict when it passes.

Escaping follows the runner's parser (actions/runner ``ActionCommand.TryParseV2``): the command
ends at the first ``::`` after the name, properties are split on ``,`` and each at its first ``=``.
The message (data) escapes ``%`` ``\\r`` ``\\n`` as ``%25`` ``%0D`` ``%0A``; a property value also
escapes ``:`` and ``,`` as ``%3A`` ``%2C`` (a ``::`` in a title would otherwise end the properties,
a ``,`` start a forged property). ``%`` goes first, so the runner's unescaping gives back the value.
Trace data goes through :func:`ragtrail.inspect.safe.plain` before that (no control or bidi
character reaches the log), and the legacy ``##[command]`` syntax, which the runner still matches
*anywhere* in a line when the line is not a ``::`` command, is broken by :func:`ragtrail.inspect.safe.log_inert` wherever
trace data is printed outside a workflow command (the terminal table uses it).

GitHub shows at most 10 error and 10 warning annotations per step; the gate keeps the most telling
ones (problems, then the failed checks of the slices, then the aggregate's) and folds the rest into
one last line that says how many it left out.
"""

from __future__ import annotations

from ragtrail.inspect.safe import plain

from . import wording
from .model import GateReport

#: annotations of one kind GitHub shows per step
PER_KIND = 10


def data(value: str) -> str:
    """A workflow command's message, escaped as the runner unescapes it."""
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def prop(value: str) -> str:
    """A workflow command's property value (``title=...``), escaped as the runner unescapes it."""
    return data(value).replace(":", "%3A").replace(",", "%2C")


def command(name: str, message: str, **properties: str) -> str:
    """``::name k=v,...::message`` with every part escaped; trace data in it is made one printable line first."""
    props = ",".join(f"{k}={prop(plain(v))}" for k, v in properties.items())
    head = f"::{name} {props}" if props else f"::{name}"
    return f"{head}::{data(plain(message))}"


def _capped(kind: str, lines: list[tuple[str, str]], what: str) -> list[str]:
    out = [command(kind, message, title=title) for title, message in lines[:PER_KIND]]
    if len(lines) > PER_KIND:
        out[-1] = command(
            kind,
            f"{len(lines) - PER_KIND + 1} more {what} not annotated here (GitHub shows "
            f"{PER_KIND} per step); the JUnit file, the markdown summary and --json have every one",
            title=f"ragtrail gate: {len(lines) - PER_KIND + 1} more",
        )
    return out


def render(report: GateReport) -> str:
    """The report as workflow command lines (each ending in a newline)."""
    # the most telling first, since GitHub shows only ten: what made the run inconclusive, then the
    # failures of the slices themselves (a loss concentrated in one slice), then the aggregate's
    errors = [(f"ragtrail gate INCONCLUSIVE: {wording.problem_name(p)}", wording.problem_line(p)) for p in report.problems]
    errors += [(f"ragtrail gate FAIL: {c.slice} {wording.check_name(c)}", wording.failure_message(c)) for c in wording.failed_first_by_slice(report)]
    warnings = [("ragtrail gate warning", w) for w in wording.warnings(report)]
    lines = _capped("error", errors, "errors") + _capped("warning", warnings, "warnings")
    if report.verdict == "PASS":
        lines.append(command("notice", wording.verdict_line(report), title="ragtrail gate: PASS"))
    elif not errors:  # a verdict that is not PASS always has its reason annotated
        lines.append(command("error", wording.verdict_line(report), title=f"ragtrail gate: {report.verdict}"))
    return "".join(line + "\n" for line in lines)
