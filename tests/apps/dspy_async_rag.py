# Source: DSPy "Async DSPy Programming" (https://dspy.ai/tutorials/async/: a custom module whose
#   `async def aforward` awaits `predictor.acall(...)`, run with `await program.acall(...)` inside
#   `asyncio.run(main())`) applied to the RAG tutorial's module (https://dspy.ai/tutorials/rag/:
#   `search = dspy.retrievers.Embeddings(embedder=..., corpus=..., k=...)`, `context =
#   search(question).passages`, `dspy.ChainOfThought("context, question -> response")`).
# Offline swaps: the RAG-QA-Arena corpus (a download) -> five inline passages;
#   dspy.Embedder("openai/text-embedding-3-small", dimensions=512) -> dspy.Embedder around DSPy's own
#   offline n-gram vectorizer (dspy.utils.DummyVectorizer; the tutorial's "local function" form);
#   dspy.LM("openai/gpt-4o-mini") -> dspy.utils.DummyLM with the answer scripted (reasoning and
#   response, the fields ChainOfThought asks for).
import asyncio

import dspy
from dspy.utils import DummyLM, DummyVectorizer

dspy.configure(
    lm=DummyLM(
        [
            {
                "reasoning": "The context says acall runs a module asynchronously.",
                "response": "Call await program.acall(...) to run a DSPy program asynchronously.",
            }
        ]
    )
)

corpus = [
    "Call await program.acall(...) to run a DSPy program asynchronously.",
    "dspy.asyncify wraps a synchronous program so it runs in a worker thread.",
    "Optimizers such as MIPROv2 tune the prompts of a program.",
    "dspy.Evaluate scores a program on a development set.",
    "Signatures declare the input and output fields of a module.",
]
search = dspy.retrievers.Embeddings(embedder=dspy.Embedder(DummyVectorizer()), corpus=corpus, k=2)


class RAG(dspy.Module):
    def __init__(self):
        self.respond = dspy.ChainOfThought("context, question -> response")

    async def aforward(self, question):
        context = search(question).passages
        return await self.respond.acall(context=context, question=question)


async def main():
    rag = RAG()
    output = await rag.acall(question="How do I run a DSPy program asynchronously?")
    print(output)


asyncio.run(main())
