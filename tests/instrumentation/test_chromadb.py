"""Chroma ``Collection.query`` / ``AsyncCollection.query`` as ragtrail ``retrieve`` stages.

Real clients, offline: an in-process ``EphemeralClient`` with a deterministic hashing embedding
function (Chroma's default embedding function downloads a model: never used here), and, for the
async client, a real Chroma server (``chroma run``, shipped in the chromadb wheel) on a loopback port.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

import mirrorutil
import spanutil

chromadb = pytest.importorskip("chromadb")
np = pytest.importorskip("numpy")

from chromadb.api.models.Collection import Collection  # noqa: E402
from chromadb.api.types import EmbeddingFunction  # noqa: E402
from chromadb.config import Settings  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.instrumentation.utils import suppress_instrumentation  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

import ragtrail  # noqa: E402
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.contract.receipts import receipt  # noqa: E402
from ragtrail.instrumentation._vectorstore import vector_receipt  # noqa: E402
from ragtrail.instrumentation.chromadb import ChromaInstrumentor  # noqa: E402

VENV_BIN = Path(sys.executable).parent
DIM = 16
DOCS = {
    "doc-apple": ("apples are red fruit", {"source": "a", "year": 2020}),
    "doc-pear": ("pears are green fruit", {"source": "b", "year": 2021}),
    "doc-car": ("cars are fast machines", {"source": "a", "year": 2022}),
    str(uuid.UUID(int=7)): ("a uuid shaped id about fruit", None),
}


class HashEmbedding(EmbeddingFunction):
    """Deterministic bag-of-words hashing into 16 dims: no model, no download."""

    def __init__(self) -> None:
        pass

    def __call__(self, input: Any) -> Any:  # noqa: A002 - chromadb's parameter name
        out = []
        for text in input:
            v = np.zeros(DIM, dtype="float32")
            for word in text.split():
                v[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIM] += 1.0
            out.append(v)
        return out

    @staticmethod
    def name() -> str:
        return "ragtrail-test-hash"

    def get_config(self) -> dict[str, Any]:
        return {}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> HashEmbedding:
        return HashEmbedding()


def embed(text: str) -> Any:
    return HashEmbedding()([text])[0]


def new_collection(docs: dict[str, Any] = DOCS) -> Collection:
    client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
    collection = client.create_collection(f"t-{uuid.uuid4().hex[:12]}", embedding_function=HashEmbedding())
    if docs:
        ids = list(docs)
        collection.add(ids=ids, documents=[docs[i][0] for i in ids], metadatas=[docs[i][1] for i in ids])
    return collection


@pytest.fixture
def instrumentor(tracer_provider):
    inst = ChromaInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield inst
    inst.uninstrument()


def retrieve_spans(exporter: Any) -> list[Any]:
    return spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)


stitched = spanutil.stitched
check_count_and_digest = spanutil.check_count_and_digest


def check_span(
    span: Any,
    spans: Any,
    result: Any,
    row: int,
    *,
    collection: Any,
    top_k: int,
    text: str | None = None,
    vector: Any = None,
    hop: int = 0,
    transform: str = "none",
    parent_hop: int | None = None,
    filter_json: str | None = None,
    corpus: int | None = None,
    batch: tuple[int, int] | None = None,
    component: str = "chromadb.Collection",
    findings: tuple[str, ...] | None = None,
    extra: dict[str, Any] | None = None,
) -> None:
    """Pop every expected attribute (nothing may be left); events exactly the row's hits, in order."""
    ids = result["ids"][row]
    distances = result["distances"][row] if result.get("distances") is not None else None
    documents = result["documents"][row] if result.get("documents") is not None else None
    a = spanutil.own(span)
    expected: dict[str, Any] = {
        sc.SCHEMA: 5,
        sc.STAGE_KIND: sc.KIND_RETRIEVE,
        sc.STAGE_COMPONENT: component,
        sc.STAGE_STATUS: sc.STATUS_OK if ids else sc.STATUS_EMPTY,
        sc.STAGE_TOP_K: top_k,
        sc.STAGE_COLLECTION: collection.name,
        sc.CANDIDATES_IN: 0,
        sc.CANDIDATES_OUT: len(ids),
        sc.CANDIDATES_EXCLUDED: 0,
        sc.GEN_AI_OPERATION_NAME: "retrieval",
        sc.GEN_AI_DATA_SOURCE_ID: collection.name,
        sc.GEN_AI_RETRIEVAL_TOP_K: top_k,
        sc.OPENINFERENCE_SPAN_KIND: "RETRIEVER",
    }
    if text is not None:
        rec = receipt(text)
        expected.update(
            {
                sc.QUERY_TEXT: text,
                sc.QUERY_HOP: hop,
                sc.QUERY_TRANSFORM: transform,
                sc.QUERY_CHARS: rec.chars,
                sc.QUERY_BYTES: rec.bytes,
                sc.QUERY_SHA256: rec.sha256,
                sc.OI_INPUT_VALUE: text,
            }
        )
        if parent_hop is not None:
            expected[sc.QUERY_PARENT_HOP] = parent_hop
    if vector is not None:
        expected[sc.QUERY_VECTOR_DIM], expected[sc.QUERY_VECTOR_SHA256] = vector_receipt(vector)
    if filter_json is not None:
        expected[sc.STAGE_FILTER] = filter_json
    if corpus is not None:
        expected[sc.COVERAGE_CORPUS_SIZE] = corpus
    if batch is not None:
        expected[sc.STAGE_BATCH_INDEX], expected[sc.STAGE_BATCH_SIZE] = batch
    if findings is not None:
        expected[sc.STAGE_FINDINGS] = findings
    expected.update(extra or {})
    for key, value in expected.items():
        assert key in a, key
        assert a.pop(key) == value, key
    evs = stitched(span, spans)
    check_count_and_digest(span, evs)
    a.pop(sc.EVENTS_COUNT), a.pop(sc.EVENTS_DIGEST)
    for i, ident in enumerate(ids):
        if f"retrieval.documents.{i}.document.id" not in a:
            assert i >= 30
            break
        assert a.pop(f"retrieval.documents.{i}.document.id") == ident
        if distances is not None and math.isfinite(distances[i]):
            assert a.pop(f"retrieval.documents.{i}.document.score") == pytest.approx(distances[i])
    a.pop(sc.EVENTS_SPANS, None)
    mirrorutil.pop_mirrors(a, span, spans)
    assert a == {}, f"unexpected attributes {a}"
    assert [name for name, _ in evs] == [sc.EVENT_CANDIDATE] * len(ids)
    for rank, (ident, (_, ev)) in enumerate(zip(ids, evs, strict=False)):
        # schema 4: a search whose every hit an earlier search of this pipeline returned with the same
        # content points to it; the receipts read back are checked exactly below
        spanutil.pop_pointer(ev, {})
        assert ev.pop(sc.CANDIDATE_ID) == ident
        assert ev.pop(sc.CANDIDATE_RANK) == rank
        if distances is not None:
            assert ev.pop(sc.CANDIDATE_SCORE_KIND) == sc.SCORE_DISTANCE
            if math.isfinite(distances[rank]):
                assert ev.pop(sc.CANDIDATE_SCORE) == pytest.approx(distances[rank])
            else:
                assert ev.pop(sc.CANDIDATE_SCORE_RAW) == repr(float(distances[rank]))
        else:
            assert ev.pop(sc.CANDIDATE_SCORE_KIND) == sc.SCORE_NONE
        if text is not None:
            assert ev.pop(sc.CANDIDATE_HOP) == hop
        if documents is not None and documents[rank] is not None:
            rec = receipt(documents[rank])
            assert ev.pop(sc.CANDIDATE_CONTENT_CHARS) == rec.chars
            assert ev.pop(sc.CANDIDATE_CONTENT_BYTES) == rec.bytes
            assert ev.pop(sc.CANDIDATE_CONTENT_SHA256) == rec.sha256
        assert ev == {}, ev


Spy = spanutil.CallSpy


def test_one_text_query_exact_span(instrumentor, span_exporter, monkeypatch) -> None:
    collection = new_collection()
    spy = Spy(monkeypatch, Collection, "_transform_query_response")
    result = collection.query(query_texts="red fruit", n_results=3)
    assert result is spy.returned[0] and result == spy.snapshots[0]  # the same object, unmodified
    assert result["ids"][0][0] == "doc-apple"
    spans = span_exporter.get_finished_spans()
    [span] = retrieve_spans(span_exporter)
    assert span.name == "retrieve Collection" and span.kind == trace.SpanKind.CLIENT
    assert spy.current[0].get_span_context().span_id == span.context.span_id
    check_span(span, spans, result, 0, collection=collection, top_k=3, text="red fruit")


def test_where_where_document_and_ids_are_the_filter(instrumentor, span_exporter) -> None:
    collection = new_collection()
    result = collection.query(
        query_texts=["fruit"], n_results=2, where={"source": "a"}, where_document={"$contains": "fruit"}, ids=["doc-apple", "doc-car", "doc-pear"]
    )
    assert result["ids"] == [["doc-apple"]]
    spans = span_exporter.get_finished_spans()
    [span] = retrieve_spans(span_exporter)
    check_span(
        span,
        spans,
        result,
        0,
        collection=collection,
        top_k=2,
        text="fruit",
        filter_json='{"ids":["doc-apple","doc-car","doc-pear"],"where":{"source":"a"},"where_document":{"$contains":"fruit"}}',
    )


def test_batch_of_texts_one_stage_per_query(instrumentor, span_exporter, tracer_provider) -> None:
    collection = new_collection()
    with tracer_provider.get_tracer("test").start_as_current_span("app") as parent:
        result = collection.query(query_texts=["red fruit", "fast machines", "green"], n_results=2)
    spans = span_exporter.get_finished_spans()
    rows = sorted(retrieve_spans(span_exporter), key=lambda s: s.attributes[sc.STAGE_BATCH_INDEX])
    assert len(rows) == 3
    for i, text in enumerate(["red fruit", "fast machines", "green"]):
        check_span(rows[i], spans, result, i, collection=collection, top_k=2, text=text, batch=(i, 3))
    assert {r.parent.span_id for r in rows} == {parent.get_span_context().span_id}
    assert {r.start_time for r in rows} == {rows[0].start_time}


def test_multi_query_variants_keep_their_hops(instrumentor, span_exporter) -> None:
    """Each variant a transform produced is the hop its own stage and candidates carry; the one
    collection both stages searched is counted once in the corpus."""
    collection = new_collection()
    collection.count()  # the application's own count: the size ragtrail may use

    @ragtrail.query_transform(transform="multi_query")
    def variants(query: str) -> list[str]:
        return [f"{query} red", f"{query} machines"]

    @ragtrail.pipeline
    def answer(query: str) -> Any:
        return collection.query(query_texts=variants(query), n_results=2)

    result = answer("fruit")
    spans = span_exporter.get_finished_spans()
    rows = sorted(retrieve_spans(span_exporter), key=lambda s: s.attributes[sc.STAGE_BATCH_INDEX])
    approximate = {sc.COVERAGE_CORPUS_APPROXIMATE: True}
    check_span(
        rows[0],
        spans,
        result,
        0,
        collection=collection,
        top_k=2,
        text="fruit red",
        hop=1,
        transform="multi_query",
        parent_hop=0,
        batch=(0, 2),
        corpus=4,
        extra=approximate,
    )
    check_span(
        rows[1],
        spans,
        result,
        1,
        collection=collection,
        top_k=2,
        text="fruit machines",
        hop=2,
        transform="multi_query",
        parent_hop=0,
        batch=(1, 2),
        corpus=4,
        extra=approximate,
    )
    pipeline = next(s for s in spans if s.attributes.get(sc.STAGE_KIND) == sc.KIND_PIPELINE)
    assert pipeline.attributes[sc.COVERAGE_CORPUS_SIZE] == 4
    assert sc.COVERAGE_STORES not in pipeline.attributes  # one store: written only when several
    assert pipeline.attributes[sc.COVERAGE_CORPUS_APPROXIMATE] is True
    assert pipeline.attributes[sc.COVERAGE_RETRIEVED] == len({i for row in result["ids"] for i in row})


@pytest.mark.parametrize("shape", ["array-2d", "flat-list", "list-of-lists"])
def test_embedding_queries_are_receipted_not_exported(instrumentor, span_exporter, shape) -> None:
    collection = new_collection()
    vectors = [embed("red fruit"), embed("green fruit")]
    query = {"array-2d": np.stack(vectors), "flat-list": vectors[0].tolist(), "list-of-lists": [v.tolist() for v in vectors]}[shape]
    result = collection.query(query_embeddings=query, n_results=2)
    spans = span_exporter.get_finished_spans()
    rows = sorted(retrieve_spans(span_exporter), key=lambda s: s.attributes.get(sc.STAGE_BATCH_INDEX, 0))
    n = 1 if shape == "flat-list" else 2
    assert len(rows) == n == len(result["ids"])
    for i in range(n):
        check_span(rows[i], spans, result, i, collection=collection, top_k=2, vector=vectors[i], batch=(i, n) if n > 1 else None)


def test_without_distances_the_score_kind_is_none(instrumentor, span_exporter) -> None:
    collection = new_collection()
    result = collection.query(query_texts="fruit", n_results=2, include=["documents"])
    assert result["distances"] is None
    spans = span_exporter.get_finished_spans()
    [span] = retrieve_spans(span_exporter)
    check_span(span, spans, result, 0, collection=collection, top_k=2, text="fruit")


def test_empty_collection_and_zero_hits_are_empty_not_failed(instrumentor, span_exporter) -> None:
    empty = new_collection({})
    nothing = empty.query(query_texts="anything", n_results=5)
    full = new_collection()
    filtered = full.query(query_texts="fruit", n_results=5, where={"source": "none-such"})
    assert nothing["ids"] == [[]] and filtered["ids"] == [[]]
    spans = span_exporter.get_finished_spans()
    first, second = retrieve_spans(span_exporter)
    check_span(first, spans, nothing, 0, collection=empty, top_k=5, text="anything")
    check_span(second, spans, filtered, 0, collection=full, top_k=5, text="fruit", filter_json='{"where":{"source":"none-such"}}')
    assert first.attributes[sc.STAGE_STATUS] == second.attributes[sc.STAGE_STATUS] == sc.STATUS_EMPTY


def test_nan_distances_recorded_raw_with_a_finding(instrumentor, span_exporter) -> None:
    collection = new_collection()
    query = [float("nan")] * DIM
    result = collection.query(query_embeddings=[query], n_results=2)
    assert all(math.isnan(d) for d in result["distances"][0])
    spans = span_exporter.get_finished_spans()
    [span] = retrieve_spans(span_exporter)
    check_span(
        span,
        spans,
        result,
        0,
        collection=collection,
        top_k=2,
        vector=query,
        findings=(f"2 of 2 scores are not finite (NaN or inf); recorded as {sc.CANDIDATE_SCORE_RAW}",),
    )


def test_raising_client_is_failed_and_reraised_unchanged(instrumentor, span_exporter) -> None:
    collection = new_collection()
    with suppress_instrumentation(), pytest.raises(Exception) as plain:
        collection.query(query_embeddings=[[1.0, 2.0]], n_results=2)
    with pytest.raises(Exception) as traced:
        collection.query(query_embeddings=[[1.0, 2.0]], n_results=2)
    assert type(traced.value) is type(plain.value) and str(traced.value) == str(plain.value)
    name = type(traced.value).__name__
    assert name == "InvalidArgumentError"
    [span] = retrieve_spans(span_exporter)
    assert span.attributes[sc.STAGE_STATUS] == sc.STATUS_FAILED
    assert span.attributes[sc.STAGE_FAILURE_CLASS] == f"exception:{name}"
    assert span.attributes[sc.QUERY_VECTOR_DIM] == 2
    assert sc.COVERAGE_CORPUS_SIZE not in span.attributes
    assert span.status.status_code == StatusCode.ERROR
    assert [e.name for e in span.events] == ["exception"]


def test_two_hundred_hits_all_arrive_top_ranked_first(instrumentor, span_exporter, tracer_provider) -> None:
    """The anchor lost the top-ranked 72 of 200 hits to the SDK's 128-event limit; here all arrive."""
    assert tracer_provider._span_limits.max_events == 128
    docs = {f"d{i:03d}": (f"fruit {'red ' * (i % 9)}word{i}", {"n": i}) for i in range(200)}
    collection = new_collection(docs)
    result = collection.query(query_texts="red fruit", n_results=200)
    assert len(result["ids"][0]) == 200
    spans = span_exporter.get_finished_spans()
    [span] = retrieve_spans(span_exporter)
    assert all(s.dropped_events == 0 for s in spans)
    evs = stitched(span, spans)
    assert evs[0][1][sc.CANDIDATE_ID] == result["ids"][0][0] and evs[0][1][sc.CANDIDATE_RANK] == 0
    check_span(span, spans, result, 0, collection=collection, top_k=200, text="red fruit")
    # schema 3: the 200 hits are columns on the one stage span (no continuation span)
    assert sc.EVENTS_SPANS not in span.attributes and not [s for s in spans if s.attributes.get(sc.STAGE_CONTINUATION)]


def test_thousand_hits_arrive_intact(instrumentor, span_exporter) -> None:
    docs = {f"k{i}": (f"passage {i} about {'fruit' if i % 3 else 'cars'} {i % 17}", None) for i in range(1000)}
    collection = new_collection(docs)
    result = collection.query(query_texts="passage about fruit", n_results=1000)
    spans = span_exporter.get_finished_spans()
    [span] = retrieve_spans(span_exporter)
    assert len(stitched(span, spans)) == 1000
    check_span(span, spans, result, 0, collection=collection, top_k=1000, text="passage about fruit")


def test_uninstrument_restores_query(tracer_provider, span_exporter) -> None:
    from chromadb.api.models.AsyncCollection import AsyncCollection

    names = ("query", "count")
    originals = [vars(Collection)[n] for n in names] + [vars(AsyncCollection)["query"]]
    inst = ChromaInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    assert all(type(vars(Collection)[n]).__name__ == "FunctionWrapper" for n in names)
    inst.uninstrument()
    assert [vars(Collection)[n] for n in names] + [vars(AsyncCollection)["query"]] == originals
    new_collection().query(query_texts="fruit", n_results=1)
    assert retrieve_spans(span_exporter) == []


def test_suppressed_and_one_span_per_call(instrumentor, span_exporter) -> None:
    collection = new_collection()
    collection.query(query_texts="fruit", n_results=1)
    assert len(span_exporter.get_finished_spans()) == 1
    with suppress_instrumentation():
        collection.query(query_texts="fruit", n_results=1)
    assert len(span_exporter.get_finished_spans()) == 1


# --- async client against a real Chroma server ------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory):
    binary = VENV_BIN / "chroma"
    if not binary.exists():
        pytest.skip("the chroma CLI (server) is not installed")
    port = _free_port()
    path = tmp_path_factory.mktemp("chroma")
    log = open(path / "server.log", "w")  # noqa: SIM115 - the server writes to it until the fixture ends
    proc = subprocess.Popen(
        [str(binary), "run", "--path", str(path / "db"), "--host", "127.0.0.1", "--port", str(port)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"chroma server exited: {(path / 'server.log').read_text()[-2000:]}")
                time.sleep(0.2)
        else:
            pytest.fail("chroma server did not start")
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


async def async_collection(port: int) -> Any:
    client = await chromadb.AsyncHttpClient(host="127.0.0.1", port=port, settings=Settings(anonymized_telemetry=False))
    collection = await client.create_collection(f"a-{uuid.uuid4().hex[:12]}", embedding_function=HashEmbedding())
    ids = list(DOCS)
    await collection.add(ids=ids, documents=[DOCS[i][0] for i in ids], metadatas=[DOCS[i][1] for i in ids])
    return collection


async def test_async_span_covers_the_awaited_query(instrumentor, span_exporter, chroma_server, monkeypatch) -> None:
    from chromadb.api.async_fastapi import AsyncFastAPI

    collection = await async_collection(chroma_server)
    spy = Spy(monkeypatch, AsyncFastAPI, "_query", delay=0.05)
    result = await collection.query(query_texts=["red fruit", "fast machines"], n_results=2, where={"year": {"$gte": 2020}})
    spans = span_exporter.get_finished_spans()
    rows = sorted(retrieve_spans(span_exporter), key=lambda s: s.attributes[sc.STAGE_BATCH_INDEX])
    assert len(rows) == 2
    start, end = spy.window[0]
    for span in rows:
        assert span.start_time <= start and span.end_time >= end  # covers the awaited HTTP query
    assert spy.current[0].get_span_context().span_id == rows[0].context.span_id
    for i, text in enumerate(["red fruit", "fast machines"]):
        # over HTTP a count would cost a round trip per query: no corpus size
        check_span(
            rows[i],
            spans,
            result,
            i,
            collection=collection,
            top_k=2,
            text=text,
            batch=(i, 2),
            component="chromadb.AsyncCollection",
            filter_json='{"where":{"year":{"$gte":2020}}}',
        )


async def test_async_failure_is_failed_and_reraised(instrumentor, span_exporter, chroma_server) -> None:
    collection = await async_collection(chroma_server)
    with pytest.raises(Exception) as traced:
        await collection.query(query_embeddings=[[1.0, 2.0]], n_results=2)
    [span] = retrieve_spans(span_exporter)
    assert span.attributes[sc.STAGE_STATUS] == sc.STATUS_FAILED
    assert span.attributes[sc.STAGE_FAILURE_CLASS] == f"exception:{type(traced.value).__name__}"


async def test_async_concurrent_queries_keep_their_parents(instrumentor, span_exporter, chroma_server) -> None:
    collection = await async_collection(chroma_server)

    @ragtrail.pipeline
    async def answer(query: str) -> Any:
        return await collection.query(query_texts=query, n_results=1)

    await asyncio.gather(answer("red fruit"), answer("fast machines"), answer("green"))
    spans = span_exporter.get_finished_spans()
    pipelines = {s.context.span_id: s for s in spans if s.attributes.get(sc.STAGE_KIND) == sc.KIND_PIPELINE}
    stages = retrieve_spans(span_exporter)
    assert len(stages) == 3
    for s in stages:
        parent = pipelines[s.parent.span_id]
        assert parent.attributes[sc.QUERY_TEXT] == s.attributes[sc.QUERY_TEXT]


# --- under opentelemetry-instrument ----------------------------------------------------------------


def test_under_opentelemetry_instrument_two_hundred_hits(tmp_path) -> None:
    from ragtrail.inspect import manifest
    from ragtrail.inspect.model import Trace
    from ragtrail.inspect.otlp import decode_document

    script = tmp_path / "app.py"
    script.write_text(
        textwrap.dedent("""
        import hashlib, json
        import chromadb, numpy as np
        from chromadb.api.types import EmbeddingFunction
        from chromadb.config import Settings

        class HashEmbedding(EmbeddingFunction):
            def __init__(self): pass
            def __call__(self, input):
                out = []
                for text in input:
                    v = np.zeros(16, dtype="float32")
                    for word in text.split():
                        v[int(hashlib.sha256(word.encode()).hexdigest(), 16) % 16] += 1.0
                    out.append(v)
                return out
            @staticmethod
            def name(): return "ragtrail-test-hash"
            def get_config(self): return {}
            @staticmethod
            def build_from_config(config): return HashEmbedding()

        client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
        col = client.create_collection("app-docs", embedding_function=HashEmbedding())
        col.add(ids=[f"d{i:03d}" for i in range(200)], documents=[f"fruit {'red ' * (i % 9)}w{i}" for i in range(200)])
        result = col.query(query_texts="red fruit", n_results=200)
        with open("ids.json", "w") as f:
            json.dump(result["ids"][0], f)
        print("APP-OK")
    """)
    )
    store = tmp_path / "store"
    others = sorted(ep.name for ep in entry_points(group="opentelemetry_instrumentor") if ep.name != "ragtrail_chromadb")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RAGTRAIL_"))}
    env.update(
        {
            "OTEL_PYTHON_CONFIGURATOR": "ragtrail",
            "OTEL_TRACES_EXPORTER": "ragtrail_file",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_SERVICE_NAME": "chroma-app",
            "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": ",".join(others),
            "RAGTRAIL_LOCAL_STORE_DIR": str(store),
        }
    )
    proc = subprocess.run(
        [str(VENV_BIN / "opentelemetry-instrument"), sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=240, cwd=tmp_path
    )
    assert proc.returncode == 0 and "APP-OK" in proc.stdout, proc.stderr[-4000:]
    want = json.loads((tmp_path / "ids.json").read_text())
    spans = [
        s
        for f in sorted(store.glob("traces-*.jsonl"))
        for line in f.read_text().splitlines()
        if line.strip()
        for s in decode_document(json.loads(line))
    ]
    [stage_span] = [s for s in spans if s.attributes.get(sc.STAGE_KIND) == sc.KIND_RETRIEVE and not s.attributes.get(sc.STAGE_CONTINUATION)]
    assert stage_span.name == "retrieve Collection"
    assert sc.COVERAGE_CORPUS_SIZE not in stage_span.attributes  # the app never counted: unknown, not asked
    m = manifest.build(Trace(trace_id=stage_span.trace_id, spans=[s for s in spans if s.trace_id == stage_span.trace_id], source="file")).as_dict()
    [stage] = m["stages"]
    assert [c["id"] for c in stage["candidates"]] == want  # all 200, the top-ranked included, in order
    assert {c["score_kind"] for c in stage["candidates"]} == {sc.SCORE_DISTANCE}
    assert m["fidelity"]["alarms"] == [] and m["fidelity"]["missing_events"] == 0


def test_instrumentation_errors_never_reach_the_app(instrumentor, span_exporter, monkeypatch) -> None:
    import ragtrail.instrumentation.chromadb as module

    collection = new_collection()
    with suppress_instrumentation():
        want = collection.query(query_texts="red fruit", n_results=2)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("recording bug")

    monkeypatch.setattr(module, "_outcome", broken)
    assert collection.query(query_texts="red fruit", n_results=2) == want
    [span] = retrieve_spans(span_exporter)
    assert span.attributes[sc.STAGE_INSTRUMENTATION_ERRORS] == 1
    assert span.attributes[sc.QUERY_TEXT] == "red fruit"  # what was known before the call is kept
    monkeypatch.setattr(module, "_start", broken)
    assert collection.query(query_texts="red fruit", n_results=2) == want
    assert len(retrieve_spans(span_exporter)) == 1


def _app(collection: Any) -> None:
    """What an application does with a collection: writes, queries, its own count, a query again."""
    collection.query(query_texts="fruit", n_results=1)
    collection.add(ids=["doc-new"], documents=["new fruit"])
    collection.query(query_texts="fruit", n_results=1)
    collection.count()
    collection.delete(ids=["doc-apple", "doc-pear"])
    collection.upsert(ids=["doc-x"], documents=["x"])
    collection.query(query_texts="fruit", n_results=1)


def test_ragtrail_calls_nothing_more_on_the_database(span_exporter, tracer_provider, monkeypatch) -> None:
    """The in-process client's server API (count, get, query, add, upsert, delete) is called exactly
    as often with ragtrail as without it; the corpus size is the app's own last count, approximate."""
    from chromadb.api.rust import RustBindingsAPI

    names = ("_count", "_get", "_query", "_add", "_upsert", "_delete", "_peek")
    runs = []
    for instrument in (False, True):
        spies = {name: Spy(monkeypatch, RustBindingsAPI, name) for name in names}
        inst = ChromaInstrumentor()
        if instrument:
            inst.instrument(tracer_provider=tracer_provider)
        try:
            _app(new_collection())
        finally:
            if instrument:
                inst.uninstrument()
            monkeypatch.undo()
        runs.append({name: len(spy.returned) for name, spy in spies.items()})
    assert runs[0] == runs[1]
    assert runs[1]["_count"] == 1  # the application's own
    sizes = [(s.attributes.get(sc.COVERAGE_CORPUS_SIZE), s.attributes.get(sc.COVERAGE_CORPUS_APPROXIMATE)) for s in retrieve_spans(span_exporter)]
    # unknown until the app counted (5 then); the writes after it are not watched: approximate
    assert sizes == [(None, None), (None, None), (5, True)]


def test_corpus_size_the_user_set(instrumentor, span_exporter) -> None:
    from ragtrail.recorder import corpus

    collection = new_collection()
    ragtrail.corpus_size(collection.name, 1003)
    try:
        collection.query(query_texts="fruit", n_results=1)
    finally:
        corpus.clear()
    [span] = retrieve_spans(span_exporter)
    assert span.attributes[sc.COVERAGE_CORPUS_SIZE] == 1003
    assert sc.COVERAGE_CORPUS_APPROXIMATE not in span.attributes


@pytest.mark.parametrize("mode", ["hash", "off"])
def test_query_capture_modes_keep_the_text_out(instrumentor, span_exporter, mode) -> None:
    from ragtrail import settings as config

    config.set_capture(query=mode)
    collection = new_collection()
    secret = "secret patient name fruit"
    collection.query(query_texts=secret, n_results=1)
    collection.query(query_embeddings=[embed(secret)], n_results=1)
    with pytest.raises(TypeError):
        collection.query(query_texts=secret, n_results=0)
    spans = span_exporter.get_finished_spans()
    assert len(spans) == 3
    for span in spans:
        blob = json.dumps(
            {
                "name": span.name,
                "attributes": dict(span.attributes),
                "events": [dict(e.attributes) for e in span.events],
                "status": span.status.description,
            },
            default=str,
        )
        assert "secret" not in blob
    text_span, vector_span, failed = spans
    if mode == "hash":
        assert text_span.attributes[sc.QUERY_SHA256] == receipt(secret).sha256
        assert vector_span.attributes[sc.QUERY_VECTOR_SHA256] == vector_receipt(embed(secret))[1]
    else:
        assert sc.QUERY_SHA256 not in text_span.attributes
        assert sc.QUERY_VECTOR_SHA256 not in vector_span.attributes
    assert failed.attributes[sc.STAGE_STATUS] == sc.STATUS_FAILED


def test_wrong_arguments_fail_like_the_library_and_are_recorded(instrumentor, span_exporter) -> None:
    collection = new_collection()
    with suppress_instrumentation(), pytest.raises(TypeError) as plain:
        collection.query(query_texts="fruit", n_result=2)
    with pytest.raises(TypeError) as traced:
        collection.query(query_texts="fruit", n_result=2)
    assert str(traced.value) == str(plain.value)
    [span] = retrieve_spans(span_exporter)
    assert span.attributes[sc.STAGE_STATUS] == sc.STATUS_FAILED
    assert span.attributes[sc.STAGE_FAILURE_CLASS] == "exception:TypeError"
