"""LangChain's RAG tutorial part 2, chains version (an app nobody on the team had written):
``create_history_aware_retriever`` + ``create_retrieval_chain``, asked twice. On the second question
the contextualizer's LLM writes the standalone question, and ``StrOutputParser`` hands it to the
retriever as a ``str`` subclass (``TextAccessor``). ``verify`` raised a false ``changed_uncited`` alarm
on ``ragtrail.query.text`` of that intact retrieve stage: the producer's field digest was of the text
quoted twice (the subclass taken for an object), the reader's of the plain string OTLP carried."""

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
        ("retrieve", "VectorStoreRetriever", 0, 2, 0),
        ("generate", "FakeListChatModel", 2, 2, 0),
    ]
    retrieve = second["stages"][1]
    assert (retrieve["query"]["text"], retrieve["query"]["hop"]) == (REWRITTEN, 1)
    for m in (first, second):
        assert m["coverage"]["statement"] == "2 of 3 read: an absence claim is not supported"
        report = run.verify(m["trace_id"])["fidelity"]
        assert (report["alarms"], report["intact"], report["changed_uncited"]) == ([], 4, 0)
