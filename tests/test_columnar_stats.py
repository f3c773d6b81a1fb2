"""The columnar path (chdb over the Collector exporter's ``otel_traces``) gives ``stats`` exactly as the
Python path does, on the same store: every field but the two SQL does not compute (insights and
fidelity alarms), weights (span probability, adjusted count, tracestate, the gateway's tail stamp and
the tail sampler's scope record: ``weight.trace_weight`` and its SQL twin) and coverage included; the
ingest is incremental (a grown store is caught up, a line is never ingested twice)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from test_cli_errors import ragtrail
from test_inspect_many import experiment

pytest.importorskip("chdb")

from ragtrail.inspect.columnar import NOT_COMPUTED  # noqa: E402
from ragtrail.inspect.columnar.engine import ChdbEngine  # noqa: E402
from ragtrail.inspect.columnar.ingest import catch_up  # noqa: E402
from ragtrail.inspect.weight import trace_weight  # noqa: E402

PIPELINE = b'{"key":"ragtrail.stage.kind","value":{"stringValue":"pipeline"}}'


def _attr(key: str, kind: str, value: str) -> bytes:
    return json.dumps({"key": key, "value": {kind: value}}, separators=(",", ":")).encode()


def _sampled(line: bytes, n: int) -> bytes:
    """Every 3rd trace sampled at p=0.25 (every 6th with an adjusted count of 7), every 5th a
    tracestate threshold, every 4th a corpus size: the weights and coverage both paths must agree on."""
    extra = b""
    if n % 3 == 0:
        extra += b"," + _attr("ragtrail.sampling.probability", "doubleValue", 0.25)  # type: ignore[arg-type]
    if n % 6 == 0:
        extra += b"," + _attr("ragtrail.sampling.adjusted_count", "intValue", "7")
    if n % 4 == 0:
        extra += b"," + _attr("ragtrail.coverage.corpus_size", "intValue", "20")
    line = line.replace(PIPELINE, PIPELINE + extra, 1)
    if n % 5 == 0:
        line = line.replace(b'"name":', b'"traceState":"ot=th:c","name":', 1)
    return line


def _weighted_store(tmp_path: Path) -> Path:
    raw, store = tmp_path / "raw", tmp_path / "store"
    experiment(raw, new_reranker=True, questions=40)
    store.mkdir()
    lines = [line for path in sorted(raw.glob("*.jsonl")) for line in path.read_bytes().splitlines(keepends=True)]
    (store / "traces-0001.jsonl").write_bytes(b"".join(_sampled(line, n) for n, line in enumerate(lines)))
    return store


def _stats(store: Path, engine: str, cache: Path) -> dict[str, object]:
    result = ragtrail("stats", "--json", "--source", str(store), "--engine", engine, env={"RAGTRAIL_COLUMNAR_DIR": str(cache)})
    assert result.returncode == 0, result.stderr
    out: dict[str, object] = json.loads(result.stdout)
    return out


def test_columnar_stats_equal_the_python_path(tmp_path: Path) -> None:
    store = _weighted_store(tmp_path)
    python = _stats(store, "python", tmp_path / "cache")
    columnar = _stats(store, "columnar", tmp_path / "cache")
    assert python["weighted_traces"] and python["coverage"]["corpus_known"]  # type: ignore[index]
    assert columnar.pop("not_computed") == list(NOT_COMPUTED)
    for key in NOT_COMPUTED:
        assert columnar.pop(key) is None
        python.pop(key)
    assert json.dumps(columnar) == json.dumps(python)


def test_ingest_is_incremental(tmp_path: Path) -> None:
    store = _weighted_store(tmp_path)
    path = store / "traces-0001.jsonl"
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    half = len(lines) // 2
    assert half >= 1
    path.write_bytes(b"".join(lines[:half]) + lines[half][:100])  # a line still being written is left for later
    engine = ChdbEngine(tmp_path / "engine")
    assert catch_up(engine, store).lines == half
    assert catch_up(engine, store).lines == 0
    path.write_bytes(data)
    assert catch_up(engine, store).lines == len(lines) - half
    spans = engine.run_sql("SELECT count() FROM otel_traces")[0][0]
    assert int(spans) == data.count(b'"spanId"') - data.count(b'"links":[{"traceId"')  # each span once
    assert catch_up(engine, store).lines == 0
    grown = _stats(store, "columnar", tmp_path / "cache")
    assert grown == _stats(store, "columnar", tmp_path / "cache")


def test_columnar_compare_equals_the_python_path(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    experiment(a, new_reranker=False, questions=30)
    experiment(b, new_reranker=True, questions=34)
    env = {"RAGTRAIL_COLUMNAR_DIR": str(tmp_path / "cache")}
    outputs = []
    for engine in ("python", "columnar"):
        result = ragtrail("compare", str(a), str(b), "--json", "--engine", engine, env=env)
        assert result.returncode == 0, result.stderr
        outputs.append(result.stdout)
    assert json.loads(outputs[0])["verdicts"] and json.loads(outputs[0])["only_in_b"]
    assert outputs[1] == outputs[0]


def test_columnar_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    a = tmp_path / "a"
    experiment(a, new_reranker=False, questions=3)
    env = {"RAGTRAIL_COLUMNAR_DIR": str(tmp_path / "cache")}
    for args in (("stats", "--source", str(a), "--status", "degraded"), ("compare", "version:1", "version:2", "--source", str(a))):
        result = ragtrail(*args, "--engine", "columnar", env=env)
        assert result.returncode == 2 and "--engine columnar" in result.stderr, result.stderr


def test_the_statements_read_otel_traces_itself(tmp_path: Path) -> None:
    """A ClickHouse server without the ragtrail_spans view passes the projection as a subquery: same rows."""
    from ragtrail.inspect import columnar
    from ragtrail.inspect.columnar import compare, spans

    store = _weighted_store(tmp_path)
    engine = ChdbEngine(tmp_path / "engine")
    catch_up(engine, store)
    on_view = columnar.as_dict(columnar.stats(engine, spans.SPANS_TABLE))
    assert on_view == columnar.as_dict(columnar.stats(engine, spans.subquery(columnar.TABLE)))
    assert on_view["traces"] > 0
    rows = sorted(engine.run_sql(compare.records_query(spans.SPANS_TABLE)))
    assert rows == sorted(engine.run_sql(compare.records_query(spans.subquery(columnar.TABLE))))


def test_the_threshold_and_a_missing_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ragtrail.inspect.columnar import engine as engine_module
    from ragtrail.inspect.columnar.store import choose

    store = tmp_path / "store"
    experiment(store, new_reranker=False, questions=2)
    monkeypatch.setenv("RAGTRAIL_COLUMNAR_MIN_BYTES", "0")
    assert choose(str(store), "auto", narrowed=False) == (store, None)
    assert choose(str(store), "auto", narrowed=True) == (None, None)
    assert choose(str(store), "python", narrowed=False) == (None, None)
    monkeypatch.setenv("RAGTRAIL_COLUMNAR_MIN_BYTES", "off")
    assert choose(str(store), "auto", narrowed=False) == (None, None)
    monkeypatch.setenv("RAGTRAIL_COLUMNAR_MIN_BYTES", str(10**12))
    assert choose(str(store), "auto", narrowed=False) == (None, None)
    monkeypatch.setenv("RAGTRAIL_COLUMNAR_MIN_BYTES", "0")
    monkeypatch.setattr(engine_module, "available", lambda: False)
    found, note = choose(str(store), "auto", narrowed=False)
    assert found is None and note is not None and "ragtrail[columnar]" in note


def _kv(key: str, value: object) -> dict[str, Any]:
    kind = "stringValue" if isinstance(value, str) else "doubleValue" if isinstance(value, float) else "intValue"
    return {"key": key, "value": {kind: value if kind != "intValue" else str(value)}}


def _stamp(spans: list[dict[str, Any]], kind: int) -> None:
    """One trace's spans, by ``kind``: head-sampled; tail-stamped on one span; head and tail on every span
    (as the gateway stamps); a policy without probability; (4: the scope record, see :func:`_tail`);
    nothing; a tail probability out of range (a policy, so unknown)."""
    pipeline = next((sp for sp in spans if {"key": "ragtrail.stage.kind", "value": {"stringValue": "pipeline"}} in sp["attributes"]), spans[0])
    if kind in (0, 2):
        pipeline["attributes"].append(_kv("ragtrail.sampling.probability", 0.25 if kind == 0 else 0.5))
    if kind == 1:
        spans[-1]["attributes"] += [_kv("ragtrail.sampling.tail.policy", "baseline-probabilistic"), _kv("ragtrail.sampling.tail.probability", 0.1)]
    if kind == 2:
        for sp in spans:
            sp["attributes"] += [_kv("ragtrail.sampling.tail.policy", "finding-stage-status"), _kv("ragtrail.sampling.tail.probability", 1)]
    if kind in (3, 6):
        pipeline["attributes"].append(_kv("ragtrail.sampling.tail.policy", "my-own-policy"))
        if kind == 6:
            pipeline["attributes"].append(_kv("ragtrail.sampling.tail.probability", 2.0))


def _tail(line: bytes, kinds: dict[str, int]) -> bytes:
    """One line of a store with each trace stamped by its kind (its place among the traces, mod 7): the
    spans of a kind-4 trace move to a scope of their own that carries the tail sampler's record only."""
    doc = json.loads(line)
    for rs in doc["resourceSpans"]:
        scopes = []
        for ss in rs["scopeSpans"]:
            by_trace: dict[str, list[dict[str, Any]]] = {}
            for sp in ss["spans"]:
                by_trace.setdefault(sp["traceId"], []).append(sp)
            for trace_id, spans in by_trace.items():
                _stamp(spans, kinds.setdefault(trace_id, len(kinds) % 7))
            recorded = [sp for sp in ss["spans"] if kinds[sp["traceId"]] == 4]
            ss["spans"] = [sp for sp in ss["spans"] if kinds[sp["traceId"]] != 4]
            scopes += [ss] if ss["spans"] else []
            if recorded:
                scope = {**ss.get("scope", {}), "attributes": [_kv("tailsampling.policy", "baseline-probabilistic")]}
                scopes.append({**ss, "scope": scope, "spans": recorded})
        rs["scopeSpans"] = scopes
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


def _tail_store(tmp_path: Path, name: str, new_reranker: bool, questions: int) -> Path:
    raw, store = tmp_path / f"{name}-raw", tmp_path / name
    experiment(raw, new_reranker=new_reranker, questions=questions)
    store.mkdir()
    lines = [line for path in sorted(raw.glob("*.jsonl")) for line in path.read_bytes().splitlines() if line.strip()]
    kinds: dict[str, int] = {}
    (store / "traces-0001.jsonl").write_bytes(b"".join(_tail(line, kinds) for line in lines))
    return store


def test_tail_stamped_stores_weigh_the_same_on_both_paths(tmp_path: Path) -> None:
    a, b = _tail_store(tmp_path, "a", False, 30), _tail_store(tmp_path, "b", True, 34)
    python = _stats(b, "python", tmp_path / "cache")
    columnar = _stats(b, "columnar", tmp_path / "cache")
    assert python["unknown_policy_traces"] and python["no_sampling_record_traces"] and "tail" in str(python["sampling"])
    assert columnar.pop("not_computed") == list(NOT_COMPUTED)
    for key in NOT_COMPUTED:
        assert columnar.pop(key) is None
        python.pop(key)
    assert json.dumps(columnar) == json.dumps(python)
    env = {"RAGTRAIL_COLUMNAR_DIR": str(tmp_path / "cache")}
    outputs = []
    for engine in ("python", "columnar"):
        result = ragtrail("compare", str(a), str(b), "--json", "--engine", engine, env=env)
        assert result.returncode == 0, result.stderr
        outputs.append(result.stdout)
    assert "tail" in json.loads(outputs[0])["a"]["sampling"]
    assert outputs[1] == outputs[0]


@pytest.mark.parametrize("head", [None, 0, -1, 1, 4, 7.5])
def test_the_sql_twin_of_the_weight_rule(tmp_path: Path, head: float | None) -> None:
    from ragtrail.inspect.columnar.sql import weight_sql

    engine = ChdbEngine(tmp_path / "engine")
    for policy in (None, "", "baseline-probabilistic"):
        for tail in (None, 0, -0.5, 0.1, 0.25, 1, 1.5):
            types = ("Nullable(Float64)", "Nullable(String)", "Nullable(Float64)")
            lit = ["NULL" if v is None else f"'{v}'" if isinstance(v, str) else repr(float(v)) for v in (head, policy, tail)]
            query = "SELECT " + weight_sql(*(f"CAST({v}, '{t}')" for v, t in zip(lit, types, strict=True)))
            ((weight, basis, stamped),) = engine.run_sql(query)
            w = trace_weight(head, policy, tail)
            assert (float(weight), basis, bool(stamped)) == (w.weight, w.basis, w.tail_policy is not None), (head, policy, tail)


def test_an_engine_directory_from_an_older_version_is_ingested_afresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the tail weights the slim table had fewer columns and there were no scope policies: such a
    directory would weigh tail-stamped traces as unstamped, so it is dropped and the store read again."""
    from ragtrail.inspect.columnar import spans
    from ragtrail.inspect.columnar.schema import SCOPE_TABLE
    from ragtrail.inspect.columnar.store import open_store

    monkeypatch.setenv("RAGTRAIL_COLUMNAR_DIR", str(tmp_path / "cache"))
    store = _tail_store(tmp_path, "b", True, 7)
    engine = open_store(store)
    before = engine.run_sql(f"SELECT count(), uniqExact(Policy) FROM {SCOPE_TABLE}"), engine.run_sql(f"SELECT count() FROM {spans.SPANS_TABLE}")
    engine.run_sql(f"DROP TABLE {SCOPE_TABLE}")
    engine.run_sql(f"ALTER TABLE {spans.SPANS_TABLE} DROP COLUMN TailPolicy")
    engine.close()
    engine = open_store(store)
    try:
        after = engine.run_sql(f"SELECT count(), uniqExact(Policy) FROM {SCOPE_TABLE}"), engine.run_sql(f"SELECT count() FROM {spans.SPANS_TABLE}")
        columns = engine.run_sql(
            f"SELECT name FROM system.columns WHERE database = currentDatabase() AND table = '{spans.SPANS_TABLE}' ORDER BY position"
        )
    finally:
        engine.close()
    assert after == before and before[0][0][0] > 0
    assert [c[0] for c in columns] == spans.names()
