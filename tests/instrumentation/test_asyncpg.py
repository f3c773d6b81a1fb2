"""pgvector searches through asyncpg (``Connection.fetch``/``fetchrow``, a pool's, and a prepared
statement's, the path SQLAlchemy's asyncpg dialect takes) as ragtrail ``retrieve`` stages, against a
real PostgreSQL 18 with pgvector 0.8 (tests/pgutil.py). Exact attributes; the app's records, its
exceptions and the statements the server received are the same with and without ragtrail."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

asyncpg = pytest.importorskip("asyncpg")
psycopg = pytest.importorskip("psycopg")
pytest.importorskip("pgserver")
pgvector_asyncpg = pytest.importorskip("pgvector.asyncpg")

from opentelemetry import trace  # noqa: E402
from opentelemetry.instrumentation.utils import suppress_instrumentation  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

from pgutil import Postgres  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.asyncpg import AsyncpgInstrumentor  # noqa: E402

from .test_psycopg import QUERY, check_span, instrumented, orm_searches, prints_ok, retrieve_spans  # noqa: E402
from .test_psycopg import pg as pg  # noqa: E402, F401 - the module's server fixture (items and docs tables)

FILTERED = "SELECT id, content, embedding <=> $1 AS distance FROM items WHERE category = $2 ORDER BY distance LIMIT $3"
NEWS = '{"params":["news"],"where":"category = $2"}'


@pytest.fixture
def instrumentor(tracer_provider) -> Iterator[AsyncpgInstrumentor]:
    with instrumented(AsyncpgInstrumentor(), tracer_provider) as inst:
        yield inst


def on_connection(pg: Postgres, work: Callable[[Any], Awaitable[Any]]) -> Any:
    """``work(conn)`` on a fresh asyncpg connection (pgvector's codec registered), in its own loop."""
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(pg.uri)

    async def main() -> Any:
        conn = await asyncpg.connect(host=info["host"], user=info.get("user") or "postgres", database=info.get("dbname") or "postgres")
        try:
            await pgvector_asyncpg.register_vector(conn)
            return await work(conn)
        finally:
            await conn.close()

    return asyncio.run(main())


def test_connection_fetch_exact_span_and_records_unchanged(pg, instrumentor, span_exporter) -> None:
    async def work(conn: Any) -> tuple[list[Any], list[Any]]:
        with suppress_instrumentation():
            bare = await conn.fetch(FILTERED, QUERY, "pets", 3)
        return bare, await conn.fetch(FILTERED, QUERY, "pets", 3)

    bare, rows = on_connection(pg, work)
    assert rows == bare and [r["id"] for r in rows] == [101, 202, 505]
    [span] = retrieve_spans(span_exporter)
    check_span(
        span,
        span_exporter.get_finished_spans(),
        [r["id"] for r in rows],
        component="asyncpg.Connection",
        top_k=3,
        kind=sc.SCORE_DISTANCE,
        scores=[r["distance"] for r in rows],
        contents=[r["content"] for r in rows],
        filter_json='{"params":["pets"],"where":"category = $2"}',
    )


def test_prepared_statement_fetchrow_and_the_pool(pg, instrumentor, span_exporter) -> None:
    """``prepare`` + ``fetch`` (SQLAlchemy's path), ``fetchrow`` (one row: said in a finding when the
    LIMIT allowed more) and a pool's ``fetch`` (it runs on a connection's)."""
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(pg.uri)

    async def work(conn: Any) -> tuple[Any, ...]:
        statement = await conn.prepare(FILTERED)
        prepared = await statement.fetch(QUERY, "news", 2)
        first = await conn.fetchrow(FILTERED, QUERY, "news", 2)
        only = await statement.fetchrow(QUERY, "news", 1)
        pool = await asyncpg.create_pool(
            host=info["host"], user=info.get("user") or "postgres", database="postgres", init=pgvector_asyncpg.register_vector
        )
        async with pool:
            pooled = await pool.fetch(FILTERED, QUERY, "news", 2)
        return prepared, first, only, pooled

    prepared, first, only, pooled = on_connection(pg, work)
    assert prepared == pooled and first == only == prepared[0] and [r["id"] for r in prepared] == [303, 404]
    spans = retrieve_spans(span_exporter)
    everything = span_exporter.get_finished_spans()
    assert [s.attributes[sc.STAGE_COMPONENT] for s in spans] == [
        "asyncpg.PreparedStatement",
        "asyncpg.Connection",
        "asyncpg.PreparedStatement",
        "asyncpg.Connection",
    ]
    fetchrow = "fetchrow: the first row only (asyncpg asks the server for one); the LIMIT allowed more"
    for span, got, k, findings in (
        (spans[0], prepared, 2, None),
        (spans[1], [first], 2, [fetchrow]),
        (spans[2], [only], 1, None),
        (spans[3], pooled, 2, None),
    ):
        check_span(
            span,
            everything,
            [r["id"] for r in got],
            component=span.attributes[sc.STAGE_COMPONENT],
            top_k=k,
            kind=sc.SCORE_DISTANCE,
            scores=[r["distance"] for r in got],
            contents=[r["content"] for r in got],
            filter_json=NEWS,
            findings=findings,
        )


def test_statements_received_by_the_server_are_the_same(pg, tracer_provider, span_exporter) -> None:
    async def work(conn: Any) -> int:
        before = pg.statements()
        await conn.fetch(FILTERED, QUERY, "news", 2)
        await conn.fetch("SELECT * FROM items ORDER BY embedding <-> $1 LIMIT 5", QUERY)
        await (await conn.prepare(FILTERED)).fetch(QUERY, "pets", 1)
        await conn.fetchval("SELECT count(*) FROM items")
        return pg.statements() - before

    without = on_connection(pg, work)
    with instrumented(AsyncpgInstrumentor(), tracer_provider):
        with_ragtrail = on_connection(pg, work)
    assert without == with_ragtrail == 4
    assert len(retrieve_spans(span_exporter)) == 3


def test_select_star_no_rows_and_other_statements(pg, instrumentor, span_exporter) -> None:
    """The README's ``SELECT *`` (no score: kind ``none``), a search matching no row (no column
    names to read, nothing to identify: no finding), and statements that are not searches."""

    async def work(conn: Any) -> tuple[Any, ...]:
        star = await conn.fetch("SELECT * FROM items ORDER BY embedding <-> $1 LIMIT 2", QUERY)
        none = await conn.fetch(FILTERED, QUERY, "nothing", 2)
        assert await conn.fetchrow(FILTERED, QUERY, "nothing", 2) is None  # no row: no "first row only" finding
        other = await conn.fetch("SELECT id FROM items WHERE id < $1 ORDER BY id LIMIT 2", 300)
        status = await conn.execute("SELECT id FROM items ORDER BY embedding <-> $1 LIMIT 2", QUERY)
        return star, none, other, status

    star, none, other, status = on_connection(pg, work)
    assert [r["id"] for r in star] == [101, 202] and none == [] and [r["id"] for r in other] == [101, 202] and status == "SELECT 2"
    spans = retrieve_spans(span_exporter)  # execute returns a status, no rows: not recorded
    everything = span_exporter.get_finished_spans()
    check_span(
        spans[0],
        everything,
        [101, 202],
        component="asyncpg.Connection",
        top_k=2,
        kind=sc.SCORE_NONE,
        scores=None,
        contents=["cats purr", "dogs bark"],
    )
    for span in spans[1:]:
        check_span(
            span,
            everything,
            [],
            component="asyncpg.Connection",
            top_k=2,
            kind=None,
            scores=None,
            filter_json='{"params":["nothing"],"where":"category = $2"}',
        )
    assert len(spans) == 3


def test_failing_statement_passes_through(pg, instrumentor, span_exporter) -> None:
    sql = "SELECT id FROM nowhere ORDER BY embedding <-> $1 LIMIT 2"

    async def work(conn: Any) -> tuple[BaseException, BaseException]:
        caught = []
        for suppressed in (True, False):
            try:
                if suppressed:
                    with suppress_instrumentation():
                        await conn.fetch(sql, QUERY)
                else:
                    await conn.fetch(sql, QUERY)
            except asyncpg.PostgresError as exc:
                caught.append(exc)
        return caught[0], caught[1]

    plain, traced = on_connection(pg, work)
    assert type(traced) is type(plain) is asyncpg.UndefinedTableError and str(traced) == str(plain)
    [span] = retrieve_spans(span_exporter)
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes[sc.STAGE_STATUS] == sc.STATUS_FAILED


def test_instrumentation_errors_never_reach_the_app(pg, instrumentor, span_exporter, monkeypatch) -> None:
    """A recording step that breaks is counted on the span; the records are untouched."""
    import ragtrail.instrumentation.asyncpg as module
    from ragtrail.recorder.errors import internal_error_count

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("recording bug")

    async def work(conn: Any) -> tuple[Any, ...]:
        with suppress_instrumentation():
            bare = await conn.fetch(FILTERED, QUERY, "news", 2)
        monkeypatch.setattr(module, "_outcome", broken)
        recorded = await conn.fetch(FILTERED, QUERY, "news", 2)
        monkeypatch.setattr(module, "start_search", broken)  # cannot even open: the call runs bare
        unopened = await conn.fetch(FILTERED, QUERY, "news", 2)
        return bare, recorded, unopened

    before = internal_error_count()
    bare, recorded, unopened = on_connection(pg, work)
    assert recorded == unopened == bare
    [span] = retrieve_spans(span_exporter)
    assert span.attributes[sc.STAGE_INSTRUMENTATION_ERRORS] == 1
    assert span.end_time is not None and trace.get_current_span() is trace.INVALID_SPAN
    assert internal_error_count() == before + 2


def test_concurrent_searches_overlap_each_in_its_own_context(pg, instrumentor, tracer_provider, span_exporter) -> None:
    """Real async: two searches awaited together are both in flight at once (each stage opens before
    the other ends), and each stage nests under the span of the task that awaited it."""
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(pg.uri)
    tracer = tracer_provider.get_tracer("test")

    async def search(conn: Any, name: str, category: str) -> Any:
        with tracer.start_as_current_span(name):
            return await conn.fetch(FILTERED, QUERY, category, 2)

    async def main() -> Any:
        conns = [await asyncpg.connect(host=info["host"], user=info.get("user") or "postgres", database="postgres") for _ in range(2)]
        try:
            for conn in conns:
                await pgvector_asyncpg.register_vector(conn)
            # both connected first: each search's first await is its own round trip to the server
            return await asyncio.gather(search(conns[0], "pets task", "pets"), search(conns[1], "news task", "news"))
        finally:
            for conn in conns:
                await conn.close()

    pets, news = asyncio.run(main())
    assert [r["id"] for r in pets] == [101, 202] and [r["id"] for r in news] == [303, 404]
    spans = span_exporter.get_finished_spans()
    parents = {s.name: s for s in spans if s.name.endswith(" task")}
    stages = {json_filter_category(s): s for s in retrieve_spans(span_exporter)}
    assert stages["pets"].parent.span_id == parents["pets task"].context.span_id
    assert stages["news"].parent.span_id == parents["news task"].context.span_id
    assert stages["pets"].start_time < stages["news"].end_time and stages["news"].start_time < stages["pets"].end_time


def json_filter_category(span: Any) -> str:
    import json

    return str(json.loads(span.attributes[sc.STAGE_FILTER])["params"][0])


def test_the_id_column_is_configurable(pg, tracer_provider, span_exporter) -> None:
    docs = "SELECT doc_id, body, embedding <-> $1 AS distance FROM docs ORDER BY distance LIMIT 2"
    with instrumented(AsyncpgInstrumentor(), tracer_provider, id_column="doc_id"):
        rows = on_connection(pg, lambda conn: conn.fetch(docs, QUERY))
    [span] = retrieve_spans(span_exporter)
    check_span(
        span,
        span_exporter.get_finished_spans(),
        ["d101", "d202"],
        component="asyncpg.Connection",
        top_k=2,
        kind=sc.SCORE_DISTANCE,
        scores=[r["distance"] for r in rows],
        contents=["cats purr", "dogs bark"],
        table="docs",
    )


def test_uninstrument_restores_the_methods_and_instrument_imports_no_asyncpg() -> None:
    """``opentelemetry-instrument`` instruments every installed library at start-up: asyncpg is
    imported (and patched) only when the application imports it; ``uninstrument()`` restores it."""
    script = (
        "import sys\n"
        "from ragtrail.instrumentation.asyncpg import AsyncpgInstrumentor\n"
        "inst = AsyncpgInstrumentor()\n"
        "inst.instrument()\n"
        "assert not [m for m in sys.modules if m == 'asyncpg' or m.startswith('asyncpg.')], 'imported'\n"
        "import asyncpg, wrapt\n"
        "from asyncpg.prepared_stmt import PreparedStatement\n"
        "names = ('fetch', 'fetchrow')  # PreparedStatement's are functools-wrapped already: not __wrapped__\n"
        "assert all(isinstance(vars(c)[n], wrapt.FunctionWrapper) for c in (asyncpg.Connection, PreparedStatement) for n in names)\n"
        "inst.uninstrument()\n"
        "assert not any(isinstance(vars(c)[n], wrapt.FunctionWrapper) for c in (asyncpg.Connection, PreparedStatement) for n in names)\n"
        "print('OK')\n"
    )
    prints_ok(script)


def test_sqlalchemy_async_orm_through_the_asyncpg_driver(pg, instrumentor, span_exporter) -> None:
    """SQLAlchemy's async ORM on ``postgresql+asyncpg://`` prepares each statement and runs the
    prepared statement's ``fetch`` with ``$n`` parameters, the query vector bound as pgvector's text
    ``'[...]'``: the same stages as hand-written SQL, the vector's receipt the same float32 bytes."""
    pytest.importorskip("sqlalchemy")
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    l2, cosine = orm_searches()
    env = pg.libpq_env()

    async def main() -> tuple[Any, Any]:
        engine = create_async_engine(f"postgresql+asyncpg://{env['PGUSER']}@/postgres?host={env['PGHOST']}")
        try:
            async with AsyncSession(engine) as session:
                return (await session.scalars(l2)).all(), (await session.execute(cosine)).all()
        finally:
            await engine.dispose()

    nearest, scored = asyncio.run(main())
    assert [item.id for item in nearest] == [101, 202] and [r[0] for r in scored] == [303, 404]
    first, second = retrieve_spans(span_exporter)
    everything = span_exporter.get_finished_spans()
    component = "asyncpg.PreparedStatement"
    check_span(first, everything, [101, 202], component=component, top_k=2, kind=sc.SCORE_NONE, scores=None, contents=[i.content for i in nearest])
    check_span(
        second,
        everything,
        [r[0] for r in scored],
        component=component,
        top_k=2,
        kind=sc.SCORE_DISTANCE,
        scores=[r[1] for r in scored],
        filter_json='{"params":["news"],"where":"items.category = $2::VARCHAR"}',
    )
