"""LangChain's RAG tutorial part 2, chains version (an app nobody on the team had written):
``create_history_aware_retriever`` + ``create_retrieval_chain``, asked twice. On the second question
the contextualizer's LLM writes the standalone question, and ``StrOutputParser`` hands it to the
retriever as a ``str`` subclass (``TextAccessor``). ``verify`` raised a false ``changed_uncited`` alarm
on ``ragtrail.query.text`` of that intact retrieve stage: the producer's field digest was of the text
quoted twice (the subclass taken for an object), the reader's of the plain string OTLP carried.
That question was also hop 1 ``untracked`` ("changed by no instrumented transform") though the
contextualizer's model call, recorded, wrote it: it is now a ``rewrite`` of the question produced by a
``query_transform`` stage named after the model (the retriever asked the very text the model call,
which read no document, wrote)."""

from __future__ import annotations

from tests.apps.runner import assert_host_untouched, run_app
from tests.apps.test_langchain_haystack_apps import manifests, stages_of

REWRITTEN = "What are common ways of doing task decomposition?"


def test_history_aware_rewrite_verifies_intact(tmp_path):
    run = run_app("langchain_history_aware.py", tmp_path)
    assert_host_untouched(run)
    assert run.stdout.splitlines() == [
        "Task decomposition splits a hard task into smaller steps. ['planning', 'ways']",
        "Chain of thought and tree of thoughts are common ways. ['ways', 'planning']",
    ]
    first, second = manifests(run)  # each verified first: no alarm, nothing changed without a rule
    assert stages_of(first) == [("retrieve", "VectorStoreRetriever", 0, 2, 0), ("generate", "FakeListChatModel", 2, 2, 0)]
    assert stages_of(second) == [
        ("generate", "FakeListChatModel", 0, 0, 0),  # the contextualizer's call: no documents
        ("query_transform", "FakeListChatModel", 0, 0, 0),  # what it wrote, the retriever's question
        ("retrieve", "VectorStoreRetriever", 0, 2, 0),
        ("generate", "FakeListChatModel", 2, 2, 0),
    ]
    model = "langchain_core.language_models.fake_chat_models.FakeListChatModel"
    hops = [(h["hop"], h["parent_hop"], h["transform"], h["text"], h["hit_index"], h["produced_by"]) for h in second["query_hops"]]
    assert hops == [
        (0, None, "none", "What are common ways of doing it?", False, None),
        (1, 0, "rewrite", REWRITTEN, True, f"query_transform {model}"),
    ]
    assert [h["hop"] for h in first["query_hops"]] == [0]
    retrieve = second["stages"][2]
    assert (retrieve["query"]["text"], retrieve["query"]["hop"]) == (REWRITTEN, 1)
    assert second["findings"] == [] and first["findings"] == []
    for m in (first, second):
        assert m["coverage"]["statement"] == "2 of 3 read: an absence claim is not supported"
        report = run.verify(m["trace_id"])["fidelity"]
        assert (report["alarms"], report["changed_uncited"]) == ([], 0)
