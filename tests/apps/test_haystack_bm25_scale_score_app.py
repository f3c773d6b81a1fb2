"""Haystack's InMemoryBM25Retriever reference example, then ``scale_score=True`` with a run-time
filter: the scaled scores are ``expit(bm25 / 8)``, not BM25 scores. They were recorded as kind
``bm25``; now kind ``none`` with a finding naming the scaling (probe h74)."""

from __future__ import annotations

import json

from tests.apps.runner import assert_host_untouched, manifests, run_app
from tests.apps.test_derived_apps import assert_verifies_clean
from tests.apps.test_haystack_ranker_apps import sha
from tests.apps.test_langchain_haystack_apps import stages_of

DE = "python ist eine beliebte Programmiersprache"
INTRO = "Programmiersprache und Python: eine Einführung"
FINDING = "scale_score=True: each document's score is the store's expit(bm25 / 8), not the raw score"


def test_bm25_scale_score_is_named_not_called_bm25(tmp_path):
    run = run_app("haystack_bm25_scale_score.py", tmp_path)
    assert_host_untouched(run)
    raw_line, scaled_line = run.stdout.splitlines()
    raw, scaled = json.loads(raw_line), json.loads(scaled_line)  # the app's own printed scores
    first, second = manifests(run)
    assert [stages_of(m) for m in (first, second)] == [[("retrieve", "InMemoryBM25Retriever", 0, 2, 0)]] * 2
    [plain] = first["stages"]
    assert [(c["sha256"], c["score_kind"]) for c in plain["candidates"]] == [(sha(DE), "bm25"), (sha(INTRO), "bm25")]
    assert [round(c["score"], 4) for c in plain["candidates"]] == raw
    assert first["findings"] == []
    [cut] = second["stages"]
    assert [(c["sha256"], c["score_kind"]) for c in cut["candidates"]] == [(sha(INTRO), "none"), (sha(DE), "none")]
    assert [round(c["score"], 4) for c in cut["candidates"]] == scaled
    assert all(0.5 < c["score"] < 1 for c in cut["candidates"])  # expit of a positive BM25 score
    assert cut["filter"] == '{"field":"meta.lang","operator":"==","value":"de"}'
    assert [f["text"] if isinstance(f, dict) else f for f in second["findings"]][-1].endswith(FINDING)
    assert [t["insights"] for t in run.traces()] == [[], []]
    for m in (first, second):
        assert_verifies_clean(run, m["trace_id"])
        assert m["coverage"]["corpus_size"] == 3
