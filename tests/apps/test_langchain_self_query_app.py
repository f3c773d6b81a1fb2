"""LangChain's self-querying retrieval page (issue 24, principle 3): SelfQueryRetriever over a Chroma
store with LangChain's own query-constructor prompt, output parser and lark filter grammar (a scripted
chat model writes the structured queries the page shows). The constructed query is a ``rewrite`` hop of
the question, only it reached the index, and the filter the LLM wrote is on the self-query stage as
the store received it."""

from __future__ import annotations

import hashlib
import re

import pytest
from tests.apps.runner import assert_host_untouched, run_app
from tests.apps.test_langchain_haystack_apps import manifests, stages_of

pytest.importorskip("langchain_classic")
pytest.importorskip("chromadb")
pytest.importorskip("lark")

QUESTIONS = [
    ("Has Greta Gerwig directed any movies about women", "women", '{"director":{"$eq":"Greta Gerwig"}}'),
    (
        "What's a movie after 1990 but before 2005 that's all about toys, and preferably is animated",
        "toys",
        '{"$and":[{"year":{"$gt":1990}},{"year":{"$lt":2005}},{"genre":{"$eq":"animated"}}]}',
    ),
]
FOUND = [
    "A bunch of normal-sized women are supremely wholesome and some men pine after them",
    "Toys come alive and have a blast doing so",
]
UNKNOWN_CONTEXT = (
    "what reached the model is unknown: no budget, context or generate stage recorded it "
    "(1 retrieved of a corpus of unknown size): an absence claim is not supported"
)
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_self_query_constructed_query_is_the_searched_rewrite_hop(tmp_path):
    run = run_app("langchain_self_query.py", tmp_path)
    assert_host_untouched(run, stderr_empty=False)  # the app's own langchain-community DeprecationWarning
    assert "`langchain-community` is being sunset" in run.stderr
    assert run.stdout == f"{FOUND[0]} 2019\n{FOUND[1]} 1995\n"
    traces = manifests(run)  # verified first: no alarm, nothing changed without a rule
    assert len(traces) == 2
    for m, (question, constructed, where), text in zip(traces, QUESTIONS, FOUND, strict=True):
        assert stages_of(m) == [
            ("retrieve", "SelfQueryRetriever", 1, 1, 0),
            ("retrieve", "Chroma", 1, 1, 0),
            ("retrieve", "Collection", 0, 1, 0),
        ]
        self_query, chroma, collection = m["stages"]
        hops = [(h["hop"], h["parent_hop"], h["transform"], h["text"], h["hit_index"], h["produced_by"]) for h in m["query_hops"]]
        assert hops == [
            (0, None, "none", question, False, None),
            (1, 0, "rewrite", constructed, True, f"retrieve {self_query['component']}"),
        ]
        assert [h["used_by"] for h in m["query_hops"]] == [[f"retrieve {self_query['component']}"], [f"retrieve {chroma['component']}"]]
        # the filter the LLM wrote, as Chroma's translator gave it to the store (and as chromadb ran it)
        assert self_query["filter"] == where and collection["filter"] == f'{{"where":{where}}}'
        assert (self_query["query"]["hop"], chroma["query"]["hop"], collection["query"]) == (0, 1, None)
        # one document found, the one the app printed, under one id across the trace: Chroma's own uuid,
        # which langchain-community's Chroma drops from its Documents and the chromadb stage recorded
        [row] = collection["candidates"]
        assert UUID.match(row["id"]) and row["sha256"] == sha(text)
        assert [(c["id"], c["sha256"]) for c in self_query["candidates"]] == [(row["id"], sha(text))]
        assert [(c["id"], c["sha256"], c["score_kind"]) for c in chroma["candidates"]] == [(row["id"], sha(text), "distance")]
        assert all(s["excluded"] == [] for s in m["stages"])  # nothing was cut: nothing has a fate to explain
        assert m["in_context"] is None  # no prompt, budget or generate stage: unknown, not "every retrieved id"
        coverage = m["coverage"]
        assert (coverage["corpus_size"], coverage["retrieved"], coverage["in_context"]) == (None, 1, None)
        assert coverage["statement"] == UNKNOWN_CONTEXT
        assert m["findings"] == []
        text_out = run.show_text(m["trace_id"])
        # only the constructed query is "→ index" (the question never reached the store)
        assert [line.strip() for line in text_out.splitlines() if "→ index" in line] == [f'hop 1  rewrite of hop 0  "{constructed}" → index']
        assert "Fidelity: faithful" in text_out
    assert [t["insights"] for t in run.traces()] == [[], []]
