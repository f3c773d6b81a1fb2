"""The commands over one trace: ``show``, ``verify``, ``diff`` and ``report``, and ``demo`` (which records one).

Added to the ``ragtrail`` group in :mod:`ragtrail.cli.app`.
"""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.text import Text

from ragtrail.cli.console import json_out, progress_bar, source_option, stdout
from ragtrail.inspect import errors, render
from ragtrail.inspect.gc_pause import gc_paused
from ragtrail.inspect.insights import InsightSettings
from ragtrail.inspect.manifest_model import Manifest
from ragtrail.inspect.safe import plain

__all__ = ["demo", "diff_cmd", "report", "show", "verify"]


def _load(ref: str, source: str | None, timeout: float) -> Manifest:
    from ragtrail.inspect.manifest import build
    from ragtrail.inspect.sources import resolve

    with progress_bar("reading traces") as progress:
        trace = resolve(ref, source, timeout=timeout, progress=progress)
    return build(trace)


@click.command()
@click.argument("trace")
@source_option
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
@click.option("--limit", type=int, default=10, show_default=True, help="Candidates shown per stage.")
@click.option("--all", "show_all", is_flag=True, help="Show every candidate and exclusion.")
@click.option(
    "--doc",
    "doc",
    default=None,
    metavar="ID",
    help="One document's fate, stage by stage (rank, score, kept or excluded and why, content changes, cited).",
)
@click.option(
    "--date-key",
    default="updated_at",
    show_default=True,
    help="Metadata key (ragtrail.candidate.meta.KEY) holding a document's date (stale_citation).",
)
@click.option("--self-author", default=None, metavar="KEY=VALUE", help="Metadata marking content the system wrote itself (self_citation).")
@gc_paused()  # a big trace is millions of objects and no cycles: see ragtrail.inspect.gc_pause
def show(
    trace: str, source: str | None, timeout: float, as_json: bool, limit: int, show_all: bool, doc: str | None, date_key: str, self_author: str | None
) -> int:
    """Show the manifest of TRACE: query hops, stages, candidates, exclusions, citations, coverage, fidelity, and the insights."""
    settings = _settings(date_key, self_author)
    manifest = _load(trace, source, timeout)
    if doc is not None:
        from ragtrail.inspect import doc_fate

        chain = doc_fate.fate(manifest, doc)
        if as_json:
            json_out(chain)
        else:
            doc_fate.render(stdout(), chain)
        return errors.EXIT_OK
    if as_json:
        json_out(manifest.as_dict())
    else:
        render.show(stdout(), manifest, limit=10**9 if show_all else limit, max_stages=10**9 if show_all else 20, settings=settings)
    return errors.EXIT_OK


def _load_policy(policy_file: str | None) -> Any:
    """``--policy FILE`` parsed (a usage error, exit 2, when it is not a policy)."""
    if policy_file is None:
        return None
    from ragtrail.contract.policy import PolicyError, load_policy

    try:
        return load_policy(policy_file)
    except PolicyError as exc:
        raise errors.UsageError(
            f"--policy {policy_file}: {exc}", 'a policy is JSON: {"version": N, "grants": [{"component": GLOB, "rules": [...]}]}'
        ) from None


def _with_policy(m: dict[str, Any], trace: Any, policy: Any) -> dict[str, Any]:
    """A verified trace's result with the policy check's alarms and notes added (issue 28)."""
    if policy is not None:
        from ragtrail.inspect.policy import check_policy

        checked = check_policy(trace, policy)
        m["fidelity"]["alarms"].extend(a.as_dict() for a in checked.alarms)
        m["fidelity"]["notes"].extend(checked.notes)
    return m


def _settings(date_key: str, self_author: str | None) -> InsightSettings:
    """What the insights read: the date key, and ``KEY=VALUE`` marking the system's own content."""
    if self_author is None:
        return InsightSettings(date_key=date_key)
    key, sep, value = self_author.partition("=")
    if not sep or not key:
        raise errors.UsageError(f"--self-author wants KEY=VALUE, got {self_author!r}", "e.g. --self-author author=assistant")
    return InsightSettings(date_key=date_key, author_key=key.strip(), author_value=value.strip())


def _print_verdict(out: Console, m: dict[str, Any]) -> None:
    """One verified trace: its alarms, or the ok line with what was checked; then its findings."""
    f = m["fidelity"]
    if f["alarms"]:
        for a in f["alarms"]:
            out.print(Text(render.alarm_line(a)))
    else:
        events = m.get("events_checked", sum(len(s["candidates"]) + len(s["excluded"]) for s in m.get("stages", [])))
        out.print(
            Text(
                f"ok trace={plain(m['trace_id'])}: intact {f['intact']}, changed_cited {f['changed_cited']}, "
                f"not captured {f['not_captured']}, {events} events and {m['span_count']} spans checked"
            )
        )
    for finding in m.get("findings", []):
        out.print(Text(f"FINDING trace={plain(m['trace_id'])}: {plain(finding)}"))


@click.command()
@click.argument("traces", nargs=-1)
@source_option
@click.option("--search", is_flag=True, help="Verify recent ragtrail traces found in the source.")
@click.option("--limit", type=int, default=20, show_default=True, help="How many traces --search checks.")
@click.option("--query", "-q", default=None, help="Search filter: TraceQL for Tempo, key=value tag for Jaeger.")
@click.option("--lookback", default=None, help="How far back --search looks (30m, 1h, 2d; servers default to 1h, a local store to everything).")
@click.option("--json", "as_json", is_flag=True, help="Print the fidelity of each trace as JSON.")
@click.option("--strict", is_flag=True, help="Also fail on findings (degraded stages, unexplained exclusions).")
@click.option(
    "--key-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="The receipt key (RAGTRAIL_RECEIPT_KEY of the producer) to check keyed (hmac-sha256) receipts.",
)
@click.option(
    "--policy",
    "policy_file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="A transform policy file (RAGTRAIL_TRANSFORM_POLICY): a rule cited by a stage it does not grant it to, "
    "or a trace recorded under another policy, is an alarm.",
)
@click.option(
    "--checkpoints",
    "checkpoints_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="A producer checkpoint file (RAGTRAIL_CHECKPOINT_PATH): name the checkpointed traces missing from the source, "
    "those altered, and those in the source never checkpointed (exit 1 on any, 9 when the file itself does not hold).",
)
@gc_paused()  # a big trace is millions of objects and no cycles: see ragtrail.inspect.gc_pause
def verify(
    traces: tuple[str, ...],
    source: str | None,
    timeout: float,
    search: bool,
    limit: int,
    query: str | None,
    lookback: str | None,
    as_json: bool,
    strict: bool,
    key_file: str | None,
    policy_file: str | None,
    checkpoints_file: str | None,
) -> int:
    """Check every receipt, event count and span count of TRACE(S); exit 1 on any alarm. With
    --checkpoints FILE: check the source holds every trace the producer checkpointed, unaltered."""
    from ragtrail.inspect.manifest import build, fidelity_only
    from ragtrail.inspect.sources import open_source, resolve
    from ragtrail.settings import read_key_file

    key = read_key_file(key_file) if key_file else None
    if checkpoints_file is not None:
        if traces or search:
            raise errors.UsageError("--checkpoints compares a whole source", "pass no TRACE ids and no --search with it")
        from ragtrail.cli.checkpoints import run_checkpoints

        return run_checkpoints(checkpoints_file, source, timeout, key, as_json)
    policy = _load_policy(policy_file)

    if not traces and not search:
        raise errors.UsageError("nothing to verify", "pass TRACE ids (or `last`) or --search")
    refs = list(traces)
    src = None
    if search:
        src = open_source(source, timeout=timeout)
        with progress_bar("searching"):
            refs.extend(src.search(limit, query, lookback))
        if not refs:
            raise errors.TraceNotFound(f"no ragtrail traces found in {src.description}", "widen --lookback or check the source")
    results = []
    out = stdout()
    with progress_bar(f"verifying {len(refs)} traces", unit="count") as progress:
        for i, ref in enumerate(refs):
            trace = src.get(ref) if src is not None and ref not in traces else resolve(ref, source, timeout=timeout)
            results.append(_with_policy((build(trace, key) if strict else fidelity_only(trace, key)).as_dict(), trace, policy))
            progress(i + 1, len(refs))
    failed = False
    for m in results:
        failed |= bool(m["fidelity"]["alarms"]) or bool(m.get("findings", []))
        if not as_json:
            _print_verdict(out, m)
    if as_json:
        json_out([{"trace_id": m["trace_id"], "fidelity": m["fidelity"], "findings": m.get("findings", [])} for m in results])
    if src is not None and hasattr(src, "close"):
        src.close()
    return errors.EXIT_ALARMS if failed else errors.EXIT_OK


@click.command("diff")
@click.argument("trace_a")
@click.argument("trace_b")
@source_option
@click.option("--source-b", default=None, metavar="SOURCE", help="Source of TRACE_B when it differs from --source.")
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON.")
@click.option("--exit-code", is_flag=True, help="Exit 1 when the evidence differs.")
@click.option("--limit", type=int, default=10, show_default=True, help="Differences shown per stage.")
@gc_paused()  # a big trace is millions of objects and no cycles: see ragtrail.inspect.gc_pause
def diff_cmd(trace_a: str, trace_b: str, source: str | None, timeout: float, source_b: str | None, as_json: bool, exit_code: bool, limit: int) -> int:
    """Compare the evidence of two traces stage by stage, and say where it first differs."""
    from ragtrail.inspect.diff import diff

    a = _load(trace_a, source, timeout)
    b = _load(trace_b, source_b or source, timeout)
    result = diff(a, b)
    if as_json:
        json_out(result)
    else:
        render.diff(stdout(), result, limit=limit)
    return errors.EXIT_ALARMS if (exit_code and not result["same_evidence"]) else errors.EXIT_OK


@click.command()
@click.argument("trace")
@source_option
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False, writable=True), help="The HTML file to write.")
@gc_paused()  # a big trace is millions of objects and no cycles: see ragtrail.inspect.gc_pause
def report(trace: str, source: str | None, timeout: float, output: str) -> int:
    """Write TRACE's manifest as one self-contained HTML file (funnel, hops, tables, fidelity)."""
    from ragtrail.inspect import report as html

    manifest = _load(trace, source, timeout)
    path = html.write(manifest, output)
    click.echo(plain(path))
    return errors.EXIT_OK


@click.command()
@click.option(
    "--store",
    default=".ragtrail",
    show_default=True,
    type=click.Path(file_okay=False),
    help="The local store directory the demo writes its traces to.",
)
@click.option(
    "--report", "report_path", default=None, type=click.Path(dir_okay=False), help="Where to write the HTML report (default: STORE/demo-report.html)."
)
@click.option(
    "--budget",
    type=click.IntRange(1, 10_000),
    default=90,
    show_default=True,
    help="The context budget in words (raise it and `ragtrail diff` the two runs).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON instead of the terminal view.")
def demo(store: str, report_path: str | None, budget: int, as_json: bool) -> int:
    """Run the bundled example RAG pipeline under ragtrail (no server needed) and show its manifest."""
    from ragtrail.demo.run import run_demo

    result = run_demo(store=store, report_path=report_path, budget_words=budget)
    if as_json:
        json_out(result.manifest.as_dict())
    else:
        out = stdout()
        out.print(Text.assemble(("answer", "bold"), ": ", plain(result.answer)))
        out.print("")
        render.show(out, result.manifest)
        out.print("")
        out.print(Text.assemble(("HTML report", "bold"), f": {plain(result.report_path)}"))
        also = ""
        if result.otlp_endpoint:
            also = (
                f"; also exported to {plain(result.otlp_endpoint)}"
                if not result.otlp_failures
                else f"; export to {plain(result.otlp_endpoint)} FAILED ({result.otlp_failures} batches): is the collector up?"
            )
        out.print(Text(f"traces in {plain(result.store_path)}{also}"))
        out.print(
            Text(f"next: ragtrail show {plain(result.manifest.trace_id)} --source {plain(store)}   ·   ragtrail verify last --source {plain(store)}")
        )
    return errors.EXIT_OK
