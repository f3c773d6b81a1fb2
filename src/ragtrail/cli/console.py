"""What every ``ragtrail`` command shares: the terminal (stdout and stderr consoles), the progress bar,
JSON output and the ``--source`` option.

Trace data is untrusted: it is printed as ``Text`` (never markup) and through
:mod:`ragtrail.inspect.safe`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

import click
from rich.console import Console

from ragtrail.inspect.safe import json_text

if TYPE_CHECKING:
    from rich.progress import ProgressColumn

__all__ = ["ProgressUnit", "json_out", "progress_bar", "source_option", "stderr", "stdout", "wide_stdout"]

ProgressUnit = Literal["bytes", "count", "percent"]
"""How the bar shows the work done: bytes read, ``done/total`` items, or a percentage."""


def stdout() -> Console:
    """Trace data is printed as ``Text`` (never markup); emoji codes such as ``:x:`` in it stay literal too."""
    return Console(soft_wrap=True, width=None if sys.stdout.isatty() else 120, highlight=False, emoji=False)


def wide_stdout() -> Console:
    """stdout for tables with many columns (``stats``, ``compare``): a pipe gets 180 columns, not 120."""
    return Console(soft_wrap=True, width=None if sys.stdout.isatty() else 180, highlight=False)


def stderr() -> Console:
    """Where errors, notes and progress go, so that stdout holds only the command's output."""
    return Console(stderr=True, highlight=False, emoji=False)


def _ignore(done: int, total: int) -> None:
    """The progress callback when no bar is drawn."""


def _amount(unit: ProgressUnit) -> ProgressColumn:
    from rich.progress import DownloadColumn, TaskProgressColumn, TextColumn

    if unit == "bytes":
        return DownloadColumn()
    if unit == "count":
        return TextColumn("{task.completed}/{task.total}")
    return TaskProgressColumn()


@contextmanager
def progress_bar(label: str, unit: ProgressUnit = "bytes", after: float = 0.0) -> Iterator[Callable[[int, int], None]]:
    """A ``progress(done, total)`` callback drawing a bar on stderr, only when stderr is a terminal.

    With ``after`` the bar appears only once the work has taken that many seconds (a quick read draws
    nothing); without it the bar is shown at once, even before the total is known."""
    console = stderr()
    if not console.is_terminal:
        yield _ignore
        return
    from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn(label), BarColumn(), _amount(unit), TimeRemainingColumn(), console=console, transient=True)
    started = time.monotonic()
    task: TaskID | None = None

    def start(total: int | None) -> TaskID:
        bar.start()
        return bar.add_task(label, total=total)

    if after <= 0:
        task = start(None)

    def update(done: int, total: int) -> None:
        nonlocal task
        if task is None:
            if time.monotonic() - started < after:
                return
            task = start(total)
        bar.update(task, completed=done, total=total)

    try:
        yield update
    finally:
        if task is not None:
            bar.stop()


def source_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--source``/``-s`` (or ``RAGTRAIL_SOURCE``) and ``--timeout``: where a command reads traces."""
    fn = click.option("--timeout", type=float, default=10.0, show_default=True, help="Seconds to wait for a server.")(fn)
    return click.option(
        "--source", "-s", envvar="RAGTRAIL_SOURCE", default=None, metavar="SOURCE", help="Where traces live (see below). Default: ./.ragtrail"
    )(fn)


def json_out(data: Any) -> None:
    """``data`` as indented JSON on stdout (anything JSON cannot say is written as its ``str``)."""
    click.echo(json_text(data, indent=2, default=str))
