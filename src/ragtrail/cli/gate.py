"""``ragtrail gate run`` and ``ragtrail gate baseline``: the retrieval regression gate for CI.

Added to the ``ragtrail`` group in :mod:`ragtrail.cli.app`. The decision is :mod:`ragtrail.gate.evaluate`'s; this module
only gets the traces (in-process or ``--traces``), hands the report to the CI renderers and exits
with the verdict's code (PASS 0, REGRESSION 1, INCONCLUSIVE 3; usage errors 2). The gate's modules
are imported inside the commands, so the rest of the CLI does not pay for them at start-up.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click

from ragtrail.cli.console import json_out, progress_bar
from ragtrail.inspect import errors
from ragtrail.inspect.safe import plain

__all__ = ["gate"]


@click.group()
def gate() -> None:
    """Retrieval regression gate for CI: recall and survival of labelled relevant ids at every stage,
    against a committed baseline. Exit codes: 0 PASS, 1 REGRESSION, 3 INCONCLUSIVE (evidence the gate
    cannot trust: missing, failed, sampled or truncated traces, receipt alarms, a changed corpus)."""


def _inputs(fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        (
            click.option(
                "--pipeline",
                default=None,
                metavar="PKG.MODULE:FUNCTION",
                help="Run this function (it takes the query) in-process under ragtrail, once per case.",
            ),
            click.option(
                "--set",
                "set_path",
                required=True,
                type=click.Path(dir_okay=False),
                metavar="EVAL.JSONL",
                help="The eval set: one JSON object per line (query, relevant, optional id, slice, claim).",
            ),
            click.option(
                "--traces",
                default=None,
                metavar="SOURCE",
                help="Read recorded traces instead (local store dir, file, jaeger+http://..., tempo+http://..., clickhouse+http://...); "
                "cases pair with traces by the hop-0 query receipt.",
            ),
            click.option(
                "--key-file",
                type=click.Path(exists=True, dir_okay=False),
                default=None,
                help="The receipt key (RAGTRAIL_RECEIPT_KEY of the producer) to check keyed receipts.",
            ),
            click.option("--timeout", type=float, default=10.0, show_default=True, help="Seconds to wait for a server."),
            click.option("--lookback", default="24h", show_default=True, help="How far back a server search looks (--traces)."),
        )
    ):
        fn = option(fn)
    return fn


def _key(key_file: str | None) -> bytes | None:
    if key_file is None:
        return None
    from ragtrail.settings import read_key_file

    return read_key_file(key_file)


def _collect(pipeline: str | None, traces: str | None, evalset: Any, key: bytes | None, timeout: float, lookback: str, label: str) -> list[Any]:
    from ragtrail.gate import runner

    if (pipeline is None) == (traces is None):
        raise errors.UsageError(
            "pass exactly one of --pipeline and --traces", "--pipeline my_app.rag:answer runs it; --traces .ragtrail reads recorded traces"
        )
    with progress_bar(label, unit="percent", after=1.0) as progress:
        if pipeline is not None:
            # the gate's stdout is its report (--json, annotations): what the pipeline prints goes to stderr
            with contextlib.redirect_stdout(sys.stderr):
                fn = runner.load_pipeline(pipeline)
                return runner.run_in_process(fn, evalset.cases, key=key, progress=progress)
        assert traces is not None
        return runner.from_traces(traces, evalset.cases, key=key, progress=progress, lookback=lookback, timeout=timeout)


@gate.command("run")
@_inputs
@click.option(
    "--baseline",
    "baseline_path",
    required=True,
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="The baseline frozen by `ragtrail gate baseline` (committed next to the set).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the whole report as JSON.")
@click.option("--junit", type=click.Path(dir_okay=False), default=None, metavar="FILE", help="Write JUnit XML (one test case per slice and metric).")
@click.option(
    "--markdown", type=click.Path(dir_okay=False), default=None, metavar="FILE", help="Write a markdown summary fit for a pull-request comment."
)
@click.option("--annotations", is_flag=True, help="Print GitHub Actions annotations (::error ...) for failures.")
@click.option(
    "--artifacts",
    type=click.Path(file_okay=False),
    default=None,
    metavar="DIR",
    help="Write per-case manifest diffs and the report into DIR (upload it as the CI artifact).",
)
def gate_run(
    pipeline: str | None,
    set_path: str,
    traces: str | None,
    key_file: str | None,
    timeout: float,
    lookback: str,
    baseline_path: str,
    as_json: bool,
    junit: str | None,
    markdown: str | None,
    annotations: bool,
    artifacts: str | None,
) -> int:
    """Run the eval set (in-process or from --traces) and judge it against the baseline."""
    from ragtrail.gate import baseline as baseline_mod
    from ragtrail.gate import evalset as evalset_mod
    from ragtrail.gate.evaluate import evaluate

    evalset = evalset_mod.load(set_path)
    frozen = baseline_mod.load(baseline_path)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    clock = time.monotonic()
    runs = _collect(pipeline, traces, evalset, _key(key_file), timeout, lookback, "gate run")
    report = evaluate(
        evalset, runs, frozen, pipeline=pipeline, baseline_path=baseline_path, started_at=started, duration_s=round(time.monotonic() - clock, 3)
    )
    from rich.console import Console

    from ragtrail.gate import annotations as annotations_out
    from ragtrail.gate import artifacts as artifacts_out
    from ragtrail.gate import junit as junit_out
    from ragtrail.gate import markdown as markdown_out
    from ragtrail.gate import terminal

    for path, renderer in ((junit, junit_out), (markdown, markdown_out)):
        if path is not None:
            Path(path).write_text(renderer.render(report), encoding="utf-8")
    if artifacts is not None:
        artifacts_out.write(report, Path(artifacts))
    if annotations:
        text = annotations_out.render(report)
        if text:
            click.echo(text.rstrip("\n"))
    if as_json:
        json_out(report.to_dict())
    else:
        terminal.render(report, Console(highlight=False, emoji=False))
    return report.exit_code


@gate.command("baseline")
@_inputs
@click.option(
    "--runs",
    type=click.IntRange(1, 100),
    default=3,
    show_default=True,
    help="Repeat the set this many times (with --traces: each query's N most recent traces); the floors sit below the worst run.",
)
@click.option(
    "--output",
    "-o",
    "output",
    required=True,
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Where to write the baseline (JSON, sorted keys: commit it).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the baseline document as JSON too.")
def gate_baseline(
    pipeline: str | None,
    set_path: str,
    traces: str | None,
    key_file: str | None,
    timeout: float,
    lookback: str,
    runs: int,
    output: str,
    as_json: bool,
) -> int:
    """Freeze a baseline: the metrics of N runs per slice, their floors, and the corpus/index identity."""
    from ragtrail.gate import baseline as baseline_mod
    from ragtrail.gate import evalset as evalset_mod
    from ragtrail.gate.model import EXIT_CODES, INCONCLUSIVE

    evalset = evalset_mod.load(set_path)
    key = _key(key_file)
    if traces is not None and pipeline is None:
        from ragtrail.gate import runner

        # N runs recorded elsewhere: each query's N most recent traces
        with progress_bar("baseline from traces", unit="percent", after=1.0) as progress:
            collected = runner.from_traces_runs(traces, evalset.cases, runs=runs, key=key, progress=progress, lookback=lookback, timeout=timeout)
    else:
        collected = [_collect(pipeline, traces, evalset, key, timeout, lookback, f"baseline run {i + 1}/{runs}") for i in range(runs)]
    try:
        document = baseline_mod.freeze(evalset, collected, pipeline=pipeline)
    except baseline_mod.BaselineRefused as exc:
        click.echo(
            f"ragtrail gate baseline: not written: {len(exc.problems)} problems in the runs "
            "(a baseline frozen from evidence the gate cannot trust would be worthless)"
        )
        for problem in exc.problems[:20]:
            where = f" case {plain(problem.case_id)}" if problem.case_id else ""
            click.echo(f"  {problem.kind}{where}: {plain(problem.detail)}")
        return EXIT_CODES[INCONCLUSIVE]
    baseline_mod.write(document, output)
    if as_json:
        json_out(document)
        return 0
    click.echo(
        f"ragtrail gate baseline: wrote {plain(output)} ({len(evalset.cases)} cases, {runs} run"
        f"{'s' if runs != 1 else ''}, set digest {evalset.digest[:12]}…)"
    )
    for slice_, rows in document["thresholds"].items():
        shown = ", ".join(
            f"{plain(metric)} {row['mean']:.3f} (floor {row['threshold']:.3f})"
            if row["direction"] == "floor"
            else f"{plain(metric)} {row['mean']:.3f} (ceiling {row['threshold']:.3f})"
            for metric, row in rows.items()
        )
        click.echo(f"  {plain(slice_)}: {shown}")
        warning = next((row["warning"] for row in rows.values() if row.get("warning")), None)
        if warning:
            click.echo(f"  warning: {plain(slice_)}: {warning}")
    return 0
