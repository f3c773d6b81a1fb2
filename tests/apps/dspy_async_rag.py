# Source: DSPy "Async DSPy Programming" (https://dspy.ai/tutorials/async/: a custom module whose
#   `async def aforward` awaits `predictor.acall(...)`, run with `await program.acall(...)` inside
#   `asyncio.run(main())`) applied to the RAG tutorial's module (https://dspy.ai/tutorials/rag/:
#   `search = dspy.retrievers.Embeddings(embedder=..., corpus=..., k=...)`, `context =
#   search(question).passages`, `dspy.ChainOfThought("context, question -> response")`).
# Offline swaps: the RAG-QA-Arena corpus (a download) -> five inline passages;
#   dspy.Embedder("openai/text-embedding-3-small", dimensions=512) -> dspy.Embedder around a
#   deterministic bag-of-words function (the tutorial's "local function" form of Embedder);
#   dspy.LM("openai/gpt-4o-mini") -> dspy.utils.DummyLM with the answer scripted (reasoning and
#   response, the fields ChainOfThought asks for).
import asyncio

import dspy
from dspy.utils import DummyLM

lm = DummyLM(
    [
        {
            "reasoning": "The context says cosine similarity compares the angle between two vectors.",
            "response": "Cosine similarity measures the angle between two embedding vectors.",
        }
    ]
)
dspy.configure(lm=lm)

corpus = [
    "BM25 ranks documents by term frequency and inverse document frequency.",
    "Cosine similarity measures the angle between two embedding vectors.",
    "A vector database stores embeddings and searches them by similarity.",
    "Reranking reorders retrieved passages with a stronger model.",
    "Chunking splits long documents into passages before embedding them.",
]


def embed(texts):
    vectors = []
    for text in texts:
        v = [0.0] * 64
        for w in text.lower().replace(".", " ").replace("?", " ").replace(",", " ").split():
            v[sum(map(ord, w)) % 64] += 1.0
        vectors.append(v)
    return vectors


embedder = dspy.Embedder(embed)
topk_docs_to_retrieve = 2
search = dspy.retrievers.Embeddings(embedder=embedder, corpus=corpus, k=topk_docs_to_retrieve)


class RAG(dspy.Module):
    def __init__(self):
        self.respond = dspy.ChainOfThought("context, question -> response")

    async def aforward(self, question):
        context = search(question).passages
        return await self.respond.acall(context=context, question=question)


async def main():
    rag = RAG()
    output = await rag.acall(question="What does cosine similarity measure between embedding vectors?")
    print(output)


asyncio.run(main())
