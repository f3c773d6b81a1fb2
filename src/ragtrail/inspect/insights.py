"""Named findings that need no eye: each one says what it saw and the evidence it saw it in.

* ``stale_citation``: a cited document is older (by ``meta.<date key>``) than an uncited candidate it
  outranked at the same stage (seed 000: "current doc retrieved, ranked #2, outranked by an older version").
* ``echo``: a candidate's content receipt equals a query hop's receipt, so the "evidence" is the question
  itself (seed 001: "the raw top hit is frequently the asking message itself").
* ``self_citation``: the answer cited content the system generated itself (``meta.<author key>`` equal to
  the configured author).
* ``silent_fallback``: a reranking stage that claims scores of its own (the recorder's ``rerank_is_identity``
  finding) handed on its input order and scores unchanged and said nothing about it (seed 003: "silent
  fallback disguised missing input as the order the model ranked"). A stage that gives no scores of its own
  (an MMR pick, lost-in-the-middle) keeping the top of its input is no such evidence.

Nothing here guesses: a date that does not parse, or a metadata key the trace does not carry, yields no
finding (and :func:`insights` says which keys were never seen, so "none found" is not read as "checked").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ragtrail.contract import semconv as sc

from .manifest_model import Manifest, Row

STALE_CITATION = "stale_citation"
ECHO = "echo"
SELF_CITATION = "self_citation"
SILENT_FALLBACK = "silent_fallback"
INSIGHTS = (STALE_CITATION, ECHO, SELF_CITATION, SILENT_FALLBACK)

# fewer candidates than this and "same order as the input" is a coincidence as often as not
_MIN_ORDER_EVIDENCE = 3


@dataclass(frozen=True)
class InsightSettings:
    """What the insights read: the metadata key holding a document's date, and who counts as "self"."""

    date_key: str = "updated_at"
    author_key: str | None = None
    author_value: str | None = None


def _when(value: Any) -> datetime | float | None:
    """A comparable date from an ISO string or epoch seconds; ``None`` when it is neither (never guessed)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    return None


def _earlier(a: datetime | float, b: datetime | float) -> bool:
    """``a < b`` when both are dates or both are epoch seconds; a date and a number never compare."""
    if isinstance(a, datetime) and isinstance(b, datetime):
        return a < b
    if isinstance(a, float) and isinstance(b, float):
        return a < b
    return False


def _rank(row: Row) -> int:
    return row.rank if row.rank is not None else 0


def _stale(c: Row, u: Row, date_key: str, label: str) -> dict[str, Any]:
    cited_date, newer_date = (c.meta or {})[date_key], (u.meta or {})[date_key]
    return {
        "insight": STALE_CITATION,
        "stage": label,
        "stages": [label],
        "cited": c.id,
        "cited_date": cited_date,
        "cited_rank": c.rank,
        "newer": u.id,
        "newer_date": newer_date,
        "newer_rank": u.rank,
        "said": (
            f"cited {c.id} ({date_key} {cited_date}, rank {c.rank}) outranked "
            f"the newer {u.id} ({date_key} {newer_date}, rank {u.rank}) "
            f"at {label}, which was not cited"
        ),
    }


def _furthest(manifest: Manifest, rows: dict[str, Row], date_key: str) -> str:
    """Of the newer candidates (by id), the newest (the current version), and of those the one
    handed on by the latest stage (the first of them on a tie)."""
    when = {ident: _when((row.meta or {}).get(date_key)) for ident, row in rows.items()}
    ids = [i for i in rows if not any(_earlier(w, v) for v in when.values() if (w := when[i]) is not None and v is not None)]
    last = {ident: max((i for i, s in enumerate(manifest.stages) if any(c.id == ident for c in s.candidates)), default=-1) for ident in ids}
    return max(ids, key=lambda ident: (last[ident], -ids.index(ident)))


def _fate_of(manifest: Manifest, ident: str) -> dict[str, Any]:
    """Where the newer candidate got to: the last stage that handed it on (and its output rank), and
    the stage that then cut it, with the reason and detail it gave (``None`` when none did)."""
    kept = [(s, c) for s in manifest.stages for c in s.candidates if c.id == ident and s.kind not in (sc.KIND_CITE, sc.KIND_GENERATE)]
    stage, row = kept[-1]
    after = manifest.stages[manifest.stages.index(stage) + 1 :]
    cut = next(((s, e) for s in after for e in s.excluded if e.id == ident), None)
    out: dict[str, Any] = {"furthest": stage.label, "furthest_rank": row.rank}
    out.update(cut_at=None, cut_input_rank=None, cut_reason=None, cut_detail=None)
    if cut is not None:
        out.update(cut_at=cut[0].label, cut_input_rank=cut[1].rank, cut_reason=cut[1].reason, cut_detail=cut[1].detail)
    return out


def _evidence(f: dict[str, Any]) -> str:
    """One line: how far the newer candidate got and what removed it."""
    went = f"{f['newer']} got as far as {f['furthest']} (output rank {f['furthest_rank']})"
    if f["cut_at"] is None:
        return f"{went}; no stage recorded cutting it"
    detail = f" ({f['cut_detail']})" if f["cut_detail"] else ""
    return f"{went}, then was cut at {f['cut_at']} from input rank {f['cut_input_rank']}: {f['cut_reason']}{detail}"


def stale_citations(manifest: Manifest, date_key: str) -> list[dict[str, Any]]:
    """One finding per cited document: of the newer, uncited candidates it outranked at some stage,
    the newest (the current version), and of those the one that got furthest (the story is where the
    current document was lost), with the first
    stage where the cited one outranked it (``stages`` lists every stage where it did), the last
    stage that handed it on and the stage and reason that then removed it (``evidence``)."""
    cited = set(manifest.cited)
    outranked: dict[str, dict[str, list[tuple[Row, Row, str]]]] = {}
    for stage in manifest.stages:
        if stage.kind in (sc.KIND_CITE, sc.KIND_GENERATE):
            continue
        dated = [(c, _when((c.meta or {}).get(date_key))) for c in stage.candidates if isinstance(c.rank, int)]
        for c, when_c in dated:
            if c.id not in cited or when_c is None:
                continue
            newer = sorted(
                (u for u, when_u in dated if u.id not in cited and when_u is not None and _rank(c) < _rank(u) and _earlier(when_c, when_u)), key=_rank
            )
            for u in newer:
                outranked.setdefault(c.id, {}).setdefault(u.id, []).append((c, u, stage.label))
    found: list[dict[str, Any]] = []
    for by_newer in outranked.values():
        newer_id = _furthest(manifest, {ident: seen[0][1] for ident, seen in by_newer.items()}, date_key)
        seen = by_newer[newer_id]
        c, u, label = seen[0]
        finding = _stale(c, u, date_key, label)
        finding["stages"] = list(dict.fromkeys(at for _, _, at in seen))
        finding.update(_fate_of(manifest, newer_id))
        finding["evidence"] = _evidence(finding)
        found.append(finding)
    return found


def echoes(manifest: Manifest) -> list[dict[str, Any]]:
    hops = {h.sha256: h.hop for h in manifest.query_hops if h.sha256}
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for stage in manifest.stages:
        for c in stage.candidates:
            sha = c.sha256
            if sha and sha in hops and c.id not in seen:
                seen.add(c.id)
                out.append(
                    {
                        "insight": ECHO,
                        "stage": stage.label,
                        "id": c.id,
                        "rank": c.rank,
                        "hop": hops[sha],
                        "said": (
                            f"candidate {c.id} (rank {c.rank} at {stage.kind} "
                            f"{stage.component}) has the same content sha256 as query hop "
                            f"{hops[sha]}: the question came back as its own evidence"
                        ),
                    }
                )
    return out


def self_citations(manifest: Manifest, key: str, value: str) -> list[dict[str, Any]]:
    cited = set(manifest.cited)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for stage in manifest.stages:
        for c in stage.candidates:
            author = (c.meta or {}).get(key)
            if c.id in cited and author is not None and str(author) == value and c.id not in seen:
                seen.add(c.id)
                out.append(
                    {
                        "insight": SELF_CITATION,
                        "id": c.id,
                        "stage": stage.label,
                        "said": f"the answer cited {c.id}, whose {key} is {value}: content the system wrote itself",
                    }
                )
    return out


def _by_rank(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda c: (c.rank is None, c.rank))


def silent_fallbacks(manifest: Manifest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    stages = manifest.stages
    for i, stage in enumerate(stages):
        if stage.kind != sc.KIND_RERANK or stage.fallback:
            continue
        if stage.status in (sc.STATUS_DEGRADED, sc.STATUS_FAILED):
            continue  # it said so: a declared fallback is a stage status, not a silent one
        if not any(f.startswith(f"{sc.FINDING_RERANK_IS_IDENTITY}:") for f in stage.findings):
            # the recorder's evidence that the stage claimed rerank scores and handed its inputs on: a
            # stage that gives no scores of its own (an MMR pick, lost-in-the-middle) keeps the top of
            # its input by design, and that is no evidence of a fallback
            continue
        ins = {c.id for c in stage.candidates} | {e.id for e in stage.excluded}
        upstream = next(
            (s for s in reversed(stages[:i]) if s.candidates and s.kind not in (sc.KIND_CITE, sc.KIND_GENERATE, sc.KIND_QUERY_TRANSFORM)), None
        )
        if upstream is None:
            continue
        given_rows = _by_rank(upstream.candidates)
        given = [c.id for c in given_rows]
        if set(given) != ins:
            continue  # not the same set: the input is not known well enough to compare orders
        kept_rows = _by_rank(stage.candidates)
        kept = [c.id for c in kept_rows]
        # the same order alone is what a reranker that agrees with its retriever also does: the
        # evidence of a fallback is the same order *and* the upstream scores handed on unscored
        same_scores = all(k.score == g.score for k, g in zip(kept_rows, given_rows, strict=False))
        if len(given) >= _MIN_ORDER_EVIDENCE and len(kept) >= 2 and kept == given[: len(kept)] and same_scores:
            out.append(
                {
                    "insight": SILENT_FALLBACK,
                    "stage": stage.label,
                    "upstream": upstream.label,
                    "count": len(given),
                    "said": (
                        f"{stage.label} handed on its input order from "
                        f"{upstream.label} unchanged, scores too ({len(kept)} of "
                        f"{len(given)} kept) and reported no fallback: a reranker that fell back "
                        "silently looks exactly like this"
                    ),
                }
            )
    return out


def checked(settings: InsightSettings | None = None) -> str:
    """What :func:`insights` looked for under ``settings`` (so that "none found" is not read as more)."""
    settings = settings or InsightSettings()
    author = f"{settings.author_key}={settings.author_value}" if settings.author_key else None
    return f"{STALE_CITATION} (by meta.{settings.date_key}), {ECHO}, {SILENT_FALLBACK}" + (
        f", {SELF_CITATION} ({author})" if author else f"; {SELF_CITATION} not checked (no author given)"
    )


def insights(manifest: Manifest, settings: InsightSettings | None = None) -> list[dict[str, Any]]:
    """Every insight found in one manifest, each ``{"insight": name, "said": one line, ...evidence}``."""
    settings = settings or InsightSettings()
    found = stale_citations(manifest, settings.date_key) + echoes(manifest) + silent_fallbacks(manifest)
    if settings.author_key and settings.author_value is not None:
        found += self_citations(manifest, settings.author_key, settings.author_value)
    return found
