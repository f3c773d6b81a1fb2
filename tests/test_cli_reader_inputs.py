"""Reader inputs that used to end in exit 70 ("a bug"): each is now one line with its documented code.

The five causes found by fuzzing the readers (issue 13): JSON nested deeper than ~1,000 levels
(RecursionError, also for 100 MB of brackets), a numeric attribute key, an object as an event name, a
TRACE argument over 255 characters (ENAMETOOLONG), and ``show ""`` (which scanned every ``*.json``
under the current folder). Real traces come from the real recorder and local-store exporter.
"""

from __future__ import annotations

import json

import pytest

from fixtures.ragtrail_traces import rag_run, record, rewrite_store
from test_cli_errors import assert_one_line_error, ragtrail


@pytest.fixture()
def store(tmp_path):
    trace_id = record(tmp_path, rag_run)
    return tmp_path, trace_id


@pytest.mark.parametrize("depth", [1_000, 100_000, 4_000_000])
def test_json_nested_too_deeply(tmp_path, depth):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * depth + "]" * depth)
    assert_one_line_error(ragtrail("show", str(deep)), 4, "nests JSON too deeply to be a trace")
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text('{"resourceSpans": ' + "[" * depth + "]" * depth + "}")
    assert_one_line_error(ragtrail("verify", str(wrapped)), 4, "nests JSON too deeply to be a trace")


def test_attribute_value_nested_too_deeply(store):
    path, trace_id = store
    value: dict = {"stringValue": "leaf"}
    for _ in range(40):
        value = {"arrayValue": {"values": [value]}}

    def edit(span):
        span["attributes"].append({"key": "deep", "value": value})

    tampered = rewrite_store(path, edit)
    assert_one_line_error(ragtrail("show", trace_id, "--source", str(tampered)), 4, "an attribute value nests deeper than 32 levels")


def test_deep_lines_among_good_ones_are_skipped(store):
    path, trace_id = store
    (path / "junk.jsonl").write_text("[" * 50_000 + "\n")
    result = ragtrail("show", trace_id, "--source", str(path))
    assert result.returncode == 0, result.stderr


def test_numeric_attribute_key(store):
    path, trace_id = store

    def edit(span):
        span["attributes"][0]["key"] = 5

    tampered = rewrite_store(path, edit)
    assert_one_line_error(ragtrail("show", trace_id, "--source", str(tampered)), 4, "attribute key 5 is a int, not a string", "not OTLP JSON")
    assert_one_line_error(ragtrail("verify", trace_id, "--source", str(tampered)), 4, "attribute key 5")


def test_object_as_event_name(store):
    path, trace_id = store

    def edit(span):
        for event in span.get("events", []):
            event["name"] = {"nested": "object"}

    tampered = rewrite_store(path, edit)
    assert_one_line_error(ragtrail("show", trace_id, "--source", str(tampered)), 4, "an event name is a dict, not a string")


@pytest.mark.parametrize("length", [256, 5_000])
def test_over_long_trace_argument(store, length):
    path, _ = store
    assert_one_line_error(ragtrail("show", "a" * length, "--source", str(path)), 2, "neither a trace id")
    assert_one_line_error(ragtrail("verify", "x" * length, "--source", str(path)), 2)


def test_empty_trace_argument(store):
    path, _ = store
    (path / "other.json").write_text(json.dumps({"not": "a trace"}))
    assert_one_line_error(ragtrail("show", "", "--source", str(path), cwd=path), 2, "the TRACE argument is empty")
    assert_one_line_error(ragtrail("verify", "  ", cwd=path), 2, "the TRACE argument is empty")
    assert_one_line_error(ragtrail("diff", "", "last", "--source", str(path)), 2, "the TRACE argument is empty")
