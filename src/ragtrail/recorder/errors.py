"""Internal-error accounting: every error inside ragtrail is caught, counted and logged once per site.

Never breaking the host application means an instrumentation error is never raised into it; it is
counted here (``ragtrail.internal_error_count()``) and, for the stage it happened in, on the span
(``ragtrail.instrumentation.errors``), so a reader knows the record may be incomplete.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

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
        try:
            _log.warning("ragtrail: internal error in %s (counted, logged once): %r", site, exc, exc_info=True)
        except Exception:  # no room left to log (at the recursion limit), or a repr that raises: counted
            pass


# raised to stop the work, not by it: a cancelled task, Ctrl-C, a closed generator
CANCELLATIONS: tuple[type[BaseException], ...] = (KeyboardInterrupt, GeneratorExit)
try:  # asyncio.CancelledError is a BaseException since 3.8
    import asyncio as _asyncio

    CANCELLATIONS = CANCELLATIONS + (_asyncio.CancelledError,)
except ImportError:  # pragma: no cover
    pass
try:
    import concurrent.futures as _futures

    CANCELLATIONS = CANCELLATIONS + (_futures.CancelledError,)
except ImportError:  # pragma: no cover
    pass


def is_cancellation(exc: BaseException | None) -> bool:
    """The call was stopped from outside (``asyncio.CancelledError``, ``KeyboardInterrupt``,
    ``GeneratorExit``): not a failure of the retrieval, so a stage says ``cancelled``, not ``failed``."""
    return isinstance(exc, CANCELLATIONS)


def exception_message(exc: BaseException) -> str | None:
    """``str(exc)``, or ``None`` when the exception's ``__str__`` itself raises: a broken message must
    not cost the stage its events, count and digest."""
    try:
        text = str(exc)
    except Exception:
        return None
    return text if isinstance(text, str) else None


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
