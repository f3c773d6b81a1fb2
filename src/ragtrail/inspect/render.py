"""Terminal views of a manifest, a verification and a diff (rich tables, plain text when piped).

Only presentation lives here: every number shown comes from the manifest dict, so ``--json`` and
the terminal can never disagree.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

_SHOW_META = ("updated_at", "version", "status")


def _short(text: Any, width: int = 72) -> str:
    if text is None:
        return ""
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _score(value: Any) -> str:
    return "" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


def _knobs(knobs: dict[str, Any]) -> str:
    knobs = dict(knobs)
    parts = []
    if "budget_limit" in knobs:
        used = knobs.pop("budget_used", None)
        unit = knobs.pop("budget_unit", "")
        limit = knobs.pop("budget_limit")
        parts.append(f"budget {'?' if used is None else _score(used)}/{_score(limit)} {unit}".rstrip())
    parts.extend(f"{k}={_score(v) if isinstance(v, float) else v}" for k, v in knobs.items())
    return " ".join(parts)


def _hop_text(hop: dict[str, Any]) -> str:
    if hop.get("text") is not None:
        return f'"{_short(hop["text"], 80)}"'
    if hop.get("sha256"):
        return f"(text not captured, sha256 {str(hop['sha256'])[:12]}…)"
    return "(not captured)"


def show(console: Console, m: dict[str, Any], limit: int = 10, max_stages: int = 20) -> None:
    """The manifest: hops, stages with counts, candidates, exclusions, citations, coverage, fidelity, sampling.

    ``limit`` caps the rows per table, ``max_stages`` the hops, stage rows and per-stage tables shown
    (a batch trace can hold thousands): every cut is announced, and ``--all``/``--json`` show everything."""
    pipe = m.get("pipeline")
    head = Text.assemble(("ragtrail manifest ", "bold"), ("trace ", "dim"), (m["trace_id"], "bold cyan"))
    console.print(head)
    sub = f"source {m['source']} · {m['span_count']} spans"
    if pipe:
        sub += f" · pipeline {pipe['component']} {pipe['status']} {pipe['duration_ms']:.1f} ms"
    console.print(sub, style="dim")

    console.print("\n[bold]Query hops[/bold] (raw → rewritten → what hit the index)")
    for hop in m["query_hops"][:max_stages]:
        origin = hop["transform"] if hop.get("parent_hop") is None else f"{hop['transform']} of hop {hop['parent_hop']}"
        mark = " → index" if hop.get("hit_index") else ""
        console.print(f"  hop {hop['hop']}  [cyan]{origin}[/cyan]  {_hop_text(hop)}{mark}", highlight=False)
        if hop["used_by"]:
            console.print(f"         used by {', '.join(hop['used_by'])}", style="dim", highlight=False)

    table = Table(title=None, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for col in ("#", "stage", "component", "status", "in", "out", "excl", "hop", "knobs"):
        table.add_column(col, justify="right" if col in ("#", "in", "out", "excl", "hop") else "left")
    if len(m["query_hops"]) > max_stages:
        console.print(f"  … {len(m['query_hops']) - max_stages} more hops (--all shows every one)", style="dim")
    for i, s in enumerate(m["stages"][: max_stages * 5]):
        status = s["status"] or ""
        style = {"degraded": "yellow", "failed": "red", "empty": "magenta"}.get(status, "")
        status_text = Text(status + (f" ({s['failure_class']})" if s.get("failure_class") else ""), style=style)
        table.add_row(str(i), s["kind"], _short(s["component"], 40), status_text, str(s["in"]), str(s["out"]),
                      str(s["excluded_count"]), "" if not s["query"] else str(s["query"]["hop"]), _knobs(s["knobs"]))
    console.print("\n[bold]Stages[/bold]")
    console.print(table)
    if len(m["stages"]) > max_stages * 5:
        console.print(f"  … {len(m['stages']) - max_stages * 5} more stages (--all shows every one)", style="dim")

    cited = set(m["cited"])
    shown = 0
    for i, s in enumerate(m["stages"]):
        if not s["candidates"] and not s["excluded"]:
            continue
        shown += 1
        if shown > max_stages:
            console.print(f"\n… candidates of {sum(1 for x in m['stages'][i:] if x['candidates'] or x['excluded'])} "
                          "more stages not shown (--all shows every one)", style="dim")
            break
        console.print(f"\n[bold]{i} {s['kind']}[/bold] {s['component']}  "
                      f"[dim]in {s['in']} → out {s['out']}, excluded {s['excluded_count']}[/dim]", highlight=False)
        if s["candidates"]:
            t = Table(box=box.SIMPLE, show_edge=False, pad_edge=False)
            for col in ("rank", "id", "score", "hop", "meta", ""):
                t.add_column(col, justify="right" if col in ("rank", "score", "hop") else "left")
            for c in s["candidates"][:limit]:
                meta = " ".join(f"{k}={v}" for k, v in (c.get("meta") or {}).items() if k in _SHOW_META)
                flag = "cited" if c["id"] in cited else ""
                if c.get("transform_rule"):
                    flag = (flag + " " if flag else "") + c["transform_rule"]
                t.add_row(str(c["rank"]), c["id"], _score(c["score"]), "" if c["hop"] is None else str(c["hop"]),
                          meta, Text(flag, style="green"))
            console.print(t)
            if len(s["candidates"]) > limit:
                console.print(f"  … {len(s['candidates']) - limit} more candidates (--all shows every one)", style="dim")
        if s["excluded"]:
            t = Table(box=box.SIMPLE, show_edge=False, pad_edge=False, title_justify="left")
            for col in ("excluded", "rank", "reason", "detail"):
                t.add_column(col)
            for e in s["excluded"][:limit]:
                reason_style = "red" if e.get("reason") == "unexplained" else "yellow"
                t.add_row(e["id"], "" if e["rank"] is None else str(e["rank"]), Text(str(e.get("reason")), style=reason_style),
                          _short(e.get("detail"), 60))
            console.print(t)
            if len(s["excluded"]) > limit:
                console.print(f"  … {len(s['excluded']) - limit} more exclusions (--all shows every one)", style="dim")

    console.print(f"\n[bold]Cited[/bold]: {', '.join(m['cited']) if m['cited'] else '(nothing recorded)'}", highlight=False)
    cov = m["coverage"]
    console.print(f"[bold]Coverage[/bold]: {cov['statement']}", highlight=False)
    claims = "  ".join(("✓ " if c["supported"] else "✗ ") + c["claim"] for c in cov["claims"])
    console.print(f"  claims: {claims}", style="dim", highlight=False)
    fidelity(console, m["fidelity"], limit=max_stages * 5)
    console.print(f"[bold]Sampling[/bold]: {m['sampling']['statement']}", highlight=False)
    if m["findings"]:
        console.print("[bold]Findings[/bold]:")
        for f in m["findings"][:max_stages]:
            console.print(f"  • {f}", style="yellow", highlight=False)
        if len(m["findings"]) > max_stages:
            console.print(f"  … {len(m['findings']) - max_stages} more findings (--all shows every one)", style="dim")


def fidelity(console: Console, f: dict[str, Any], limit: int = 100) -> None:
    """One line of verdict counts, then one line per alarm."""
    dropped = ("unknown (source drops them)" if f["dropped_events"] is None
               else f"{f['dropped_events']} events, {f['dropped_attributes']} attributes")
    verdict = Text("faithful", style="green") if not f["alarms"] else Text(f"{len(f['alarms'])} ALARMS", style="bold red")
    line = Text.assemble(("Fidelity", "bold"), ": ", verdict,
                         f" · receipts intact {f['intact']}, changed_cited {f['changed_cited']}, "
                         f"changed_uncited {f['changed_uncited']}, unverifiable {f['unverifiable']}, "
                         f"not captured {f['not_captured']} · missing events {f['missing_events']}, "
                         f"missing spans {f['missing_spans']} · dropped {dropped}"
                         + (" · backend PARTIAL" if f["partial"] else ""))
    console.print(line, highlight=False)
    for a in f["alarms"][:limit]:
        console.print(f"  {alarm_line(a)}", style="red", highlight=False)
    if len(f["alarms"]) > limit:
        console.print(f"  … {len(f['alarms']) - limit} more alarms (ragtrail verify lists every one)", style="red")
    for note in f["notes"]:
        console.print(f"  note: {note}", style="dim", highlight=False)


def alarm_line(a: dict[str, Any]) -> str:
    cand = a["candidate"] or "-"
    detail = f" ({a['detail']})" if a.get("detail") else ""
    return (f"ALARM trace={a['trace_id']} span={a['span_id']} stage={a['stage'] or '-'} candidate={cand} "
            f"field={a['field']}: {a['problem']}{detail}")


def diff(console: Console, d: dict[str, Any], limit: int = 10) -> None:
    console.print(Text.assemble(("ragtrail diff ", "bold"), ("A ", "dim"), (d["a"], "cyan"), ("  B ", "dim"), (d["b"], "cyan")))
    for h in d["query_hops"]:
        a = h["a"] or {}
        b = h["b"] or {}
        console.print(f"  query hop {h['hop']}: A {a.get('transform')} {_hop_text(a) if a else '(none)'}  "
                      f"B {b.get('transform')} {_hop_text(b) if b else '(none)'}", style="yellow", highlight=False)
    for s in d["stages"]:
        name = f"{s['kind']} {s['component']}"
        if s["same"]:
            console.print(f"  [green]=[/green] {name}: same", highlight=False)
            continue
        console.print(f"  [yellow]≠[/yellow] [bold]{name}[/bold]" + (f" (only in {s['only_in']})" if s["only_in"] else ""),
                      highlight=False)
        if s["query_changed"]:
            console.print(f"      query: A {_short(s.get('query_a'), 50)!r} → B {_short(s.get('query_b'), 50)!r}", highlight=False)
        for c in s["added"][:limit]:
            console.print(f"      + {c['id']} (rank {c['rank']}, score {_score(c['score'])})", style="green", highlight=False)
        for c in s["removed"][:limit]:
            console.print(f"      - {c['id']} (was rank {c['rank']}, score {_score(c['score'])})", style="red", highlight=False)
        for c in sorted(s["moved"], key=lambda c: -abs(c["delta"] or 0))[:limit]:
            console.print(f"      ~ {c['id']} rank {c['rank_a']} → {c['rank_b']} ({c['delta']:+d})"
                          if c["delta"] is not None else f"      ~ {c['id']} moved", highlight=False)
        for c in s["content_changed"][:limit]:
            rules = f" (rule {c['rule_a'] or '-'} → {c['rule_b'] or '-'})" if (c["rule_a"] or c["rule_b"]) else ""
            console.print(f"      * {c['id']} content {str(c['sha256_a'])[:12]}… → {str(c['sha256_b'])[:12]}…{rules}",
                          highlight=False)
        for e in s["exclusions_new"][:limit]:
            console.print(f"      excluded in B only: {e['id']} {e['reason']} {_short(e['detail'], 40)}", highlight=False)
        for e in s["exclusions_gone"][:limit]:
            console.print(f"      excluded in A only: {e['id']} {e['reason']} {_short(e['detail'], 40)}", highlight=False)
        for e in s["exclusions_changed"][:limit]:
            console.print(f"      exclusion of {e['id']}: {e['reason_a']} → {e['reason_b']}", highlight=False)
        hidden = sum(max(0, len(s[k]) - limit) for k in ("added", "removed", "moved", "content_changed", "exclusions_new", "exclusions_gone"))
        if hidden:
            console.print(f"      … {hidden} more differences (--json shows all)", style="dim")
    if d["cited_a"] != d["cited_b"]:
        console.print(f"  cited: A {d['cited_a']}  B {d['cited_b']}", highlight=False)
    console.print(Text.assemble(("verdict: ", "bold"), (d["verdict"], "green" if d["same_evidence"] else "yellow")))
