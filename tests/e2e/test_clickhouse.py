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
    local = _json("compare", str(loaded.a), str(loaded.b), "--engine", "python")
    for side, name, store in (("a", a, loaded.a), ("b", b, loaded.b)):
        assert pushed[side].pop("name") == name
        assert local[side].pop("name") == str(store)
    for key in ("questions", "only_in_a", "only_in_b"):  # newest first from a server, file order from a store
        pushed[key].sort(key=lambda q: q["query_sha256"])
        local[key].sort(key=lambda q: q["query_sha256"])
    assert pushed == local


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
