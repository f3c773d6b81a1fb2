"""Terminal views of a manifest, a verification and a diff (rich tables, plain text when piped).

Only presentation lives here: every number shown comes from the manifest, whose ``as_dict`` is what
``--json`` prints, so the two can never disagree. Every piece of trace data goes through :func:`ragtrail.inspect.safe.plain`
and every line is a ``rich.text.Text`` (never a markup string), so ids, queries and details are shown
as they are: no markup interpreted, no escape sequence reaching the terminal, one record per line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .fidelity import Alarm, Fidelity
from .insights import InsightSettings, checked, insights
from .manifest_model import Hop, Manifest, QueryHop, Row, Stage
from .safe import plain


def _short(text: Any, width: int = 72) -> str:
    """``text`` made safe (:func:`plain`), its runs of spaces collapsed, cut to ``width`` with an ellipsis."""
    if text is None:
        return ""
    line = " ".join(plain(text).split())
    return line if len(line) <= width else line[: width - 1] + "…"


def _score(value: Any) -> str:
    return "" if value is None else f"{value:.4g}" if isinstance(value, float) else plain(value)


def _knobs(knobs: dict[str, Any]) -> str:
    knobs = dict(knobs)
    parts = []
    if "budget_limit" in knobs:
        used = knobs.pop("budget_used", None)
        unit = knobs.pop("budget_unit", "")
        limit = knobs.pop("budget_limit")
        parts.append(f"budget {'?' if used is None else _score(used)}/{_score(limit)} {plain(unit)}".rstrip())
    parts.extend(f"{plain(k)}={_score(v) if isinstance(v, float) else plain(v)}" for k, v in knobs.items())
    return " ".join(parts)


def _meta(meta: Any, width: int = 40) -> str:
    """Every captured metadata key of a candidate, ``key=value``, each value cut to ``width``."""
    if not isinstance(meta, dict):
        return ""
    return " ".join(f"{_short(k, width)}={_short(v, width)}" for k, v in meta.items())


def _stage_details(s: Stage) -> list[Text]:
    """What a stage ran against (filter, collection, model) and the error it ended with, one line each."""
    lines = []
    ran = [
        f"{label} {_short(value, 120)}"
        for value, label in ((s.filter, "filter"), (s.collection, "collection"), (s.model, "model"))
        if value is not None
    ]
    if ran:
        lines.append(Text("  " + " · ".join(ran), style="dim"))
    if s.error:
        lines.append(Text(f"  error: {_short(s.error, 200)}", style="red"))
    return lines


def _hop_text(hop: Hop | QueryHop | dict[str, Any]) -> str:
    text, sha = (hop.get("text"), hop.get("sha256")) if isinstance(hop, dict) else (hop.text, hop.sha256)
    if isinstance(text, str) and text and not text.strip():
        return f"(whitespace only, {len(text)} chars)"  # collapsed, it would read as an empty query
    if text is not None:
        return f'"{_short(text, 80)}"'
    if sha:
        return f"(text not captured, sha256 {plain(str(sha)[:12])}…)"
    return "(not captured)"


def _num(value: Any) -> str:
    """A count or number from the manifest (the reader can hand over anything: shown safely)."""
    return "" if value is None else plain(value)


def _heading(title: str, rest: str = "", newline: bool = True) -> Text:
    return Text.assemble("\n" if newline else "", (title, "bold"), rest)


def show(console: Console, m: Manifest, limit: int = 10, max_stages: int = 20, settings: InsightSettings | None = None) -> None:
    """The manifest: hops, stages with counts, candidates, exclusions, citations, coverage, fidelity,
    sampling, then the story: the findings and the insights that need no eye, each with its evidence
    (``settings``: the date key and author the insights read).

    ``limit`` caps the rows per table, ``max_stages`` the hops, stage rows and per-stage tables shown
    (a batch trace can hold thousands): every cut is announced, and ``--all``/``--json`` show everything."""
    run_status = _header(console, m)
    _hops(console, m.query_hops, max_stages)
    _stage_table(console, m.stages, max_stages, run_status)
    _stage_rows(console, m, limit, max_stages)
    cited_text = ", ".join(plain(c) for c in m.cited) if m.cited else "(nothing recorded)"
    console.print(_heading("Cited", f": {cited_text}"))
    cov = m.coverage
    console.print(_heading("Coverage", f": {plain(cov.statement)}", newline=False))
    claims = "  ".join(("✓ " if c.supported else "✗ ") + plain(c.claim) for c in cov.claims)
    console.print(Text(f"  claims: {claims}", style="dim"))
    fidelity(console, m.fidelity, limit=max_stages * 5)
    console.print(_heading("Sampling", f": {plain(m.sampling.statement)}", newline=False))
    if m.findings:
        console.print(_heading("Findings", ":", newline=False))
        for f in m.findings[:max_stages]:
            console.print(Text(f"  • {plain(f)}", style="yellow"))
        if len(m.findings) > max_stages:
            console.print(Text(f"  … {len(m.findings) - max_stages} more findings (--all shows every one)", style="dim"))
    _insights(console, insights(m, settings), checked(settings))


def _insights(console: Console, found: list[dict[str, Any]], looked_for: str) -> None:
    """Each insight's one line and its evidence; or what was looked for, when none was found."""
    if not found:
        console.print(_heading("Insights", f": none found (looked for {plain(looked_for)})", newline=False))
        return
    console.print(_heading("Insights", ":", newline=False))
    for i in found:
        console.print(Text(f"  • {plain(i['insight'])}: {plain(i['said'])}", style="yellow"))
        if i.get("evidence"):
            console.print(Text(f"    {plain(i['evidence'])}", style="yellow"))


def _header(console: Console, m: Manifest) -> str:
    """The title and the source line; returns the run status as the stage heading says it."""
    pipe = m.pipeline
    console.print(Text.assemble(("ragtrail manifest ", "bold"), ("trace ", "dim"), (plain(m.trace_id), "bold cyan")))
    sub = f"source {plain(m.source)} · {_num(m.span_count)} spans"
    run_status = f"run {plain(m.run_status)}" if m.run_status else ""
    if pipe:
        sub += f" · pipeline {plain(pipe.component)} {plain(pipe.status)}"
        sub += f" ({run_status})" if run_status else ""
        sub += f" {pipe.duration_ms:.1f} ms"
    console.print(Text(sub, style="dim"))
    return run_status


def _hops(console: Console, hops: list[QueryHop], max_stages: int) -> None:
    console.print(_heading("Query hops", " (raw → rewritten → what hit the index)"))
    for hop in hops[:max_stages]:
        origin = plain(hop.transform) if hop.parent_hop is None else f"{plain(hop.transform)} of hop {_num(hop.parent_hop)}"
        mark = (" → index" if hop.hit_index else "") + _cut_on_the_way(hop)
        which = f"q{hop.question} " if hop.question is not None else ""
        console.print(Text.assemble(f"  {which}hop {_num(hop.hop)}  ", (origin, "cyan"), f"  {_hop_text(hop)}{mark}"))
        if hop.used_by:
            console.print(Text(f"         used by {', '.join(plain(u) for u in hop.used_by)}", style="dim"))
    if len(hops) > max_stages:
        console.print(Text(f"  … {len(hops) - max_stages} more hops (--all shows every one)", style="dim"))


def _cut_on_the_way(hop: QueryHop) -> str:
    """A hop whose text arrived shorter than the length its producer stamped was cut on the way (the
    SDK's attribute limit, a formatter, a Collector): said where the text is printed."""
    if isinstance(hop.text, str) and isinstance(hop.chars, int) and not isinstance(hop.chars, bool) and len(hop.text) < hop.chars:
        return f"  [cut on the way: {len(hop.text)} of {hop.chars} chars arrived]"
    return ""


def _stage_table(console: Console, stages: list[Stage], max_stages: int, run_status: str) -> None:
    table = Table(title=None, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for col in ("#", "stage", "component", "status", "in", "out", "excl", "hop", "knobs"):
        table.add_column(col, justify="right" if col in ("#", "in", "out", "excl", "hop") else "left")
    for i, s in enumerate(stages[: max_stages * 5]):
        status = plain(s.status or "")
        style = {"degraded": "yellow", "failed": "red", "empty": "magenta"}.get(status, "")
        status_text = Text(status + (f" ({plain(s.failure_class)})" if s.failure_class else ""), style=style)
        table.add_row(
            Text(str(i)),
            Text(plain(s.kind)),
            Text(_short(s.component, 40)),
            status_text,
            Text(_num(s.n_in)),
            Text(_num(s.n_out)),
            Text(_num(s.excluded_count)),
            Text("" if not s.query else _num(s.query.hop)),
            Text(_knobs(s.knobs)),
        )
    console.print(_heading("Stages", f" ({run_status})" if run_status else ""))
    console.print(table)
    if len(stages) > max_stages * 5:
        console.print(Text(f"  … {len(stages) - max_stages * 5} more stages (--all shows every one)", style="dim"))


def _stage_rows(console: Console, m: Manifest, limit: int, max_stages: int) -> None:
    """Each stage's candidate and exclusion tables, up to ``max_stages`` stages of ``limit`` rows."""
    cited = set(m.cited)
    damaged = m.fidelity.damaged_rows()
    shown = 0
    for i, s in enumerate(m.stages):
        details = _stage_details(s)
        if not s.candidates and not s.excluded and not details:
            continue
        shown += 1
        if shown > max_stages:
            console.print(
                Text(
                    f"\n… candidates of {sum(1 for x in m.stages[i:] if x.candidates or x.excluded)} more stages not shown (--all shows every one)",
                    style="dim",
                )
            )
            break
        console.print(
            Text.assemble(
                "\n",
                (f"{i} {plain(s.kind)}", "bold"),
                f" {plain(s.component)}  ",
                (f"in {_num(s.n_in)} → out {_num(s.n_out)}, excluded {_num(s.excluded_count)}", "dim"),
            )
        )
        for line in details:
            console.print(line)
        marks = {cand: why for (span, cand), why in damaged.items() if span == s.span_id}
        if s.candidates:
            _candidates(console, s.candidates, cited, limit, marks)
        if s.excluded:
            _exclusions(console, s.excluded, limit, marks)


def _damage(marks: dict[str, str], row_id: str) -> Text:
    """The row's damage as verify named it (red), or nothing."""
    why = marks.get(row_id)
    return Text(f" DAMAGED ({plain(why)})", style="bold red") if why else Text("")


def _candidates(console: Console, rows: list[Row], cited: set[str], limit: int, marks: dict[str, str]) -> None:
    t = Table(box=box.SIMPLE, show_edge=False, pad_edge=False)
    for col in ("rank", "id", "score", "hop", "meta", ""):
        t.add_column(col, justify="right" if col in ("rank", "score", "hop") else "left")
    for c in rows[:limit]:
        flag = "cited" if c.id in cited else ""
        if c.transform_rule:
            flag = (flag + " " if flag else "") + plain(c.transform_rule)
        flags = Text.assemble(Text(flag, style="green"), _damage(marks, c.id))
        t.add_row(Text(_num(c.rank)), Text(plain(c.id)), Text(_score(c.score)), Text(_num(c.hop)), Text(_meta(c.meta)), flags)
    console.print(t)
    if len(rows) > limit:
        console.print(Text(f"  … {len(rows) - limit} more candidates (--all shows every one)", style="dim"))


def _exclusions(console: Console, rows: list[Row], limit: int, marks: dict[str, str]) -> None:
    t = Table(box=box.SIMPLE, show_edge=False, pad_edge=False, title_justify="left")
    for col in ("excluded", "input rank", "cut"):
        t.add_column(col, justify="right" if col == "input rank" else "left")
    for e in rows[:limit]:
        reason_style = "red" if e.reason == "unexplained" else "yellow"
        detail = f" ({_short(e.detail, 60)})" if e.detail else ""
        t.add_row(Text(plain(e.id)), Text(_num(e.rank)), Text.assemble((plain(e.reason), reason_style), detail, _damage(marks, e.id)))
    console.print(t)
    if len(rows) > limit:
        console.print(Text(f"  … {len(rows) - limit} more exclusions (--all shows every one)", style="dim"))


def fidelity(console: Console, f: Fidelity, limit: int = 100) -> None:
    """One line of verdict counts, then one line per alarm."""
    dropped = (
        "unknown (source drops them)" if f.dropped_events is None else f"{_num(f.dropped_events)} events, {_num(f.dropped_attributes)} attributes"
    )
    verdict = Text("faithful", style="green") if not f.alarms else Text(f"{len(f.alarms)} ALARMS", style="bold red")
    line = Text.assemble(
        ("Fidelity", "bold"),
        ": ",
        verdict,
        f" · receipts intact {_num(f.intact)}, changed_cited {_num(f.changed_cited)}, "
        f"changed_uncited {_num(f.changed_uncited)}, unverifiable {_num(f.unverifiable)}, "
        f"not captured {_num(f.not_captured)} · missing events {_num(f.missing_events)}, "
        f"missing spans {_num(f.missing_spans)} · dropped {dropped}" + (" · backend PARTIAL" if f.partial else ""),
    )
    console.print(line)
    for a in f.alarms[:limit]:
        console.print(Text(f"  {alarm_line(a)}", style="red"))
    if len(f.alarms) > limit:
        console.print(Text(f"  … {len(f.alarms) - limit} more alarms (ragtrail verify lists every one)", style="red"))
    for note in f.notes:
        console.print(Text(f"  note: {plain(note)}", style="dim"))


def alarm_line(a: Alarm | Mapping[str, Any]) -> str:
    """One alarm as one line of plain text (trace data escaped: print it as a ``Text``, never as markup).
    Takes the alarm or its JSON (``ragtrail verify`` prints alarms of either)."""
    alarm = a if isinstance(a, Alarm) else Alarm(**a)
    return plain(alarm.line())


def diff(console: Console, d: dict[str, Any], limit: int = 10) -> None:
    console.print(Text.assemble(("ragtrail diff ", "bold"), ("A ", "dim"), (plain(d["a"]), "cyan"), ("  B ", "dim"), (plain(d["b"]), "cyan")))
    for h in d["query_hops"]:
        a = h["a"] or {}
        b = h["b"] or {}
        console.print(
            Text(
                f"  query hop {_num(h['hop'])}: A {plain(a.get('transform'))} {_hop_text(a) if a else '(none)'}  "
                f"B {plain(b.get('transform'))} {_hop_text(b) if b else '(none)'}",
                style="yellow",
            )
        )
    for s in d["stages"]:
        name = f"{plain(s['kind'])} {plain(s['component'])}"
        if s["same"]:
            console.print(Text.assemble("  ", ("=", "green"), f" {name}: same"))
            continue
        console.print(Text.assemble("  ", ("≠", "yellow"), " ", (name, "bold"), f" (only in {plain(s['only_in'])})" if s["only_in"] else ""))
        if s["query_changed"]:
            console.print(Text(f"      query: A {_short(s.get('query_a'), 50)!r} → B {_short(s.get('query_b'), 50)!r}"))
        for c in s["added"][:limit]:
            console.print(Text(f"      + {plain(c['id'])} (rank {_num(c['rank'])}, score {_score(c['score'])})", style="green"))
        for c in s["removed"][:limit]:
            console.print(Text(f"      - {plain(c['id'])} (was rank {_num(c['rank'])}, score {_score(c['score'])})", style="red"))
        for c in sorted(s["moved"], key=lambda c: -abs(c["delta"] or 0))[:limit]:
            console.print(
                Text(
                    f"      ~ {plain(c['id'])} rank {_num(c['rank_a'])} → {_num(c['rank_b'])} ({c['delta']:+d})"
                    if c["delta"] is not None
                    else f"      ~ {plain(c['id'])} moved"
                )
            )
        for c in s["content_changed"][:limit]:
            rules = f" (rule {plain(c['rule_a'] or '-')} → {plain(c['rule_b'] or '-')})" if (c["rule_a"] or c["rule_b"]) else ""
            console.print(Text(f"      * {plain(c['id'])} content {plain(str(c['sha256_a'])[:12])}… → {plain(str(c['sha256_b'])[:12])}…{rules}"))
        for e in s["exclusions_new"][:limit]:
            console.print(Text(f"      excluded in B only: {plain(e['id'])} {plain(e['reason'])} {_short(e['detail'], 40)}"))
        for e in s["exclusions_gone"][:limit]:
            console.print(Text(f"      excluded in A only: {plain(e['id'])} {plain(e['reason'])} {_short(e['detail'], 40)}"))
        for e in s["exclusions_changed"][:limit]:
            console.print(Text(f"      exclusion of {plain(e['id'])}: {plain(e['reason_a'])} → {plain(e['reason_b'])}"))
        hidden = sum(max(0, len(s[k]) - limit) for k in ("added", "removed", "moved", "content_changed", "exclusions_new", "exclusions_gone"))
        if hidden:
            console.print(Text(f"      … {hidden} more differences (--json shows all)", style="dim"))
    if d["cited_a"] != d["cited_b"]:
        console.print(Text(f"  cited: A {plain(d['cited_a'])}  B {plain(d['cited_b'])}"))
    console.print(Text.assemble(("verdict: ", "bold"), (plain(d["verdict"]), "green" if d["same_evidence"] else "yellow")))
