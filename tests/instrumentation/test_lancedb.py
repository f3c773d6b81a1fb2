"""LanceDB (embedded) vector, full-text and hybrid searches as ragtrail ``retrieve`` stages, against
the real engine in a temporary directory. Exact attributes; the rows the app gets and the queries the
table executes are the same with and without ragtrail."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

lancedb = pytest.importorskip("lancedb")
np = pytest.importorskip("numpy")

from opentelemetry.instrumentation.utils import suppress_instrumentation  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

import spanutil  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.contract.receipts import content_id  # noqa: E402
from ragtrail.instrumentation.lancedb import LanceDBInstrumentor  # noqa: E402
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
def db(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from lancedb.index import FTS

    connection = lancedb.connect(str(tmp_path_factory.mktemp("lance")))
    tbl = connection.create_table("items", data=[{"id": i, "text": t, "category": c, "vector": v} for i, t, c, v in ROWS])
    tbl.create_index("text", config=FTS())
    connection.create_table("docs", data=[{"doc_id": f"d{i}", "body": t, "vector": v} for i, t, _c, v in ROWS])
    return connection


@pytest.fixture
def table(db: Any) -> Any:
    return db.open_table("items")


@pytest.fixture
def instrumentor(tracer_provider) -> Iterator[LanceDBInstrumentor]:
    inst = LanceDBInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield inst
    inst.uninstrument()


def retrieve_spans(exporter: Any) -> list[Any]:
    return spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)


def bare(run: Any) -> Any:
    with suppress_instrumentation():
        return run()


def expect(rows: list[dict[str, Any]], **kw: Any) -> Expected:
    kw.setdefault("component", "lancedb.LanceVectorQueryBuilder")
    kw.setdefault("collection", "items")
    kw.setdefault("kind", sc.SCORE_DISTANCE)
    score = {"distance": "_distance", "bm25": "_score"}.get(kw["kind"], "_relevance_score")
    return Expected(ids=[str(r["id"]) for r in rows], scores=[r[score] for r in rows], contents=[r["text"] for r in rows], **kw)


def test_vector_search_with_where_and_limit_exact_span(table, instrumentor, span_exporter) -> None:
    def search() -> Any:
        return table.search(QUERY).where("category = 'pets'").limit(2).to_list()

    expected = bare(search)
    rows = search()
    assert rows == expected and [r["id"] for r in rows] == [101, 202]
    [span] = retrieve_spans(span_exporter)
    assert span.name == "retrieve LanceVectorQueryBuilder"
    check_span(
        span,
        span_exporter.get_finished_spans(),
        expect(rows, top_k=2, vector=QUERY, filter_json='{"where":"category = \'pets\'"}'),
    )


def test_every_result_form_records_once(table, instrumentor, span_exporter) -> None:
    builder = table.search(QUERY).limit(3)
    frame = builder.to_pandas()
    assert list(frame["id"]) == [101, 202, 505]
    assert builder.to_arrow().num_rows == 3
    assert len(builder.to_list()) == 3
    assert len(retrieve_spans(span_exporter)) == 3


def test_cosine_distance_and_postfilter(table, instrumentor, span_exporter) -> None:
    rows = table.search(QUERY).distance_type("cosine").where("id > 200", prefilter=False).limit(2).to_list()
    assert rows == bare(lambda: table.search(QUERY).distance_type("cosine").where("id > 200", prefilter=False).limit(2).to_list())
    [span] = retrieve_spans(span_exporter)
    check_span(span, span_exporter.get_finished_spans(), expect(rows, top_k=2, vector=QUERY, filter_json='{"postfilter":true,"where":"id > 200"}'))


def test_full_text_search_is_bm25(table, instrumentor, span_exporter) -> None:
    rows = table.search("cats", query_type="fts").limit(2).to_list()
    assert [r["id"] for r in rows] == [101]
    [span] = retrieve_spans(span_exporter)
    check_span(
        span, span_exporter.get_finished_spans(), expect(rows, component="lancedb.LanceFtsQueryBuilder", kind=sc.SCORE_BM25, top_k=2, text="cats")
    )


def test_hybrid_search_is_one_rrf_stage(table, instrumentor, span_exporter) -> None:
    def search() -> Any:
        return table.search(query_type="hybrid").vector(QUERY).text("cats").limit(3).to_list()

    expected = bare(search)
    rows = search()
    assert [r["id"] for r in rows] == [r["id"] for r in expected]
    [span] = retrieve_spans(span_exporter)  # the legs, run in LanceDB's thread pool, are not stages
    check_span(
        span,
        span_exporter.get_finished_spans(),
        expect(rows, component="lancedb.LanceHybridQueryBuilder", kind=sc.SCORE_RRF, top_k=3, text="cats", vector=QUERY),
    )


def test_several_query_vectors_are_a_batch(table, instrumentor, span_exporter) -> None:
    queries = [QUERY, [0.0, 1.0, 0.0]]
    result = table.search(queries).limit(2).to_arrow().to_pylist()
    spans = span_exporter.get_finished_spans()
    stages = retrieve_spans(span_exporter)
    assert len(stages) == 2
    for index, span in enumerate(stages):
        rows = [r for r in result if r["query_index"] == index]
        check_span(span, spans, expect(rows, top_k=2, vector=queries[index], batch=(index, 2)))


def test_id_column_is_configurable(db, tracer_provider, span_exporter, monkeypatch) -> None:
    docs = db.open_table("docs")
    inst = LanceDBInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    try:
        rows = docs.search(QUERY).limit(2).to_list()
    finally:
        inst.uninstrument()
    monkeypatch.setenv("RAGTRAIL_LANCEDB_ID_COLUMN", "doc_id")
    inst.instrument(tracer_provider=tracer_provider)
    try:
        again = docs.search(QUERY).limit(2).to_list()
    finally:
        inst.uninstrument()
    assert rows == again
    first, second = retrieve_spans(span_exporter)
    spans = span_exporter.get_finished_spans()
    # no "id" column: the rows are identified by their content ("body"), said in a finding
    check_span(
        first,
        spans,
        Expected(
            component="lancedb.LanceVectorQueryBuilder",
            collection="docs",
            ids=[content_id(r["body"]) for r in rows],
            kind=sc.SCORE_DISTANCE,
            scores=[r["_distance"] for r in rows],
            contents=[r["body"] for r in rows],
            top_k=2,
            vector=QUERY,
            findings=(
                "no column named 'id': the 2 rows are identified by the sha256 of their content (RAGTRAIL_LANCEDB_ID_COLUMN names the id column)",
            ),
        ),
    )
    check_span(
        second,
        spans,
        Expected(
            component="lancedb.LanceVectorQueryBuilder",
            collection="docs",
            ids=[r["doc_id"] for r in again],
            kind=sc.SCORE_DISTANCE,
            scores=[r["_distance"] for r in again],
            contents=[r["body"] for r in again],
            top_k=2,
            vector=QUERY,
        ),
    )


def test_no_extra_queries_on_the_engine(table, tracer_provider, span_exporter, monkeypatch) -> None:
    calls: list[str] = []
    cls = type(table)
    for name in ("_execute_query", "count_rows", "to_arrow", "_output_schema"):
        original = getattr(cls, name)

        def counted(self: Any, *args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
            calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, counted)

    def workload() -> list[str]:
        calls.clear()
        table.search(QUERY).where("category = 'news'").limit(2).to_list()
        table.search("dogs", query_type="fts").limit(2).to_pandas()
        table.search(query_type="hybrid").vector(QUERY).text("cats").limit(3).to_list()
        return list(calls)

    without = workload()
    inst = LanceDBInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    try:
        with_ragtrail = workload()
    finally:
        inst.uninstrument()
    assert sorted(with_ragtrail) == sorted(without) and len(without) == 5
    assert len(retrieve_spans(span_exporter)) == 3


def test_failing_query_raises_the_same_and_uninstrument_restores(table, instrumentor, span_exporter) -> None:
    with pytest.raises(Exception) as plain:
        bare(lambda: table.search(QUERY).where("nowhere = 1").limit(2).to_list())
    with pytest.raises(type(plain.value)) as caught:
        table.search(QUERY).where("nowhere = 1").limit(2).to_list()
    assert str(caught.value) == str(plain.value)
    [span] = retrieve_spans(span_exporter)
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes[sc.STAGE_STATUS] == sc.STATUS_FAILED
    instrumentor.uninstrument()
    table.search(QUERY).limit(1).to_list()
    assert len(retrieve_spans(span_exporter)) == 1
