# Source: LlamaIndex documentation, "Auto Merging Retriever" (examples/retrievers/auto_merging_retriever),
#   https://docs.llamaindex.ai/en/stable/examples/retrievers/auto_merging_retriever/
#   HierarchicalNodeParser.from_defaults() (chunk sizes 2048, 512, 128), get_leaf_nodes, a
#   SimpleDocumentStore holding every node, VectorStoreIndex over the leaves, as_retriever(similarity_top_k=6),
#   AutoMergingRetriever(base_retriever, storage_context, verbose=True), retriever.retrieve(query_str)
#   against base_retriever.retrieve(query_str), then RetrieverQueryEngine.from_args(retriever).query(query_str).
# Swapped for offline stand-ins (nothing else changed):
#   - Settings.embed_model = a letter-count embedding (deterministic, no model, no network)
#   - llm = a scripted LLM answering every prompt with a fixed sentence, instead of OpenAI gpt-3.5-turbo
#   - the Llama 2 paper (PDF) -> a short text on the paper's "Safety in RLHF" section (data/llama2_safety.txt)
#   - verbose=True -> verbose=False: its "> Merging ..." message prints the parent's random uuid, and
#     stdout is compared between two runs
#   - display_source_node(node, source_length=10000) (a notebook display) -> print of the node's score and
#     first words (node ids are random uuids: stdout is compared between two runs)
from typing import Any

from llama_index.core import Settings, SimpleDirectoryReader, StorageContext, VectorStoreIndex
from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen, LLMMetadata
from llama_index.core.embeddings import BaseEmbedding
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.llms.custom import CustomLLM
from llama_index.core.node_parser import HierarchicalNodeParser, get_leaf_nodes, get_root_nodes
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import AutoMergingRetriever
from llama_index.core.storage.docstore import SimpleDocumentStore


def letters(text: str) -> list[float]:
    return [float(text.lower().count(c)) + 0.1 for c in "abcdefghijklmnopqrstuvwxyz"]


class LetterEmbedding(BaseEmbedding):
    def _get_query_embedding(self, query: str) -> list[float]:
        return letters(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return letters(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return letters(text)


class ScriptedLLM(CustomLLM):
    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(context_window=3900, num_output=64, model_name="scripted")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text="More safety data makes the model safer without hurting helpfulness.")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        yield CompletionResponse(text="More safety data makes the model safer without hurting helpfulness.")


Settings.embed_model = LetterEmbedding()
docs = SimpleDirectoryReader(input_files=["data/llama2_safety.txt"], filename_as_id=True).load_data()

node_parser = HierarchicalNodeParser.from_defaults()
nodes = node_parser.get_nodes_from_documents(docs)
print(len(nodes))

leaf_nodes = get_leaf_nodes(nodes)
print(len(leaf_nodes))
root_nodes = get_root_nodes(nodes)

# define storage context (will include vector store by default too)
docstore = SimpleDocumentStore()
docstore.add_documents(nodes)
storage_context = StorageContext.from_defaults(docstore=docstore)

llm = ScriptedLLM()

## Load index into vector index
base_index = VectorStoreIndex(leaf_nodes, storage_context=storage_context)

base_retriever = base_index.as_retriever(similarity_top_k=6)
retriever = AutoMergingRetriever(base_retriever, storage_context, verbose=False)

query_str = "What could be the potential outcomes of adjusting the amount of safety data used in the RLHF stage?"

nodes = retriever.retrieve(query_str)
base_nodes = base_retriever.retrieve(query_str)
print(len(nodes))
print(len(base_nodes))
for node in nodes:
    print(round(node.score, 4), node.node.get_content()[:40])

query_engine = RetrieverQueryEngine.from_args(retriever, llm=llm)
response = query_engine.query(query_str)
print(str(response))
