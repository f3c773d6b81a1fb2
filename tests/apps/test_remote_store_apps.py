"""The remote stores' documentation apps (Elasticsearch kNN/hybrid/RRF, OpenSearch k-NN, Pinecone's
quickstart) run plain and under ``opentelemetry-instrument``, read back with the real ``ragtrail``
CLI. The services cannot run here: each app reaches a loopback HTTP server (tests/loopback_http.py)
through its documented configuration (``ELASTICSEARCH_URL``, ``OPENSEARCH_HOST``/``OPENSEARCH_PORT``,
``PINECONE_CONTROLLER_HOST``), answering with the services' documented response bodies
(tests/service_responses.py). Both runs send the same requests (ragtrail adds none); the app's
output is untouched; ``verify`` raises no alarm; the manifest has the engine's ids, scores and kinds,
k, num_candidates and filters, the query hop, and says what server-side fusion hides."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.apps.runner import AppRun, assert_host_untouched, run_app
from tests.apps.test_embedded_store_apps import manifests

from loopback_http import Loopback, serve
from service_responses import (
    Response,
    es_acknowledged,
    es_bulk,
    es_hit,
    es_index_created,
    es_index_not_found,
    es_refreshed,
    es_search,
    pinecone_error,
    pinecone_index_model,
    pinecone_match,
    pinecone_query,
    pinecone_stats,
    pinecone_upserted,
)


def run_against(
    app: str, tmp_path: Path, respond: Callable[[str, str, Any], Response], enabled: str, env: Callable[[Loopback], dict[str, str]]
) -> tuple[AppRun, Loopback]:
    with serve(respond) as server:
        run = run_app(app, tmp_path, enabled=[enabled], extra_env=env(server))
    half = len(server.requests) // 2
    assert half and server.requests[:half] == server.requests[half:]  # the instrumented run sent exactly the plain run's requests
    return run, server


def printed(run: AppRun, label: str) -> list[tuple[str, float]]:
    return [(p[1], float(p[2])) for p in (line.split(" ") for line in run.stdout.splitlines()) if p[0] == label]


def only_stage(m: dict[str, Any]) -> dict[str, Any]:
    [stage] = m["stages"]
    assert (stage["kind"], stage["status"], stage["excluded_count"]) == ("retrieve", "ok", 0)
    assert m["coverage"]["corpus_size"] is None  # hits.total / the response count matches, never the corpus
    return stage


# --- Elasticsearch ---------------------------------------------------------------------------------

ES_DOCS = {
    "1": {"image-vector": [1, 5, -20], "title": "moose family", "file-type": "jpg"},
    "2": {"image-vector": [42, 8, -15], "title": "alpine lake", "file-type": "png"},
    "3": {"image-vector": [15, 11, 23], "title": "full moon", "file-type": "jpg"},
}


def es_hits(scored: list[tuple[str, float]], fields: list[str] | None = None) -> list[dict[str, Any]]:
    hits = []
    for ident, score in scored:
        hit = es_hit("image-index", ident, score, ES_DOCS[ident])
        if fields:
            hit["fields"] = {f: [ES_DOCS[ident][f]] for f in fields}
        hits.append(hit)
    return hits


def es_respond(method: str, path: str, body: Any) -> Response:
    """What a cluster holding the guide's three documents answers (l2_norm kNN scores are
    1 / (1 + squared distance); RRF with rank_constant 20 scores 1/(20 + rank) per retriever)."""
    if method == "PUT" and path == "/image-index":
        return es_index_created("image-index")
    if path.endswith("/_bulk"):
        return es_bulk(body, index="image-index")
    if path.endswith("/_refresh"):
        return es_refreshed()
    if "retriever" in body:  # alpine lake first in both retrievers; the others only in the kNN one
        return es_search(es_hits([("2", 2 / 21), ("3", 1 / 22), ("1", 1 / 23)]))
    if "query" in body:  # 0.9 x BM25 of "lake" + 0.1 x kNN similarity, summed by the server
        return es_search(es_hits([("2", 0.88306075), ("3", 4.6554e-05), ("1", 3.1656e-05)]))
    if "filter" in body["knn"]:
        return es_search(es_hits([("2", 1 / 318)], body.get("fields")))
    return es_search(es_hits([("1", 1 / 117), ("3", 1 / 1630), ("2", 1 / 2220)], body.get("fields")))


def test_elasticsearch_knn_guide_app(tmp_path: Path) -> None:
    pytest.importorskip("elasticsearch")
    from ragtrail.instrumentation.elasticsearch import FUSED, RRF_HIDDEN

    run, server = run_against("elasticsearch_knn.py", tmp_path, es_respond, "ragtrail_elasticsearch", lambda s: {"ELASTICSEARCH_URL": s.url})
    assert_host_untouched(run)
    searches = [r for r in server.requests if r[1] == "/image-index/_search"]
    assert len(searches) == 8  # 4 searches, in each run
    knn, filtered, hybrid, rrf = (only_stage(m) for m in manifests(run))
    for stage in (knn, filtered, hybrid, rrf):
        assert (stage["component"], stage["collection"]) == ("elasticsearch.Elasticsearch.search", "image-index")
    for stage, label, kind in ((knn, "knn", "similarity"), (filtered, "filtered", "similarity"), (hybrid, "hybrid", "none"), (rrf, "rrf", "rrf")):
        got = [(c["id"], c["score"], c["score_kind"], c["rank"]) for c in stage["candidates"]]
        assert got == [(i, pytest.approx(s), kind, r) for r, (i, s) in enumerate(printed(run, label))], label
    # kNN alone: k is the top_k, num_candidates and the field in the filter JSON, the vector a receipt only
    assert knn["knobs"] == {"top_k": 10} and knn["findings"] == []
    assert knn["filter"] == '{"knn":[{"field":"image-vector","k":10,"num_candidates":100}]}'
    assert knn["query"] is None  # a vector, receipted on the span only: no query text, no hop
    assert filtered["knobs"] == {"top_k": 5} and filtered["findings"] == []
    assert filtered["filter"] == '{"knn":[{"field":"image-vector","filter":{"term":{"file-type":"png"}},"k":5,"num_candidates":50}]}'
    # hybrid: the server summed the boosted legs: a fused score of no kind, and the finding says so
    assert hybrid["knobs"] == {"top_k": 10} and hybrid["findings"] == [FUSED]
    assert hybrid["query"]["text"] == "mountain lake" and hybrid["query"]["hop"] == 0
    assert hybrid["filter"] == (
        '{"knn":[{"boost":0.1,"field":"image-vector","k":5,"num_candidates":50}],"query":{"match":{"title":{"boost":0.9,"query":"mountain lake"}}}}'
    )
    # RRF retriever: the fused rank's score, kind rrf; what it hides (each retriever's own list) is said
    assert rrf["knobs"] == {"top_k": 3} and rrf["findings"] == [RRF_HIDDEN]
    # the query is the standard retriever's match text (hop 0), the kNN retriever's vector a receipt
    assert rrf["query"]["text"] == "mountain lake" and rrf["query"]["hop"] == 0
    assert all(c["hop"] == 0 for c in rrf["candidates"])
    assert rrf["filter"] == (
        '{"retriever":{"rrf":{"rank_constant":20,"rank_window_size":50,"retrievers":[{"standard":{"query":{"match":{"title":"mountain lake"}}}},'
        '{"knn":{"field":"image-vector","k":5,"num_candidates":50}}]}}}'
    )


# --- OpenSearch ------------------------------------------------------------------------------------

HOTELS = {
    "1": ([5.2, 4.4], "true", 5),
    "2": ([5.2, 3.9], "false", 4),
    "3": ([4.9, 3.4], "true", 9),
    "4": ([4.2, 4.6], "false", 6),
    "5": ([3.3, 4.5], "true", 8),
    "6": ([6.4, 3.4], "true", 9),
}


def hotel_hits(scored: list[tuple[str, float]]) -> list[dict[str, Any]]:
    return [es_hit("hotels-index", i, s, {"location": HOTELS[i][0], "parking": HOTELS[i][1], "rating": HOTELS[i][2]}) for i, s in scored]


def os_respond(method: str, path: str, body: Any) -> Response:
    """What a cluster holding the samples' twelve hotels answers: l2 scores 1 / (1 + squared distance)
    to [5, 4], as in the efficient-filter sample's documented output (3, 6, 5: 0.72992706, ...)."""
    if path == "/hotels-index" and method == "HEAD":
        return es_index_not_found("hotels-index", headers={})
    if path == "/hotels-index":
        return es_index_created("hotels-index", headers={}) if method == "PUT" else es_acknowledged(headers={})
    if path.endswith("/_bulk"):
        return es_bulk(body, headers={})
    if path.endswith("/_refresh"):
        return es_refreshed(headers={})
    query = body["query"]
    if "bool" in query:  # k=5 nearest (2, 1, 3, 4, 6), then the post-filter keeps those with parking
        return es_search(hotel_hits([("1", 0.8333333), ("3", 0.72992706), ("6", 0.3012048)]), headers={})
    if "filter" in query["knn"]["location"]:
        return es_search(hotel_hits([("3", 0.72992706), ("6", 0.3012048), ("5", 0.24154587)]), headers={})
    return es_search(hotel_hits([("2", 0.95238096), ("1", 0.8333333), ("3", 0.72992706)]), headers={})


def test_opensearch_knn_guide_app(tmp_path: Path) -> None:
    pytest.importorskip("opensearchpy")

    def env(server: Loopback) -> dict[str, str]:
        host, port = server.url.removeprefix("http://").split(":")
        return {"HOST": host, "PORT": port}

    run, server = run_against("opensearch_knn.py", tmp_path, os_respond, "ragtrail_opensearch", env)
    assert_host_untouched(run)
    assert len([r for r in server.requests if r[1] == "/hotels-index/_search"]) == 6  # 3 searches, in each run
    knn, efficient, boolean = (only_stage(m) for m in manifests(run))
    for stage, label in ((knn, "knn"), (efficient, "efficient"), (boolean, "boolean")):
        assert (stage["component"], stage["collection"]) == ("opensearchpy.OpenSearch.search", "hotels-index")
        # a k-NN query alone, or one whose bool only filters: the score is the k-NN's similarity
        got = [(c["id"], c["score"], c["score_kind"], c["rank"]) for c in stage["candidates"]]
        assert got == [(i, pytest.approx(s), "similarity", r) for r, (i, s) in enumerate(printed(run, label))], label
        assert stage["findings"] == [] and stage["query"] is None  # the vector is a receipt on the span, no text
    assert knn["knobs"] == {"top_k": 3} and knn["filter"] == '{"query":{"knn":{"location":{"k":3}}}}'
    assert efficient["knobs"] == {"top_k": 3}
    assert efficient["filter"] == (
        '{"query":{"knn":{"location":{"filter":{"bool":{"must":[{"range":{"rating":{"gte":8,"lte":10}}},{"term":{"parking":"true"}}]}},"k":3}}}}'
    )
    # the post-filter: k=5 asked, 3 came back (the filter ran after the k-NN): top_k is the k asked
    assert boolean["knobs"] == {"top_k": 5} and boolean["out"] == 3
    assert boolean["filter"] == '{"query":{"bool":{"filter":{"bool":{"must":[{"term":{"parking":"true"}}]}},"must":{"knn":{"location":{"k":5}}}}}}'


# --- Pinecone --------------------------------------------------------------------------------------

PINECONE = {
    "example-namespace1": {"vec1": ([1.0, 1.5], "drama"), "vec2": ([2.0, 1.0], "documentary"), "vec3": ([0.1, 3.0], "documentary")},
    "example-namespace2": {"vec1": ([1.0, -2.5], "drama"), "vec2": ([3.0, -2.0], "documentary"), "vec3": ([0.5, -1.5], "comedy")},
}


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (math.hypot(*a) * math.hypot(*b))


def pinecone_respond(method: str, path: str, body: Any) -> Response:
    """Pinecone's control plane (the index "quickstart", ready, its host this same server) and data
    plane over the quickstart's records: cosine scores, the metadata filter's $eq applied."""
    if path == "/indexes":
        return 201, pinecone_index_model("quickstart", PINECONE_HOST[0], dimension=2, metric="cosine"), {}
    if path == "/indexes/quickstart":
        return 200, pinecone_index_model("quickstart", PINECONE_HOST[0], dimension=2, metric="cosine"), {}
    if path == "/vectors/upsert":
        return pinecone_upserted(len(body["vectors"]))
    if path == "/describe_index_stats":
        return pinecone_stats({ns: len(records) for ns, records in PINECONE.items()}, dimension=2)
    if path != "/query":
        return pinecone_error(404, 5, "Not Found")
    records = PINECONE[body["namespace"]]
    wanted = (body.get("filter") or {}).get("genre", {}).get("$eq")
    scored = sorted(((cosine(body["vector"], v), i) for i, (v, genre) in records.items() if wanted in (None, genre)), reverse=True)
    return pinecone_query([pinecone_match(i, s, {"genre": records[i][1]}, records[i][0]) for s, i in scored], body)


PINECONE_HOST = [""]


def test_pinecone_quickstart_app(tmp_path: Path) -> None:
    pytest.importorskip("pinecone")

    def env(server: Loopback) -> dict[str, str]:
        PINECONE_HOST[0] = server.url
        # no metric told: the app's own create_index / describe_index answers say "cosine" (ragtrail asks Pinecone nothing)
        return {"PINECONE_CONTROLLER_HOST": server.url, "PINECONE_API_KEY": "test-key"}

    run, server = run_against("pinecone_quickstart.py", tmp_path, pinecone_respond, "ragtrail_pinecone", env)
    assert_host_untouched(run)
    assert run.stdout.splitlines()[0] == "vectors 6"
    assert len([r for r in server.requests if r[1] == "/query"]) == 6  # 3 queries, in each run
    ns1, ns2, filtered = (only_stage(m) for m in manifests(run))
    for stage, label, namespace in (
        (ns1, "ns1", "example-namespace1"),
        (ns2, "ns2", "example-namespace2"),
        (filtered, "filtered", "example-namespace1"),
    ):
        assert (stage["component"], stage["collection"]) == ("pinecone.Index.query", namespace)
        got = [(c["id"], c["score"], c["score_kind"], c["rank"]) for c in stage["candidates"]]
        assert got == [(i, pytest.approx(s), "similarity", r) for r, (i, s) in enumerate(printed(run, label))], label
        assert stage["knobs"] == {"top_k": 3} and stage["findings"] == [] and stage["query"] is None  # a vector: receipted only
    # the same ids in two namespaces are two records: the namespace is the collection
    assert [c["id"] for c in ns1["candidates"]] == ["vec1", "vec2", "vec3"] and [c["id"] for c in ns2["candidates"]] == ["vec1", "vec3", "vec2"]
    assert ns1["filter"] is None and ns2["filter"] is None
    assert filtered["filter"] == '{"genre":{"$eq":"documentary"}}' and [c["id"] for c in filtered["candidates"]] == ["vec2", "vec3"]
