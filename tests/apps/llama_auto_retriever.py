# Source: LlamaIndex example "Auto-Retrieval from a Vector Database" (Chroma)
#   (https://docs.llamaindex.ai/en/stable/examples/vector_stores/chroma_auto_retriever/): the page's
#   celebrity TextNodes with category and country metadata, VectorStoreIndex(nodes), VectorStoreInfo
#   with the two MetadataInfo, VectorIndexAutoRetriever(index, vector_store_info=vector_store_info),
#   retriever.retrieve("Tell me about two celebrities from United States").
# Swapped for offline stand-ins (nothing else changed):
#   - the Chroma vector store -> LlamaIndex's default in-memory one (llama-index-vector-stores-chroma is
#     not installed here)
#   - Settings.embed_model = a letter-count embedding (deterministic, no model, no network)
#   - Settings.llm = a scripted LLM instead of OpenAI: to the auto-retriever's prompt it answers the
#     query spec an LLM writes for the question (query "celebrities", filter country == "United States",
#     top_k 2), in the ```json block the prompt asks for; the node texts shortened
from typing import Any

from llama_index.core import Settings, VectorStoreIndex
from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen, LLMMetadata
from llama_index.core.embeddings import BaseEmbedding
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.llms.custom import CustomLLM
from llama_index.core.retrievers import VectorIndexAutoRetriever
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import MetadataInfo, VectorStoreInfo


def letters(text: str) -> list[float]:
    return [float(text.lower().count(c)) + 0.1 for c in "abcdefghijklmnopqrstuvwxyz"]


class LetterEmbedding(BaseEmbedding):
    def _get_query_embedding(self, query: str) -> list[float]:
        return letters(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return letters(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return letters(text)


SPEC = '```json\n{"query": "celebrities", "filters": [{"key": "country", "value": "United States", "operator": "=="}], "top_k": 2}\n```'


class ScriptedLLM(CustomLLM):
    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(context_window=3900, num_output=256, model_name="scripted")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=SPEC)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        yield CompletionResponse(text=SPEC, delta=SPEC)


Settings.embed_model = LetterEmbedding()
Settings.llm = ScriptedLLM()

nodes = [
    TextNode(text="Michael Jordan is a retired professional basketball player.", metadata={"category": "Sports", "country": "United States"}),
    TextNode(
        text="Angelina Jolie is an American actress, filmmaker, and humanitarian.",
        metadata={"category": "Entertainment", "country": "United States"},
    ),
    TextNode(
        text="Elon Musk is a business magnate, industrial designer, and engineer.",
        metadata={"category": "Business", "country": "United States"},
    ),
    TextNode(text="Rihanna is a Barbadian singer, actress, and businesswoman.", metadata={"category": "Music", "country": "Barbados"}),
    TextNode(text="Cristiano Ronaldo is a Portuguese professional footballer.", metadata={"category": "Sports", "country": "Portugal"}),
]
index = VectorStoreIndex(nodes)

vector_store_info = VectorStoreInfo(
    content_info="brief biography of celebrities",
    metadata_info=[
        MetadataInfo(name="category", type="str", description="Category of the celebrity, one of [Sports, Entertainment, Business, Music]"),
        MetadataInfo(name="country", type="str", description="Country of the celebrity, one of [United States, Barbados, Portugal]"),
    ],
)
retriever = VectorIndexAutoRetriever(index, vector_store_info=vector_store_info)

for node in retriever.retrieve("Tell me about two celebrities from United States"):
    print(node.node.get_content()[:20], node.node.metadata["country"], round(node.score, 4))
