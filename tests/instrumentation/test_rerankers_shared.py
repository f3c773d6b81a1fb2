"""The reranker instrumentations' shared recorder (ragtrail.instrumentation._rerank), and the span
checks the per-library reranker tests import from here (so every library is held to one contract).

The checks build every expected attribute from the test's own data and docs/semconv.md §1-3 (receipts by
``ragtrail.contract.receipts.receipt``, the events digest re-derived here from docs/semconv.md §3), pop them, and
assert nothing unexpected is left.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.trace import StatusCode

import mirrorutil
import spanutil
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import content_id, receipt
from ragtrail.instrumentation import _rerank
from ragtrail.recorder.candidates import Candidate
from ragtrail.recorder.stage import stage
from spanutil import attrs, pop_all

# --- the contract every reranker span is checked against ------------------------------------------


def doc(content: Any, ident: str | None = None, score: float | None = None, kind: str | None = None) -> dict[str, Any]:
    """One expected document: its id (own id, else ``sha256:`` of the content) and receipt."""
    return {"id": ident or content_id(content), "content": content, "score": score, "kind": kind}


def _candidate_attrs(d: dict[str, Any], rank: int | None, kind: str) -> dict[str, Any]:
    rec = receipt(d["content"])
    out: dict[str, Any] = {sc.CANDIDATE_ID: d["id"]}
    if rank is not None:
        out[sc.CANDIDATE_RANK] = rank
    score = d.get("score")
    if score is not None:
        if isinstance(score, float) and not math.isfinite(score):
            out[sc.CANDIDATE_SCORE_RAW] = repr(score)
        else:
            out[sc.CANDIDATE_SCORE] = pytest.approx(score, rel=1e-6)
    out[sc.CANDIDATE_SCORE_KIND] = d.get("kind") or kind
    out[sc.CANDIDATE_CONTENT_CHARS] = rec.chars
    out[sc.CANDIDATE_CONTENT_BYTES] = rec.bytes
    out[sc.CANDIDATE_CONTENT_SHA256] = rec.sha256
    return out


def digest(items: Sequence[tuple[str, str, str]]) -> str:
    """docs/semconv.md §3, re-derived: sha256 of the compact JSON array of [event, id, content sha256], the
    items sorted (schema 2: the digest does not depend on the order events arrive in)."""
    payload = json.dumps([list(i) for i in sorted(items)], separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def expected_events(
    outputs: Sequence[dict], exclusions: Sequence[tuple[int, dict, str, str | None]], input_kind: str = sc.SCORE_NONE
) -> list[tuple[str, dict[str, Any]]]:
    events = [(sc.EVENT_CANDIDATE, _candidate_attrs(d, rank, sc.SCORE_RERANK)) for rank, d in enumerate(outputs)]
    for rank, d, reason, detail in exclusions:
        e = _candidate_attrs(d, rank, input_kind)
        e[sc.EXCLUSION_REASON] = reason
        if detail is not None:
            e[sc.EXCLUSION_DETAIL] = detail
        events.append((sc.EVENT_EXCLUSION, e))
    return events


def check_rerank_span(
    span: Any,
    *,
    component: str,
    query: str | None,
    inputs: Sequence[dict],
    outputs: Sequence[dict],
    exclusions: Sequence[tuple[int, dict, str, str | None]] = (),
    top_k: int | None = None,
    model: str | None = None,
    status: str = "ok",
    failure_class: str | None = None,
    findings: Sequence[str] | None = None,
    input_kind: str = sc.SCORE_NONE,
    exception_type: str | None = None,
) -> None:
    """Assert the exact attributes and events of one reranker stage span (nothing else allowed)."""
    assert span.name == f"rerank {component.rsplit('.', 1)[-1]}"
    a = attrs(span)
    expected: dict[str, Any] = {
        sc.OPENINFERENCE_SPAN_KIND: sc.OI_RERANKER,
        sc.SCHEMA: 5,
        sc.STAGE_KIND: sc.KIND_RERANK,
        sc.STAGE_COMPONENT: component,
        sc.STAGE_STATUS: status,
        sc.CANDIDATES_IN: len(inputs),
        sc.CANDIDATES_OUT: len(outputs),
        sc.CANDIDATES_EXCLUDED: len(exclusions),
    }
    if query is not None:
        rec = receipt(query)
        expected.update(
            {
                sc.OI_INPUT_VALUE: query,
                sc.OI_RERANKER_QUERY: query,
                sc.QUERY_HOP: 0,
                sc.QUERY_TRANSFORM: sc.TRANSFORM_NONE,
                sc.QUERY_TEXT: query,
                sc.QUERY_CHARS: rec.chars,
                sc.QUERY_BYTES: rec.bytes,
                sc.QUERY_SHA256: rec.sha256,
            }
        )
    if top_k is not None:
        expected[sc.STAGE_TOP_K] = top_k
        expected[sc.OI_RERANKER_TOP_K] = top_k
    if model is not None:
        expected[sc.STAGE_MODEL] = model
        expected[sc.OI_RERANKER_MODEL_NAME] = model
    if failure_class is not None:
        expected[sc.STAGE_FAILURE_CLASS] = failure_class
    if findings:
        expected[sc.STAGE_FINDINGS] = list(findings)
    for i, d in enumerate(outputs):
        expected[f"{sc.OI_RERANKER_OUTPUT_DOCUMENTS}.{i}.{sc.OI_DOCUMENT_ID}"] = d["id"]
        if d.get("score") is not None and math.isfinite(d["score"]):
            expected[f"{sc.OI_RERANKER_OUTPUT_DOCUMENTS}.{i}.{sc.OI_DOCUMENT_SCORE}"] = pytest.approx(d["score"], rel=1e-6)
    for i, d in enumerate(inputs):
        expected[f"{sc.OI_RERANKER_INPUT_DOCUMENTS}.{i}.{sc.OI_DOCUMENT_ID}"] = d["id"]
        if d.get("score") is not None and math.isfinite(d["score"]):
            expected[f"{sc.OI_RERANKER_INPUT_DOCUMENTS}.{i}.{sc.OI_DOCUMENT_SCORE}"] = pytest.approx(d["score"], rel=1e-6)

    events = expected_events(outputs, exclusions, input_kind)
    expected[sc.EVENTS_COUNT] = len(events)
    expected[sc.EVENTS_DIGEST] = digest([(name, e[sc.CANDIDATE_ID], e[sc.CANDIDATE_CONTENT_SHA256]) for name, e in events])
    pop_all(a, expected)
    mirrorutil.pop_mirrors(a, span)
    assert a == {}, f"unexpected attributes: {a}"

    actual = spanutil.records(span)  # schema 3: the columns and the exclusion events, decoded
    if exception_type is not None:
        (exception,) = [e for e in span.events if e.name == "exception"]
        assert exception.attributes["exception.type"] == exception_type
        assert span.status.status_code is StatusCode.ERROR
    else:
        assert span.status.status_code is StatusCode.OK  # the OpenInference mirror's status on success
    assert actual == events


def rerank_spans(exporter: Any) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if (s.attributes or {}).get(sc.STAGE_KIND) == sc.KIND_RERANK]


# --- a real process under opentelemetry-instrument -----------------------------------------------


def run_under_opentelemetry_instrument(
    script: str, tmp_path: Path, entry_point: str, extra_env: dict[str, str] | None = None, timeout: float = 240
) -> list[Any]:
    """``script`` under ``opentelemetry-instrument`` with only ``entry_point`` enabled; the decoded spans."""
    return spanutil.run_under_opentelemetry_instrument(script, tmp_path, entry_point, service="rerank-app", extra_env=extra_env, timeout=timeout)[1]


# --- the shared recorder itself -------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, None),
        (Ellipsis, None),
        (True, None),
        (5, 5),
        (5.0, 5),
        (5.5, None),
        (float("nan"), None),
        ("3", None),
        (0, 0),
    ],
)
def test_top_k_of(value: Any, expected: int | None) -> None:
    assert _rerank.top_k_of(value) == expected


def test_plain_score_turns_numpy_scalars_into_floats() -> None:
    np = pytest.importorskip("numpy")
    value = _rerank.plain_score(np.float32(0.25))
    assert type(value) is float and value == 0.25
    row = np.array([0.1, 0.2])
    assert _rerank.plain_score(row) is row
    assert _rerank.plain_score(None) is None


def test_ranked_maps_indices_and_reports_bad_ones(span_exporter, tracer_provider) -> None:
    tracer = tracer_provider.get_tracer("test")
    call = _rerank.RerankArgs("my.Reranker", query="q")
    with stage(sc.KIND_RERANK, "my.Reranker", tracer=tracer) as s:
        call.inputs = _rerank.snapshot(["a", {"id": "B", "text": "b"}])
        s.inputs(call.inputs)
        out = _rerank.ranked(
            s,
            call,
            [(1, 0.5, "r1"), (7, 0.9, "r7"), (0, float("nan"), "r0"), (None, 0.1, "rx")],
            orphan=lambda raw: Candidate(id="orphan") if raw == "rx" else None,
        )
        s.outputs(out)
    assert [(c.id, c.raw) for c in out] == [("B", "r1"), (content_id("a"), "r0"), ("orphan", "rx")]
    assert out[1].content == "a" and out[1].score_kind == sc.SCORE_RERANK
    (span,) = span_exporter.get_finished_spans()
    assert span.attributes[sc.STAGE_FINDINGS] == (
        "2 result(s) pointed at no input document",
        "1 non-finite rerank score(s), recorded as ragtrail.candidate.score_raw",
    )


def test_snapshot_freezes_metadata_and_receipt() -> None:
    item = {"id": 1, "text": "t", "meta": {"k": "v"}}
    (candidate,) = _rerank.snapshot([item])
    item["meta"]["k"] = "changed"
    item["text"] = "changed"
    assert candidate.id == "1" and candidate.metadata == {"k": "v"}
    assert candidate.receipt == receipt("t")


def test_argument_and_document_list() -> None:
    assert _rerank.argument(("q", ["d"]), {}, 1, "documents") == ["d"]
    assert _rerank.argument(("q",), {"docs": 3}, 1, "documents", "docs") == 3
    assert _rerank.argument((), {}, None, "query", default="x") == "x"
    call = _rerank.RerankArgs("c")
    assert _rerank.document_list(call, iter(["a"])) is None
    assert _rerank.document_list(call, None) is None
    assert call.findings == ["documents are a list_iterator, not a list: not snapshotted", "no documents among the arguments"]
