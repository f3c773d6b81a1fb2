# Source: LlamaIndex example "Time-Weighted Rerank"
#   (https://docs.llamaindex.ai/en/stable/examples/node_postprocessor/TimeWeightedPostprocessorDemo/):
#   three versions of one text as nodes whose metadata "__last_accessed__" says when each was last
#   read, VectorStoreIndex over them, TimeWeightedPostprocessor(time_decay=0.5,
#   time_access_refresh=False, top_k=1), index.as_query_engine(similarity_top_k=3,
#   node_postprocessors=[node_postprocessor]), one question.
# Swapped for offline stand-ins (nothing else changed):
#   - Settings.embed_model = a letter-count embedding (deterministic, no model, no network)
#   - Settings.llm = MockLLM() instead of OpenAI
#   - the Paul Graham essay versions -> three short refund-policy texts; the page's
#     `now = datetime.now()` -> a fixed `now` passed to the postprocessor (its documented `now` field)
#     so that the hours since each access, and so the pick, are the same every run
from llama_index.core import Settings, VectorStoreIndex
from llama_index.core.embeddings import BaseEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.postprocessor import TimeWeightedPostprocessor
from llama_index.core.schema import TextNode


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

now = 1_700_000_000.0
hour = 3600.0
nodes = [
    TextNode(text="Refunds are accepted within 14 days of purchase.", id_="v1", metadata={"__last_accessed__": now - 72 * hour}),
    TextNode(text="Refunds are accepted within 30 days of purchase.", id_="v2", metadata={"__last_accessed__": now - 24 * hour}),
    TextNode(text="Refunds are accepted within 60 days for enterprise plans.", id_="v3", metadata={"__last_accessed__": now - 1 * hour}),
]
index = VectorStoreIndex(nodes)

node_postprocessor = TimeWeightedPostprocessor(time_decay=0.5, time_access_refresh=False, top_k=1, now=now)
query_engine = index.as_query_engine(similarity_top_k=3, node_postprocessors=[node_postprocessor])
response = query_engine.query("How many days do customers have to ask for a refund?")
print([(n.node.node_id, round(n.score, 4)) for n in response.source_nodes])
