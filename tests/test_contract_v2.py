"""Contract v2 (issue 11): order-free reading, completeness without the root, the stage receipt,
keyed receipts. Every trace here is recorded by the real recorder and written by the real export
path (tests/fixtures/ragtrail_traces.py), then served in each backend's shape or tampered with."""

from __future__ import annotations

import base64
import copy
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import ragtrail
from fixtures.ragtrail_traces import all_spans, record, store_lines
from fixtures.ragtrail_traces import multi_query_run as mq_run
from ragtrail.cli.app import main as cli_main
from ragtrail.contract import semconv as sc
from ragtrail.inspect.manifest import build
from ragtrail.inspect.sources import resolve

KEY = "correct horse battery staple"


def _record(
    tmp_path: Path, run: Callable[[Any], str] = mq_run, env: dict[str, str] | None = None, monkeypatch: pytest.MonkeyPatch | None = None
) -> dict[str, Any]:
    """Record ``run``; the trace as one OTLP JSON document (all lines merged)."""
    for k, v in (env or {}).items():
        assert monkeypatch is not None
        monkeypatch.setenv(k, v)
    store = tmp_path / "store"
    record(store, run)
    docs = store_lines(store)
    return {"resourceSpans": [rs for d in docs for rs in d["resourceSpans"]]}


def _write(tmp_path: Path, name: str, body: Any) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(body))
    return str(path)


class _Result:
    def __init__(self, exit_code: int, output: str) -> None:
        self.exit_code, self.output = exit_code, output


def _cli(capfd: pytest.CaptureFixture[str], *args: str) -> _Result:
    """The console script's entry point, in process (exit code and what it printed)."""
    capfd.readouterr()
    try:
        cli_main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capfd.readouterr()
    return _Result(code, out.out + out.err)


def _verdict(path: str, key: bytes | None = None) -> dict[str, Any]:
    f = build(resolve(path, None), key).as_dict()["fidelity"]
    return {k: v for k, v in f.items() if k != "notes"}


# --- backend shapes ----------------------------------------------------------------------------
def _otlp_value_to_jaeger(key: str, value: dict[str, Any]) -> dict[str, Any]:
    ((kind, v),) = value.items()
    if kind == "stringValue":
        return {"key": key, "type": "string", "value": v}
    if kind == "intValue":
        return {"key": key, "type": "int64", "value": int(v)}
    if kind == "doubleValue":
        return {"key": key, "type": "float64", "value": float(v)}
    if kind == "boolValue":
        return {"key": key, "type": "bool", "value": v}
    if kind == "arrayValue":  # Jaeger keeps an OTLP array as its JSON text
        items = [list(x.values())[0] for x in v.get("values", [])]
        items = [
            int(x) if isinstance(x, str) and x.lstrip("-").isdigit() and "intValue" in y else x
            for x, y in zip(items, v.get("values", []), strict=False)
        ]
        # Go's encoding/json, as Jaeger writes the array's text: a whole float 1.0 is written 1
        items = [
            int(x) if isinstance(x, float) and x.is_integer() and "doubleValue" in y else x for x, y in zip(items, v.get("values", []), strict=False)
        ]
        return {"key": key, "type": "string", "value": json.dumps(items, separators=(",", ":"))}
    raise AssertionError(kind)


def to_jaeger_v1(doc: dict[str, Any]) -> dict[str, Any]:
    """The OTLP document in Jaeger's v1 ``GET /api/traces/{id}`` shape (tags, logs, references)."""
    spans, processes = [], {}
    for n, rs in enumerate(doc["resourceSpans"]):
        pid = f"p{n + 1}"
        res = {kv["key"]: kv["value"] for kv in rs["resource"]["attributes"]}
        processes[pid] = {
            "serviceName": res["service.name"]["stringValue"],
            "tags": [_otlp_value_to_jaeger(k, v) for k, v in res.items() if k != "service.name"],
        }
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                start = int(s["startTimeUnixNano"]) // 1000
                spans.append(
                    {
                        "traceID": s["traceId"],
                        "spanID": s["spanId"],
                        "operationName": s["name"],
                        "references": (
                            [{"refType": "CHILD_OF", "traceID": s["traceId"], "spanID": s["parentSpanId"]}] if s.get("parentSpanId") else []
                        ),
                        "startTime": start,
                        "duration": int(s["endTimeUnixNano"]) // 1000 - start,
                        "tags": [_otlp_value_to_jaeger(kv["key"], kv["value"]) for kv in s.get("attributes", [])],
                        "logs": [
                            {
                                "timestamp": int(e["timeUnixNano"]) // 1000,
                                "fields": [{"key": "event", "type": "string", "value": e["name"]}]
                                + [_otlp_value_to_jaeger(kv["key"], kv["value"]) for kv in e.get("attributes", [])],
                            }
                            for e in s.get("events", [])
                        ],
                        "processID": pid,
                        "warnings": None,
                    }
                )
    return {"data": [{"traceID": spans[0]["traceID"], "spans": spans, "processes": processes}]}


def _b64(doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for s in all_spans(doc):
        for k in ("traceId", "spanId", "parentSpanId"):
            if s.get(k):
                s[k] = base64.b64encode(bytes.fromhex(s[k])).decode()
    return doc


def _reorder(doc: dict[str, Any], how: str) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    rng = random.Random(11)
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            ss["spans"].reverse()
            for s in ss["spans"]:
                events = s.get("events", [])
                if how == "by_name":  # Jaeger v2's SortCollections: by name (query events last)
                    events.sort(key=lambda e: e["name"])
                elif how == "reversed":  # exclusions before candidates, query events last
                    events.reverse()
                else:
                    rng.shuffle(events)
    return doc


def shapes(tmp_path: Path, doc: dict[str, Any]) -> dict[str, str]:
    """One trace in every backend shape, each with its events in another order."""
    sorted_doc, reversed_doc, shuffled = (_reorder(doc, h) for h in ("by_name", "reversed", "shuffled"))
    return {
        "local store": _write(tmp_path, "local.json", doc),
        "collector file exporter": _write(tmp_path, "collector.json", shuffled),
        "jaeger v3": _write(tmp_path, "jaeger.v3.json", {"result": sorted_doc}),
        "jaeger v1": _write(tmp_path, "jaeger.v1.json", to_jaeger_v1(sorted_doc)),
        "tempo v1": _write(tmp_path, "tempo.v1.json", _b64(reversed_doc)),
        "tempo v2": _write(tmp_path, "tempo.v2.json", {"trace": _b64(shuffled)}),
    }


def _order_free_manifest(m: dict[str, Any]) -> list[Any]:
    return [
        [(s["kind"], s["component"], [c["id"] for c in s["candidates"]], [e["id"] for e in s["excluded"]]) for s in m["stages"]],
        [(h["hop"], h["text"]) for h in m["query_hops"]],
    ]


def test_every_backend_shape_gives_the_same_verdict_whatever_the_event_order(tmp_path: Path) -> None:
    doc = _record(tmp_path)
    span = _span(doc, "retrieve multi_query")
    assert [e["name"] for e in span["events"]] == [sc.EVENT_QUERY] * 3  # the candidates are columns (schema 3)
    assert len(_attr(span, sc.COLUMN_IDS)["arrayValue"]["values"]) == 6
    fuse = _span(doc, "fuse rrf")
    assert [e["name"] for e in fuse["events"]] == [sc.EVENT_EXCLUSION]  # one per reason
    # a whole score 1.0 reaches Jaeger v1 as 1 in the array's text: the reader still verifies it
    _set(fuse["attributes"], sc.COLUMN_SCORES, {"arrayValue": {"values": [{"doubleValue": 1.0}] * 4}})
    _restamp(doc, "fuse rrf", keyed=False, score=None)
    paths = shapes(tmp_path, doc)
    verdicts = {name: _verdict(p) for name, p in paths.items()}
    reference = verdicts["local store"]
    assert reference["alarms"] == []
    assert (reference["intact"], reference["changed_uncited"], reference["unverifiable"]) == (23, 0, 0)
    for name, verdict in verdicts.items():
        assert verdict == {**reference, "dropped_attributes": verdict["dropped_attributes"], "dropped_events": verdict["dropped_events"]}, name
    # the reader restores emission order for display, whatever order the backend served
    manifests = {name: _order_free_manifest(build(resolve(p, None)).as_dict()) for name, p in paths.items()}
    for name, m in manifests.items():
        assert m == manifests["local store"], name
    fuse = manifests["jaeger v1"][0][3]
    assert fuse[2] == ["policy-2024-11", "policy-2026-01", "policy-2026-01-draft", "sales-deck-q1"]
    assert fuse[3] == ["policy-2026-01", "policy-2026-01-draft"]


def test_schema_1_recorded_trace_from_jaeger_still_verifies() -> None:
    fixtures = Path(__file__).parent / "fixtures" / "jaeger_recorded"
    for name in ("whole_trace.v1.json", "whole_trace.v3.json"):
        m = build(resolve(str(fixtures / name), None)).as_dict()
        assert m["schema"] == 1
        assert m["fidelity"]["alarms"] == [], name


# --- completeness ------------------------------------------------------------------------------
def _drop(doc: dict[str, Any], keep: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            ss["spans"] = [s for s in ss["spans"] if keep(s)]
    return doc


def _attr(span: dict[str, Any], key: str) -> Any:
    for kv in span.get("attributes", []):
        if kv["key"] == key:
            return kv["value"]
    return None


def _alarms(path: str, key: bytes | None = None) -> list[tuple[str, str]]:
    return [(a["field"], a["problem"]) for a in build(resolve(path, None), key).as_dict()["fidelity"]["alarms"]]


def test_rootless_trace_alarms_and_exits_1(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    doc = _record(tmp_path)
    rootless = _drop(doc, lambda s: _attr(s, sc.TRACE_SPAN_COUNT) is None)
    path = _write(tmp_path, "rootless.json", rootless)
    assert _alarms(path) == [(sc.TRACE_SEGMENT_ROOT, "root span missing")]
    result = _cli(capfd, "verify", path)
    assert result.exit_code == 1, result.output
    assert "root span missing" in result.output
    shown = _cli(capfd, "show", path)
    assert "faithful" not in shown.output.replace("not faithful", "") and "ALARM" in shown.output


def test_missing_stage_span_alarms(tmp_path: Path) -> None:
    doc = _record(tmp_path)
    gone = _drop(doc, lambda s: s["name"] != "fuse rrf")
    assert _alarms(_write(tmp_path, "gone.json", gone)) == [(sc.TRACE_SPAN_COUNT, "missing spans")]
    both = _drop(gone, lambda s: _attr(s, sc.TRACE_SPAN_COUNT) is None)
    assert _alarms(_write(tmp_path, "both.json", both)) == [(sc.TRACE_SEGMENT_ROOT, "root span missing"), (sc.TRACE_SPAN_COUNT, "missing spans")]


def test_lowered_count_is_an_alarm_not_a_note(tmp_path: Path) -> None:
    doc = _record(tmp_path)
    for s in all_spans(doc):
        value = _attr(s, sc.TRACE_SPAN_COUNT)
        if value is not None:
            value["intValue"] = str(int(value["intValue"]) - 1)
    assert _alarms(_write(tmp_path, "lowered.json", doc)) == [(sc.TRACE_SPAN_COUNT, "span count changed")]


# --- the stage receipt: each tampering kind detected and named -------------------------------------
def _span(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in all_spans(doc) if s["name"] == name)


def _event(span: dict[str, Any], event_name: str, n: int = 0) -> dict[str, Any]:
    return [e for e in span["events"] if e["name"] == event_name][n]


def _set(attrs: list[dict[str, Any]], key: str, value: dict[str, Any]) -> None:
    for kv in attrs:
        if kv["key"] == key:
            kv["value"] = value
            return
    attrs.append({"key": key, "value": value})


def _on_span(name: str, key: str, value: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return lambda doc: _set(_span(doc, name)["attributes"], key, value)


def _on_event(name: str, event: str, key: str, value: dict[str, Any], n: int = 0) -> Callable[[dict[str, Any]], None]:
    return lambda doc: _set(_event(_span(doc, name), event, n)["attributes"], key, value)


def _on_column(name: str, key: str, index: int, value: dict[str, Any], event: str | None = None) -> Callable[[dict[str, Any]], None]:
    """Change one row of a column: on the stage span, or on its first ``event``."""

    def edit(doc: dict[str, Any]) -> None:
        span = _span(doc, name)
        attrs = _event(span, event)["attributes"] if event else span["attributes"]
        next(kv for kv in attrs if kv["key"] == key)["value"]["arrayValue"]["values"][index] = value

    return edit


def _swap_ids(doc: dict[str, Any]) -> None:
    ids = _attr(_span(doc, "fuse rrf"), sc.COLUMN_IDS)["arrayValue"]["values"]
    ids[0], ids[1] = ids[1], ids[0]


TAMPERING = {  # what was changed -> the field the alarm names (the 18 kinds the issue saw uncaught, and more)
    "score": (_on_column("fuse rrf", sc.COLUMN_SCORES, 0, {"doubleValue": 0.9}), sc.COLUMN_SCORES),
    "rank (two outputs swapped)": (_swap_ids, sc.COLUMN_IDS),
    "id": (_on_column("fuse rrf", sc.COLUMN_IDS, 2, {"stringValue": "sla-2025"}), sc.COLUMN_IDS),
    # schema 5: the fuse's excluded rows are a run of consecutive input ranks, said by the first
    "exclusion rank": (_on_event("fuse rrf", sc.EVENT_EXCLUSION, sc.COLUMN_RANK_FIRST, {"intValue": "6"}), sc.COLUMN_RANK_FIRST),
    "score kind": (_on_span("fuse rrf", sc.COLUMN_SCORE_KIND, {"stringValue": "rerank"}), sc.COLUMN_SCORE_KIND),
    "hop": (_on_column("fuse rrf", sc.COLUMN_HOPS, 0, {"intValue": "3"}), sc.COLUMN_HOPS),
    "exclusion reason": (_on_event("fuse rrf", sc.EVENT_EXCLUSION, sc.EXCLUSION_REASON, {"stringValue": "stale"}), sc.EXCLUSION_REASON),
    "exclusion detail": (
        _on_column("fuse rrf", sc.COLUMN_EXCLUSION_DETAILS, 1, {"stringValue": "old"}, sc.EVENT_EXCLUSION),
        sc.COLUMN_EXCLUSION_DETAILS,
    ),
    "stage status": (_on_span("filter status", sc.STAGE_STATUS, {"stringValue": "ok"}), sc.STAGE_STATUS),
    "failure class": (_on_span("filter status", sc.STAGE_FAILURE_CLASS, {"stringValue": "parse_error"}), sc.STAGE_FAILURE_CLASS),
    "fallback": (_on_span("filter status", sc.STAGE_FALLBACK, {"stringValue": "none"}), sc.STAGE_FALLBACK),
    "candidates in": (_on_span("fuse rrf", sc.CANDIDATES_IN, {"intValue": "4"}), sc.CANDIDATES_IN),
    "candidates out": (_on_span("fuse rrf", sc.CANDIDATES_OUT, {"intValue": "3"}), sc.CANDIDATES_OUT),
    "candidates excluded": (_on_span("fuse rrf", sc.CANDIDATES_EXCLUDED, {"intValue": "0"}), sc.CANDIDATES_EXCLUDED),
    "cited ids": (_on_span("pipeline mq", sc.CITED_IDS, {"arrayValue": {"values": [{"stringValue": "sla-2025"}]}}), sc.CITED_IDS),
    "component": (_on_span("fuse rrf", sc.STAGE_COMPONENT, {"stringValue": "tests.other"}), sc.STAGE_COMPONENT),
    "threshold knob": (_on_span("filter status", sc.STAGE_THRESHOLD, {"doubleValue": 0.1}), sc.STAGE_THRESHOLD),
    "coverage": (_on_span("pipeline mq", sc.COVERAGE_RETRIEVED, {"intValue": "9"}), sc.COVERAGE_RETRIEVED),
    "content chars (no payload)": (_on_column("fuse rrf", sc.COLUMN_CONTENT_CHARS, 0, {"intValue": "3"}), sc.COLUMN_CONTENT_CHARS),
    # schema 5: ASCII content says its bytes are its chars once, instead of a bytes column
    "content bytes (no payload)": (_on_span("fuse rrf", sc.COLUMN_CONTENT_ENCODING, {"stringValue": "utf-16"}), sc.COLUMN_CONTENT_ENCODING),
    # schema 4: the fuse stage's excluded rows point to the retrieval that wrote their receipts
    "excluded content pointer": (
        _on_event("fuse rrf", sc.EVENT_EXCLUSION, sc.COLUMN_CONTENT_FROM, {"stringValue": "00000000000000ff"}),
        sc.COLUMN_CONTENT_FROM,
    ),
    "query hop event text": (
        _on_event("retrieve multi_query", sc.EVENT_QUERY, sc.QUERY_TRANSFORM, {"stringValue": "rewrite"}, 1),
        sc.QUERY_TRANSFORM,
    ),
    "transform rule added": (
        _on_span("fuse rrf", sc.COLUMN_TRANSFORM_RULE, {"arrayValue": {"values": [{"stringValue": "budget_trim@1"}] + [{"stringValue": ""}] * 3}}),
        sc.COLUMN_TRANSFORM_RULE,
    ),
}


@pytest.mark.parametrize("kind", sorted(TAMPERING))
def test_each_tampering_kind_is_detected_and_named(tmp_path: Path, kind: str) -> None:
    doc = _record(tmp_path)
    edit, field = TAMPERING[kind]
    tampered = copy.deepcopy(doc)
    edit(tampered)
    alarms = build(resolve(_write(tmp_path, "t.json", tampered), None)).as_dict()["fidelity"]["alarms"]
    named = [(a["field"], a["problem"]) for a in alarms if a["field"] == field]
    assert named == [(field, "changed_uncited")], alarms
    assert all(a["stage"] for a in alarms)


def test_same_length_preview_replaced_is_changed_uncited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sc.ENV_CAPTURE_CONTENT, "preview")
    ragtrail.settings.reset()
    try:
        doc = _record(tmp_path)
    finally:
        monkeypatch.delenv(sc.ENV_CAPTURE_CONTENT)
        ragtrail.settings.reset()
    preview = _attr(_span(doc, "fuse rrf"), sc.COLUMN_CONTENT_PREVIEW)["arrayValue"]["values"][0]
    assert len(preview["stringValue"]) == 256
    preview["stringValue"] = "X" * 256
    f = build(resolve(_write(tmp_path, "p.json", doc), None)).as_dict()["fidelity"]
    assert [(a["stage"], a["field"], a["problem"]) for a in f["alarms"]] == [("fuse tests.rrf", sc.COLUMN_CONTENT_PREVIEW, "changed_uncited")]
    assert f["changed_uncited"] == 1


def test_restamped_field_digest_is_caught_by_the_receipt(tmp_path: Path) -> None:
    doc = _record(tmp_path)
    span = _span(doc, "fuse rrf")
    _set(span["attributes"], sc.STAGE_RECEIPT_FIELDS, {"stringValue": "x=00000000"})
    alarms = _alarms(_write(tmp_path, "f.json", doc))
    assert alarms == [(sc.STAGE_RECEIPT_FIELDS, "changed_uncited")]


# --- keyed receipts -----------------------------------------------------------------------------
def _restamp(doc: dict[str, Any], name: str, keyed: bool = True, score: float | None = 0.99) -> None:
    """What a forger without the key does: change a score and restamp the receipt unkeyed (``score``
    None: restamp only, and the events digest too, as after a change of every score)."""
    from ragtrail.contract.receipts import digest_item, sorted_events_digest, stage_fields, stage_receipt
    from ragtrail.inspect.otlp import decode_document
    from ragtrail.inspect.stages import StageView

    span = _span(doc, name)
    if score is not None:
        _on_column(name, sc.COLUMN_SCORES, 0, {"doubleValue": score})(doc)
    decoded = next(s for s in decode_document(doc) if s.name == name)
    stamp = stage_receipt(stage_fields(decoded.attributes, [(e.name, e.attributes) for e in decoded.events]))
    _set(span["attributes"], sc.STAGE_RECEIPT, {"stringValue": f"hmac-sha256:{stamp.receipt}" if keyed else stamp.receipt})
    _set(span["attributes"], sc.STAGE_RECEIPT_FIELDS, {"stringValue": stamp.fields})
    records = [digest_item(e.name, e.attributes) for _, e in StageView(decoded).events()]
    _set(span["attributes"], sc.EVENTS_DIGEST, {"stringValue": sorted_events_digest(records)})


def test_keyed_receipts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    doc = _record(tmp_path, env={sc.ENV_RECEIPT_KEY: KEY}, monkeypatch=monkeypatch)
    monkeypatch.delenv(sc.ENV_RECEIPT_KEY)
    receipts = [_attr(s, sc.STAGE_RECEIPT)["stringValue"] for s in all_spans(doc)]
    assert len(receipts) == 7 and all(r.startswith("hmac-sha256:") for r in receipts), receipts
    assert all(KEY not in json.dumps(s) for s in all_spans(doc))
    path = _write(tmp_path, "keyed.json", doc)
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    # with the key: ok
    assert _cli(capfd, "verify", path, "--key-file", str(key_file)).exit_code == 0
    # without it: unverifiable, not ok
    result = _cli(capfd, "verify", path)
    assert result.exit_code == 1, result.output
    assert result.output.count("keyed (hmac-sha256)") == len(receipts)
    # a forger who restamps (without the key) is caught with it
    _restamp(doc, "fuse rrf")
    forged = _write(tmp_path, "forged.json", doc)
    result = _cli(capfd, "verify", forged, "--key-file", str(key_file))
    assert result.exit_code == 1
    assert "stage=fuse tests.rrf" in result.output and "field=ragtrail.stage.receipt" in result.output
    # a downgrade (the receipt restamped unkeyed) is caught when verify holds the key
    for kv in _span(doc, "fuse rrf")["attributes"]:
        if kv["key"] == sc.STAGE_RECEIPT:
            kv["value"]["stringValue"] = kv["value"]["stringValue"].replace("hmac-sha256:", "")
    result = _cli(capfd, "verify", _write(tmp_path, "downgraded.json", doc), "--key-file", str(key_file))
    assert result.exit_code == 1 and result.output.count("ALARM") == 1
    assert "field=ragtrail.stage.receipt: changed_uncited (the receipt is unkeyed (sha256) but a key was given" in result.output
    # the same restamp on an unkeyed trace passes: what the key is for
    plain = _record(tmp_path / "plain")
    _restamp(plain, "fuse rrf")
    for kv in _span(plain, "fuse rrf")["attributes"]:
        if kv["key"] == sc.STAGE_RECEIPT:
            kv["value"]["stringValue"] = kv["value"]["stringValue"].replace("hmac-sha256:", "")
    assert _alarms(_write(tmp_path, "plain.json", plain)) == []


def test_export_stamps_every_ragtrail_span_with_its_segment(tmp_path: Path) -> None:
    doc = _record(tmp_path)
    spans = all_spans(doc)
    root = next(s for s in spans if not s.get("parentSpanId"))
    assert _attr(root, sc.TRACE_SPAN_COUNT) == {"intValue": "7"}
    assert _attr(root, sc.TRACE_SEGMENT_ROOT) is None and _attr(root, sc.TRACE_SEGMENT_SPAN_COUNT) is None
    others = [s for s in spans if s is not root]
    assert len(others) == 6
    for s in others:
        assert _attr(s, sc.TRACE_SEGMENT_ROOT) == {"stringValue": root["spanId"]}, s["name"]
        assert _attr(s, sc.TRACE_SEGMENT_SPAN_COUNT) == {"intValue": "7"}, s["name"]
        assert _attr(s, sc.TRACE_SPAN_COUNT) is None


def test_field_digests_cut_by_a_value_limit_name_only_what_they_cover() -> None:
    from ragtrail.contract.receipts import changed_fields, parse_field_digests, stage_receipt

    fields = {"a.one": "1", "b.two": "2", "c.three": "3", "d.four": "4"}
    stamped = stage_receipt(fields).fields
    assert changed_fields(fields, parse_field_digests(stamped)) == []
    changed = dict(fields, **{"a.one": "9"})
    assert changed_fields(changed, parse_field_digests(stamped)) == ["a.one"]
    cut = stamped[: stamped.index("c.three=") + 11]  # a collector's truncate_all, mid-digest
    assert changed_fields(changed, parse_field_digests(cut)) == ["a.one"]
    assert changed_fields(dict(fields, **{"b.two": "x"}), parse_field_digests(cut)) == ["b.two"]
    # uncut, a field the producer never wrote is named as added
    assert changed_fields(dict(fields, **{"e.five": "5"}), parse_field_digests(stamped)) == ["e.five"]
