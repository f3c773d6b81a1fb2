"""``ragtrail ls``, ``stats`` and ``compare``: commands over many traces, read one at a time.

Added to the ``ragtrail`` group in :mod:`ragtrail.cli.app`. Every trace is read through
:class:`ragtrail.inspect.stream.TraceStream` (bounded memory) and reduced to a
:class:`ragtrail.inspect.records.TraceRecord`; every piece of trace data printed goes through
:mod:`ragtrail.inspect.safe`.
"""

from __future__ import annotations

import json
import sys
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import click

from ragtrail.cli.console import json_out, progress_bar, source_option, stderr, wide_stdout
from ragtrail.inspect import errors
from ragtrail.inspect.gc_pause import gc_paused
from ragtrail.inspect.safe import plain, text
from ragtrail.inspect.weight import WeightTally

__all__ = ["compare_cmd", "ls_cmd", "stats_cmd"]


def _key_file_option(why: str) -> Callable[..., Any]:
    """``--key-file``: the producer's receipt key (RAGTRAIL_RECEIPT_KEY), read as ``verify --key-file`` reads it."""
    return click.option(
        "--key-file",
        type=click.Path(exists=True, dir_okay=False),
        default=None,
        help=f"The receipt key (RAGTRAIL_RECEIPT_KEY of the producer): {why}",
    )


def _read_key(key_file: str | None) -> bytes | None:
    from ragtrail.settings import read_key_file

    return read_key_file(key_file) if key_file is not None else None


def _filter_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        (
            click.option("--since", default=None, help="Traces that ended after this: ISO time or a duration back (30m, 7d)."),
            click.option("--until", default=None, help="Traces that started before this: ISO time or a duration back."),
            click.option(
                "--status",
                "run_status",
                default=None,
                metavar="RUN_STATUS",
                help="Run status on the pipeline span (available, empty, degraded, failed).",
            ),
            click.option("--stage-status", default=None, help="Some stage has this status (ok, empty, degraded, failed)."),
            click.option("--finding", default=None, help="A finding or insight containing this text (e.g. stale_citation, echo)."),
            click.option("--reason", default=None, help="Some candidate was excluded with this reason code."),
            click.option("--component", default=None, help="Some stage (or the pipeline) has this component."),
            click.option("--doc", "doc", default=None, metavar="ID", help="Some stage saw this document id."),
            click.option(
                "--query-text",
                default=None,
                metavar="TEXT",
                help="The question (hashed here with the contract's receipt; the raw text is never needed on the wire).",
            ),
            click.option("--query-sha256", default=None, metavar="HEX", help="The question's receipt, as recorded."),
            _key_file_option("--query-text is hashed with it (hmac-sha256), as a producer in hash mode under that key stamps it."),
            click.option("--service-version", "service_version", default=None, help="The resource's service.version."),
            click.option("--lookback", default="1h", show_default=True, help="How far back a server search looks."),
            click.option(
                "--limit", type=int, default=None, help="At most this many traces (servers: default every trace in the lookback, paged through)."
            ),
            click.option(
                "--date-key",
                default="updated_at",
                show_default=True,
                help="Metadata key (ragtrail.candidate.meta.KEY) holding a document's date (stale_citation).",
            ),
            click.option(
                "--self-author",
                default=None,
                metavar="KEY=VALUE",
                help="Metadata marking content the system wrote itself (self_citation), e.g. author=assistant.",
            ),
        )
    ):
        fn = option(fn)
    return fn


def _insight_settings(date_key: str, self_author: str | None) -> Any:
    from ragtrail.inspect.insights import InsightSettings

    if self_author is not None:
        key, sep, value = self_author.partition("=")
        if not sep or not key:
            raise errors.UsageError(f"--self-author wants KEY=VALUE, got {self_author!r}", "e.g. --self-author author=assistant")
        return InsightSettings(date_key=date_key, author_key=key.strip(), author_value=value.strip())
    return InsightSettings(date_key=date_key)


def _make_filter(
    since: str | None,
    until: str | None,
    run_status: str | None,
    stage_status: str | None,
    finding: str | None,
    reason: str | None,
    component: str | None,
    doc: str | None,
    query_text: str | None,
    query_sha256: str | None,
    service_version: str | None,
    tag: tuple[str, str] | None = None,
    key: bytes | None = None,
) -> Any:
    from ragtrail.inspect.search import Filter, parse_time, query_receipt

    if query_text is not None and query_sha256 is not None:
        raise errors.UsageError("--query-text and --query-sha256 both given", "pass one")
    return Filter(
        since_ns=parse_time(since),
        until_ns=parse_time(until),
        run_status=run_status,
        stage_status=stage_status,
        finding=finding,
        reason=reason,
        component=component,
        doc=doc,
        query_sha256=query_receipt(query_text, key) if query_text is not None else query_sha256,
        service_version=service_version,
        tag=tag,
    )


def _is_server(source: str | None) -> bool:
    import os

    spec = source or os.environ.get("RAGTRAIL_SOURCE") or ""
    return spec.startswith(("jaeger+", "tempo+", "clickhouse+"))


@dataclass(frozen=True)
class ServerRead:
    """How many traces a server search answered (``None``: not a server), and the line saying it was cut."""

    traces: int | None
    incomplete: str | None
    source: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"traces_read": self.traces, "complete": self.incomplete is None, "note": self.incomplete}

    def header(self) -> str | None:
        """The line above a server read's output saying how much was read (``None`` for a file source)."""
        if self.traces is None:
            return None
        return f"{self.traces} traces read from {self.source}" + (
            " (INCOMPLETE: the server capped its search answer)" if self.incomplete else " (every trace in the range)"
        )


def _read_field(read: list[ServerRead]) -> dict[str, Any] | None:
    """The ``server_read`` field of ``--json`` output: only for a server source (a file is read whole)."""
    return read[0].as_dict() if read and read[0].traces is not None else None


def _records(
    source: str | None, flt: Any, settings: Any, *, timeout: float, lookback: str, limit: int | None, label: str, read: list[ServerRead] | None = None
) -> Iterator[Any]:
    """Matching records of one source, streamed; the filter is pushed down to a server and checked here.
    A server is read up to ``limit`` (default: every trace in the lookback); ``read`` gets what it answered."""
    import gc
    import os

    from ragtrail.inspect.errors import NoRagtrailSpans
    from ragtrail.inspect.records import from_trace
    from ragtrail.inspect.stream import TraceStream

    source = source or os.environ.get("RAGTRAIL_SOURCE") or None
    server_query = None
    if source and source.startswith("tempo+"):
        server_query = flt.traceql()
    elif source and source.startswith("jaeger+"):
        server_query = flt.jaeger_tags()
    stream = TraceStream(source, server_query=server_query, lookback=lookback, limit=limit, timeout=timeout)
    with progress_bar(label, unit="percent", after=1.0) as progress:
        stream.progress = progress
        for trace in stream:
            try:
                record = from_trace(trace, settings)
            except NoRagtrailSpans:
                continue
            finally:
                del trace
                # the cyclic collector is paused for the command (gc_paused): without this, the cycles
                # a parsed trace leaves behind pile up and memory grows with the traces read (~65 KB
                # each). A young-generation pass per trace walks only what that trace allocated.
                gc.collect(0)
            if flt.matches(record):
                yield record
    if read is not None:
        read.append(ServerRead(stream.read_from_server, stream.incomplete, stream.description))
    for note in stream.notes():
        stderr().print(f"ragtrail: note: {plain(note)}", highlight=False, markup=False, soft_wrap=True)


@click.command("ls")
@source_option
@_filter_options
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array, one object per trace.")
@gc_paused()
def ls_cmd(
    source: str | None,
    timeout: float,
    since: str | None,
    until: str | None,
    run_status: str | None,
    stage_status: str | None,
    finding: str | None,
    reason: str | None,
    component: str | None,
    doc: str | None,
    query_text: str | None,
    query_sha256: str | None,
    key_file: str | None,
    service_version: str | None,
    lookback: str,
    limit: int | None,
    date_key: str,
    self_author: str | None,
    as_json: bool,
) -> int:
    """List the traces in a source that match every filter given, one line per trace (oldest first).

    Filters are pushed down to Tempo (TraceQL) and Jaeger (tags) and always checked on what is read;
    a local store is read in bounded memory. Exit 3 when no trace matches."""
    flt = _make_filter(
        since, until, run_status, stage_status, finding, reason, component, doc, query_text, query_sha256, service_version, key=_read_key(key_file)
    )
    settings = _insight_settings(date_key, self_author)
    read: list[ServerRead] = []
    records = _records(source, flt, settings, timeout=timeout, lookback=lookback, limit=limit, label="reading traces", read=read)
    if limit is not None and not _is_server(source):
        records = iter(deque(records, maxlen=limit))  # the most recent LIMIT, in bounded memory
    tally = WeightTally()
    shown = _emit(records, as_json, tally)
    header = read[0].header() if read and shown else None
    if header is not None:  # stdout holds only the traces: how many were read goes to stderr
        stderr().print(f"ragtrail: {plain(header)}", highlight=False, markup=False, soft_wrap=True)
    if tally.weighted or tally.unknown_policy:  # sampled traces: what they stand for, beside them
        stderr().print(f"ragtrail: {plain(tally.statement())}", highlight=False, markup=False, soft_wrap=True)
    if not shown:
        raise errors.TraceNotFound("no trace matches", "loosen the filters (ragtrail ls --help) or check --source")
    return errors.EXIT_OK


def _emit(records: Iterator[Any], as_json: bool, tally: WeightTally) -> int:
    from ragtrail.inspect.search import summary_line

    n = 0
    write = sys.stdout.write  # one plain line per trace: rich's layout costs more than reading the trace
    for r in records:
        tally.add(r.weight, r.basis, r.tail_stamped)
        if as_json:
            write(("[\n" if n == 0 else ",\n") + json.dumps(r.as_dict(), ensure_ascii=False, default=str))
        else:
            write(plain(summary_line(r)) + "\n")
            for i in r.insights:
                write(plain(f"    {i['insight']}: {i['said']}") + "\n")
        n += 1
    if as_json:
        sys.stdout.write("\n]\n" if n else "")
    return n


@click.command("stats")
@source_option
@_filter_options
@click.option("--json", "as_json", is_flag=True, help="Print the aggregates as JSON.")
@click.option(
    "--engine",
    type=click.Choice(["auto", "python", "columnar"]),
    default="auto",
    show_default=True,
    help=(
        "columnar: aggregate in SQL, a local store in chdb or a clickhouse+http source in its server"
        " (auto: local stores from RAGTRAIL_COLUMNAR_MIN_BYTES, default 64 MiB, with no filter)."
    ),
)
@gc_paused()
def stats_cmd(
    source: str | None,
    timeout: float,
    since: str | None,
    until: str | None,
    run_status: str | None,
    stage_status: str | None,
    finding: str | None,
    reason: str | None,
    component: str | None,
    doc: str | None,
    query_text: str | None,
    query_sha256: str | None,
    key_file: str | None,
    service_version: str | None,
    lookback: str,
    limit: int | None,
    date_key: str,
    self_author: str | None,
    as_json: bool,
    engine: str,
) -> int:
    """Aggregate a source per stage kind and component: counts in/out/excluded, exclusion reasons,
    statuses and failure classes, fallback and unexplained rates, coverage; weighted by each trace's
    sampling adjusted count (and said so). A large local store is aggregated in SQL (chdb, --engine)."""
    from ragtrail.inspect.columnar.store import choose
    from ragtrail.inspect.stats import Stats

    filters = (since, until, run_status, stage_status, finding, reason, component, doc, query_text, query_sha256, service_version)
    narrowed = any(f is not None for f in filters) or limit is not None
    pushed = _pushdown_stats(source, engine, narrowed, timeout, lookback)
    store, note = (None, None) if pushed is not None else choose(source, engine, narrowed)
    if note is not None:
        stderr().print(f"ragtrail: note: {note}", highlight=False, markup=False, soft_wrap=True)
    flt = _make_filter(*filters, key=_read_key(key_file))
    stats = Stats()
    read: list[ServerRead] = []
    if pushed is not None:
        stats = pushed
    elif store is not None:
        stats = _columnar_stats(store)
    else:
        for r in _records(
            source, flt, _insight_settings(date_key, self_author), timeout=timeout, lookback=lookback, limit=limit, label="aggregating", read=read
        ):
            stats.add(r)
    if not stats.traces:
        raise errors.TraceNotFound("no trace matches", "loosen the filters or check --source")
    result = stats.as_dict() if store is None and pushed is None else _columnar_dict(stats, "ClickHouse" if pushed is not None else "chdb")
    if _read_field(read) is not None:
        result["server_read"] = _read_field(read)
    if as_json:
        json_out(result)
    else:
        header = read[0].header() if read else None
        if header is not None:
            wide_stdout().print(text(header))
        _render_stats(result)
    return errors.EXIT_OK


def _columnar_stats(store: Any) -> Any:
    """``stats`` over ``store`` through the embedded engine (caught up with the store first)."""
    from ragtrail.inspect import columnar
    from ragtrail.inspect.columnar.store import open_store

    engine = open_store(store)
    try:
        return columnar.stats(engine, columnar.SPANS_TABLE, columnar.SCOPE_TABLE)
    finally:
        engine.close()


def _pushdown_stats(source: str | None, engine: str, narrowed: bool, timeout: float, lookback: str) -> Any:
    """``stats`` computed by a ClickHouse server in SQL (``--engine columnar`` with a
    ``clickhouse+http://`` source and no filter but the lookback), else ``None``: the statements of
    ``inspect.columnar.sql`` over the server's ``otel_traces``, the same SQL the embedded engine runs."""
    from ragtrail.inspect import columnar
    from ragtrail.inspect.columnar.spans import select_sql
    from ragtrail.inspect.sources import open_source
    from ragtrail.inspect.sources.clickhouse import ClickHouseSource

    if engine != "columnar" or not (source or "").startswith("clickhouse+"):
        return None
    if narrowed:
        raise errors.UsageError(
            "--engine columnar over ClickHouse takes no filter but --lookback", "drop the filters and --limit, or use --engine python"
        )
    server = open_source(source, timeout=timeout)
    assert isinstance(server, ClickHouseSource)
    with server.temporary_table(select_sql(server.window_table(lookback))) as slim:  # the maps parsed once, not per statement
        return columnar.stats(server, slim)


def _columnar_dict(stats: Any, where: str = "chdb") -> dict[str, Any]:
    """The columnar result, and the one line saying what SQL did not compute."""
    from ragtrail.inspect import columnar

    stderr().print(
        f"ragtrail: note: aggregated in {where} (columnar); insights and fidelity alarms are not computed there (--engine python computes them)",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    return columnar.as_dict(stats)


def _dist(d: dict[str, Any]) -> str:
    return "-" if d["min"] is None else f"{d['min']}/{d['median']}/{d['p90']}/{d['max']}"


def _counts(d: dict[str, Any], n: int = 3) -> str:
    items = list(d.items())
    shown = ", ".join(f"{plain(k)} {v:g}" for k, v in items[:n])
    return shown + (f", +{len(items) - n}" if len(items) > n else "")


def _render_stats(result: dict[str, Any]) -> None:
    from rich import box
    from rich.table import Table

    out = wide_stdout()
    out.print(text(result["sampling"]))
    out.print(
        text(
            "runs: "
            + (_counts(result["run_statuses"], 5) or "-")
            + (
                f" · refusal rate {result['refusal_rate']:.1%} of {result['refusal_known']:g}"
                if result["refusal_rate"] is not None
                else " · refusals not recorded"
            )
            + (f" · insights: {_counts(result['insights'], 5)}" if result["insights"] else "")
            + (f" · {result['alarms']} fidelity alarms" if result["alarms"] else "")
        )
    )
    cov = result["coverage"]
    if cov["mean_read_fraction"] is not None:
        out.print(
            text(
                f"coverage: mean {cov['mean_read_fraction']:.4%} of the corpus read "
                f"(corpus size known for {cov['corpus_known']:g}; exhaustive {cov['exhaustive']:g})"
            )
        )
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="in/out/excluded: min/median/p90/max", title_justify="left")
    for col in ("stage", "component", "traces", "in", "out", "excluded", "reasons", "statuses", "failures", "fallback", "unexplained"):
        table.add_column(
            col, justify="right" if col in ("traces", "fallback", "unexplained") else "left", overflow="fold", no_wrap=col in ("stage", "component")
        )
    for s in result["stages"]:
        table.add_row(
            text(s["kind"]),
            text(s["component"]),
            f"{s['traces']:g}",
            _dist(s["in"]),
            _dist(s["out"]),
            _dist(s["excluded"]),
            text(_counts(s["exclusion_reasons"])),
            text(_counts(s["statuses"])),
            text(_counts(s["failure_classes"])),
            "-" if s["fallback_rate"] is None else f"{s['fallback_rate']:.1%}",
            "-" if s["unexplained_rate"] is None else f"{s['unexplained_rate']:.1%}",
        )
    out.print(table)


# --- compare -----------------------------------------------------------------------------------------
_SELECTORS = ("version:", "tag:", "time:")


def _side(arg: str, source: str | None) -> tuple[str | None, dict[str, Any], str]:
    """``PATH|SERVER`` (a source of its own), or ``version:V`` / ``tag:KEY=VALUE`` / ``time:SINCE..UNTIL`` on --source."""
    if not arg.startswith(_SELECTORS):
        return arg, {}, arg
    kind, _, value = arg.partition(":")
    if kind == "version":
        return source, {"service_version": value}, arg
    if kind == "tag":
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise errors.UsageError(f"bad side {arg!r}", "use tag:KEY=VALUE (a resource attribute)")
        return source, {"tag": (key, val)}, arg
    since, sep, until = value.partition("..")
    if not sep:
        raise errors.UsageError(f"bad side {arg!r}", "use time:SINCE..UNTIL (ISO times or durations back, e.g. time:2h..1h)")
    return source, {"since": since or None, "until": until or None}, arg


def _side_filter(selection: dict[str, Any]) -> Any:
    """A compare side's selection (time, service version, tag) as a filter."""
    none = (None,) * 8
    return _make_filter(selection.get("since"), selection.get("until"), *none, selection.get("service_version"), selection.get("tag"))


def _read_side(
    name: str,
    arg: str,
    source: str | None,
    make: Callable[[str], Any],
    key: bytes | None,
    read: list[ServerRead],
    server: dict[str, Any],
) -> Any:
    """One compare side read into ``make(label)`` (a ``SideSummary`` or a ``StreamedSide``), each trace
    paired by ``key`` as the producer's receipts are (``paired_by_key``)."""
    from ragtrail.inspect.compare import paired_by_key
    from ragtrail.inspect.insights import InsightSettings

    spec, selection, label = _side(arg, source)
    summary = make(label)
    records = _records(spec, _side_filter(selection), InsightSettings(), label=f"reading {name}", read=read, **server)
    for r in records:
        summary.add(paired_by_key(r, key))
    if not summary.traces:
        raise errors.TraceNotFound(f"side {name} ({plain(label)}) has no ragtrail trace", "check the source or selection")
    return summary


@click.command("compare")
@click.argument("side_a")
@click.argument("side_b")
@source_option
@click.option("--lookback", default="1h", show_default=True, help="How far back a server search looks.")
@click.option("--limit", type=int, default=None, help="Server sources: at most this many traces per side (default: every trace in the lookback).")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--markdown", "as_markdown", is_flag=True, help="Print the comparison as Markdown.")
@click.option("--show", "show_n", type=int, default=30, show_default=True, help="Questions listed in the terminal view.")
@_key_file_option("a trace whose question was recorded as text is paired by its keyed receipt, as a hash-mode run under that key stamps it.")
@click.option(
    "--engine",
    type=click.Choice(["auto", "python", "columnar"]),
    default="auto",
    show_default=True,
    help=(
        "columnar: read two local stores through chdb, or two clickhouse+http sides in their servers' SQL"
        " (auto: local stores from RAGTRAIL_COLUMNAR_MIN_BYTES, default 64 MiB)."
    ),
)
@click.option(
    "--keep-records",
    is_flag=True,
    help=(
        "clickhouse+http sides with --engine columnar: keep one compare record per trace in tables of each side's"
        " database (ragtrail_compare_v1, ragtrail_compare_v1_seen; created there, the only ragtrail write to it),"
        " recomputing only the traces whose spans changed since; a user who cannot write them: computed per run, as without it."
    ),
)
@gc_paused()
def compare_cmd(
    side_a: str,
    side_b: str,
    source: str | None,
    timeout: float,
    lookback: str,
    limit: int | None,
    as_json: bool,
    as_markdown: bool,
    show_n: int,
    key_file: str | None,
    engine: str,
    keep_records: bool,
) -> int:
    """Compare two runs question by question, paired by the receipt of the question (hop 0).

    \b
    SIDE_A / SIDE_B: a source each (PATH, jaeger+URL, tempo+URL, clickhouse+URL), or a selection of --source:
      version:1.4.0          resource service.version
      tag:KEY=VALUE          a resource attribute (e.g. tag:experiment=hop-v2)
      time:SINCE..UNTIL      ISO times or durations back (time:2h..1h)"""
    from ragtrail.inspect.compare import SideSummary, StreamedSide, compare, markdown

    if as_json and as_markdown:
        raise errors.UsageError("--json and --markdown both given", "pick one")
    key = _read_key(key_file)
    reads: dict[str, list[ServerRead]] = {"A": [], "B": []}
    server = {"timeout": timeout, "lookback": lookback, "limit": limit}
    stores = _compare_stores(side_a, side_b, source, engine, narrowed=key is not None or limit is not None)
    if keep_records and (stores is None or not isinstance(stores[0], str)):
        raise errors.UsageError("--keep-records keeps records on a ClickHouse server", "compare two clickhouse+http sides with --engine columnar")
    if stores is not None:
        form = "json" if as_json else "markdown" if as_markdown else ""
        return _columnar_compare(stores, (side_a, side_b), (timeout, lookback, keep_records), form, show_n)
    # A is held (one compact record per question); B streams past it, each trace paired as it is read
    a = _read_side("A", side_a, source, SideSummary, key, reads["A"], server)
    b = _read_side("B", side_b, source, lambda label: StreamedSide(label, against=a), key, reads["B"], server)
    result = compare(a, b)
    for name, read in reads.items():
        if _read_field(read) is not None:
            result[name.lower()]["server_read"] = _read_field(read)
    if as_json:
        json_out(result)
    elif as_markdown:
        sys.stdout.write(markdown(result, limit=show_n))
    else:
        _render_compare(result, show_n)
    return errors.EXIT_OK


def _columnar_compare(stores: tuple[Any, Any], names: tuple[str, str], server: tuple[float, str, bool], form: str, show_n: int) -> int:
    """``compare`` paired in SQL (``inspect.columnar.paired``): two local stores through the embedded
    engine, or two ``clickhouse+`` databases by their server; printed as the Python path prints it,
    the lists streamed from the engine."""
    from ragtrail.inspect.compare import markdown

    with _paired(stores, names, *server) as paired:
        result = paired.result
        for name, side in (("A", "a"), ("B", "b")):
            if not result[side]["traces"]:
                raise errors.TraceNotFound(f"side {name} ({plain(result[side]['name'])}) has no ragtrail trace", "check the source or selection")
        if form == "json":
            _json_streamed(result)
        elif form == "markdown":
            sys.stdout.write(markdown(result, limit=show_n))
        else:
            _render_compare(result, show_n, paired.changed)
    return errors.EXIT_OK


def _paired(stores: tuple[Any, Any], names: tuple[str, str], timeout: float, lookback: str, keep_records: bool) -> Any:
    """The SQL comparison's context: two local stores, or two ``clickhouse+`` specs of one server
    (``keep_records``: from the records kept in their databases, :func:`_kept_records`)."""
    from ragtrail.inspect.columnar.paired import servers_compared
    from ragtrail.inspect.columnar.store import stores_compared
    from ragtrail.inspect.sources import open_source
    from ragtrail.inspect.sources.clickhouse import ClickHouseSource

    if not isinstance(stores[0], str):
        return stores_compared(stores[0], stores[1], names)
    a, b = (open_source(spec, timeout=timeout) for spec in stores)
    assert isinstance(a, ClickHouseSource) and isinstance(b, ClickHouseSource)
    if a.base_url != b.base_url:
        raise errors.UsageError("--engine columnar compares two databases of one ClickHouse server", "name one server, or use --engine python")
    orders = (a.recency_order(), b.recency_order())
    if keep_records and _kept_records(a, b):
        from ragtrail.inspect.columnar import kept
        from ragtrail.inspect.columnar.paired import records_compared

        windows = (kept.window(a, a.database, a.window_start_ns(lookback)), kept.window(b, b.database, b.window_start_ns(lookback)))
        return records_compared(a, windows, orders, names)
    return servers_compared(a, (a.window_table(lookback), b.window_table(lookback)), orders, names)


def _kept_records(*sides: Any) -> bool:
    """Each side's kept compare records brought up to its ``otel_traces`` (``inspect.columnar.kept``),
    one line each on stderr; ``False`` with one line saying why when the server refuses the writes (a
    read-only user): the records are then computed in the session, as without ``--keep-records``."""
    from ragtrail.inspect.columnar import kept

    for side in sides:
        side.check_schema()
        try:
            done = kept.refresh(side, side.database, side.table)
        except errors.HttpStatusError as exc:
            note = f"compare records not kept in {side.database} ({exc}); computed in this session instead"
            stderr().print(f"ragtrail: {plain(note)}", highlight=False, markup=False, soft_wrap=True)
            return False
        if not done.whole:
            note = (
                f"compare records in {side.database} hold a trace twice (another compare --keep-records at the same time?);"
                " computed in this session instead"
            )
            stderr().print(f"ragtrail: {plain(note)}", highlight=False, markup=False, soft_wrap=True)
            return False
        note = f"compare records kept in {side.database}: {done.recomputed} of {done.traces} traces recomputed"
        stderr().print(f"ragtrail: {plain(note)}", highlight=False, markup=False, soft_wrap=True)
    return True


def _json_streamed(result: dict[str, Any]) -> None:
    """``json_out(result)`` byte for byte, the engine's lists (``Listing``) written a row at a time."""
    from ragtrail.inspect.columnar.paired import Listing
    from ragtrail.inspect.safe import json_text

    marks = {key: f"@ragtrail-listing-{key}@" for key, value in result.items() if isinstance(value, Listing)}
    rest = json_text({key: marks.get(key, value) for key, value in result.items()}, indent=2, default=str)
    write = sys.stdout.write
    for key, mark in marks.items():
        head, rest = rest.split(json.dumps(mark), 1)
        write(head)
        n = 0
        for item in result[key]:
            write(("[\n    " if n == 0 else ",\n    ") + json_text(item, indent=2, default=str).replace("\n", "\n    "))
            n += 1
        write("\n  ]" if n else "[]")
    write(rest + "\n")


def _compare_stores(side_a: str, side_b: str, source: str | None, engine: str, narrowed: bool) -> tuple[Any, Any] | None:
    """The two local stores to read through the engine, or ``None`` (the Python path): both sides must
    be whole local stores (no selector, no --limit or --key-file); ``auto`` takes it when one is large."""
    from ragtrail.inspect.columnar.store import choose

    if engine == "python" or (engine == "auto" and (narrowed or any(s.startswith(_SELECTORS) for s in (side_a, side_b)))):
        return None
    if engine == "columnar" and all(s.startswith("clickhouse+") for s in (side_a, side_b)):
        if narrowed:
            raise errors.UsageError("--engine columnar over ClickHouse takes no --limit or --key-file", "drop them, or use --engine python")
        return side_a, side_b  # computed by the servers (_pushdown_records)
    if any(s.startswith(_SELECTORS) for s in (side_a, side_b)):
        raise errors.UsageError("--engine columnar compares two whole local stores", "name two store directories, or use --engine python")
    chosen = [choose(side, engine, narrowed) for side in (side_a, side_b)]
    for _, note in chosen:
        if note is not None:
            stderr().print(f"ragtrail: note: {note}", highlight=False, markup=False, soft_wrap=True)
    if engine == "auto" and any(store is not None for store, _ in chosen):
        from ragtrail.inspect.columnar.store import local_store

        both = (local_store(side_a), local_store(side_b))
        return None if None in both else both
    a, b = chosen[0][0], chosen[1][0]
    return None if a is None or b is None else (a, b)


def _rate(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def _render_compare(result: dict[str, Any], show_n: int, listed: Any = None) -> None:
    """The terminal view; ``listed``: the changed pairs as the columnar path lists them (else from the questions)."""
    from rich import box
    from rich.table import Table

    out = wide_stdout()
    a, b = result["a"], result["b"]
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("")
    table.add_column(text(f"A {a['name']}"), justify="right")
    table.add_column(text(f"B {b['name']}"), justify="right")
    table.add_row("traces / questions", f"{a['traces']} / {a['questions']}", f"{b['traces']} / {b['questions']}")
    table.add_row("requests they stand for", f"{a['requests']:g}", f"{b['requests']:g}")
    table.add_row(
        "refused",
        f"{a['refused']}/{a['refusal_known']} ({_rate(a['refusal_rate'])})",
        f"{b['refused']}/{b['refusal_known']} ({_rate(b['refusal_rate'])})",
    )
    table.add_row("degraded", f"{a['degraded']} ({_rate(a['degraded_rate'])})", f"{b['degraded']} ({_rate(b['degraded_rate'])})")
    table.add_row("fallback", f"{a['fallback']} ({_rate(a['fallback_rate'])})", f"{b['fallback']} ({_rate(b['fallback_rate'])})")
    table.add_row("no query receipt (unpaired)", str(a["no_query_receipt"]), str(b["no_query_receipt"]))
    table.add_row("only on this side", str(len(result["only_in_a"])), str(len(result["only_in_b"])))
    out.print(table)
    for side, summary in (("A", a), ("B", b)):
        out.print(text(f"{side}: {summary['sampling']}", "dim"), soft_wrap=True)
    surv = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="survival in B of A's evidence (paired questions)", title_justify="left")
    for col in ("stage in B", "A's cited present", "A's in-context present"):
        surv.add_column(col, justify="left" if col == "stage in B" else "right")
    for s in b["survival"]:
        surv.add_row(text(s["stage"]), _rate(s["other_cited_present"]), _rate(s["other_in_context_present"]))
    out.print(surv)
    verdicts = ", ".join(f"{n} {v}" for v, n in sorted(result["verdicts"].items()))
    out.print(text(f"{result['paired']} questions paired: {verdicts}"))
    if result["newly_refused"]:
        where = ", ".join(f"{n} at {k}" for k, n in sorted(result["newly_refused_first_difference"].items(), key=lambda kv: -kv[1]))
        out.print(text(f"refused in B, answered in A: {result['newly_refused']} (evidence first differs: {where})", "bold yellow"))
    if listed is None:
        listed = [p for p in result["questions"] if p["verdict"] not in ("same evidence", "same evidence, same answer")]
        listed.sort(key=lambda p: (not (p["refused_b"] and not p["refused_a"]), p["query_sha256"]))
    changed = listed
    for p in changed[:show_n]:
        refusal = " REFUSED in B" if p["refused_b"] and not p["refused_a"] else ""
        out.print(text(f"  {p['query_sha256'][:12]} {p['verdict']}{refusal}: {p['cause'] or '-'}  (A {p['a']} · B {p['b']})"), soft_wrap=True)
    if len(changed) > show_n:
        out.print(text(f"  … {len(changed) - show_n} more questions that differ (--json or --markdown lists all)", "dim"))
    for side, key in (("A", "only_in_a"), ("B", "only_in_b")):
        for q in result[key][:show_n]:
            out.print(text(f"  only in {side}: question {q['query_sha256'][:12]} (trace {q['trace_id']})", "dim"), soft_wrap=True)
