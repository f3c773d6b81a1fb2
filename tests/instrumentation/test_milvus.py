"""Milvus Lite (pymilvus' MilvusClient on a local ``.db`` file: the real engine, started by pymilvus
in a subprocess) searches as ragtrail ``retrieve`` stages. Exact attributes; the hits the app gets
and the requests the client sends are the same with and without ragtrail."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pymilvus = pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from opentelemetry.instrumentation.utils import suppress_instrumentation  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

import spanutil  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.milvus import UNKNOWN_METRIC, MilvusInstrumentor  # noqa: E402
from storeutil import Expected, check_span  # noqa: E402

ROWS = [
    (101, "cats purr", "pets", [1.0, 0.0, 0.0]),
    (202, "dogs bark", "pets", [0.8, 0.6, 0.0]),
    (303, "stocks fell", "news", [0.0, 1.0, 0.0]),
    (404, "rain tomorrow", "news", [0.0, 0.0, 1.0]),
    (505, "fish swim", "pets", [0.6, 0.0, 0.8]),
]
QUERY = [0.9, 0.1, 0.1]


@pytest.fixture(scope="module")
def db_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("milvus") / "milvus.db"


@pytest.fixture(scope="module")
def instrumentor(db_path: Path) -> Iterator[MilvusInstrumentor]:
    """Instrumented before the collections are made: the app's own create_collection tells the metric."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    inst = MilvusInstrumentor()
    inst.instrument(tracer_provider=provider)
    inst.exporter = exporter
    yield inst
    inst.uninstrument()


@pytest.fixture(scope="module")
def client(db_path: Path, instrumentor: MilvusInstrumentor) -> Iterator[Any]:
    c = pymilvus.MilvusClient(str(db_path))
    data = [{"id": i, "vector": v, "text": t, "category": g} for i, t, g, v in ROWS]
    c.create_collection("items", dimension=3)  # COSINE, the quick-setup default
    c.insert("items", data)
    c.create_collection("items_l2", dimension=3, metric_type="L2")
    c.insert("items_l2", data)
    yield c
    c.close()


@pytest.fixture
def exporter(instrumentor: MilvusInstrumentor) -> Iterator[Any]:
    instrumentor.exporter.clear()
    yield instrumentor.exporter


def retrieve_spans(exporter: Any) -> list[Any]:
    return spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)


def bare(run: Any) -> Any:
    with suppress_instrumentation():
        return run()


def expect(hits: list[Any], **kw: Any) -> Expected:
    kw.setdefault("component", "pymilvus.MilvusClient.search")
    kw.setdefault("collection", "items")
    kw.setdefault("kind", sc.SCORE_SIMILARITY)
    text = [h["entity"]["text"] for h in hits] if all("text" in h["entity"] for h in hits) else None
    return Expected(ids=[str(h["id"]) for h in hits], scores=[h["distance"] for h in hits], contents=text, **kw)


def test_cosine_search_with_filter_and_output_fields_exact_span(client, exporter) -> None:
    def search() -> Any:
        return client.search("items", data=[QUERY], filter='category == "pets"', limit=2, output_fields=["text"])

    expected = bare(search)
    [hits] = search()
    assert [h["id"] for h in hits] == [h["id"] for h in expected[0]] == [101, 202]
    assert [h["distance"] for h in hits] == [h["distance"] for h in expected[0]]
    [span] = retrieve_spans(exporter)
    assert span.name == "retrieve search"
    check_span(span, exporter.get_finished_spans(), expect(hits, top_k=2, vector=QUERY, filter_json='{"filter":"category == \\"pets\\""}'))


def test_l2_metric_is_a_distance_and_partitions_are_part_of_the_filter(client, exporter) -> None:
    [hits] = client.search("items_l2", data=[QUERY], filter='category == "pets"', limit=3, output_fields=["text"], partition_names=["_default"])
    assert [h["id"] for h in hits] == [101, 202, 505]
    assert hits[0]["distance"] < hits[1]["distance"]
    [span] = retrieve_spans(exporter)
    check_span(
        span,
        exporter.get_finished_spans(),
        expect(
            hits,
            collection="items_l2",
            kind=sc.SCORE_DISTANCE,
            top_k=3,
            vector=QUERY,
            filter_json='{"filter":"category == \\"pets\\"","partition_names":["_default"]}',
        ),
    )


def test_several_query_vectors_are_a_batch_and_no_output_fields_means_no_content(client, exporter) -> None:
    queries = [QUERY, [0.0, 1.0, 0.0]]
    result = client.search("items", data=queries, limit=2)
    spans = exporter.get_finished_spans()
    stages = retrieve_spans(exporter)
    assert len(stages) == 2
    for index, span in enumerate(stages):
        check_span(span, spans, expect(list(result[index]), top_k=2, vector=queries[index], batch=(index, 2)))


def test_metric_named_in_search_params_wins(client, exporter) -> None:
    [hits] = client.search("items_l2", data=[QUERY], limit=1, search_params={"metric_type": "L2"}, output_fields=["text"])
    [span] = retrieve_spans(exporter)
    check_span(span, exporter.get_finished_spans(), expect(hits, collection="items_l2", kind=sc.SCORE_DISTANCE, top_k=1, vector=QUERY))


def test_a_collection_ragtrail_did_not_see_made_has_an_unknown_kind(db_path, exporter) -> None:
    """A second client of the same file: ragtrail saw no create_collection through it, and asks nothing."""
    other = pymilvus.MilvusClient(str(db_path))
    try:
        [hits] = other.search("items", data=[QUERY], limit=2, output_fields=["text"])
        assert other.describe_index("items", "vector")["metric_type"] == "COSINE"
        [again] = other.search("items", data=[QUERY], limit=2, output_fields=["text"])
    finally:
        other.close()
    first, second = retrieve_spans(exporter)
    spans = exporter.get_finished_spans()
    check_span(first, spans, expect(hits, kind=sc.SCORE_NONE, top_k=2, vector=QUERY, findings=(UNKNOWN_METRIC,)))
    # the application's own describe_index told it
    check_span(second, spans, expect(again, top_k=2, vector=QUERY))


def test_no_extra_requests_to_milvus(client, db_path, exporter) -> None:
    from pymilvus.client.grpc_handler import GrpcHandler

    calls: list[str] = []
    names = [n for n, v in vars(GrpcHandler).items() if callable(v) and not n.startswith("_")]
    originals = {n: getattr(GrpcHandler, n) for n in names}

    def counting(name: str) -> Any:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return originals[name](self, *args, **kwargs)

        return call

    def workload() -> list[str]:
        calls.clear()
        client.search("items", data=[QUERY], filter='category == "pets"', limit=2, output_fields=["text"])
        client.search("items_l2", data=[QUERY, QUERY], limit=3)
        return list(calls)

    for n in names:
        setattr(GrpcHandler, n, counting(n))
    try:
        with_ragtrail = workload()
        without = bare(workload)
    finally:
        for n, fn in originals.items():
            setattr(GrpcHandler, n, fn)
    assert with_ragtrail == without == ["search", "search"]
    assert len(retrieve_spans(exporter)) == 3


def test_failing_search_raises_the_same(client, exporter) -> None:
    with pytest.raises(Exception) as plain:
        bare(lambda: client.search("nowhere", data=[QUERY], limit=2))
    with pytest.raises(type(plain.value)) as caught:
        client.search("nowhere", data=[QUERY], limit=2)
    assert str(caught.value) == str(plain.value)
    [span] = retrieve_spans(exporter)
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes[sc.STAGE_STATUS] == sc.STATUS_FAILED


def test_async_client_search_is_a_stage(client, db_path, exporter) -> None:
    """``AsyncMilvusClient.search``: the same stage, covering the awaited call (the metric named in
    ``search_params``: ragtrail saw this client create nothing)."""
    import asyncio

    async def main() -> Any:
        aclient = pymilvus.AsyncMilvusClient(str(db_path))
        try:
            return await aclient.search("items_l2", data=[QUERY], limit=2, output_fields=["text"], search_params={"metric_type": "L2"})
        finally:
            await aclient.close()

    [hits] = asyncio.run(main())
    [span] = retrieve_spans(exporter)
    check_span(
        span,
        exporter.get_finished_spans(),
        expect(list(hits), component="pymilvus.AsyncMilvusClient.search", collection="items_l2", kind=sc.SCORE_DISTANCE, top_k=2, vector=QUERY),
    )
