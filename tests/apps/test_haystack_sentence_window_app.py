"""Haystack's SentenceWindowRetriever page (an app nobody on the team had written): the window's
neighbours reach the prompt without any recorded stage reading them. The coverage line once said "1 of
8 read ... 7 units never read" while the model read 3 sentences; the neighbours are now of unknown
origin, counted apart and named, never read and never "no unit"."""

from __future__ import annotations

from tests.apps.runner import assert_host_untouched, run_app
from tests.apps.test_haystack_ranker_apps import sha
from tests.apps.test_langchain_haystack_apps import manifests, stages_of

MOTHER = " Paul's mother was a Bene Gesserit."
SPICE = " The spice melange is found only on Arrakis."
DUNE = " Arrakis is also called Dune."


def test_sentence_window_neighbours_are_of_unknown_origin(tmp_path):
    run = run_app("haystack_sentence_window.py", tmp_path)
    assert_host_untouched(run)
    assert run.stdout == "The spice melange is found only on Arrakis.\n"
    [m] = manifests(run)
    assert stages_of(m) == [("retrieve", "InMemoryBM25Retriever", 0, 1, 0), ("generate", "FakeGenerator", 3, 3, 0)]
    retrieve, generate = m["stages"]
    [hit] = retrieve["candidates"]
    assert hit["sha256"] == sha(SPICE)
    window = [(c["id"], c["sha256"]) for c in generate["candidates"]]
    assert [s for _, s in window] == [sha(MOTHER), sha(SPICE), sha(DUNE)]
    neighbours = [i for i, s in window if s != sha(SPICE)]
    assert m["in_context"] == [i for i, _ in window]
    cov = m["coverage"]
    assert (cov["corpus_size"], cov["retrieved"], cov["in_context"], cov["unknown_origin"], cov["exhaustive"]) == (8, 1, 1, 2, False)
    assert cov["statement"] == "1 of 8 read, and 2 in the context of unknown origin: an absence claim is not supported"
    assert [(c["claim"], c["supported"], c["why"]) for c in cov["claims"]][1] == (
        "absence",
        False,
        "asserts something about up to 7 units never read (2 in the context of unknown origin)",
    )
    assert m["findings"] == [
        f"2 in the context of unknown origin ({', '.join(neighbours)}): no recorded stage read them "
        "(text made in the run, or a component ragtrail does not record read them); coverage counts them apart"
    ]
