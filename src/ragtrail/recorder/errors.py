"""Internal-error accounting: every error inside ragtrail is caught, counted and logged once per site.

Never breaking the host application means an instrumentation error is never raised into it; it is
counted here (``ragtrail.internal_error_count()``) and, for the stage it happened in, on the span
(``ragtrail.instrumentation.errors``), so a reader knows the record may be incomplete.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["guarded", "internal_error_count", "record_internal_error"]

_log = logging.getLogger("ragtrail")
_lock = threading.Lock()
_counts: Counter[str] = Counter()

F = TypeVar("F", bound=Callable[..., Any])


def record_internal_error(site: str, exc: BaseException) -> None:
    """Count an error caught at ``site``; the first of each (site, exception type) is logged with
    its traceback, later ones only counted (a broken hook on a hot path must not flood the log)."""
    key = f"{site}:{type(exc).__name__}"
    with _lock:
        _counts[key] += 1
        first = _counts[key] == 1
    if first:
        # no room left to log (at the recursion limit), or a repr that raises: counted all the same
        with contextlib.suppress(Exception):
            _log.warning("ragtrail: internal error in %s (counted, logged once): %r", site, exc, exc_info=True)


def internal_error_count() -> int:
    """How many internal errors ragtrail has caught in this process (never raised into the app)."""
    with _lock:
        return sum(_counts.values())


def guarded(site: str, default: Any = None) -> Callable[[F], F]:
    """Decorate a recording helper: an ``Exception`` it raises is counted at ``site`` and
    ``default`` returned instead (``BaseException`` such as ``KeyboardInterrupt`` passes)."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                record_internal_error(site, exc)
                return default

        return wrapper  # type: ignore[return-value]

    return decorate
