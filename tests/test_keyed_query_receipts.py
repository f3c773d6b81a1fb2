"""Issue 28, item 4: keyed query receipts. In ``hash`` mode under a receipt key the query receipt is
an HMAC (``hmac-sha256:<64 hex>``), so a guessed question is not confirmed offline; ``verify`` takes
it as well formed, and ``ls --query-text`` / ``compare`` hash the same way with ``--key-file``.
Without a key nothing changes (the wire snapshot pins that). The privacy audit checks every exported
byte (tests/instrumentation/test_privacy_audit.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ragtrail as rt
from fixtures.ragtrail_traces import rag_run, record
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import keyed_receipt, receipt
from ragtrail.inspect.search import query_receipt
from ragtrail.inspect.stream import TraceStream
from test_cli_errors import ragtrail

KEY = "query key 28"
QUERY = "refund window?"  # rag_run's question
REWRITE = "enterprise refund window"


def query_digests(store: Path) -> dict[str, set[str]]:
    """Every ``ragtrail.query.sha256`` in the store, by span name."""
    out: dict[str, set[str]] = {}
    for t in TraceStream(str(store)):
        for s in t.spans:
            value = s.attributes.get(sc.QUERY_SHA256)
            if value is not None:
                out.setdefault(s.name, set()).add(value)
            for e in s.events:
                if sc.QUERY_SHA256 in e.attributes:
                    out.setdefault(f"{s.name} event", set()).add(e.attributes[sc.QUERY_SHA256])
    return out


def keyed_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(sc.ENV_RECEIPT_KEY, KEY)
    rt.set_capture(query="hash")
    store = tmp_path / "keyed"
    record(store, rag_run)
    monkeypatch.delenv(sc.ENV_RECEIPT_KEY)
    return store


def test_keyed_hash_mode_stamps_an_hmac_and_no_unkeyed_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = keyed_store(tmp_path, monkeypatch)
    key = KEY.encode()
    query, rewrite = keyed_receipt(QUERY, key), keyed_receipt(REWRITE, key)
    assert query.sha256.startswith("hmac-sha256:") and len(query.sha256) == 76
    assert (query.chars, query.bytes) == (receipt(QUERY).chars, receipt(QUERY).bytes)
    found = query_digests(store)
    assert found["pipeline answer"] == {query.sha256}
    assert found["query_transform rewrite event"] == {rewrite.sha256}
    assert found["retrieve bm25"] == {rewrite.sha256}
    raw = b"".join(p.read_bytes() for p in store.rglob("*.jsonl"))
    for text in (QUERY, REWRITE):
        assert text.encode() not in raw and receipt(text).sha256.encode() not in raw
    assert KEY.encode() not in raw
    # the trace verifies (a keyed query receipt is well formed; the stage receipts need the key)
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    result = ragtrail("verify", "--search", "--source", str(store), "--key-file", str(key_file))
    assert result.returncode == 0, result.stdout + result.stderr


def test_text_mode_and_no_key_stay_unkeyed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rt.set_capture(query="hash")
    record(tmp_path / "plain", rag_run)
    assert query_digests(tmp_path / "plain")["pipeline answer"] == {receipt(QUERY).sha256}
    monkeypatch.setenv(sc.ENV_RECEIPT_KEY, KEY)
    rt.set_capture(query="text")  # the text itself is exported: its receipt stays the plain sha256
    record(tmp_path / "text", rag_run)
    assert query_digests(tmp_path / "text")["pipeline answer"] == {receipt(QUERY).sha256}


def test_ls_query_text_with_the_key_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = keyed_store(tmp_path, monkeypatch)
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    assert query_receipt(QUERY, KEY.encode()) == keyed_receipt(QUERY, KEY.encode()).sha256
    found = ragtrail("ls", "--source", str(store), "--query-text", QUERY, "--key-file", str(key_file), "--json")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)[0]["query_sha256"] == query_receipt(QUERY, KEY.encode())
    # without the key the plain sha256 is looked for, and a keyed producer never wrote it
    assert ragtrail("ls", "--source", str(store), "--query-text", QUERY).returncode == 3
    assert ragtrail("ls", "--source", str(store), "--query-text", "another question", "--key-file", str(key_file)).returncode == 3


def test_compare_pairs_a_text_run_with_a_keyed_hash_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keyed = keyed_store(tmp_path, monkeypatch)
    rt.set_capture(query="text")
    record(tmp_path / "text", rag_run)
    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    paired = json.loads(ragtrail("compare", str(tmp_path / "text"), str(keyed), "--key-file", str(key_file), "--json").stdout)
    assert (paired["paired"], paired["only_in_a"], paired["only_in_b"]) == (1, [], [])
    # without the key the text run's plain sha256 never meets the keyed one
    apart = json.loads(ragtrail("compare", str(tmp_path / "text"), str(keyed), "--json").stdout)
    assert (apart["paired"], len(apart["only_in_a"]), len(apart["only_in_b"])) == (0, 1, 1)


def test_the_gate_pairs_its_cases_with_keyed_traces_given_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``gate run --traces`` pairs a case with its trace by the hop-0 query receipt: a producer in
    keyed hash mode is found with the key, and without it the case is missing (said, not guessed)."""
    from ragtrail.gate.model import EvalCase
    from ragtrail.gate.runner import from_traces

    store = keyed_store(tmp_path, monkeypatch)
    case = EvalCase(id="refund", query=QUERY, relevant=())
    [with_key] = from_traces(str(store), [case], key=KEY.encode())
    assert with_key.trace_id is not None and [p.kind for p in with_key.problems if p.kind == "missing_query"] == []
    [without] = from_traces(str(store), [case])
    assert without.trace_id is None and [p.kind for p in without.problems] == ["missing_query"]
