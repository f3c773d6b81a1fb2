"""Qdrant: ``query_points``, ``query_batch_points`` and ``query_points_groups`` of ``QdrantClient`` and
``AsyncQdrantClient`` as ``retrieve`` stages (qdrant-client 1.20 has no ``search``).

* One stage per query; a batch's requests become sibling stages (see
  :mod:`ragtrail.instrumentation._vectorstore`). ``query_points_groups`` records its hits flattened
  in group order, with ``ragtrail.stage.group_by`` / ``.group_size``.
* ``limit`` is the stage's ``top_k``, ``score_threshold`` its threshold, the request's filter
  (``query_filter``) its ``ragtrail.stage.filter`` (canonical JSON of the model).
* Score kind: a ScoredPoint's score means what the collection's distance makes it mean. It is read
  from the collection's config after the call: ``Cosine``/``Dot`` (and sparse vectors) are
  ``similarity``, ``Euclid``/``Manhattan`` are ``distance`` (Qdrant returns those ascending);
  a fusion query is ``rrf`` (RRF) or ``similarity`` (DBSF), a BM25 text query ``bm25``, order-by,
  sample, discover and context queries ``none``.
* Cost: ragtrail adds no request to the user's database, on the query path or beside it. A local
  client (``:memory:`` or a path) is in-process: its vector config and its size (ids held minus
  deleted flags, exact) are read in place from the client's memory. A remote client's facts come only
  from what the application itself asked: the result of its own ``get_collection`` (distance and
  ``points_count``, which Qdrant documents as approximate) or the vector config it passed to
  ``create_collection``, cached for the client's life. Until then the scores are recorded with kind
  ``none`` and a finding, and the corpus size is unknown unless the user set it with
  ``ragtrail.corpus_size(collection_name, n)`` (or on the client object).
* The query is recorded as text for a ``Document``/``TextQuery`` (inference) query, as a vector
  receipt for a dense vector; a point-id query records neither.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import canonical_json, content_id
from ragtrail.hooks import Args, Kwargs, bind, guard
from ragtrail.instrumentation._base import RagtrailInstrumentor
from ragtrail.instrumentation._vectorstore import (
    Outcome,
    Query,
    Row,
    StoreStages,
    acall_through,
    call_through,
    filter_json,
    plain,
    text_of,
)
from ragtrail.recorder.candidates import Candidate, normalize_id

_KEY = "ragtrail.qdrant"
_METHODS = ("query_points", "query_batch_points", "query_points_groups")


@dataclass
class _Facts:
    """What the collection's config says about scores, and its size when that was cheap to learn."""

    vectors: Any = None
    sparse: frozenset[str] = frozenset()
    points_count: int | None = None
    approximate: bool = False


# remote clients: collection name -> the facts the application's own calls revealed
_remote_facts: weakref.WeakKeyDictionary[Any, dict[str, _Facts]] = weakref.WeakKeyDictionary()
_remote_lock = threading.Lock()
_MMR_HIDDEN = "maximal marginal relevance ran inside Qdrant over"
UNREAD = "score kind unknown: the application has not read this collection's config (ragtrail adds no request to the database)"


class QdrantInstrumentor(RagtrailInstrumentor):
    """Records Qdrant queries (sync and async clients) as retrieve stages."""

    _instruments: Collection[str] = ("qdrant-client >= 1.12",)

    def _patch(self, **kwargs: Any) -> None:
        # patched when the application imports them: qdrant-client takes ~0.8 s to import
        self.when_imported("qdrant_client.qdrant_client", lambda: self._patch_module(False))
        self.when_imported("qdrant_client.async_qdrant_client", lambda: self._patch_module(True))
        # a local client's MMR runs in this process: its pool is seen where it is picked from
        local = "qdrant_client.local.local_collection"
        self.when_imported(local, lambda: self.wrap(local, "LocalCollection._mmr", _local_mmr))

    def _patch_module(self, is_async: bool) -> None:
        from qdrant_client.http.models import ScoredPoint

        self.register_adapter(ScoredPoint, point_candidate)
        module = "qdrant_client.async_qdrant_client" if is_async else "qdrant_client.qdrant_client"
        owner = "AsyncQdrantClient" if is_async else "QdrantClient"
        for method in _METHODS:
            self.wrap(module, f"{owner}.{method}", self._async(method) if is_async else self._sync(method))
        # observed, never asked: what the application's own calls reveal about a remote collection
        self.wrap(module, f"{owner}.get_collection", _aobserve_info if is_async else _observe_info)
        self.wrap(module, f"{owner}.create_collection", _aobserve_create if is_async else _observe_create)

    def _sync(self, method: str) -> Callable[..., Any]:
        def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
            with _mmr_watch(method):
                return call_through(
                    _KEY,
                    lambda: _start(self.tracer, method, wrapped, instance, args, kwargs),
                    wrapped,
                    args,
                    kwargs,
                    lambda stages, result: _complete(stages, result, instance, _facts),
                )

        return wrapper

    def _async(self, method: str) -> Callable[..., Any]:
        async def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
            with _mmr_watch(method):
                # nothing is awaited after the result has arrived: it is the host's
                return await acall_through(
                    _KEY,
                    lambda: _start(self.tracer, method, wrapped, instance, args, kwargs),
                    wrapped,
                    args,
                    kwargs,
                    lambda stages, result: _complete(stages, result, instance, _afacts),
                )

        return wrapper


def _complete(stages: _QdrantStages, result: Any, instance: Any, facts_of: Callable[[Any, str | None], _Facts | None]) -> None:
    """Read the collection's facts (local or cached: never a wait on the network) and record the
    result (the hook skeleton ends the stages whatever happens here)."""
    facts = guard("qdrant.facts", facts_of, instance, stages.collection) if stages.active else None
    stages.remote = bool(stages.active and guard("qdrant.is_local", _is_local, instance) is False)
    stages.complete(lambda: _outcome(stages, result, facts))


def point_candidate(point: Any) -> Candidate:
    """A ScoredPoint as a candidate: its id (int or UUID string), its score, its payload as metadata
    and the payload's text (``text``/``content``/``page_content``/``document``…) as content."""
    payload = point.payload if isinstance(point.payload, Mapping) else None
    content = text_of(payload)
    ident = normalize_id(point.id) or content_id(content if content is not None else canonical_json(payload))
    return Candidate(id=ident, content=content, score=plain(point.score), metadata=payload)


class _QdrantStages(StoreStages):
    method: str
    remote = False
    requests: list[dict[str, Any]]


def _start(tracer: Any, method: str, wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> _QdrantStages:
    arguments = bind(wrapped, args, kwargs)
    collection = arguments.get("collection_name")
    stages = _QdrantStages(
        tracer, f"qdrant_client.{type(instance).__qualname__}.{method}", collection=collection if isinstance(collection, str) else None
    )
    stages.method = method
    if method == "query_batch_points":
        requests = arguments.get("requests")
        # a list or tuple only: an iterator is the library's to read, not ours
        stages.requests = [_request_of(r) for r in requests] if isinstance(requests, (list, tuple)) else []
    else:
        request = {
            "query": arguments.get("query"),
            "using": arguments.get("using"),
            "prefetch": arguments.get("prefetch"),
            "filter": arguments.get("query_filter"),
            "limit": arguments.get("limit"),
            "score_threshold": arguments.get("score_threshold"),
        }
        if method == "query_points_groups":
            request["group_by"] = arguments.get("group_by")
            request["group_size"] = arguments.get("group_size")
        stages.requests = [request]
    first = _row(stages, 0, (), None)
    return stages.start(first)


def _request_of(request: Any) -> dict[str, Any]:
    """A batch entry (a ``QueryRequest`` or its dict form) as the keys a stage needs."""
    get = request.get if isinstance(request, Mapping) else (lambda key, default=None: getattr(request, key, default))
    limit = get("limit", None)
    return {
        "query": get("query", None),
        "using": get("using", None),
        "prefetch": get("prefetch", None),
        "filter": get("filter", None),
        "limit": 10 if limit is None else limit,
        "score_threshold": get("score_threshold", None),
    }


def _row(stages: _QdrantStages, index: int, candidates: Any, facts: _Facts | None) -> Row:
    request = stages.requests[index] if index < len(stages.requests) else {}
    attributes: dict[str, Any] = {}
    if "group_by" in request:
        attributes[sc.STAGE_GROUP_BY] = request["group_by"]
        attributes[sc.STAGE_GROUP_SIZE] = request["group_size"]
    findings = _mmr(request.get("query"), attributes)
    return Row(
        candidates=candidates,
        query=_query_of(request.get("query")),
        top_k=request.get("limit"),
        threshold=request.get("score_threshold"),
        filter=filter_json(request.get("filter")),
        # an unread request (an iterator was passed): assume the default vector's meaning
        score_kind=(
            _score_kind(request.get("query"), request.get("using"), request.get("prefetch"), facts) if request else _vector_kind(None, facts)
        ),
        attributes=attributes,
        findings=findings,
    )


def _mmr(query: Any, attributes: dict[str, Any]) -> list[str]:
    """A ``NearestQuery`` with ``mmr``: Qdrant picks the points by maximal marginal relevance itself.
    Its ``diversity`` (0 = relevance only) is written as the MMR lambda (1 = relevance only), and a
    finding says the candidates it did not pick are not returned (langchain-qdrant's MMR runs so)."""
    mmr = getattr(query, "mmr", None)
    diversity = getattr(mmr, "diversity", None)
    if mmr is None:
        return []
    if isinstance(diversity, (int, float)) and not isinstance(diversity, bool):
        attributes[sc.STAGE_MMR_LAMBDA] = 1.0 - float(diversity)
    pool = getattr(mmr, "candidates_limit", None)
    over = pool if pool is not None else "its default"
    return [f"{_MMR_HIDDEN} {over} candidates: the ones it did not pick are not returned"]


# a local client's ``LocalCollection._mmr`` calls under the open ``query_points``: (pool, pick)
_mmr_seen: contextvars.ContextVar[list[tuple[Any, Any]] | None] = contextvars.ContextVar("ragtrail_qdrant_mmr", default=None)


@contextlib.contextmanager
def _mmr_watch(method: str) -> Iterator[None]:
    """Collect the local ``_mmr`` calls made under one ``query_points`` (sync or async); other
    methods collect nothing."""
    token = _mmr_seen.set([]) if method == "query_points" else None
    try:
        yield
    finally:
        if token is not None:
            _mmr_seen.reset(token)


def _local_mmr(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """``LocalCollection._mmr(search_results, ...)``: the pool the local collection fetched
    (``candidates_limit`` nearest points, with their ids and scores) and what it picked from it."""
    result = wrapped(*args, **kwargs)
    seen = _mmr_seen.get()
    if seen is not None:
        seen.append((args[0] if args else kwargs.get("search_results"), result))
    return result


def _candidates(points: Any, score_kind: str | None) -> list[Candidate]:
    out = []
    for point in points:
        candidate = point_candidate(point)
        candidate.score_kind = score_kind
        out.append(candidate)
    return out


def _mmr_pool(query: Any, picked: list[Candidate], row: Row) -> None:
    """A local client's MMR: the pool it picked from as the stage's inputs and each point it did not
    pick an exclusion ``custom:not_picked_by_mmr`` (issue 24, principle 5), in place of the finding
    that they are hidden. Only when one pick was seen and it is exactly what the call returned (no
    offset cut it): else the finding stays."""
    mmr = getattr(query, "mmr", None)
    seen = _mmr_seen.get()
    if mmr is None or not seen or len(seen) != 1:
        return
    pool, chosen = seen[0]
    if not isinstance(pool, list) or not isinstance(chosen, list):
        return
    if [normalize_id(p.id) for p in chosen] != [c.id for c in picked]:
        return
    inputs = _candidates(pool, row.score_kind)
    kept = {c.id for c in picked}
    diversity = getattr(mmr, "diversity", None)
    detail = f"in the candidates_limit pool of {len(inputs)}, not picked: maximal marginal relevance took {len(picked)}"
    if isinstance(diversity, (int, float)) and not isinstance(diversity, bool):
        detail += f", diversity={diversity:g}"
    row.inputs = inputs
    row.exclusions = [(c.id, sc.REASON_NOT_PICKED_BY_MMR, detail) for c in inputs if c.id not in kept]
    row.findings = [f for f in row.findings if not f.startswith(_MMR_HIDDEN)]


def _query_of(query: Any) -> Query | None:
    from qdrant_client import models

    if isinstance(query, models.NearestQuery):
        query = query.nearest
    if isinstance(query, models.Document):
        return Query(text=query.text)
    if isinstance(query, models.TextQuery):
        text = query.text
        return Query(text=text if isinstance(text, str) else getattr(text, "text", None))
    if hasattr(query, "shape") or (isinstance(query, (list, tuple)) and query):
        return Query(vector=query)
    return None


def _score_kind(query: Any, using: str | None, prefetch: Any, facts: _Facts | None) -> str | None:
    from qdrant_client import models

    if isinstance(query, models.FusionQuery):
        return sc.SCORE_RRF if query.fusion == models.Fusion.RRF else sc.SCORE_SIMILARITY
    if isinstance(query, models.RrfQuery):
        return sc.SCORE_RRF
    if isinstance(query, models.TextQuery):
        return sc.SCORE_BM25
    if isinstance(query, (models.OrderByQuery, models.SampleQuery, models.DiscoverQuery, models.ContextQuery)):
        return sc.SCORE_NONE
    if isinstance(query, models.FormulaQuery):
        return sc.SCORE_SIMILARITY  # the formula's value, ordered highest first
    if query is None:
        if prefetch:
            first = prefetch[0] if isinstance(prefetch, (list, tuple)) else prefetch
            return _score_kind(getattr(first, "query", None), getattr(first, "using", None), getattr(first, "prefetch", None), facts)
        return sc.SCORE_NONE
    nearest = query.nearest if isinstance(query, models.NearestQuery) else query
    if isinstance(nearest, models.SparseVector):
        return sc.SCORE_SIMILARITY
    return _vector_kind(using, facts)


def _vector_kind(using: str | None, facts: _Facts | None) -> str | None:
    """What a nearest-vector score means for the collection's (named) vector."""
    from qdrant_client import models

    if facts is None:
        return None
    if using is not None and using in facts.sparse:
        return sc.SCORE_SIMILARITY
    vectors = facts.vectors
    params = vectors.get(using or "") if isinstance(vectors, Mapping) else vectors
    distance = getattr(params, "distance", None)
    if distance in (models.Distance.COSINE, models.Distance.DOT):
        return sc.SCORE_SIMILARITY
    if distance in (models.Distance.EUCLID, models.Distance.MANHATTAN):
        return sc.SCORE_DISTANCE
    return None


def _outcome(stages: _QdrantStages, result: Any, facts: _Facts | None) -> Outcome | None:
    if stages.method == "query_batch_points":
        responses = list(result) if isinstance(result, (list, tuple)) else None
        if responses is None:
            return None
        lists = [getattr(response, "points", None) or [] for response in responses]
    elif stages.method == "query_points_groups":
        lists = [[hit for group in (getattr(result, "groups", None) or []) for hit in (group.hits or [])]]
    else:
        lists = [getattr(result, "points", None) or []]

    def row(index: int) -> Row:
        found = _row(stages, index, [], facts)
        candidates = _candidates(lists[index], found.score_kind)
        found.candidates = candidates
        if stages.method == "query_points":
            _mmr_pool(stages.requests[0].get("query"), candidates, found)
        if found.score_kind is None and candidates:
            found.findings.append(UNREAD if facts is None and stages.remote else "score kind unknown: the collection's distance could not be read")
        return found

    size = None
    if facts is not None and facts.points_count is not None:
        size = lambda: facts.points_count  # noqa: E731
    # the collection is the store (a name the user can give ragtrail.corpus_size); without a size,
    # a user's figure for it is still looked up
    return Outcome(
        rows=len(lists),
        row=row,
        corpus_size=size or (lambda: None),
        store=stages.collection,
        approximate=bool(facts is not None and facts.approximate),
    )


def _is_local(client: Any) -> bool:
    from qdrant_client.local.async_qdrant_local import AsyncQdrantLocal
    from qdrant_client.local.qdrant_local import QdrantLocal

    return isinstance(getattr(client, "_client", None), (QdrantLocal, AsyncQdrantLocal))


def _facts_of(info: Any, local: bool) -> _Facts:
    params = info.config.params
    sparse = frozenset((params.sparse_vectors or {}).keys())
    # Qdrant documents a remote collection's points_count as approximate
    return _Facts(vectors=params.vectors, sparse=sparse, points_count=info.points_count, approximate=not local)


def _local_config(instance: Any, collection: str) -> _Facts | None:
    """The in-process collection's vector config, read in place: ``get_collection`` deep-copies the
    whole config and counts every point. ``None`` when this qdrant-client lays its local mode out
    differently (then nothing is known: no request is made instead)."""
    try:
        config = instance._client._get_collection(collection).config
        return _Facts(vectors=config.vectors, sparse=frozenset((config.sparse_vectors or {}).keys()))
    except AttributeError:
        return None


def _local_count(instance: Any, collection: str) -> int | None:
    """The in-process collection's size from the client's own memory: ids it holds minus those
    flagged deleted (exact; no count request, no payload scan)."""
    try:
        local = instance._client._get_collection(collection)
        held = len(local.ids)
        deleted = local.deleted[: len(local.payload)] if hasattr(local, "payload") else local.deleted
        return held - int(deleted.sum())
    except (AttributeError, TypeError):
        return None


def _remember(instance: Any, collection: Any, facts: _Facts | None) -> None:
    if not isinstance(collection, str) or facts is None:
        return
    try:
        with _remote_lock:
            _remote_facts.setdefault(instance, {})[collection] = facts
    except TypeError:  # pragma: no cover - a client that cannot be weakly referenced
        pass


def _cached(instance: Any, collection: str) -> _Facts | None:
    with _remote_lock:
        per_client = _remote_facts.get(instance)
        return per_client.get(collection) if per_client is not None else None


def _collection_arg(args: Args, kwargs: Kwargs) -> Any:
    return kwargs.get("collection_name", args[0] if args else None)


def _created(args: Args, kwargs: Kwargs) -> _Facts:
    vectors = kwargs.get("vectors_config", args[1] if len(args) > 1 else None)
    sparse = kwargs.get("sparse_vectors_config", None) or {}
    return _Facts(vectors=vectors, sparse=frozenset(sparse.keys()) if isinstance(sparse, dict) else frozenset())


def _observe(instance: Any, args: Args, kwargs: Kwargs, facts: Callable[[], _Facts | None]) -> None:
    """Remember what an application's own call revealed of a remote collection (``facts`` is
    computed only then: a local client's facts are read in place when needed)."""
    if not _is_local(instance):
        _remember(instance, _collection_arg(args, kwargs), facts())


def _observe_info(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """The application's own ``get_collection``: its answer is kept (no request of ours)."""
    result = wrapped(*args, **kwargs)
    guard("qdrant.observe", _observe, instance, args, kwargs, lambda: _facts_of(result, local=False))
    return result


async def _aobserve_info(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    result = await wrapped(*args, **kwargs)
    guard("qdrant.observe", _observe, instance, args, kwargs, lambda: _facts_of(result, local=False))
    return result


def _observe_create(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """The application's own ``create_collection``: the vector config it gave is the distance."""
    result = wrapped(*args, **kwargs)
    guard("qdrant.observe", _observe, instance, args, kwargs, lambda: _created(args, kwargs))
    return result


async def _aobserve_create(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    result = await wrapped(*args, **kwargs)
    guard("qdrant.observe", _observe, instance, args, kwargs, lambda: _created(args, kwargs))
    return result


def _facts(instance: Any, collection: str | None) -> _Facts | None:
    """Local facts read in place from the client's memory; remote ones only as the application's
    own calls revealed them. Never a request."""
    if collection is None:
        return None
    if _is_local(instance):
        facts = _local_config(instance, collection)
        if facts is not None:
            facts.points_count = _local_count(instance, collection)
        return facts
    return _cached(instance, collection)


# the async client reads the same way: nothing is awaited, nothing is asked
_afacts = _facts
