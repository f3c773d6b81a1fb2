"""``ragtrail compare`` through SQL: the statements of :mod:`.pairing` run, and their rows made into
the very dict :func:`ragtrail.inspect.compare.compare` returns.

Nothing is held per trace or per question in Python: the counts, verdicts, rates and survival shares
come back summed; the three lists (``only_in_a``, ``only_in_b``, ``questions``) are :class:`Listing`\\ s,
read from the engine a row at a time when printed. Each listed pair is described by the reference
:func:`ragtrail.inspect.compare.pair` over what SQL hands it (the stages only where some stage differs),
so the chain and its sentence are the Python path's own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from ragtrail.inspect.compare import Rates, SideCounts, pair, side_rates, survival_entry
from ragtrail.inspect.weight import WeightTally

from . import pairing, per_trace
from .compare import bare, stage_record
from .engine import COMPACT, SqlRunner
from .spans import select_sql


class PairingRunner(SqlRunner, Protocol):
    """What pairing asks of an engine: statements, rows streamed as tuples, and scratch tables."""

    def stream_tuples(self, sql: str, params: Any = None) -> Iterator[tuple[Any, ...]]: ...

    def temporary_table(self, select: str, params: Any = None, engine: str = ...) -> contextlib.AbstractContextManager[str]: ...


@dataclass
class Listing:
    """A list the engine holds: its length, its first rows, and every row streamed in order."""

    count: int
    rows: Callable[[int | None], Iterator[Any]]

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Any]:
        return self.rows(None) if self.count else iter(())

    def __getitem__(self, cut: slice) -> list[Any]:
        if cut.start not in (None, 0) or cut.step is not None:
            raise IndexError("a listing is read from its first row")
        return [] if not self.count or (cut.stop is not None and cut.stop <= 0) else list(self.rows(cut.stop))


@dataclass
class Paired:
    """The comparison (``result``: ``inspect.compare.compare``'s dict, its lists :class:`Listing`\\ s) and
    the changed pairs the terminal lists (newly refused first, then by question)."""

    result: dict[str, Any]
    changed: Listing


def _pair(row: tuple[Any, ...]) -> dict[str, Any]:
    """One paired question (a row of :data:`.pairing.PAIR_COLUMNS`), described by the reference ``pair``."""
    q, trace_a, trace_b, answer_a, answer_b, refused_a, refused_b, status_a, status_b, cited_a, cited_b, stages_a, stages_b = row
    a = bare(trace_a, q, answer_a, refused_a, status_a, [stage_record(s) for s in stages_a], tuple(cited_a))
    b = bare(trace_b, q, answer_b, refused_b, status_b, [stage_record(s) for s in stages_b], tuple(cited_b))
    return pair(a, b)


def _side(runner: PairingRunner, kept: str, name: str) -> tuple[SideCounts, Rates]:
    row = runner.run_sql(pairing.side_query(kept))[0]
    traces, requests, bases, stamped, no_query, repeats, *rest = row
    tally = WeightTally(int(traces), float(requests), {str(k): int(n) for k, n in zip(bases[0], bases[1], strict=True)}, int(stamped))
    counts = SideCounts(name, repeats=int(repeats), no_query=int(no_query), traces=int(traces), tally=tally)
    q, refused, known, w_refused, w_known, weight, degraded, w_degraded, fallback, w_fallback = rest
    weights = (float(w_refused), float(w_known), float(weight))
    return counts, Rates(int(q), int(refused), int(known), *weights, int(degraded), float(w_degraded), int(fallback), float(w_fallback))


def _survival(runner: PairingRunner, pairs: str, side: str, totals: tuple[int, int]) -> list[dict[str, Any]]:
    rows = runner.run_sql(pairing.survival_query(pairs, side))
    return [survival_entry(str(label), int(n), int(cited), int(context), *totals) for label, n, cited, context, _seen in rows]


def _counts(runner: PairingRunner, pairs: str, newly_refused: bool) -> dict[str, int]:
    return {str(key): int(n) for key, n, _seen in runner.run_sql(pairing.verdicts_query(pairs, newly_refused))}


def _listing(runner: PairingRunner, pairs: str, which: str, count: int, make: Callable[[tuple[Any, ...]], Any]) -> Listing:
    def rows(limit: int | None) -> Iterator[Any]:
        for row in runner.stream_tuples(pairing.listing_query(pairs, which, limit)):
            yield make(row)

    return Listing(count, rows)


def _only(row: tuple[Any, ...]) -> dict[str, Any]:
    return {"query_sha256": row[0], "trace_id": row[1]}


@contextlib.contextmanager
def compared(runner: PairingRunner, kept: tuple[str, str], joined: str, heavy: tuple[str, str], names: tuple[str, str]) -> Iterator[Paired]:
    """The comparison of two sides' :func:`.pairing.kept_query` tables (``kept``), joined on the question
    (``joined``: a table of :func:`.pairing.joined_query`), with the stages of the traces whose
    signatures differ (``heavy``: see :func:`.pairing.pairs_query`); valid while the context is open
    (its lists are read from the engine)."""
    (side_a, rates_a), (side_b, rates_b) = (_side(runner, kept[0], names[0]), _side(runner, kept[1], names[1]))
    with runner.temporary_table(pairing.pairs_query(joined, *heavy), None, COMPACT) as pairs:
        paired, newly, only_a, only_b, changed, *bases = (int(v) for v in runner.run_sql(pairing.pair_counts_query(pairs))[0])
        a = {**side_rates(side_a, rates_a), "survival": _survival(runner, pairs, "a", (bases[0], bases[1])), "notes": side_a.notes}
        b = {**side_rates(side_b, rates_b), "survival": _survival(runner, pairs, "b", (bases[2], bases[3])), "notes": side_b.notes}
        result = {
            "a": a,
            "b": b,
            "paired": paired,
            "verdicts": _counts(runner, pairs, False),
            "newly_refused": newly,
            "newly_refused_first_difference": _counts(runner, pairs, True) if newly else {},
            "only_in_a": _listing(runner, pairs, "only_in_a", only_a, _only),
            "only_in_b": _listing(runner, pairs, "only_in_b", only_b, _only),
            "questions": _listing(runner, pairs, "questions", paired, _pair),
        }
        yield Paired(result, _listing(runner, pairs, "changed", changed, _pair))


@contextlib.contextmanager
def servers_compared(runner: PairingRunner, windows: tuple[str, str], orders: tuple[str, str], names: tuple[str, str]) -> Iterator[Paired]:
    """``compare`` of two ``otel_traces`` windows of one ClickHouse server (``windows``: ``FROM``
    targets; ``orders``: each side's reading order), computed by that server in its session's
    temporary tables: each side's slim spans once (in memory: the maps parsed once), then its
    per-trace records (compressed on disk), then :func:`records_compared`."""
    with contextlib.ExitStack() as stack:
        records = []
        for window in windows:
            with runner.temporary_table(select_sql(window)) as slim:
                records.append(stack.enter_context(runner.temporary_table(per_trace.select_sql(slim), None, COMPACT)))
        yield stack.enter_context(records_compared(runner, (records[0], records[1]), orders, names))


@contextlib.contextmanager
def records_compared(runner: PairingRunner, records: tuple[str, str], orders: tuple[str, str], names: tuple[str, str]) -> Iterator[Paired]:
    """``compare`` of two sides' per-trace records (``records``: tables or ``FROM`` targets of
    :data:`.per_trace.COLUMNS`, computed in the session or kept by :mod:`.kept`): their questions and
    the traces kept for them, joined, in the session's temporary tables (the questions' winners in
    memory, the rest compressed on disk), each written by as many insert streams as the server's
    queries read with (one stream unless told)."""
    runner = _Threaded(runner, int(runner.run_sql("SELECT toUInt64(getSetting('max_threads'))")[0][0]))
    with contextlib.ExitStack() as stack:
        kept = []
        for table, order in zip(records, orders, strict=True):
            with runner.temporary_table(pairing.winners_query(table, order), None, "ENGINE = Memory") as w:
                kept.append(stack.enter_context(runner.temporary_table(pairing.kept_query(table, w), None, COMPACT)))
        joined = stack.enter_context(runner.temporary_table(pairing.joined_query(kept[0], kept[1]), None, COMPACT))
        heavy = tuple(pairing.heavy_query(r, pairing.differing_query(joined, side)) for r, side in zip(records, "ab", strict=True))
        with compared(runner, (kept[0], kept[1]), joined, (heavy[0], heavy[1]), names) as paired:
            yield paired


@dataclass
class _Threaded:
    """A runner whose scratch tables are filled by ``threads`` insert streams (``max_insert_threads``
    on each statement: a server's HTTP requests share no ``SET`` outside a session)."""

    runner: PairingRunner
    threads: int

    def run_sql(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        return self.runner.run_sql(sql, params)

    def stream_tuples(self, sql: str, params: Any = None) -> Iterator[tuple[Any, ...]]:
        return self.runner.stream_tuples(sql, params)

    def temporary_table(self, select: str, params: Any = None, engine: str = COMPACT) -> contextlib.AbstractContextManager[str]:
        return self.runner.temporary_table(f"{select} SETTINGS max_insert_threads = {self.threads}", params, engine)
