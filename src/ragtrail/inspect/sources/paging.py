"""Read a server's whole search answer, page by page, and say when the server cut it.

Jaeger's and Tempo's search APIs have no cursor: one request answers at most ``limit`` traces, and
Jaeger's memory store does not even pick the most recent ones. So the time range is split: a window
whose answer is full is halved (newer half first) until every window answers fewer traces than
asked, trace ids de-duplicated across windows, until the range is exhausted or ``--limit`` reached.
A window that cannot be split any further (the server's time resolution) and still answers a full
page is a read the server capped: it is said in :attr:`SearchResult.capped`, never passed off as the
whole range.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Hit:
    """One trace of a search answer: its id and its start (ns), to keep the most recent first."""

    trace_id: str
    start_ns: int


PageFetch = Callable[[int, int, int], list[Hit]]
"""``fetch(start, end, limit)``: the traces a server answers for one window (server's time unit)."""


class PageTooLarge(Exception):
    """Raised by a :data:`PageFetch` when the server refuses the page size (Tempo's ``max_result_limit``)."""


@dataclass(frozen=True)
class SearchResult:
    """What a search read: trace ids (most recent first), and whether the server cut the answer."""

    trace_ids: list[str]
    capped: bool = False
    requests: int = 0

    def note(self, description: str) -> str | None:
        """The plain line that says a read is incomplete (``None`` when it is not)."""
        if not self.capped:
            return None
        return (
            f"incomplete read: {description} capped its search answer; {len(self.trace_ids)} traces were read, "
            "the time range holds more (narrow --lookback/--since/--until or raise the server's limit)"
        )


MAX_REPEATS = 4
"""Halvings in a row that may answer the very same full page, with traces far outside the window,
before the server is taken to ignore the time window (which would otherwise be split down to its
resolution). A server that honours the window answers the same page for many halvings when all its
traces sit in a small part of the range: those answers lie inside the window and are not counted."""


@dataclass(frozen=True)
class Window:
    """A part of the time range still to read, with the answer of the window it was split from."""

    lo: int
    hi: int
    parent_answer: int | None = None
    repeats: int = 0


def newest_first(found: dict[str, int], limit: int | None) -> list[str]:
    """Trace ids by start time, most recent first, at most ``limit``."""
    ids = sorted(found, key=lambda tid: found[tid], reverse=True)
    return ids if limit is None else ids[:limit]


def page_windows(
    fetch: PageFetch, start: int, end: int, *, limit: int | None, page: int, resolution: int = 1, unit_ns: int = 1
) -> tuple[dict[str, int], bool, int]:
    """Every trace in ``[start, end]`` (up to ``limit``), as ``(id -> start ns, capped, requests)``.

    A window answered with fewer traces than asked is complete; a full one is halved, newer half
    first, down to ``resolution`` (the smallest window the server tells apart; ``unit_ns``
    nanoseconds per unit of ``start``/``end``). A page the server
    refuses as too large (:class:`PageTooLarge`) is asked again at half the size."""
    found: dict[str, int] = {}
    capped = False
    requests = 0
    windows = [Window(start, end)]  # a stack: the newest window on top
    while windows and (limit is None or len(found) < limit):
        window = windows.pop()
        want = page if limit is None else max(1, min(page, limit - len(found)))
        requests += 1
        try:
            hits = fetch(window.lo, window.hi, want)
        except PageTooLarge:
            if want <= 1:
                raise
            page = want // 2
            windows.append(window)
            continue
        for hit in hits:
            found[hit.trace_id] = max(found.get(hit.trace_id, 0), hit.start_ns)
        if len(hits) < want or (limit is not None and len(found) >= limit):
            continue
        answer = hash(frozenset(hit.trace_id for hit in hits))
        width = (window.hi - window.lo + resolution) * unit_ns
        outside = any(not window.lo * unit_ns - width <= hit.start_ns <= window.hi * unit_ns + width for hit in hits)
        repeats = window.repeats + 1 if answer == window.parent_answer and outside else 0
        if repeats >= MAX_REPEATS:
            return found, True, requests  # the server ignores the time window: no split can read more
        if window.hi - window.lo < 2 * resolution:
            capped = True  # a full page from a window that cannot be split: the server cut it
            continue
        mid = window.lo + (window.hi - window.lo) // 2
        windows.append(Window(window.lo, mid, answer, repeats))
        windows.append(Window(mid + resolution, window.hi, answer, repeats))
    return found, capped, requests
