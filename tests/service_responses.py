"""The documented response shapes of the services that cannot run here (Elasticsearch, OpenSearch,
Pinecone), in one place: the instrumentation tests (tests/instrumentation/test_{elasticsearch,
opensearch,pinecone}.py) and the documentation apps (tests/apps/test_remote_store_apps.py) answer
through tests/loopback_http.py with these bodies only.

Shapes, from the services' API references:

* Elasticsearch / OpenSearch ``_search``: ``took``, ``timed_out``, ``_shards``, ``hits.total``
  (``value``, ``relation``), ``hits.max_score``, ``hits.hits[]`` (``_index``, ``_id``, ``_score``,
  ``_source``); an error: ``{"error": {"root_cause": [...], "type", "reason", ...}, "status"}``;
  ``_bulk``: ``took``, ``errors``, ``items[]``; index creation: ``acknowledged``,
  ``shards_acknowledged``, ``index``. Elasticsearch's client refuses a server without the
  ``X-Elastic-Product: Elasticsearch`` header.
* Pinecone data plane ``POST /query``: ``results``, ``matches[]`` (``id``, ``score``, ``values``,
  ``metadata`` only when asked), ``namespace``, ``usage.readUnits``; ``POST /vectors/upsert``:
  ``upsertedCount``; an error: ``{"code", "message", "details"}``. Control plane ``IndexModel``:
  ``name``, ``host``, ``status``, ``schema``, ``deployment``, ``deletion_protection``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

ES_HEADERS = {"X-Elastic-Product": "Elasticsearch"}
Response = tuple[int, Any, dict[str, str]]


def es_hit(index: str, ident: str, score: float | None, source: dict[str, Any]) -> dict[str, Any]:
    return {"_index": index, "_id": ident, "_score": score, "_source": source}


def es_search(hits: Sequence[dict[str, Any]], *, total: int | None = None, took: int = 5, headers: dict[str, str] | None = None) -> Response:
    """A ``_search`` answer; ``total`` is the matches count (``hits.total.value``), not the corpus."""
    scores = [h["_score"] for h in hits if h.get("_score") is not None]
    body = {
        "took": took,
        "timed_out": False,
        "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
        "hits": {
            "total": {"value": len(hits) if total is None else total, "relation": "eq"},
            "max_score": max(scores) if scores else None,
            "hits": list(hits),
        },
    }
    return 200, body, dict(ES_HEADERS if headers is None else headers)


def es_index_not_found(index: str, *, headers: dict[str, str] | None = None) -> Response:
    error = {"type": "index_not_found_exception", "reason": f"no such index [{index}]", "index": index}
    return 404, {"error": {"root_cause": [error], **error}, "status": 404}, dict(ES_HEADERS if headers is None else headers)


def es_index_created(index: str, *, headers: dict[str, str] | None = None) -> Response:
    return 200, {"acknowledged": True, "shards_acknowledged": True, "index": index}, dict(ES_HEADERS if headers is None else headers)


def es_bulk(ndjson: Any, *, index: str | None = None, headers: dict[str, str] | None = None) -> Response:
    """A ``_bulk`` answer: one ``index`` item per action line of the NDJSON request body."""
    import json

    lines = [json.loads(line) for line in str(ndjson).splitlines() if line.strip()] if isinstance(ndjson, str) else list(ndjson or [])
    items = []
    for line in lines[::2]:
        action = line.get("index", {})
        item = {"_index": action.get("_index", index), "_id": str(action.get("_id")), "_version": 1, "result": "created", "status": 201}
        items.append({"index": {**item, "_shards": {"total": 1, "successful": 1, "failed": 0}, "_seq_no": len(items), "_primary_term": 1}})
    return 200, {"took": 7, "errors": False, "items": items}, dict(ES_HEADERS if headers is None else headers)


def es_acknowledged(*, headers: dict[str, str] | None = None) -> Response:
    return 200, {"acknowledged": True}, dict(ES_HEADERS if headers is None else headers)


def es_refreshed(*, headers: dict[str, str] | None = None) -> Response:
    return 200, {"_shards": {"total": 1, "successful": 1, "failed": 0}}, dict(ES_HEADERS if headers is None else headers)


def pinecone_match(ident: str, score: float, metadata: dict[str, Any] | None = None, values: list[float] | None = None) -> dict[str, Any]:
    match: dict[str, Any] = {"id": ident, "score": score, "values": values or []}
    if metadata is not None:
        match["metadata"] = metadata
    return match


def pinecone_query(matches: Sequence[dict[str, Any]], body: dict[str, Any], *, read_units: int = 6) -> Response:
    """A ``/query`` answer for the request ``body``: the first ``topK`` matches, metadata only when
    ``includeMetadata`` was asked, values only when ``includeValues`` was (else ``[]``), the request's
    namespace echoed."""
    found = [dict(m) for m in matches[: body["topK"]]]
    for m in found:
        if not body.get("includeMetadata"):
            m.pop("metadata", None)
        if not body.get("includeValues"):
            m["values"] = []
    return 200, {"results": [], "matches": found, "namespace": body.get("namespace", ""), "usage": {"readUnits": read_units}}, {}


def pinecone_upserted(count: int) -> Response:
    return 200, {"upsertedCount": count}, {}


def pinecone_stats(namespaces: dict[str, int], *, dimension: int) -> Response:
    """A ``/describe_index_stats`` answer."""
    body = {
        "namespaces": {name: {"vectorCount": count} for name, count in namespaces.items()},
        "dimension": dimension,
        "indexFullness": 0.0,
        "totalVectorCount": sum(namespaces.values()),
        "metric": "cosine",
        "vectorType": "dense",
    }
    return 200, body, {}


def pinecone_error(status: int, code: int, message: str) -> Response:
    return status, {"code": code, "message": message, "details": []}, {}


def pinecone_index_model(name: str, host: str, *, dimension: int, metric: str) -> dict[str, Any]:
    """The control plane's ``IndexModel`` (API 2026-07, as pinecone 10 reads it): the dense field's
    dimension and metric sit in ``schema.fields``, the serverless spec is a managed ``deployment``."""
    return {
        "name": name,
        "host": host,
        "status": {"ready": True, "state": "Ready"},
        "schema": {"fields": {"values": {"type": "dense_vector", "dimension": dimension, "metric": metric}}},
        "deployment": {"deployment_type": "managed", "cloud": "aws", "region": "us-east-1"},
        "deletion_protection": "disabled",
        "tags": None,
    }
