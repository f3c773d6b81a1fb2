"""faiss ``Index*.search`` as ragtrail ``retrieve`` stages, on real in-memory indexes.

Each query row of a search is one stage; ``-1`` padding is not a candidate; inner product is a
similarity, every other metric a distance; 1,000 hits of one query all reach the exporter.
"""

from __future__ import annotations

import copy
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import mirrorutil
import spanutil
from spanutil import rec_events

faiss = pytest.importorskip("faiss")
np = pytest.importorskip("numpy")

from opentelemetry import trace  # noqa: E402
from opentelemetry.instrumentation.utils import suppress_instrumentation  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

import ragtrail  # noqa: E402
from ragtrail import settings  # noqa
from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation._vectorstore import vector_receipt  # noqa: E402
from ragtrail.instrumentation.faiss import FaissInstrumentor  # noqa: E402

D = 8


def vectors(n: int, seed: int = 0) -> Any:
    return np.random.default_rng(seed).standard_normal((n, D)).astype("float32")


@pytest.fixture
def instrumentor(tracer_provider):
    inst = FaissInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield inst
    inst.uninstrument()


def retrieve_spans(exporter: Any) -> list[Any]:
    return spanutil.stage_spans(exporter, sc.KIND_RETRIEVE)


stitched = spanutil.stitched
check_count_and_digest = spanutil.check_count_and_digest


def pop_mirrors(a: dict[str, Any], ids: list[str], scores: list[float]) -> None:
    """OpenInference's flattened documents: the best-ranked prefix (the recorder caps them so its own
    attributes keep room under the SDK's attribute limit)."""
    for i, (ident, score) in enumerate(zip(ids, scores, strict=False)):
        if f"retrieval.documents.{i}.document.id" not in a:
            assert i >= 30, f"only {i} documents mirrored"
            break
        assert a.pop(f"retrieval.documents.{i}.document.id") == ident
        if math.isfinite(score):
            assert a.pop(f"retrieval.documents.{i}.document.score") == pytest.approx(score)


def expected_row(index: Any, q: Any, k: int, *, binary: bool = False) -> tuple[Any, Any]:
    """Ground truth: the same search with instrumentation suppressed."""
    with suppress_instrumentation():
        return index.search(q, k)


def check_row_span(
    span: Any,
    spans: Any,
    index: Any,
    q_row: Any,
    dist: Any,
    ids: Any,
    *,
    kind: str,
    k: int,
    batch: tuple[int, int] | None = None,
    binary: bool = False,
) -> None:
    keep = [(int(i), float(d)) for i, d in zip(ids, dist, strict=False) if i != -1]
    a = spanutil.own(span)
    dim, sha = vector_receipt(q_row, binary)
    expected = {
        sc.SCHEMA: 5,
        sc.STAGE_KIND: sc.KIND_RETRIEVE,
        sc.STAGE_COMPONENT: f"faiss.{type(index).__name__}",
        sc.STAGE_STATUS: sc.STATUS_OK if keep else sc.STATUS_EMPTY,
        sc.STAGE_TOP_K: k,
        sc.QUERY_VECTOR_DIM: dim,
        sc.QUERY_VECTOR_SHA256: sha,
        sc.COVERAGE_CORPUS_SIZE: index.ntotal,
        sc.CANDIDATES_IN: 0,
        sc.CANDIDATES_OUT: len(keep),
        sc.CANDIDATES_EXCLUDED: 0,
        sc.GEN_AI_OPERATION_NAME: "retrieval",
        sc.GEN_AI_DATA_SOURCE_ID: f"faiss.{type(index).__name__}",
        sc.GEN_AI_RETRIEVAL_TOP_K: k,
        sc.OPENINFERENCE_SPAN_KIND: "RETRIEVER",
    }
    if batch is not None:
        expected[sc.STAGE_BATCH_INDEX], expected[sc.STAGE_BATCH_SIZE] = batch
    if len(keep) < k:
        expected[sc.STAGE_FINDINGS] = (f"{k - len(keep)} of {k} result slots empty (faiss id -1 padding)",)
    for key, value in expected.items():
        assert key in a, key
        assert a.pop(key) == value, key
    evs = stitched(span, spans)
    check_count_and_digest(span, evs)
    a.pop(sc.EVENTS_COUNT), a.pop(sc.EVENTS_DIGEST)
    pop_mirrors(a, [str(i) for i, _ in keep], [d for _, d in keep])
    mirrorutil.pop_mirrors(a, span, spans)
    assert a == {}, f"unexpected attributes {a}"
    assert [name for name, _ in evs] == [sc.EVENT_CANDIDATE] * len(keep)
    for rank, ((ident, score), (_, ev)) in enumerate(zip(keep, evs, strict=False)):
        assert ev.pop(sc.CANDIDATE_ID) == str(ident)
        assert ev.pop(sc.CANDIDATE_RANK) == rank
        assert ev.pop(sc.CANDIDATE_SCORE_KIND) == kind
        assert ev.pop(sc.CANDIDATE_SCORE) == pytest.approx(score)
        assert ev == {}, ev


def test_patches_every_class_with_its_own_search(instrumentor) -> None:
    own = sorted(
        name
        for name, cls in vars(faiss).items()
        if isinstance(cls, type) and cls.__name__ == name and "search" in vars(cls) and issubclass(cls, (faiss.Index, faiss.IndexBinary))
    )
    assert instrumentor.patched == own
    # the classes the issue names, and subclasses that inherit a patched search
    for name in ("IndexFlat", "IndexIVF", "IndexHNSW", "IndexBinaryFlat", "IndexIDMap", "IndexPreTransform"):
        assert name in instrumentor.patched
    assert type(vars(faiss.IndexFlat)["search"]).__name__ == "FunctionWrapper"
    assert "search" not in vars(faiss.IndexFlatL2)  # inherits IndexFlat's: patched once, not twice
    # structures that are not indexes are left alone
    assert "HNSW" not in instrumentor.patched and "ProductQuantizer" not in instrumentor.patched


def test_uninstrument_restores_every_search(tracer_provider, span_exporter) -> None:
    originals = {name: vars(getattr(faiss, name))["search"] for name in ("IndexFlat", "IndexIVF", "IndexBinaryFlat")}
    inst = FaissInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    inst.uninstrument()
    for name, fn in originals.items():
        assert vars(getattr(faiss, name))["search"] is fn
    index = faiss.IndexFlatL2(D)
    index.add(vectors(5))
    index.search(vectors(1, 9), 2)
    assert retrieve_spans(span_exporter) == []


@pytest.mark.parametrize(
    "factory, kind",
    [
        (lambda: faiss.IndexFlatL2(D), sc.SCORE_DISTANCE),
        (lambda: faiss.IndexFlatIP(D), sc.SCORE_SIMILARITY),
        (lambda: faiss.IndexHNSWFlat(D, 16), sc.SCORE_DISTANCE),
        (lambda: faiss.IndexHNSWFlat(D, 16, faiss.METRIC_INNER_PRODUCT), sc.SCORE_SIMILARITY),
        (lambda: faiss.IndexFlat(D, faiss.METRIC_L1), sc.SCORE_DISTANCE),
    ],
    ids=["FlatL2", "FlatIP", "HNSWFlat", "HNSWFlat-IP", "Flat-L1"],
)
def test_one_query_one_span_exact(instrumentor, span_exporter, factory, kind) -> None:
    index = factory()
    index.add(vectors(50))
    q = vectors(1, seed=7)
    want_d, want_i = expected_row(index, q, 5)
    got_d, got_i = index.search(q, 5)
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_array_equal(got_d, want_d)
    spans = span_exporter.get_finished_spans()
    [span] = retrieve_spans(span_exporter)
    assert span.name == f"retrieve {type(index).__name__}"
    assert span.kind == trace.SpanKind.CLIENT
    check_row_span(span, spans, index, q[0], want_d[0], want_i[0], kind=kind, k=5)


def test_ivf_flat_batch_one_span_per_row(instrumentor, span_exporter, tracer_provider) -> None:
    quantizer = faiss.IndexFlatL2(D)
    index = faiss.IndexIVFFlat(quantizer, D, 4)
    data = vectors(200)
    index.train(data)
    index.add(data)
    index.nprobe = 1  # few lists probed: some rows may come back short (padded with -1)
    q = vectors(3, seed=11)
    want_d, want_i = expected_row(index, q, 60)
    tracer = tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("app") as parent:
        got_d, got_i = index.search(q, 60)
    np.testing.assert_array_equal(got_i, want_i)
    spans = span_exporter.get_finished_spans()
    rows = retrieve_spans(span_exporter)
    assert len(rows) == 3  # one per query row, no span for the quantizer's own (C++) search
    rows.sort(key=lambda s: s.attributes[sc.STAGE_BATCH_INDEX])
    for i, span in enumerate(rows):
        assert span.parent.span_id == parent.get_span_context().span_id  # siblings, not nested
        check_row_span(span, spans, index, q[i], want_d[i], want_i[i], kind=sc.SCORE_DISTANCE, k=60, batch=(i, 3))
    # every row's span covers the search: same start as row 0's, which was open around the call
    assert {s.start_time for s in rows} == {rows[0].start_time}
    assert all(s.end_time >= rows[0].end_time for s in rows[1:])


def test_padding_is_not_a_candidate(instrumentor, span_exporter) -> None:
    index = faiss.IndexFlatL2(D)
    index.add(vectors(3))
    q = vectors(1, seed=3)
    d, i = index.search(q, 10)
    assert list(i[0][3:]) == [-1] * 7
    spans = span_exporter.get_finished_spans()
    [span] = retrieve_spans(span_exporter)
    check_row_span(span, spans, index, q[0], d[0], i[0], kind=sc.SCORE_DISTANCE, k=10)
    assert span.attributes[sc.CANDIDATES_OUT] == 3


def test_empty_index_is_empty_not_failed(instrumentor, span_exporter) -> None:
    index = faiss.IndexFlatIP(D)
    q = vectors(1)
    d, i = index.search(q, 4)
    assert (i == -1).all()
    spans = span_exporter.get_finished_spans()
    [span] = retrieve_spans(span_exporter)
    check_row_span(span, spans, index, q[0], d[0], i[0], kind=sc.SCORE_SIMILARITY, k=4)
    assert span.attributes[sc.STAGE_STATUS] == sc.STATUS_EMPTY
    assert span.attributes[sc.COVERAGE_CORPUS_SIZE] == 0


def test_nan_query_finds_nothing_and_says_so(instrumentor, span_exporter) -> None:
    """faiss drops NaN distances itself (every slot comes back -1): an empty stage, not a failure,
    with the padding counted in a finding. (NaN scores that do reach a result: see the Chroma tests.)"""
    index = faiss.IndexFlatL2(D)
    index.add(vectors(4))
    q = np.full((1, D), np.nan, dtype="float32")
    d, i = index.search(q, 2)
    assert (i == -1).all()
    spans = span_exporter.get_finished_spans()
    [span] = retrieve_spans(span_exporter)
    check_row_span(span, spans, index, q[0], d[0], i[0], kind=sc.SCORE_DISTANCE, k=2)
    assert span.attributes[sc.STAGE_STATUS] == sc.STATUS_EMPTY
    assert span.attributes[sc.STAGE_FINDINGS] == ("2 of 2 result slots empty (faiss id -1 padding)",)


def test_custom_int_ids_and_id_selector_filter(instrumentor, span_exporter) -> None:
    index = faiss.IndexIDMap(faiss.IndexFlatIP(D))
    data = vectors(20)
    ids = np.arange(1_000_000_000_000, 1_000_000_000_020, dtype="int64")
    index.add_with_ids(data, ids)
    selector = faiss.IDSelectorRange(1_000_000_000_005, 1_000_000_000_015)
    params = faiss.SearchParameters(sel=selector)
    d, i = index.search(data[:1], 4, params=params)
    [span] = retrieve_spans(span_exporter)
    assert span.attributes[sc.STAGE_FILTER] == '{"id_selector":"IDSelectorRange"}'
    got = [a[sc.CANDIDATE_ID] for _, a in stitched(span, span_exporter.get_finished_spans())]
    assert got == [str(x) for x in i[0]]
    assert all(1_000_000_000_005 <= int(x) < 1_000_000_000_015 for x in got)


def test_binary_index_hamming_distance(instrumentor, span_exporter) -> None:
    index = faiss.IndexBinaryFlat(64)
    data = np.random.default_rng(1).integers(0, 256, size=(10, 8), dtype="uint8")
    index.add(data)
    d, i = index.search(data[:2], 3)
    rows = sorted(retrieve_spans(span_exporter), key=lambda s: s.attributes[sc.STAGE_BATCH_INDEX])
    assert len(rows) == 2
    spans = span_exporter.get_finished_spans()
    for r, span in enumerate(rows):
        check_row_span(span, spans, index, data[r], d[r], i[r], kind=sc.SCORE_DISTANCE, k=3, batch=(r, 2), binary=True)


def test_results_are_the_same_objects_unmodified(instrumentor, span_exporter) -> None:
    index = faiss.IndexFlatL2(D)
    index.add(vectors(30))
    q = vectors(2, seed=5)
    out_d = np.empty((2, 4), dtype="float32")
    out_i = np.empty((2, 4), dtype="int64")
    got_d, got_i = index.search(q, 4, D=out_d, I=out_i)
    assert got_d is out_d and got_i is out_i
    snapshot = (copy.deepcopy(got_d), copy.deepcopy(got_i))
    want_d, want_i = expected_row(index, q, 4)
    np.testing.assert_array_equal(out_i, want_i)
    np.testing.assert_array_equal(out_d, want_d)
    np.testing.assert_array_equal(snapshot[1], out_i)
    assert len(retrieve_spans(span_exporter)) == 2


def test_failing_search_is_failed_and_reraised_unchanged(instrumentor, span_exporter) -> None:
    index = faiss.IndexFlatL2(D)
    index.add(vectors(5))
    bad = np.zeros((1, D + 1), dtype="float32")  # wrong dimension: faiss asserts
    with suppress_instrumentation(), pytest.raises(AssertionError) as plain:
        index.search(bad, 2)
    with pytest.raises(AssertionError) as traced:
        index.search(bad, 2)
    assert type(traced.value) is type(plain.value) and str(traced.value) == str(plain.value)
    assert traced.value.__traceback__ is not None
    [span] = retrieve_spans(span_exporter)
    assert span.attributes[sc.STAGE_STATUS] == sc.STATUS_FAILED
    assert span.attributes[sc.STAGE_FAILURE_CLASS] == "exception:AssertionError"
    assert span.status.status_code == StatusCode.ERROR
    assert [e.name for e in span.events] == ["exception"]


def test_suppressed_instrumentation_records_nothing(instrumentor, span_exporter) -> None:
    index = faiss.IndexFlatL2(D)
    index.add(vectors(5))
    with suppress_instrumentation():
        index.search(vectors(1), 2)
    assert span_exporter.get_finished_spans() == ()


def test_inside_a_pipeline_the_query_text_is_unknown_but_coverage_is_said(instrumentor, span_exporter) -> None:
    index = faiss.IndexFlatIP(D)
    index.add(vectors(40))

    @ragtrail.pipeline
    def answer(query: str) -> list[str]:
        d, i = index.search(vectors(1, seed=2), 3)
        return [str(x) for x in i[0]]

    answer("what is near?")
    spans = span_exporter.get_finished_spans()
    pipeline = next(s for s in spans if s.attributes.get(sc.STAGE_KIND) == sc.KIND_PIPELINE)
    [span] = retrieve_spans(span_exporter)
    assert span.parent.span_id == pipeline.context.span_id
    assert pipeline.attributes[sc.COVERAGE_CORPUS_SIZE] == 40
    assert pipeline.attributes[sc.COVERAGE_RETRIEVED] == 3


def test_thousand_candidates_of_one_query_all_reach_the_exporter(instrumentor, span_exporter, tracer_provider) -> None:
    assert tracer_provider._span_limits.max_events == 128  # the SDK default that evicts the oldest
    index = faiss.IndexFlatIP(D)
    index.add(vectors(1500))
    q = vectors(1, seed=21)
    d, i = index.search(q, 1000)
    spans = span_exporter.get_finished_spans()
    [span] = retrieve_spans(span_exporter)
    assert span.dropped_events == 0
    evs = stitched(span, spans)
    assert [a[sc.CANDIDATE_ID] for _, a in evs] == [str(x) for x in i[0]]
    assert [a[sc.CANDIDATE_RANK] for _, a in evs] == list(range(1000))
    assert all(s.dropped_events == 0 for s in spans)
    check_count_and_digest(span, evs)
    # schema 3: 1000 candidates are columns on the one stage span (no continuation span)
    assert sc.EVENTS_SPANS not in span.attributes and not [s for s in spans if s.attributes.get(sc.STAGE_CONTINUATION)]


def test_sampled_out_parent_builds_no_rows(tracer_provider, span_exporter) -> None:
    """A sampled-out parent: no stage records, so no row is built (near-zero work)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased

    provider = TracerProvider(sampler=ParentBased(ALWAYS_OFF))
    inst = FaissInstrumentor()
    inst.instrument(tracer_provider=provider)
    try:
        index = faiss.IndexFlatL2(D)
        index.add(vectors(10))
        import ragtrail.instrumentation.faiss as module

        built: list[int] = []
        original = module._row

        def counting(call: Any, i: int, candidates: Any) -> Any:
            built.append(i)
            return original(call, i, candidates)

        module._row = counting
        try:
            with provider.get_tracer("t").start_as_current_span("parent"):
                d, i = index.search(vectors(50), 3)
        finally:
            module._row = original
        assert built == [0]  # only the pre-call description of row 0
        assert i.shape == (50, 3)
    finally:
        inst.uninstrument()


def run_under_opentelemetry_instrument(script: str, tmp_path: Path, entry_point: str) -> list[Any]:
    return spanutil.run_under_opentelemetry_instrument(script, tmp_path, entry_point, service="vector-app")[1]


def test_under_opentelemetry_instrument_thousand_hits_arrive_in_the_local_store(tmp_path) -> None:
    from ragtrail.inspect import manifest
    from ragtrail.inspect.model import Trace

    spans = run_under_opentelemetry_instrument(
        """
        import faiss, numpy as np
        rng = np.random.default_rng(0)
        index = faiss.IndexHNSWFlat(8, 16)
        index.add(rng.standard_normal((1200, 8)).astype("float32"))
        index.hnsw.efSearch = 1200  # HNSW returns at most ~efSearch hits
        d, i = index.search(rng.standard_normal((2, 8)).astype("float32"), 1000)
        with open("ids.txt", "w") as f:
            f.write(",".join(str(x) for x in i[0] if x != -1))
        print("APP-OK")
    """,
        tmp_path,
        "ragtrail_faiss",
    )
    want0 = (tmp_path / "ids.txt").read_text().split(",")
    stages = [s for s in spans if s.attributes.get(sc.STAGE_KIND) == sc.KIND_RETRIEVE and not s.attributes.get(sc.STAGE_CONTINUATION)]
    assert len(stages) == 2 and {s.name for s in stages} == {"retrieve IndexHNSWFlat"}
    assert sorted(s.attributes[sc.STAGE_BATCH_INDEX] for s in stages) == [0, 1]
    for s in stages:
        assert s.attributes[sc.COVERAGE_CORPUS_SIZE] == 1200
        assert s.dropped_events == 0
        trace_spans = [x for x in spans if x.trace_id == s.trace_id]
        m = manifest.build(Trace(trace_id=s.trace_id, spans=trace_spans, source="file")).as_dict()
        [stage] = m["stages"]
        n = s.attributes[sc.CANDIDATES_OUT]
        assert n >= 990 and len(stage["candidates"]) == n
        assert [c["rank"] for c in stage["candidates"]] == list(range(n))
        if s.attributes[sc.STAGE_BATCH_INDEX] == 0:
            assert [c["id"] for c in stage["candidates"]] == want0
        assert m["fidelity"]["alarms"] == [] and m["fidelity"]["missing_events"] == 0


def test_instrumentation_errors_never_reach_the_app(instrumentor, span_exporter, monkeypatch) -> None:
    """A recording step that breaks is counted on the span; the search result is untouched."""
    import ragtrail.instrumentation.faiss as module
    from ragtrail.recorder.errors import internal_error_count

    index = faiss.IndexFlatL2(D)
    index.add(vectors(10))
    q = vectors(1, seed=4)
    want_d, want_i = expected_row(index, q, 3)
    before = internal_error_count()

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("recording bug")

    monkeypatch.setattr(module, "_outcome", broken)
    got_d, got_i = index.search(q, 3)
    np.testing.assert_array_equal(got_i, want_i)
    [span] = retrieve_spans(span_exporter)
    assert span.attributes[sc.STAGE_INSTRUMENTATION_ERRORS] == 1
    assert span.end_time is not None and trace.get_current_span() is trace.INVALID_SPAN
    monkeypatch.setattr(module, "_start", broken)  # cannot even open: the call runs bare
    got_d, got_i = index.search(q, 3)
    np.testing.assert_array_equal(got_i, want_i)
    assert len(retrieve_spans(span_exporter)) == 1
    assert internal_error_count() == before + 2


def test_any_faiss_wheel_satisfies_the_dependency_check(monkeypatch) -> None:
    inst = FaissInstrumentor()  # the instrumentor is a singleton: monkeypatch restores it
    assert inst._check_dependency_conflicts() is None  # faiss-cpu is what is installed here
    monkeypatch.setattr(inst, "_instruments_any", ("faiss-gpu-cu12 >= 1.8", "faiss-cpu >= 1.8"))
    assert inst._check_dependency_conflicts() is None
    monkeypatch.setattr(inst, "_instruments_any", ("faiss-gpu-cu12 >= 1.8",))
    assert inst._check_dependency_conflicts() is not None


def test_importing_the_vector_store_instrumentations_imports_no_library() -> None:
    code = (
        "import sys, ragtrail.instrumentation.faiss, ragtrail.instrumentation.qdrant, "
        "ragtrail.instrumentation.chromadb; "
        "print(sorted(m for m in ('faiss', 'qdrant_client', 'chromadb', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_bulk_search_writes_at_most_the_configured_stages_and_says_so(instrumentor, span_exporter, monkeypatch) -> None:
    index = faiss.IndexFlatL2(D)
    index.add(vectors(30))
    monkeypatch.setenv("RAGTRAIL_VECTORSTORE_MAX_QUERIES", "5")
    settings.reset()  # the environment is read once, on first use
    d, i = index.search(vectors(40, seed=8), 2)
    rows = sorted(retrieve_spans(span_exporter), key=lambda s: s.attributes[sc.STAGE_BATCH_INDEX])
    assert [r.attributes[sc.STAGE_BATCH_INDEX] for r in rows] == [0, 1, 2, 3, 4]
    assert {r.attributes[sc.STAGE_BATCH_SIZE] for r in rows} == {40}
    assert rows[0].attributes[sc.STAGE_FINDINGS] == ("batch of 40 queries: stages written for the first 5 only (RAGTRAIL_VECTORSTORE_MAX_QUERIES)",)
    assert [e.attributes[sc.CANDIDATE_ID] for e in rec_events(rows[4])] == [str(x) for x in i[4]]
    span_exporter.clear()
    monkeypatch.setenv("RAGTRAIL_VECTORSTORE_MAX_QUERIES", "not-a-number")  # default 1000, logged once
    settings.reset()
    index.search(vectors(40, seed=8), 2)
    assert len(retrieve_spans(span_exporter)) == 40
