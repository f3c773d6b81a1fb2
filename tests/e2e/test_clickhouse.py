"""The ClickHouse tier: the REAL Collector's ClickHouse exporter writes ``otel_traces``, and ``ragtrail
stats``/``compare``/``ls``/``show``/``verify`` read it through ``--source clickhouse+http://...`` with
the same answers as from the local store the same traces came from.

Two stores (A plain, B with every 5th reranker falling back) are made by
benchmarks/make_many_store.py, sent over OTLP/HTTP to one Collector each (collector-config/clickhouse.yaml,
database ``side_a`` / ``side_b``), and read back. ``RAGTRAIL_CLICKHOUSE_E2E_TRACES`` sets the traces
per side (default 1,000: 99 s with load average 8 on this shared 2-core machine; 2,000 took 130 s,
benchmarks/README.md).
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import clickhouse_backend as chb
import pytest
import ragtrail_backends as rb

TRACES = int(os.environ.get("RAGTRAIL_CLICKHOUSE_E2E_TRACES", "1000"))


class Loaded:
    """The two stores, and the ClickHouse holding the same traces (databases side_a, side_b)."""

    def __init__(self, a: Path, b: Path, clickhouse: chb.ClickHouse) -> None:
        self.a, self.b, self.clickhouse = a, b, clickhouse


@pytest.fixture(scope="module")
def loaded(binaries: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    tmp = tmp_path_factory.mktemp("clickhouse")
    a = chb.make_store(tmp / "store-a", TRACES)
    b = chb.make_store(tmp / "store-b", TRACES, "--fallback-every", "5")
    clickhouse = chb.start_clickhouse(tmp)
    print(f"\nClickHouse tier on: {clickhouse.kind}")
    try:
        for database, store in (("side_a", a), ("side_b", b)):
            collector = rb.Collector(
                binaries[rb.OTELCOL_BIN],
                rb.CONFIG_DIR / "clickhouse.yaml",
                tmp,
                env=chb.collector_env(clickhouse, database),
                name=f"collector-{database}",
            )
            collector.start()
            try:
                chb.send_store(store, f"http://127.0.0.1:{collector.otlp_http_port}/v1/traces")
                size = chb.store_size(store)
                assert size[1] == TRACES
                assert chb.wait_for_spans(clickhouse, database, size[0]) == size, collector.log_tail()
            finally:
                assert collector.stop() == 0, collector.log_tail()
        yield Loaded(a, b, clickhouse)
    finally:
        clickhouse.stop()


def _json(*args: str) -> Any:
    result = rb.ragtrail_cli(*args, "--json", timeout=600)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_stats_through_clickhouse_equal_the_local_store(loaded: Loaded) -> None:
    for database, store in (("side_a", loaded.a), ("side_b", loaded.b)):
        through = _json("stats", "--source", loaded.clickhouse.source(database), "--lookback", "24h")
        assert through.pop("server_read") == {"traces_read": TRACES, "complete": True, "note": None}
        assert through == _json("stats", "--source", str(store))


def test_stats_pushed_down_to_clickhouse_equal_the_python_path(loaded: Loaded) -> None:
    """``--engine columnar``: the server computes the aggregates in SQL; every field equals the Python
    path's on the local store, but insights and alarms, which SQL does not compute and says so."""
    for database, store in (("side_a", loaded.a), ("side_b", loaded.b)):
        pushed = _json("stats", "--source", loaded.clickhouse.source(database), "--lookback", "24h", "--engine", "columnar")
        python = _json("stats", "--source", str(store), "--engine", "python")
        assert pushed.pop("not_computed") == ["insights", "alarms"]
        assert pushed.pop("insights") is None and pushed.pop("alarms") is None
        python.pop("insights")
        python.pop("alarms")
        assert pushed == python


def test_compare_through_clickhouse_equals_the_local_store(loaded: Loaded) -> None:
    through = _json("compare", loaded.clickhouse.source("side_a"), loaded.clickhouse.source("side_b"), "--lookback", "24h")
    local = _json("compare", str(loaded.a), str(loaded.b))
    for side in ("a", "b"):
        assert through[side].pop("server_read") == {"traces_read": TRACES, "complete": True, "note": None}
        assert through[side].pop("name") == loaded.clickhouse.source(f"side_{side}")
        assert local[side].pop("name") == str(loaded.a if side == "a" else loaded.b)
    # a server is read newest first, a store in file order: the questions are the same, listed in read order
    for key in ("questions", "only_in_a", "only_in_b"):
        through[key].sort(key=lambda q: q["query_sha256"])
        local[key].sort(key=lambda q: q["query_sha256"])
    assert through == local
    assert local["paired"] == TRACES


def test_compare_pushed_down_to_clickhouse_equals_the_python_path(loaded: Loaded) -> None:
    """``--engine columnar``: the server pairs the two sides in SQL (inspect.columnar.pairing); the
    whole JSON equals the Python path's on the local stores (but the names)."""
    a, b = loaded.clickhouse.source("side_a"), loaded.clickhouse.source("side_b")
    pushed = _json("compare", a, b, "--lookback", "24h", "--engine", "columnar")
    assert _named(pushed, (a, b)) == _named(_json("compare", str(loaded.a), str(loaded.b), "--engine", "python"), (str(loaded.a), str(loaded.b)))


def _named(result: dict[str, Any], names: tuple[str, str]) -> dict[str, Any]:
    """A comparison without its sides' names (checked to be ``names``) and server reads, its lists by
    question (newest first from a server, file order from a store)."""
    for side, name in zip("ab", names, strict=True):
        assert result[side].pop("name") == name
        result[side].pop("server_read", None)
    for key in ("questions", "only_in_a", "only_in_b"):
        result[key].sort(key=lambda q: q["query_sha256"])
    return result


def test_ls_limit_reads_that_many_traces_and_says_so(loaded: Loaded) -> None:
    result = rb.ragtrail_cli("ls", "--source", loaded.clickhouse.source("side_a"), "--lookback", "24h", "--limit", "7")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 7
    assert result.stderr == f"ragtrail: 7 traces read from ClickHouse at {loaded.clickhouse.url} (side_a.otel_traces) (every trace in the range)\n"


def test_show_and_verify_one_trace_as_the_local_store_does(loaded: Loaded) -> None:
    listed = _json("ls", "--source", str(loaded.b), "--limit", "1")
    trace_id = listed[0]["trace_id"]
    source = loaded.clickhouse.source("side_b")
    through, local = _json("show", "--source", source, trace_id), _json("show", "--source", str(loaded.b), trace_id)
    assert through.pop("source") == f"ClickHouse at {loaded.clickhouse.url} (side_b.otel_traces)"
    local.pop("source")
    assert _without_dropped_counts(through) == _without_dropped_counts(local)
    verified = [rb.ragtrail_cli("verify", "--json", "--source", s, trace_id) for s in (source, str(loaded.b))]
    assert [v.returncode for v in verified] == [1, 1]  # the copies' receipts name the template's trace: alarms, from both
    through_v, local_v = (json.loads(v.stdout) for v in verified)
    assert [v["trace_id"] for v in through_v] == [trace_id]
    assert _without_dropped_counts(through_v) == _without_dropped_counts(local_v)


def _without_dropped_counts(node: Any) -> Any:
    """The manifest without the SDK's dropped counts and the fidelity notes about them (the table has none)."""
    if isinstance(node, dict):
        skip = ("notes", "fidelity", "source")
        return {k: _without_dropped_counts(v) for k, v in node.items() if not k.startswith("dropped_") and k not in skip}
    if isinstance(node, list):
        return [_without_dropped_counts(v) for v in node]
    return node


def test_a_search_pages_through_every_trace_by_keyset(loaded: Loaded) -> None:
    from ragtrail.inspect.sources import ClickHouseSource

    source = ClickHouseSource(f"{loaded.clickhouse.url}/side_a")
    source.page_size = 300
    try:
        found = source.search_all(None, None, "24h")
        stored = {line.split(b'"traceId":"', 1)[1][:32].decode() for p in loaded.a.glob("*.jsonl") for line in p.read_bytes().splitlines() if line}
        assert (len(found.trace_ids), set(found.trace_ids), found.capped, found.requests) == (TRACES, stored, False, TRACES // 300 + 1)
        assert source.search_all(450, None, "24h").trace_ids == found.trace_ids[:450]
    finally:
        source.close()


def _parts(loaded: Loaded, database: str) -> list[tuple[str, str]]:
    """The active parts of ``database``'s kept-record tables (a write makes a new part)."""
    rows = chb.sql(
        loaded.clickhouse.url,
        f"SELECT table, name FROM system.parts WHERE database = '{database}' AND active AND table LIKE 'ragtrail_compare_v1%' ORDER BY table, name",
    )
    return [tuple(line.split("\t")) for line in rows.splitlines()]  # type: ignore[misc]


def _kept_compare(loaded: Loaded, a: str, b: str) -> tuple[dict[str, Any], list[str]]:
    """``compare --keep-records`` of two databases: its JSON (without names) and its stderr lines."""
    sources = (loaded.clickhouse.source(a), loaded.clickhouse.source(b))
    result = rb.ragtrail_cli("compare", *sources, "--lookback", "24h", "--engine", "columnar", "--keep-records", "--json", timeout=600)
    assert result.returncode == 0, result.stderr
    return _named(json.loads(result.stdout), sources), result.stderr.splitlines()


def _late_span(store: Path) -> tuple[str, bytes]:
    """One trace of ``store`` and an OTLP body with a late span of it (a copy of its first stage span,
    a new span id, 1 us later, degraded) and a span of a new trace that is not ragtrail's (its
    fingerprint is kept, and the lookback leaves it out)."""
    line = sorted(store.glob("*.jsonl"))[0].read_bytes().splitlines()[0]
    request = json.loads(b'{"resourceSpans":[' + line[line.index(b"[") + 1 : line.rindex(b"]")] + b"]}")
    scope = request["resourceSpans"][0]["scopeSpans"][0]
    span = next(s for s in scope["spans"] if any(a["key"] == "ragtrail.stage.kind" for a in s["attributes"]))
    late = {**span, "spanId": "00000000000000ff", "startTimeUnixNano": str(int(span["startTimeUnixNano"]) + 1000)}
    late["endTimeUnixNano"] = str(int(span["endTimeUnixNano"]) + 1000)
    late["attributes"] = [a for a in span["attributes"] if a["key"] != "ragtrail.stage.status"]
    late["attributes"].append({"key": "ragtrail.stage.status", "value": {"stringValue": "degraded"}})
    foreign = {**late, "traceId": "ab" * 16, "spanId": "00000000000000fe", "parentSpanId": "", "attributes": []}  # no ragtrail span
    scope["spans"] = [late, foreign]
    return span["traceId"], json.dumps(request).encode()


def test_compare_from_kept_records_follows_late_spans_and_recomputes_nothing_else(binaries: dict[str, Path], loaded: Loaded) -> None:
    """``--keep-records`` on copies of both databases: the first compare computes every trace's record
    into the copies' tables, the second none (no new part), and after the Collector exports a late
    span of one trace (and a trace that is not ragtrail's) the third recomputes those two alone and
    equals the Python path again."""
    for side in ("a", "b"):
        chb.sql(loaded.clickhouse.url, f"CREATE DATABASE kept_{side}")
        chb.sql(loaded.clickhouse.url, f"CREATE TABLE kept_{side}.otel_traces AS side_{side}.otel_traces")
        chb.sql(loaded.clickhouse.url, f"INSERT INTO kept_{side}.otel_traces SELECT * FROM side_{side}.otel_traces")
    local = _named(_json("compare", str(loaded.a), str(loaded.b), "--engine", "python"), (str(loaded.a), str(loaded.b)))
    first, said = _kept_compare(loaded, "kept_a", "kept_b")
    assert (first, said) == (local, [f"ragtrail: compare records kept in kept_{s}: {TRACES} of {TRACES} traces recomputed" for s in "ab"])
    parts = [_parts(loaded, "kept_a"), _parts(loaded, "kept_b")]
    second, said = _kept_compare(loaded, "kept_a", "kept_b")
    assert (second, said) == (local, [f"ragtrail: compare records kept in kept_{s}: 0 of {TRACES} traces recomputed" for s in "ab"])
    assert [_parts(loaded, "kept_a"), _parts(loaded, "kept_b")] == parts and all(parts)

    trace_id, body = _late_span(loaded.b)
    spans = loaded.clickhouse.count("kept_b")[0]
    tmp = Path(loaded.a).parent
    collector = rb.Collector(
        binaries[rb.OTELCOL_BIN], rb.CONFIG_DIR / "clickhouse.yaml", tmp, env=chb.collector_env(loaded.clickhouse, "kept_b"), name="collector-late"
    )
    collector.start()
    try:
        request = urllib.request.Request(
            f"http://127.0.0.1:{collector.otlp_http_port}/v1/traces", data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - loopback only
            assert response.status == 200
        assert chb.wait_for_spans(loaded.clickhouse, "kept_b", spans + 2)[0] == spans + 2, collector.log_tail()
    finally:
        assert collector.stop() == 0, collector.log_tail()
    third, said = _kept_compare(loaded, "kept_a", "kept_b")
    assert said == [
        f"ragtrail: compare records kept in kept_a: 0 of {TRACES} traces recomputed",
        f"ragtrail: compare records kept in kept_b: 2 of {TRACES + 1} traces recomputed",
    ]
    sources = (loaded.clickhouse.source("kept_a"), loaded.clickhouse.source("kept_b"))
    python = _named(_json("compare", *sources, "--lookback", "24h", "--engine", "python"), sources)
    assert third == python and third != local
    assert [q["b"] for q in third["questions"] if q not in first["questions"]] == [trace_id]

    # a record held twice (two compares refreshing one database at once can each insert it) is
    # recomputed, so it counts once: the output is the Python path's again
    chb.sql(loaded.clickhouse.url, "INSERT INTO kept_a.ragtrail_compare_v1 SELECT * FROM kept_a.ragtrail_compare_v1 ORDER BY TraceId LIMIT 1")
    fourth, said = _kept_compare(loaded, "kept_a", "kept_b")
    assert said == [
        f"ragtrail: compare records kept in kept_a: 1 of {TRACES} traces recomputed",
        f"ragtrail: compare records kept in kept_b: 0 of {TRACES + 1} traces recomputed",
    ]
    assert fourth == python


def test_compare_keep_records_as_a_read_only_user_computes_in_the_session(loaded: Loaded) -> None:
    """The server refuses the tables (``readonly = 2``, ClickHouse's read-only profile, set for the
    test server's one session, so this test runs last): one line says so and the comparison is the
    session's, equal to the Python path's; nothing was created."""
    chb.sql(loaded.clickhouse.url, "SET readonly = 2")
    a, b = loaded.clickhouse.source("side_a"), loaded.clickhouse.source("side_b")
    result = rb.ragtrail_cli("compare", a, b, "--lookback", "24h", "--engine", "columnar", "--keep-records", "--json", timeout=600)
    assert result.returncode == 0, result.stderr
    said = result.stderr.splitlines()
    assert len(said) == 1 and said[0].startswith("ragtrail: compare records not kept in side_a (ClickHouse at ") and "(READONLY)" in said[0], said
    assert said[0].endswith("); computed in this session instead")
    local = _named(_json("compare", str(loaded.a), str(loaded.b), "--engine", "python"), (str(loaded.a), str(loaded.b)))
    assert _named(json.loads(result.stdout), (a, b)) == local
    assert chb.sql(loaded.clickhouse.url, "SELECT count() FROM system.tables WHERE database LIKE 'side_%' AND name LIKE 'ragtrail%'") == "0\n"
