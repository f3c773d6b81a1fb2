# Source: LlamaIndex documentation, "Starter Tutorial" (query engine over a VectorStoreIndex),
#   https://docs.llamaindex.ai/en/stable/getting_started/starter_example/
#   asked two questions inside one request, wrapped in a ragtrail pipeline as the ragtrail README shows
# Swapped for offline stand-ins (nothing else changed):
#   - Settings.embed_model = a letter-count embedding (deterministic, no model, no network)
#   - Settings.llm = MockLLM() instead of OpenAI (it echoes the prompt, so the output is deterministic)
#   - two small in-memory documents instead of the "data" folder
from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.embeddings import BaseEmbedding
from llama_index.core.llms import MockLLM

import ragtrail


def letters(text: str) -> list[float]:
    return [float(text.lower().count(c)) + 0.1 for c in "abcdefghijklmnopqrstuvwxyz"]


class LetterEmbedding(BaseEmbedding):
    def _get_query_embedding(self, query: str) -> list[float]:
        return letters(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return letters(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return letters(text)


Settings.embed_model = LetterEmbedding()
Settings.llm = MockLLM()

documents = [
    Document(text="Refunds take 30 days.", metadata={"name": "refund policy"}),
    Document(text="Support answers within 4 hours.", metadata={"name": "support policy"}),
]
index = VectorStoreIndex.from_documents(documents)


@ragtrail.pipeline
def answer(question: str) -> list[str]:
    first = index.as_query_engine().query(question)
    second = index.as_query_engine().query("How fast does support answer?")
    return [str(first), str(second)]


print(answer("What is the refund window?"))
