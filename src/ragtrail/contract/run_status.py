"""The run status rule (docs/semconv.md §5), written once: the recorder stamps it on the pipeline span
from its stages; the inspector applies the same rule to the stages a trace recorded when no pipeline
span stamped one (stages with no pipeline around them), so "not a failure" is never said of a run
whose stages failed."""

from __future__ import annotations

from collections.abc import Iterable

from . import semconv as sc


def roll_up(statuses: Iterable[str], *, raised: bool, retrieved: bool) -> str:
    """``failed`` if the run raised or a stage failed, else ``degraded`` if a stage degraded, else
    ``empty`` if no stage retrieved any candidate, else ``available``."""
    seen = set(statuses)
    if raised or sc.STATUS_FAILED in seen:
        return sc.RUN_FAILED
    if sc.STATUS_DEGRADED in seen:
        return sc.RUN_DEGRADED
    return sc.RUN_AVAILABLE if retrieved else sc.RUN_EMPTY
