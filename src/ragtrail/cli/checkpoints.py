"""``ragtrail verify --checkpoints FILE``: the backend's traces against the producer's checkpoints.

Called by the ``verify`` command (:mod:`ragtrail.cli.one_trace`); the comparison itself is
:mod:`ragtrail.inspect.verify_checkpoints`. One line per named trace, then one summary line.
"""

from __future__ import annotations

import datetime as dt
import time

from rich.text import Text

from ragtrail.cli.console import json_out, progress_bar, stdout
from ragtrail.inspect import errors
from ragtrail.inspect.safe import plain

__all__ = ["run_checkpoints"]


def _utc(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_checkpoints(path: str, source_spec: str | None, timeout: float, key: bytes | None, as_json: bool) -> int:
    """Verify the source against the checkpoint file: exit 1 when a trace is missing, altered or never
    checkpointed (each named), 0 when all is there, 9 when the file itself does not hold."""
    from ragtrail.inspect.sources import open_source
    from ragtrail.inspect.verify_checkpoints import load_chain, verify_checkpoints

    chain = load_chain(path, key)
    source = open_source(source_spec, timeout=timeout)
    try:
        with progress_bar(f"comparing {len(chain.exported)} checkpointed traces", unit="count"):
            report = verify_checkpoints(chain, source, key, time.time_ns())
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()
    if as_json:
        json_out(report.as_dict())
        return errors.EXIT_ALARMS if report.failed else errors.EXIT_OK
    out = stdout()
    for label, findings in (
        ("MISSING", report.missing),
        ("ALTERED", report.altered),
        ("NOT CHECKPOINTED", report.not_checkpointed),
        ("LOST", report.lost),
    ):
        for finding in findings:
            out.print(Text(f"{label} trace={plain(finding.trace_id)}: {plain(finding.detail)}"))
    for note in report.notes:
        out.print(Text(f"note: {plain(note)}"))
    producers = len(chain.producers)
    summary = (
        f"{len(chain.exported)} traces checkpointed by {producers} producer{'s' if producers != 1 else ''} in {chain.checkpoints} checkpoints "
        f"({_utc(chain.from_ns)} .. {_utc(chain.to_ns)}): {report.present} present, {len(report.missing)} missing, {len(report.altered)} altered, "
        f"{len(report.not_checkpointed)} not checkpointed; {len(report.lost)} counted lost, {report.sampled_out} sampled out at the head"
    )
    out.print(Text(("FAIL " if report.failed else "ok ") + summary))
    return errors.EXIT_ALARMS if report.failed else errors.EXIT_OK
