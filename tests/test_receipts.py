"""Receipts: canonical bytes, deterministic digests, and the classification arithmetic (docs/semconv.md §4)."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ragtrail.contract import receipts
from ragtrail.contract.receipts import (
    BUDGET_TRIM_RULE,
    CHANGED_CITED,
    CHANGED_UNCITED,
    INTACT,
    UNVERIFIABLE,
    Receipt,
    canonical_bytes,
    classify,
    content_id,
    events_digest,
    parse_rule,
    receipt,
    truncate_rule,
)


def test_str_receipt_counts_code_points_and_utf8_bytes():
    r = receipt("héllo ✓")
    assert r == Receipt(chars=7, bytes=10, sha256=hashlib.sha256("héllo ✓".encode()).hexdigest())


def test_bytes_are_hashed_as_they_are():
    data = b"\xff\x00abc"
    r = receipt(data)
    assert r.bytes == 5
    assert r.sha256 == hashlib.sha256(data).hexdigest()


def test_lone_surrogate_is_escaped_deterministically():
    text = "a\udc80b"
    assert canonical_bytes(text) == b"a\\udc80b"
    r = receipt(text)
    assert (r.chars, r.bytes) == (3, 8)


def test_non_string_payloads_are_canonical_json():
    value = {"b": [1, 2.5, None], "a": "é"}
    assert canonical_bytes(value) == '{"a":"é","b":[1,2.5,null]}'.encode()
    assert receipt(value).sha256 == hashlib.sha256('{"a":"é","b":[1,2.5,null]}'.encode()).hexdigest()


def test_numpy_and_odd_values_are_deterministic():
    value = {"score": np.float32(0.5), "vec": np.arange(3), "when": __import__("datetime").date(2024, 11, 1), "tags": {"b", "a"}, "obj": object()}
    first = canonical_bytes(value)
    assert first == canonical_bytes(value)
    assert b'"score":0.5' in first and b'"vec":[0,1,2]' in first and b'"when":"2024-11-01"' in first
    assert b"0x" not in first  # no memory address leaks into a digest


def test_receipts_are_identical_across_processes():
    code = "from ragtrail.contract.receipts import receipt;print(receipt({'k': [1, 'x\\udc80', 2.5], 'z': None}).sha256, receipt('pólicy').sha256)"
    runs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": seed}).stdout
        for seed in ("1", "2")
    }
    assert len(runs) == 1
    assert runs.pop().split() == [receipt({"k": [1, "x\udc80", 2.5], "z": None}).sha256, receipt("pólicy").sha256]


def test_content_id_prefix():
    assert content_id("abc") == "sha256:" + hashlib.sha256(b"abc").hexdigest()


@pytest.mark.parametrize("digest", ["", "abc", "A" * 64, "g" * 64, "0" * 63, "0" * 65, None, 12])
def test_damaged_digest_is_never_a_match(digest):
    assert classify("x", Receipt(chars=1, bytes=1, sha256=digest)) == UNVERIFIABLE


def test_a_digest_cut_in_transit_is_unverifiable_even_when_it_is_a_prefix():
    r = receipt("payload")
    assert classify("payload", Receipt(r.chars, r.bytes, r.sha256[:20])) == UNVERIFIABLE


def test_classify_intact_changed_and_missing():
    text = "x" * 1000
    r = receipt(text)
    assert classify(text, r) == INTACT
    assert classify(text[:20], r) == CHANGED_UNCITED
    assert classify(text[:256], r, ["preview@1"]) == CHANGED_CITED
    assert classify(text[:255], r, ["preview@1"]) == CHANGED_UNCITED  # not the authorised length
    assert classify(text, None) == UNVERIFIABLE
    assert classify(None, r) == UNVERIFIABLE


def test_preview_of_a_short_text_must_be_the_whole_text():
    r = receipt("short")
    assert classify("shor", r, ["preview@1"]) == CHANGED_UNCITED
    assert classify("short", r, ["preview@1"]) == INTACT


def test_truncate_and_budget_rules():
    text = "α" * 100
    r = receipt(text)
    assert parse_rule("truncate@1:40") == truncate_rule(40)
    assert classify(text[:40], r, ["truncate@1:40"]) == CHANGED_CITED
    assert classify(text[:41], r, ["truncate@1:40"]) == CHANGED_UNCITED
    assert classify(text[:70], r, [BUDGET_TRIM_RULE.id]) == CHANGED_CITED
    assert classify(text + "!", r, [BUDGET_TRIM_RULE.id]) == CHANGED_UNCITED  # growing is no trim
    assert classify(text[:10], r, ["unknown@9"]) == CHANGED_UNCITED
    assert parse_rule("unknown@9") is None


def test_events_digest_is_sha256_of_the_compact_json_array():
    items = [("ragtrail.candidate", "d1", "ab"), ("ragtrail.exclusion", "é", "")]
    expected = hashlib.sha256(json.dumps([list(i) for i in items], separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()
    assert events_digest(items) == expected


def test_receipt_attributes_round_trip():
    r = receipt("q")
    assert Receipt.from_attributes(r.as_attributes("ragtrail.query"), "ragtrail.query") == r
    assert Receipt.from_attributes({}, "ragtrail.query") is None
    assert not Receipt.from_attributes({"ragtrail.query.sha256": r.sha256}, "ragtrail.query").well_formed


def test_finite_or_none():
    assert receipts.finite_or_none(np.float64(0.25)) == 0.25
    for bad in (math.nan, math.inf, -math.inf, None, "x", True):
        assert receipts.finite_or_none(bad) is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_receipt_is_a_pure_function_of_the_value(value):
    assume(value is not None)  # None means "no payload arrived" to classify()
    first, second = receipt(value), receipt(json.loads(json.dumps(value)) if not isinstance(value, float) else value)
    assert first == second
    assert len(first.sha256) == 64 and first.well_formed
    assert classify(value, first) == INTACT


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1))
def test_any_strict_prefix_is_caught(text):
    r = receipt(text)
    cut = text[:-1]
    assert classify(cut, r) == CHANGED_UNCITED
    assert classify(cut, r, [truncate_rule(len(cut))]) == CHANGED_CITED
