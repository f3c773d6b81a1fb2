"""pgvector searches through psycopg2 cursors as ragtrail ``retrieve`` stages, against the real
PostgreSQL 18 with pgvector 0.8 of tests/pgutil.py. Exact attributes; the rows every fetch style
gets and the statements the server received are the same with and without ragtrail."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")
psycopg2 = pytest.importorskip("psycopg2")
pytest.importorskip("pgserver")
np = pytest.importorskip("numpy")
pgvector_psycopg2 = pytest.importorskip("pgvector.psycopg2")

import psycopg2.extras  # noqa: E402
from opentelemetry.instrumentation.utils import suppress_instrumentation  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

import spanutil  # noqa: E402
from pgutil import Postgres, running_postgres  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.contract.receipts import content_id  # noqa: E402
from ragtrail.instrumentation.psycopg2 import Psycopg2Instrumentor  # noqa: E402
from storeutil import Expected, check_span  # noqa: E402

ROWS = [
    (101, "cats purr", "pets", [1.0, 0.0, 0.0]),
    (202, "dogs bark", "pets", [0.8, 0.6, 0.0]),
    (303, "stocks fell", "news", [0.0, 1.0, 0.0]),
    (404, "rain tomorrow", "news", [0.0, 0.0, 1.0]),
    (505, "fish swim", "pets", [0.6, 0.0, 0.8]),
]
QUERY = np.array([0.9, 0.1, 0.1], dtype=np.float32)
FILTERED = "SELECT id, content, embedding <=> %s AS distance FROM items WHERE category = %s ORDER BY distance LIMIT %s"


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    with running_postgres() as server:
        with psycopg.connect(server.uri, autocommit=True) as conn:
            conn.execute("CREATE TABLE items (id bigint PRIMARY KEY, content text, category text, embedding vector(3))")
            for i, c, g, v in ROWS:
                conn.execute("INSERT INTO items VALUES (%s, %s, %s, %s::vector)", (i, c, g, str(v)))
        yield server


@pytest.fixture
def instrumentor(tracer_provider) -> Iterator[Psycopg2Instrumentor]:
    inst = Psycopg2Instrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield inst
    inst.uninstrument()


def connect(pg: Postgres, **kwargs: Any) -> Any:
    conn = psycopg2.connect(pg.uri, **kwargs)
    conn.autocommit = True
    pgvector_psycopg2.register_vector(conn)
    return conn


def retrieve_spans(exporter: Any) -> list[Any]:
    return spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)


def run(conn: Any, sql: str, params: Any) -> list[Any]:
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def expect(rows: list[Any], **kw: Any) -> Expected:
    kw.setdefault("component", "psycopg2.cursor")
    kw.setdefault("collection", "items")
    kw.setdefault("vector", QUERY)
    return Expected(**kw, ids=[str(r[0]) for r in rows], contents=[r[1] for r in rows])


def test_cosine_search_exact_span_and_rows_unchanged(pg, instrumentor, span_exporter) -> None:
    conn = connect(pg)
    params = (QUERY, "pets", 2)
    with suppress_instrumentation():
        expected = run(conn, FILTERED, params)
    before = pg.statements()
    rows = run(conn, FILTERED, params)
    assert pg.statements() - before == 1  # the app's one statement, nothing of ragtrail's
    assert rows == expected and [r[0] for r in rows] == [101, 202]
    [span] = retrieve_spans(span_exporter)
    assert span.name == "retrieve cursor"
    check_span(
        span,
        span_exporter.get_finished_spans(),
        expect(rows, kind=sc.SCORE_DISTANCE, scores=[r[2] for r in rows], top_k=2, filter_json='{"params":["pets"],"where":"category = %s"}'),
    )
    conn.close()


def test_every_fetch_style_and_cursor_factory_gets_exactly_its_rows(pg, instrumentor, span_exporter) -> None:
    params = (QUERY, "pets", 3)
    plain = connect(pg)
    with suppress_instrumentation():
        expected = run(plain, FILTERED, params)
    cur = plain.cursor()
    cur.execute(FILTERED, params)
    assert cur.rownumber == 0
    assert cur.fetchone() == expected[0]
    assert cur.fetchmany(1) == expected[1:2]
    assert list(cur) == expected[2:]
    for factory in (psycopg2.extras.DictCursor, psycopg2.extras.RealDictCursor, psycopg2.extras.NamedTupleCursor):
        conn = connect(pg, cursor_factory=factory)
        with conn.cursor() as c:
            assert isinstance(c, factory)
            c.execute(FILTERED, params)
            got = c.fetchall()
        assert [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in got] == expected, factory
        conn.close()
    stages = retrieve_spans(span_exporter)
    assert len(stages) == 4
    spans = span_exporter.get_finished_spans()
    for span, name in zip(stages, ("cursor", "DictCursor", "RealDictCursor", "NamedTupleCursor"), strict=True):
        check_span(
            span,
            spans,
            expect(
                expected,
                component=f"psycopg2.{name}",
                kind=sc.SCORE_DISTANCE,
                scores=[r[2] for r in expected],
                top_k=3,
                filter_json='{"params":["pets"],"where":"category = %s"}',
            ),
        )
    plain.close()


def test_readme_select_star_and_the_content_fallback(pg, instrumentor, span_exporter) -> None:
    conn = connect(pg)
    rows = run(conn, "SELECT * FROM items ORDER BY embedding <-> %s LIMIT 3", (QUERY,))
    bodies = run(conn, "SELECT content AS body, content FROM items ORDER BY embedding <-> %s LIMIT 2", (QUERY,))
    first, second = retrieve_spans(span_exporter)
    spans = span_exporter.get_finished_spans()
    check_span(first, spans, expect(rows, kind=sc.SCORE_NONE, top_k=3))
    want = expect(bodies, kind=sc.SCORE_NONE, top_k=2)
    want.ids = [content_id(r[1]) for r in bodies]
    want.findings = (
        "no column named 'id': the 2 rows are identified by the sha256 of their content (RAGTRAIL_PGVECTOR_ID_COLUMN names the id column)",
    )
    check_span(second, spans, want)
    conn.close()


def test_statements_received_by_the_server_are_the_same(pg, tracer_provider, span_exporter) -> None:
    def workload() -> int:
        conn = connect(pg)
        before = pg.statements()
        run(conn, FILTERED, (QUERY, "news", 2))
        run(conn, "SELECT * FROM items ORDER BY embedding <-> %s LIMIT 5", (QUERY,))
        run(conn, "SELECT count(*) FROM items", None)
        conn.close()
        return pg.statements() - before

    without = workload()
    inst = Psycopg2Instrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    try:
        with_ragtrail = workload()
    finally:
        inst.uninstrument()
    assert without == with_ragtrail == 3
    assert len(retrieve_spans(span_exporter)) == 2


def test_other_and_failing_statements_pass_through_and_uninstrument_stops(pg, instrumentor, span_exporter) -> None:
    conn = connect(pg)
    assert run(conn, "SELECT id FROM items WHERE id < %s ORDER BY id LIMIT 2", (300,)) == [(101,), (202,)]
    assert retrieve_spans(span_exporter) == []
    with pytest.raises(psycopg2.errors.UndefinedTable) as caught:
        run(conn, "SELECT id FROM nowhere ORDER BY embedding <-> %s LIMIT 2", (QUERY,))
    other = connect(pg)
    with pytest.raises(psycopg2.errors.UndefinedTable) as plain, suppress_instrumentation():
        run(other, "SELECT id FROM nowhere ORDER BY embedding <-> %s LIMIT 2", (QUERY,))
    assert str(caught.value) == str(plain.value)
    [span] = retrieve_spans(span_exporter)
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes[sc.STAGE_STATUS] == sc.STATUS_FAILED
    instrumentor.uninstrument()
    assert len(run(other, FILTERED, (QUERY, "pets", 2))) == 2  # a traced cursor made before: passes through
    assert len(retrieve_spans(span_exporter)) == 1
    conn.close(), other.close()
