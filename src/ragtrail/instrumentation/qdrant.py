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
* Cost: nothing that waits on the network runs on the host's path, and nothing at all is awaited
  after the host's call returned (a cancellation there would lose a result that had arrived). A
  local client (``:memory:`` or a path) is in-process: its vector config is read in place and its
  exact count (``ragtrail.coverage.corpus_size``) taken after the call, synchronously (~20 µs for
  2k points; ``get_collection`` would deep-copy the config, ~10x that). A remote client's config is
  read with ``get_collection`` once per collection, off the query path (a daemon thread for
  ``QdrantClient``, a task on the running loop for ``AsyncQdrantClient``, with instrumentation
  suppressed) and cached for the client's life: until it arrives, and for
  ``RETRY_FAILED_READ_SECONDS`` after a failed read, the scores are recorded with kind ``none`` and
  a finding. The corpus size of a remote collection is not asked.
* The query is recorded as text for a ``Document``/``TextQuery`` (inference) query, as a vector
  receipt for a dense vector; a point-id query records neither.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping

from ragtrail.contract import semconv as sc
from ragtrail.recorder.candidates import Candidate, normalize_id
from ragtrail.instrumentation._base import RagtrailInstrumentor
from ragtrail.instrumentation._hook import bind, guard, record_internal_error
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
from ragtrail.contract.receipts import canonical_json, content_id

_KEY = "ragtrail.qdrant"
_METHODS = ("query_points", "query_batch_points", "query_points_groups")


@dataclass
class _Facts:
    """What the collection's config says about scores, and its size when that was cheap to learn."""

    vectors: Any = None
    sparse: frozenset[str] = frozenset()
    points_count: int | None = None


# a remote collection's config while its read is in flight: no score kind yet
_PENDING = _Facts()
# remote clients: collection name -> (facts, _PENDING while read, None after a failed read; monotonic time)
_remote_facts: "weakref.WeakKeyDictionary[Any, dict[str, tuple[_Facts | None, float]]]" = weakref.WeakKeyDictionary()
_remote_lock = threading.Lock()
_reads: set["asyncio.Task[None]"] = set()  # background config reads on the host's loop (strong refs)
RETRY_FAILED_READ_SECONDS = 60.0


class QdrantInstrumentor(RagtrailInstrumentor):
    """Records Qdrant queries (sync and async clients) as retrieve stages."""

    _instruments: Collection[str] = ("qdrant-client >= 1.12",)

    def _patch(self, **kwargs: Any) -> None:
        # patched when the application imports them: qdrant-client takes ~0.8 s to import
        self.when_imported("qdrant_client.qdrant_client", lambda: self._patch_module(False))
        self.when_imported("qdrant_client.async_qdrant_client", lambda: self._patch_module(True))

    def _patch_module(self, is_async: bool) -> None:
        from qdrant_client.http.models import ScoredPoint

        self.register_adapter(ScoredPoint, point_candidate)
        module = "qdrant_client.async_qdrant_client" if is_async else "qdrant_client.qdrant_client"
        owner = "AsyncQdrantClient" if is_async else "QdrantClient"
        for method in _METHODS:
            self.wrap(module, f"{owner}.{method}", self._async(method) if is_async else self._sync(method))

    def _sync(self, method: str) -> Callable[..., Any]:
        def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
            return call_through(_KEY, lambda: _start(self.tracer, method, wrapped, instance, args, kwargs),
                                wrapped, args, kwargs, lambda stages, result: _complete(stages, result, instance, _facts))

        return wrapper

    def _async(self, method: str) -> Callable[..., Any]:
        async def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
            # nothing is awaited after the result has arrived: it is the host's
            return await acall_through(_KEY, lambda: _start(self.tracer, method, wrapped, instance, args, kwargs),
                                       wrapped, args, kwargs, lambda stages, result: _complete(stages, result, instance, _afacts))

        return wrapper


def _complete(stages: "_QdrantStages", result: Any, instance: Any,
              facts_of: Callable[[Any, str | None], "_Facts | None"]) -> None:
    """Read the collection's facts (local or cached: never a wait on the network) and record the
    result (the hook skeleton ends the stages whatever happens here)."""
    facts = guard("qdrant.facts", facts_of, instance, stages.collection) if stages.active else None
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
    requests: list[dict[str, Any]]


def _start(tracer: Any, method: str, wrapped: Callable[..., Any], instance: Any, args: tuple,
           kwargs: dict) -> _QdrantStages:
    arguments = bind(wrapped, args, kwargs)
    collection = arguments.get("collection_name")
    stages = _QdrantStages(tracer, f"qdrant_client.{type(instance).__qualname__}.{method}",
                       collection=collection if isinstance(collection, str) else None)
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
    return stages.start(first)  # type: ignore[return-value]


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
    return Row(
        candidates=candidates,
        query=_query_of(request.get("query")),
        top_k=request.get("limit"),
        threshold=request.get("score_threshold"),
        filter=filter_json(request.get("filter")),
        # an unread request (an iterator was passed): assume the default vector's meaning
        score_kind=(_score_kind(request.get("query"), request.get("using"), request.get("prefetch"), facts)
                    if request else _vector_kind(None, facts)),
        attributes=attributes,
    )


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
            return _score_kind(getattr(first, "query", None), getattr(first, "using", None),
                               getattr(first, "prefetch", None), facts)
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
        candidates = []
        for point in lists[index]:
            candidate = point_candidate(point)
            candidate.score_kind = found.score_kind
            candidates.append(candidate)
        found.candidates = candidates
        if found.score_kind is None and candidates:
            found.findings.append("score kind unknown: the collection's config is still being read" if facts is _PENDING
                                  else "score kind unknown: the collection's distance could not be read")
        return found

    size = None
    if facts is not None and facts.points_count is not None:
        size = lambda: facts.points_count  # noqa: E731
    return Outcome(rows=len(lists), row=row, corpus_size=size)


def _is_local(client: Any) -> bool:
    from qdrant_client.local.async_qdrant_local import AsyncQdrantLocal
    from qdrant_client.local.qdrant_local import QdrantLocal

    return isinstance(getattr(client, "_client", None), (QdrantLocal, AsyncQdrantLocal))


def _facts_of(info: Any, local: bool) -> _Facts:
    params = info.config.params
    sparse = frozenset((params.sparse_vectors or {}).keys())
    return _Facts(vectors=params.vectors, sparse=sparse, points_count=info.points_count if local else None)


def _local_config(instance: Any, collection: str) -> _Facts | None:
    """The in-process collection's vector config, read in place: ``get_collection`` deep-copies the
    whole config and counts every point (measured ~10x the cost of ``count``). ``None`` when this
    qdrant-client lays its local mode out differently (then ``get_collection`` is used)."""
    try:
        config = instance._client._get_collection(collection).config
        return _Facts(vectors=config.vectors, sparse=frozenset((config.sparse_vectors or {}).keys()))
    except AttributeError:
        return None


def _local_count(instance: Any, collection: str) -> int | None:
    """The in-process collection's exact count, read in place (the async client's ``count`` is a
    coroutine, which must not be awaited after the host's call)."""
    try:
        return int(instance._client._get_collection(collection).count().count)
    except AttributeError:
        return None


def _cached(instance: Any, collection: str) -> tuple[bool, _Facts | None]:
    """A remote collection's config as read before (``_PENDING`` while the read is in flight); a
    failed read is retried after a while."""
    with _remote_lock:
        per_client = _remote_facts.get(instance)
        found = per_client.get(collection) if per_client is not None else None
    if found is None:
        return False, None
    facts, when = found
    if _expired(facts, when):
        return False, None
    return True, facts


def _expired(facts: _Facts | None, when: float) -> bool:
    """A failed read, or one still pending after ``RETRY_FAILED_READ_SECONDS`` (its thread or loop
    died), is asked again."""
    return (facts is None or facts is _PENDING) and time.monotonic() - when >= RETRY_FAILED_READ_SECONDS


def _claim(instance: Any, collection: str) -> bool:
    """Mark the collection's config as being read; False when another caller already claimed it."""
    try:
        with _remote_lock:
            per_client = _remote_facts.setdefault(instance, {})
            found = per_client.get(collection)
            if found is not None and not _expired(*found):
                return False
            per_client[collection] = (_PENDING, time.monotonic())
            return True
    except TypeError:  # pragma: no cover - a client that cannot be weakly referenced: never read
        return False


def _remember(instance: Any, collection: str, facts: _Facts | None) -> None:
    try:
        with _remote_lock:
            _remote_facts.setdefault(instance, {})[collection] = (facts, time.monotonic())
    except TypeError:  # pragma: no cover - a client that cannot be weakly referenced
        pass


def _forget_pending(instance: Any, collection: str) -> None:
    with _remote_lock:
        per_client = _remote_facts.get(instance)
        if per_client is not None and per_client.get(collection, (None,))[0] is _PENDING:
            del per_client[collection]


def _read_in_background(instance: Any, collection: str) -> None:
    """Read a remote collection's config on a daemon thread, with instrumentation suppressed (it is
    ragtrail's read, not the application's), for the queries that come after this one."""
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    def read() -> None:
        facts = None
        try:
            with suppress_instrumentation():
                facts = _facts_of(instance.get_collection(collection), local=False)
        except Exception as exc:
            record_internal_error("qdrant.read_config", exc)
        finally:
            _remember(instance, collection, facts)

    threading.Thread(target=read, name="ragtrail-qdrant-config", daemon=True).start()


def _aread_in_background(instance: Any, collection: str) -> None:
    """The async client's twin of :func:`_read_in_background`: a task on the running loop, in a
    fresh context. Cancelled with its loop, it leaves nothing cached (the next loop asks again)."""
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    async def read() -> None:
        facts = None
        try:
            with suppress_instrumentation():
                facts = _facts_of(await instance.get_collection(collection), local=False)
        except Exception as exc:
            record_internal_error("qdrant.read_config", exc)
        _remember(instance, collection, facts)

    def done(task: "asyncio.Task[None]") -> None:
        _reads.discard(task)
        if task.cancelled():  # possibly before it ever ran: nothing was read, nothing remembered
            _forget_pending(instance, collection)

    task = asyncio.get_running_loop().create_task(read(), context=contextvars.Context())
    _reads.add(task)
    task.add_done_callback(done)


def _facts(instance: Any, collection: str | None) -> _Facts | None:
    """``QdrantClient``: local facts read now, remote ones from the cache (read in the background)."""
    if collection is None:
        return None
    if _is_local(instance):
        facts = _local_config(instance, collection)
        if facts is None:
            return _facts_of(instance.get_collection(collection), local=True)
        facts.points_count = instance.count(collection, exact=True).count
        return facts
    hit, facts = _cached(instance, collection)
    if not hit:
        facts = _PENDING
        if _claim(instance, collection):
            _read_in_background(instance, collection)
    return facts


def _afacts(instance: Any, collection: str | None) -> _Facts | None:
    """``AsyncQdrantClient``: the same, without awaiting anything (local reads are in place)."""
    if collection is None:
        return None
    if _is_local(instance):
        facts = _local_config(instance, collection)
        if facts is not None:
            facts.points_count = _local_count(instance, collection)
            return facts
    hit, facts = _cached(instance, collection)
    if not hit:
        facts = _PENDING
        if _claim(instance, collection):
            _aread_in_background(instance, collection)
    return facts
