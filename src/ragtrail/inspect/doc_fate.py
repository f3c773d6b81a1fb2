"""One document's fate, stage by stage: search results → reranker output → post-budget sources → answer.

Seed 003's rule: every suspect case must be one chain, so that where the evidence died is visible.
For one id the chain says, at each stage, whether the document was handed on (rank, score), excluded
(reason, detail) or never seen there, when its content receipt changed (and under which rule), and
whether the answer cited it. A document another replaced (a child chunk by its parent, a leaf by
the node it merged into: rule ``merge@1``) follows its replacement: "merged into X, which reached
the context".
"""

from __future__ import annotations

from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.contract.columns import replaced_ids

from .coverage import CONTEXT_UNKNOWN
from .errors import TraceNotFound
from .manifest_model import Manifest, Stage


def _in_run_order(stages: list[Stage]) -> list[tuple[int, Stage]]:
    """The stages (with their manifest index) in the order their outputs were made: by end time, so
    that inner stages come before the outer stage that ran them (it starts first, but hands on
    last); the manifest's order on a tie, or when a stage carries no time."""
    indexed = list(enumerate(stages))
    if any(not s.start_ns for s in stages):
        return indexed
    return sorted(indexed, key=lambda p: (p[1].start_ns + round(p[1].duration_ms * 1e6), p[0]))


def fate(manifest: Manifest, doc_id: str) -> dict[str, Any]:
    """``{"id", "steps": [...], "cited", "in_context", "verdict"}`` (``in_context`` is ``None`` when no
    stage defined what reached the model); raises TraceNotFound when no stage saw the id."""
    steps: list[dict[str, Any]] = []
    last_sha: str | None = None
    last_seen: dict[str, Any] | None = None
    for i, s in _in_run_order(manifest.stages):
        row = next((c for c in s.candidates if c.id == doc_id), None)
        ex = next((e for e in s.excluded if e.id == doc_id), None)
        step: dict[str, Any] = {"index": i, "stage": s.label, "kind": s.kind, "status": s.status}
        if row is not None:
            step.update(state="kept", rank=row.rank, score=row.score, of=s.n_out)
            sha = row.sha256
            if sha and last_sha and sha != last_sha:
                step["content_changed"] = {"from": last_sha, "to": sha, "rule": row.transform_rule}
            last_sha = sha or last_sha
            last_seen = step
        elif ex is not None:
            step.update(state="excluded", rank=ex.rank, reason=ex.reason, detail=ex.detail)
            last_seen = step
        else:
            if last_seen is None or s.kind in (sc.KIND_QUERY_TRANSFORM,):
                continue  # before it was found, or a stage that handles queries only
            step.update(state="absent")
        if s.fallback:
            step["fallback"] = s.fallback
        steps.append(step)
    if not any(st["state"] != "absent" for st in steps):
        raise TraceNotFound(
            f"document {doc_id!r} appears in no stage of trace {manifest.trace_id}",
            "check the id (ragtrail show TRACE lists every candidate with --all)",
        )
    cited = doc_id in manifest.cited
    in_context = None if manifest.in_context is None else doc_id in manifest.in_context
    last = next(st for st in reversed(steps) if st["state"] != "absent")
    merged_into = _replacement(manifest.stages[last["index"]], doc_id) if last["state"] == "excluded" else None
    if cited:
        verdict = "cited by the answer"
    elif last["state"] == "kept" and in_context is None:
        verdict = f"last handed on by {last['stage']}; {CONTEXT_UNKNOWN}"
    elif in_context:
        verdict = "reached the context, not cited"
    elif merged_into is not None:
        last["merged_into"] = merged_into
        verdict = f"merged into {merged_into}, {_replacement_fate(manifest, merged_into)}"
    elif last["state"] == "excluded":
        verdict = f"excluded at {last['stage']} ({last.get('reason')})"
    else:
        verdict = f"last seen at {last['stage']}; did not reach the context"
    out = {"trace_id": manifest.trace_id, "id": doc_id, "steps": steps, "cited": cited, "in_context": in_context, "verdict": verdict}
    if merged_into is not None:
        out["merged_into"] = merged_into
    return out


def _replacement(stage: Stage, doc_id: str) -> str | None:
    """The output of ``stage`` that replaced ``doc_id`` (rule ``merge@1``, its ``derived_from`` naming
    the id: a parent for its chunk, a merged node for its leaf), if any."""
    return next((c.id for c in stage.candidates if c.transform_rule == sc.RULE_MERGE and doc_id in replaced_ids(c.derived_from)), None)


def _replacement_fate(manifest: Manifest, replacement: str) -> str:
    """What became of the document that replaced one: its text carries the replaced one's."""
    if replacement in manifest.cited:
        return "which the answer cited"
    if manifest.in_context is None:
        return f"which was handed on; {CONTEXT_UNKNOWN}"
    return "which reached the context" if replacement in manifest.in_context else "which did not reach the context"


def _rank(rank: Any) -> str:
    return "unknown" if rank is None else str(rank)


def render(console: Any, f: dict[str, Any]) -> None:
    """The chain in a terminal; every piece of trace data through :mod:`ragtrail.inspect.safe`."""
    from rich.text import Text

    from .safe import plain

    console.print(Text.assemble(("document ", "bold"), (plain(f["id"]), "cyan"), "  in trace ", plain(f["trace_id"])))
    for st in f["steps"]:
        head = f"  {st['index']:>2} {plain(st['stage'])}"
        if st["state"] == "kept":
            score = "" if st["score"] is None else f", score {st['score']:.4g}"
            body = f"kept, output rank {st['rank']} of {st['of']}{score}"
            style = "green"
        elif st["state"] == "excluded":
            body = f"EXCLUDED from input rank {_rank(st.get('rank'))}, cut: {plain(st.get('reason'))}" + (
                f" ({plain(st['detail'])})" if st.get("detail") else ""
            )
            style = "yellow"
        else:
            body, style = "not present", "dim"
        if st.get("status") not in (None, sc.STATUS_OK):
            body += f"  [stage {plain(st['status'])}" + (f", fallback {plain(st['fallback'])}" if st.get("fallback") else "") + "]"
        if st.get("content_changed"):
            c = st["content_changed"]
            body += f"  content {plain(c['from'])[:12]}… → {plain(c['to'])[:12]}… (rule {plain(c['rule'] or 'none')})"
        console.print(Text(head + "  ") + Text(body, style=style))
    console.print(Text.assemble(("fate: ", "bold"), plain(f["verdict"])))
