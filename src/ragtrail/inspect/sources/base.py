"""What every trace source is: the :class:`Source` protocol, the ``progress`` callback, the defaults
of ``--source`` and ``--timeout``, and how a ``lookback`` such as ``30m`` is read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..errors import UsageError
from ..model import Trace

ENV_SOURCE = "RAGTRAIL_SOURCE"
DEFAULT_STORE = ".ragtrail"
DEFAULT_TIMEOUT = 10.0

Progress = Callable[[int, int], None]
"""``progress(done, total)``: called while reading large inputs (bytes) or many traces (count)."""


class Source(Protocol):
    description: str

    def get(self, trace_id: str) -> Trace: ...

    def latest(self) -> str: ...

    def search(self, limit: int, query: str | None, lookback: str | None) -> list[str]: ...


def lookback_seconds(text: str | None) -> int:
    """``30s``, ``30m``, ``1h``, ``2d`` or a number of seconds; empty means no bound (0)."""
    if not text:
        return 0
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)
    except ValueError:
        raise UsageError(f"bad lookback {text!r}", "use e.g. 30m, 1h, 2d") from None
