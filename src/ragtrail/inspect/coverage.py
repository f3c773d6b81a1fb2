"""Survival and coverage: how much evidence each stage kept, and which claims what was read can support.

Coverage scores context against corpus, a different axis from faithfulness (answer against
context): an answer built from 6 of 1,003 chunks can quote what it read but cannot say that
something is absent, that all items agree, which one is the latest, or how many there are. There
is deliberately no threshold: 999,999 of 1,000,000 still cannot establish absence.
"""

from __future__ import annotations

from collections.abc import Sequence

from .manifest_model import AnswerClaim, ClaimVerdict, Coverage, Stage, Survival

# (claim type, example sentence, needs the whole corpus)
CLAIMS: tuple[tuple[str, str, bool], ...] = (
    ("quote", "the policy says X", False),
    ("absence", "there is no policy about X", True),
    ("universal", "all policies require X", True),
    ("latest", "the most recent policy is Y", True),
    ("count", "there are three mentions of X", True),
)


def _of(corpus_size: int | None, approximate: bool, stores: int | None = None) -> str:
    """The corpus size in words. A size summed over several stores says so: two stores may hold the
    same documents (BM25 and a vector index over one collection), so the sum is the stores' entries,
    not a count of distinct documents."""
    size = f"~{corpus_size} (approximate)" if approximate else f"{corpus_size}"
    if stores is not None and stores > 1:
        size += f" (the sum over {stores} stores, which may hold the same documents)"
    return size


def _nothing_read(retrieved: int, run_status: str | None, excluded: int) -> str:
    """Why nothing reached the model, in words that tell a failure from an empty result."""
    if retrieved:
        return f"context failure: {retrieved} retrieved, none reached the model: no claim is supported"
    if run_status == "failed":
        return "retrieval failed: nothing retrieved: no claim is supported"
    if excluded:
        return f"nothing handed on: {excluded} found, all excluded before they were retrieved (not an empty result): no claim is supported"
    if run_status in ("empty", "available", None):
        return "empty result: the search found nothing (not a failure): no claim is supported"
    return f"nothing retrieved (run {run_status}): no claim is supported"


#: the words for a context no stage defined (the recorder's count then stands for "every retrieved id")
CONTEXT_UNKNOWN = "what reached the model is unknown: no budget, context or generate stage recorded it"


def _unknown_claim(claim: str | None, claims: list[ClaimVerdict], retrieved: int, cited: int, of: str) -> AnswerClaim | None:
    """The verdict for the answer's own claim when what reached the model is unknown: a presence
    claim stands on what the answer cited, an absence claim never."""
    if claim not in ("absence", "presence", "none"):
        return None
    said = f"{retrieved} retrieved of {of}; {CONTEXT_UNKNOWN}"
    if claim == "none":
        return AnswerClaim(claim, None, f"the answer makes no claim about the corpus ({said})")
    row = next(c for c in claims if c.claim == ("absence" if claim == "absence" else "quote"))
    if claim == "absence":
        return AnswerClaim(claim, False, f"the answer claims absence: not supported ({said})", why=row.why)
    verdict = f"supported by what it cited ({cited} cited; {said})" if row.supported else f"not supported (nothing cited; {said})"
    return AnswerClaim(claim, row.supported, f"the answer claims presence: {verdict}", why=row.why)


def _unknown_context(
    corpus_size: int | None, retrieved: int, cited: int, approximate: bool, stores: int | None
) -> tuple[list[ClaimVerdict], str, str]:
    """The claims, statement and size words when what reached the model is unknown: only a quote of a
    cited unit stands."""
    claims = [
        ClaimVerdict(
            name,
            example,
            bool(cited) and not needs_all,
            (f"needs only the units quoted ({cited} cited)" if cited and not needs_all else CONTEXT_UNKNOWN),
        )
        for name, example, needs_all in CLAIMS
    ]
    of = "a corpus of unknown size" if corpus_size is None else _of(corpus_size, approximate, stores)
    return claims, f"{CONTEXT_UNKNOWN} ({retrieved} retrieved of {of}): an absence claim is not supported", of


def _unknown_coverage(corpus_size: int | None, retrieved: int, cited: int, *, claim: str | None, approximate: bool, stores: int | None) -> Coverage:
    """The coverage block when what reached the model is unknown (something was retrieved, no stage
    said what of it reached the model)."""
    unknown, said, of = _unknown_context(corpus_size, retrieved, cited, approximate, stores)
    answered = _unknown_claim(claim, unknown, retrieved, cited, of)
    return Coverage(
        corpus_size=corpus_size,
        approximate=approximate,
        stores=stores,
        retrieved=retrieved,
        in_context=None,
        cited=cited,
        exhaustive=False,
        statement=answered.statement if answered is not None else said,
        claims=unknown,
        answer_claim=answered,
    )


def _claims(
    read: int, cited: int, corpus_size: int | None, *, exhaustive: bool, approximate: bool, stores: int | None = None, unknown_origin: int = 0
) -> list[ClaimVerdict]:
    """Whether ``read`` units (of ``corpus_size``) support each type of claim, and why. Ids in the
    context of unknown origin may be units or not: the unread remainder is then an upper bound."""
    claims: list[ClaimVerdict] = []
    for name, example, needs_all in CLAIMS:
        if read == 0 and unknown_origin:
            ok, why = False, f"no unit the trace records as read reached the model ({_unknown_words(unknown_origin)})"
        elif read == 0:
            ok, why = False, "nothing reached the model: a retrieval or context failure, not a reasoning one"
        elif not needs_all:
            ok, why = True, f"needs only the units quoted ({cited} cited)" if cited else "needs only the units quoted"
        elif exhaustive:
            ok, why = True, f"all {corpus_size} units were read"
        elif corpus_size is None:
            ok, why = False, "the corpus size is unknown, so the unread remainder is unknown"
        elif approximate and read >= corpus_size:
            ok, why = False, f"the corpus size is approximate (~{corpus_size}): all of it may not have been read"
        elif stores is not None and stores > 1:
            ok, why = False, f"asserts something about units never read (how many is unknown: {stores} stores may hold the same documents)"
        elif unknown_origin:
            ok, why = False, f"asserts something about up to {corpus_size - read} units never read ({_unknown_words(unknown_origin)})"
        else:
            ok, why = False, f"asserts something about the {corpus_size - read} units never read"
        claims.append(ClaimVerdict(name, example, ok, why))
    return claims


def _unknown_words(unknown_origin: int) -> str:
    """The ids in the context no recorded stage read, in words."""
    return f"{unknown_origin} in the context of unknown origin"


def coverage(
    corpus_size: int | None,
    retrieved: int,
    in_context: int | None,
    cited: int,
    *,
    claim: str | None = None,
    run_status: str | None = None,
    approximate: bool = False,
    stores: int | None = None,
    excluded: int = 0,
    unknown_origin: int = 0,
) -> Coverage:
    """The manifest's ``coverage`` block: counts, ``exhaustive``, one statement, per-claim verdicts,
    and the verdict for the claim the answer made when the app said which (``ragtrail.answer.claim``).

    An empty result (nothing matched, the run did not fail), a failed retrieval (nothing retrieved
    and the run failed) and a context failure (retrieved, then none reached the model) get
    different words. An approximate corpus size never supports a claim about the whole corpus.
    ``in_context`` is ``None`` when no stage defined what reached the model: then nothing is read
    for certain, and no claim that needs the context is supported. ``unknown_origin`` counts the ids in
    the context no recorded stage read (a sub-answer made in the run, or a unit an unrecorded
    component fetched): never counted as read, and the unread remainder becomes an upper bound."""
    if in_context is None and not retrieved:
        in_context = 0  # nothing was retrieved: nothing from the corpus can have reached the model
    if in_context is None:
        return _unknown_coverage(corpus_size, retrieved, cited, claim=claim, approximate=approximate, stores=stores)
    read = in_context
    exhaustive = corpus_size is not None and corpus_size > 0 and read >= corpus_size and not approximate
    claims = _claims(read, cited, corpus_size, exhaustive=exhaustive, approximate=approximate, stores=stores, unknown_origin=unknown_origin)
    also = f", and {_unknown_words(unknown_origin)}" if unknown_origin else ""
    if read == 0 and unknown_origin:
        statement = f"no unit the trace records as read reached the model ({_unknown_words(unknown_origin)}): no claim about the corpus is supported"
    elif read == 0:
        statement = _nothing_read(retrieved, run_status, excluded)
    elif exhaustive:
        statement = f"all {corpus_size} of {corpus_size} read: absence, universal, latest and count claims are supported"
    elif corpus_size is None:
        statement = f"{read} read of a corpus of unknown size{also}: an absence claim is not supported"
    else:
        statement = f"{read} of {_of(corpus_size, approximate, stores)} read{also}: an absence claim is not supported"
    if read and run_status in ("failed", "degraded"):
        statement = f"run {run_status}: {statement}"
    verdict = _claim_verdict(claim, claims, read, corpus_size, approximate, stores, unknown_origin)
    if verdict is not None:
        statement = verdict.statement
    return Coverage(
        corpus_size=corpus_size,
        approximate=approximate,
        stores=stores,
        retrieved=retrieved,
        in_context=in_context,
        cited=cited,
        exhaustive=exhaustive,
        statement=statement,
        claims=claims,
        answer_claim=verdict,
        unknown_origin=unknown_origin,
    )


def _claim_verdict(
    claim: str | None,
    claims: list[ClaimVerdict],
    read: int,
    corpus_size: int | None,
    approximate: bool,
    stores: int | None = None,
    unknown_origin: int = 0,
) -> AnswerClaim | None:
    """The verdict for the one claim the answer said it made (absence, presence, none)."""
    if claim not in ("absence", "presence", "none"):
        return None
    of = "" if corpus_size is None else f" of {_of(corpus_size, approximate, stores)}"
    if claim == "none":
        return AnswerClaim(
            claim,
            None,
            f"the answer makes no claim about the corpus ({read} read{of})",
        )
    row = next(c for c in claims if c.claim == ("absence" if claim == "absence" else "quote"))
    if claim == "absence":
        if row.supported:
            text = f"the answer claims absence: supported (all {corpus_size} of {corpus_size} read)"
        elif read == 0:
            text = (
                f"the answer claims absence: not supported (no unit the trace records as read reached the model; {_unknown_words(unknown_origin)})"
                if unknown_origin
                else "the answer claims absence: not supported (nothing reached the model)"
            )
        elif corpus_size is None:
            text = f"the answer claims absence: not supported ({read} read of a corpus of unknown size)"
        else:
            unread = max(corpus_size - read, 0) if not (stores and stores > 1) else 0  # summed stores: unknown
            never = (
                (f", up to {unread} never read; {_unknown_words(unknown_origin)}" if unknown_origin else f", {unread} never read") if unread else ""
            )
            text = f"the answer claims absence: not supported ({read} of {_of(corpus_size, approximate, stores)} read{never})"
    else:
        text = (
            f"the answer claims presence: supported by what was read ({read}{of} read; an absence claim would not be)"
            if row.supported and read != corpus_size
            else f"the answer claims presence: supported by what was read ({read}{of} read)"
            if row.supported
            else f"the answer claims presence: not supported (no unit the trace records as read reached the model; {_unknown_words(unknown_origin)})"
            if unknown_origin
            else "the answer claims presence: not supported (nothing reached the model)"
        )
    return AnswerClaim(claim, row.supported, text, why=row.why)


def survival(stages: Sequence[Stage]) -> list[Survival]:
    """Evidence in and out of every stage that handles candidates, in pipeline order (the funnel)."""
    return [
        Survival(stage.kind, stage.component, stage.n_in, stage.n_out, stage.excluded_count)
        for stage in stages
        if not (stage.kind in ("query_transform",) and not stage.n_out)
    ]
