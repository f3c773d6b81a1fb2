"""Haystack's SentenceWindowRetriever page (an app nobody on the team had written): the window's
neighbours reach the prompt. The coverage line once said "1 of 8 read ... 7 units never read" while
the model read 3 sentences: no stage recorded the window, and the reader took what no stage read for
no unit at all. The window is now a ``retrieve`` stage whose outputs are the sentences it read from
the store, so they are read units (and an id no recorded stage read is "of unknown origin", never
"no unit": tests/test_inspect_known_or_unknown.py)."""

from __future__ import annotations

from tests.apps.runner import assert_host_untouched, run_app
from tests.apps.test_haystack_ranker_apps import sha
from tests.apps.test_langchain_haystack_apps import manifests, stages_of

MOTHER = " Paul's mother was a Bene Gesserit."
SPICE = " The spice melange is found only on Arrakis."
DUNE = " Arrakis is also called Dune."


def test_sentence_window_neighbours_are_read_units(tmp_path):
    run = run_app("haystack_sentence_window.py", tmp_path)
    assert_host_untouched(run)
    assert run.stdout == "The spice melange is found only on Arrakis.\n"
    [m] = manifests(run)
    assert stages_of(m) == [
        ("retrieve", "InMemoryBM25Retriever", 0, 1, 0),
        ("retrieve", "SentenceWindowRetriever", 1, 3, 0),
        ("generate", "FakeGenerator", 3, 3, 0),
    ]
    bm25, window, generate = m["stages"]
    [hit] = bm25["candidates"]
    assert (hit["sha256"], hit["hop"]) == (sha(SPICE), 0)
    assert window["query"] is None and window["knobs"] == {}
    # the window's sentences in split order, each the store's own document (id and receipt), on the hit's hop
    assert [(c["sha256"], c["score"], c["score_kind"], c["hop"]) for c in window["candidates"]] == [
        (sha(MOTHER), None, "none", 0),
        (sha(SPICE), None, "none", 0),
        (sha(DUNE), None, "none", 0),
    ]
    assert hit["id"] == window["candidates"][1]["id"]
    assert [c["id"] for c in generate["candidates"]] == [c["id"] for c in window["candidates"]] == m["in_context"]
    cov = m["coverage"]
    assert (cov["corpus_size"], cov["retrieved"], cov["in_context"], cov["unknown_origin"], cov["exhaustive"]) == (8, 3, 3, 0, False)
    assert cov["statement"] == "3 of 8 read: an absence claim is not supported"
    assert m["findings"] == [
        "retrieve haystack.components.retrievers.sentence_window_retriever.SentenceWindowRetriever: a window of 1 "
        "split(s) either side of each of the 1 hit(s), read from the document store by split_id: 2 document(s) beside the hits"
    ]
