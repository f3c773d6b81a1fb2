"""Issue 12: scores where LangChain libraries put them, and a reranker's pass-through scores.

- a retriever that writes ``Document.metadata["score"]`` (vendor retrievers do): the candidate's
  score, of a kind not known (``none``);
- a compressor that writes ``metadata["relevance_score"]`` into copies of the Documents, as
  CohereRerank and FlashrankRerank do: the candidate's ``rerank`` score, in its stage and in the
  compression retriever around it;
- a compressor that falls back to its input (seed 002): its upstream scores are not rerank scores.

Real langchain-core / langchain-classic objects, offline; exact events."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest

pytest.importorskip("langchain_classic")

from langchain_classic.retrievers import ContextualCompressionRetriever  # noqa: E402
from langchain_core.callbacks import CallbackManagerForRetrieverRun  # noqa: E402
from langchain_core.documents import BaseDocumentCompressor, Document  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402

from ragtrail.contract import semconv as sc  # noqa: E402
from ragtrail.instrumentation.langchain import LangChainInstrumentor  # noqa: E402
from spanutil import events  # noqa: E402

TEXTS = {"k1": "refunds take thirty days", "k2": "refunds need a receipt", "k3": "shipping is free", "k4": "refunds for gift cards are not possible"}


class VendorRetriever(BaseRetriever):
    """A hosted search's LangChain retriever: it returns the engine's score in the metadata."""

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        words = set(query.split())
        scored = sorted(((len(words & set(t.split())) / len(t.split()), i) for i, t in TEXTS.items()), reverse=True)
        return [Document(id=i, page_content=TEXTS[i], metadata={"score": round(s, 4), "source": "kb"}) for s, i in scored if s > 0]


class OverlapRerank(BaseDocumentCompressor):
    """Written the way CohereRerank / FlashrankRerank are: copies of the top_n Documents with
    ``relevance_score`` added to their metadata."""

    top_n: int = 2
    fall_back: bool = False

    def compress_documents(self, documents: Sequence[Document], query: str, callbacks: Any = None) -> Sequence[Document]:
        if self.fall_back:  # the model's answer did not parse: keep the retriever's order
            return list(documents)[: self.top_n]
        words = set(query.split())
        scored = sorted(((len(words & set(d.page_content.split())) + 0.5 / len(d.page_content), n) for n, d in enumerate(documents)), reverse=True)[
            : self.top_n
        ]
        out = []
        for score, n in scored:
            doc = documents[n]
            copied = Document(page_content=doc.page_content, metadata=copy.deepcopy(doc.metadata))
            copied.metadata["relevance_score"] = round(score, 4)
            out.append(copied)
        return out


@pytest.fixture
def spans(tracer_provider, span_exporter):
    inst = LangChainInstrumentor()
    inst.instrument(tracer_provider=tracer_provider)
    yield span_exporter
    inst.uninstrument()


def _candidates(span: Any) -> list[tuple]:
    return [(e[sc.CANDIDATE_ID], e.get(sc.CANDIDATE_SCORE), e[sc.CANDIDATE_SCORE_KIND]) for e in events(span, sc.EVENT_CANDIDATE)]


def _one(spans: Any, name: str) -> Any:
    [span] = [s for s in spans.get_finished_spans() if s.name == name]
    return span


def test_retriever_metadata_score_is_the_candidate_score(spans):
    docs = VendorRetriever().invoke("refunds take days")
    assert [(d.id, d.metadata["score"]) for d in docs] == [("k1", 0.75), ("k2", 0.25), ("k4", 0.1429)]
    span = _one(spans, "retrieve VendorRetriever")
    assert _candidates(span) == [("k1", 0.75, "none"), ("k2", 0.25, "none"), ("k4", 0.1429, "none")]


def test_compressor_relevance_score_is_a_rerank_score(spans):
    retriever = ContextualCompressionRetriever(base_compressor=OverlapRerank(), base_retriever=VendorRetriever())
    docs = retriever.invoke("refunds receipt")
    assert [(d.page_content, d.metadata["relevance_score"]) for d in docs] == [
        ("refunds need a receipt", 2.0227),
        ("refunds take thirty days", 1.0208),
    ]
    rerank = _one(spans, "rerank OverlapRerank")
    # the copies have no id: they keep their input's id (same content), with the reranker's score
    assert _candidates(rerank) == [("k2", 2.0227, "rerank"), ("k1", 1.0208, "rerank")]
    assert [(e[sc.CANDIDATE_ID], e[sc.EXCLUSION_REASON]) for e in events(rerank, sc.EVENT_EXCLUSION)] == [("k4", "below_rank_cutoff")]
    outer = _one(spans, "retrieve ContextualCompressionRetriever")
    assert _candidates(outer) == [("k2", 2.0227, "rerank"), ("k1", 1.0208, "rerank")]


def test_compressor_fallback_keeps_the_retrievers_scores_and_is_a_finding(spans):
    """Seed 002 in LangChain: the reranker handed on the retriever's Documents in their order; the
    retriever's metadata scores are recorded, never as rerank scores."""
    retriever = ContextualCompressionRetriever(base_compressor=OverlapRerank(fall_back=True), base_retriever=VendorRetriever())
    docs = retriever.invoke("refunds take days")
    assert [d.id for d in docs] == ["k1", "k2"]
    rerank = _one(spans, "rerank OverlapRerank")
    assert _candidates(rerank) == [("k1", 0.75, "none"), ("k2", 0.25, "none")]
    assert rerank.attributes[sc.STAGE_FINDINGS] == (
        "rerank_is_identity: the stage handed on 2 of its 3 inputs in their input order with their input scores: "
        "nothing was reranked (a silent fallback?); the scores keep their upstream kind (none)",
    )
    assert rerank.attributes[sc.STAGE_STATUS] == "ok"
    assert [(e[sc.CANDIDATE_ID], e[sc.CANDIDATE_SCORE], e[sc.EXCLUSION_REASON]) for e in events(rerank, sc.EVENT_EXCLUSION)] == [
        ("k4", 0.1429, "below_rank_cutoff")
    ]


# --- the Document state read without raising inside pydantic (issue 25's host path) -------------
def _state_cases() -> list[Any]:
    """Objects whose ``state`` each way Python can find it: none (a plain Document), a pydantic field
    (``_DocumentWithState``), a pydantic extra, a property, a class attribute, a slot, ``__getattr__``,
    a plain object's instance dict."""
    import pydantic
    from langchain_community.document_transformers.embeddings_redundant_filter import _DocumentWithState

    class Extra(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="allow")

    class WithProperty:
        @property
        def state(self) -> dict[str, Any]:
            return {"query_similarity_score": 0.5}

    class ClassLevel:
        state = {"query_similarity_score": 0.25}

    class Slotted:
        __slots__ = ("state",)

        def __init__(self) -> None:
            self.state = {"query_similarity_score": 0.75}

    class Dynamic:
        def __getattr__(self, name: str) -> Any:
            if name == "state":
                return {"query_similarity_score": 0.125}
            raise AttributeError(name)

    class Plain:
        pass

    plain_with = Plain()
    plain_with.state = {"query_similarity_score": 0.0625}  # type: ignore[attr-defined]
    return [
        Document(page_content="a"),
        _DocumentWithState(page_content="b", state={"query_similarity_score": 0.9}),
        _DocumentWithState(page_content="c"),
        Extra(state={"query_similarity_score": 0.8}),
        Extra(),
        WithProperty(),
        ClassLevel(),
        Slotted(),
        Dynamic(),
        Plain(),
        plain_with,
    ]


@pytest.mark.filterwarnings("ignore:`langchain-community` is being sunset:DeprecationWarning")  # importing its filter module
def test_doc_state_is_what_getattr_finds() -> None:
    from ragtrail.instrumentation.langchain._common import _doc_state

    cases = _state_cases()
    for _ in range(2):  # the first read decides the class's path, the second takes it
        assert [_doc_state(doc) for doc in cases] == [getattr(doc, "state", None) for doc in cases]
    assert [_doc_state(doc) for doc in cases] == [
        None,
        {"query_similarity_score": 0.9},
        {},
        {"query_similarity_score": 0.8},
        None,
        {"query_similarity_score": 0.5},
        {"query_similarity_score": 0.25},
        {"query_similarity_score": 0.75},
        {"query_similarity_score": 0.125},
        None,
        {"query_similarity_score": 0.0625},
    ]
