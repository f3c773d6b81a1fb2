"""LangChain's client-side maximal marginal relevance (issue 24, principle 5): the pool and the pick.

A store's ``max_marginal_relevance_search`` fetches ``fetch_k`` candidates with their vectors and
lets ``maximal_marginal_relevance`` pick ``k`` of them in Python. ``InMemoryVectorStore`` fetches the
pool with ``_similarity_search_with_score_by_vector`` (``(Document, similarity, vector)`` triples)
and returns the very ``Document`` objects of the ones it picked. That call is observed (no request of
ours, no copy: the list it returned), so the MMR stage records the pool as its inputs (the store's
ids and similarities), the pick as its outputs, and each candidate it did not pick as an exclusion
``custom:not_picked_by_mmr``. The pool is taken only when every returned document is one of its
objects. A store that fetches through an instrumented engine nested in the MMR stage (FAISS over
faiss, Chroma over chromadb) hands its hits up under the store's ids: those are the pool when
nothing could drop one between the fetch and the pick (:func:`_from_nested`). Else (another store,
MMR inside a database) the stage says in a finding that the candidates it did not pick are not
recorded at this stage, and the nested engine's hits it did not return are ``unexplained``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.hooks import Args, Kwargs
from ragtrail.instrumentation.langchain._common import adapt_all, feed
from ragtrail.recorder.stage import Stage, handed_up

__all__ = ["MMR_POOL", "mmr_pool", "record_mmr", "record_mmr_pick"]

# a sink key: the pool an MMR search fetched, as the store's prefetch returned it
MMR_POOL = "mmr_pool"


def mmr_pool(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """``InMemoryVectorStore._similarity_search_with_score_by_vector`` (no stage): the pool feeds the
    search above (read only by an MMR search; a similarity search's copy is ignored)."""
    result = wrapped(*args, **kwargs)
    feed(instance, MMR_POOL, result)
    return result


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def record_mmr(s: Stage, arguments: Mapping[str, Any]) -> None:
    """An MMR search's ``lambda_mult`` as the MMR lambda (the method's own default when the caller
    left it out)."""
    lam = _number(arguments.get("lambda_mult"))
    if lam is not None:
        s.set_attribute(sc.STAGE_MMR_LAMBDA, lam)


def _unseen(s: Stage, result: Any, arguments: Mapping[str, Any]) -> None:
    """The pool is not known. The hits an engine nested in this stage handed up and the search did
    not return are then exclusions ``unexplained``: the pick passed them over, or something before
    the pick removed them (a filter), and the stage cannot say which. Never a top-k cut: MMR keeps k
    by relevance and novelty together, not the best k by rank (a FAISS MMR search with a filter read
    "below_rank_cutoff" for hits ranked above the ones it returned)."""
    fetch_k = arguments.get("fetch_k")
    pool = fetch_k if isinstance(fetch_k, int) and not isinstance(fetch_k, bool) else "its default"
    inner = handed_up(s) if isinstance(result, list) else []
    kept = {c.id for c in adapt_all(result)} if inner else set()
    dropped = list(dict.fromkeys(c.id for c in inner if c.id not in kept))
    if not dropped:
        s.finding(
            f"maximal marginal relevance picked from {pool} fetched candidates (fetch_k): the ones it did not pick are not recorded at this stage"
        )
        return
    detail = "not returned by maximal marginal relevance: passed over by the pick or removed before it (not recorded at this stage)"
    s.inputs(inner)  # as the stage would take them at its end; named now, so the exclusions name them
    for ident in dropped:
        s.exclude(ident, sc.REASON_UNEXPLAINED, detail)
    s.finding(
        f"maximal marginal relevance picked from {pool} fetched candidates (fetch_k), a pool this stage did not see: "
        f"the {len(dropped)} fetched hits it did not return are unexplained (not picked, or removed before the pick)"
    )


def record_mmr_pick(s: Stage, result: Any, pool: Any, arguments: Mapping[str, Any], score_kind: str) -> bool:
    """Record MMR's pick where its pool is known: the prefetch fed to the sink (``pool``), else the
    hits an engine stage nested in this one handed up (:func:`_from_nested`). Else the finding that
    the unpicked candidates are not recorded. True when the outputs are written (else the caller
    writes them as it did before)."""
    if pool is not None:
        if _from_pool(s, result, pool, arguments, score_kind):
            return True
    elif _from_nested(s, result, arguments):
        return True
    _unseen(s, result, arguments)
    return False


def _detail(pool: int, picked: int, arguments: Mapping[str, Any]) -> str:
    lam = _number(arguments.get("lambda_mult"))
    took = f"in the fetch_k pool of {pool}, not picked: maximal marginal relevance took {picked}"
    return took + (f", lambda_mult={lam:g}" if lam is not None else "")


def _from_pool(s: Stage, result: Any, pool: Any, arguments: Mapping[str, Any], score_kind: str) -> bool:
    """The pool as inputs, the pick as outputs, the rest ``custom:not_picked_by_mmr``, when ``pool``
    is the prefetch the returned documents came from (every one of them, by object)."""
    entries = pool if isinstance(pool, list) and isinstance(result, list) else None
    if entries is None or not all(isinstance(e, tuple) and len(e) >= 2 for e in entries):
        return False
    position = {id(entry[0]): i for i, entry in enumerate(entries)}
    picked = [position.get(id(doc)) for doc in result]
    if any(i is None for i in picked) or len(set(picked)) != len(picked):
        s.finding("maximal marginal relevance returned documents that are not all from the pool it fetched: the pool is not recorded")
        return False
    candidates = adapt_all([entry[0] for entry in entries])
    for candidate, entry in zip(candidates, entries, strict=True):
        candidate.score, candidate.score_kind = _number(entry[1]), score_kind
    s.score_kind = score_kind
    s.inputs(list(candidates))
    s.outputs([candidates[i] for i in picked if i is not None])
    detail = _detail(len(entries), len(picked), arguments)
    chosen = set(picked)
    for i, candidate in enumerate(candidates):
        if i not in chosen:
            s.exclude(candidate.id, sc.REASON_NOT_PICKED_BY_MMR, detail)
    return True


# the arguments of an MMR search that change nothing between the fetch and the pick
_PLAIN_ARGUMENTS = frozenset({"query", "embedding", "k", "fetch_k", "lambda_mult", "kwargs"})


def _from_nested(s: Stage, result: Any, arguments: Mapping[str, Any]) -> bool:
    """A store whose fetch is an instrumented engine's search nested in this stage (LangChain's FAISS
    over faiss, Chroma over chromadb, PGVector over psycopg): those hits, handed up under the store's
    ids, are this stage's inputs. They are the pool only when nothing could have removed one between
    the fetch and the pick: no argument beyond query, k, fetch_k and lambda_mult (a filter may fetch
    more and drop some: FAISS fetches 2 x fetch_k then), at most fetch_k of them, more than were
    picked, every pick among them. Then each one not picked is ``custom:not_picked_by_mmr``."""
    fetch_k = arguments.get("fetch_k")
    if not isinstance(fetch_k, int) or isinstance(fetch_k, bool) or not isinstance(result, list):
        return False
    if arguments.get("kwargs") or any(v is not None for key, v in arguments.items() if key not in _PLAIN_ARGUMENTS):
        return False
    inner = handed_up(s)
    ids = [c.id for c in inner]
    if len(set(ids)) != len(ids) or not len(result) < len(ids) <= fetch_k:
        return False
    picked = adapt_all(result)
    kept = {c.id for c in picked}
    if not kept <= set(ids) or len(kept) != len(picked):
        return False
    s.inputs(inner)  # as the stage would take them at its end; named now, so the exclusions name them
    s.outputs(picked)
    detail = _detail(len(ids), len(picked), arguments)
    for ident in ids:
        if ident not in kept:
            s.exclude(ident, sc.REASON_NOT_PICKED_BY_MMR, detail)
    return True
