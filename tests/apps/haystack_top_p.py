# Source: Haystack "TopPSampler" component page (https://docs.haystack.deepset.ai/docs/toppsampler),
#   "In a pipeline": scored documents go into TopPSampler, which keeps those within the top_p share of
#   the softmax of their scores, and on into a PromptBuilder and a generator. Here the scores are an
#   InMemoryBM25Retriever's (Document.score, so no score_field), with top_p=0.9.
# Offline swaps: the page's web search, fetcher and converter -> inline Documents in an
#   InMemoryDocumentStore searched by BM25; OpenAIGenerator (API key) -> a component with the same
#   run(prompt) -> {"replies": [str], "meta": [dict]} contract and one fixed reply.
from haystack import Document, Pipeline, component
from haystack.components.builders import PromptBuilder
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.components.samplers import TopPSampler
from haystack.document_stores.in_memory import InMemoryDocumentStore


@component
class FakeGenerator:
    """Offline stand-in for OpenAIGenerator: one fixed reply."""

    @component.output_types(replies=list[str], meta=list[dict])
    def run(self, prompt: str):
        return {"replies": ["Bees make honey from the nectar of flowers."], "meta": [{"model": "fake"}]}


document_store = InMemoryDocumentStore()
document_store.write_documents(
    [
        Document(content="Bees make honey from the nectar of flowers and store the honey in wax combs."),
        Document(content="Honey keeps for years because it holds so little water."),
        Document(content="Wasps eat other insects and sweet fruit in late summer, and they make no honey."),
        Document(content="Flowers open in spring and close at night."),
        Document(content="Beekeepers wear veils to keep the bees off their faces."),
    ]
)

template = """Given these documents, answer the question.
{% for doc in documents %}{{ doc.content }}
{% endfor %}Question: {{ query }}
Answer:"""

pipe = Pipeline()
pipe.add_component("retriever", InMemoryBM25Retriever(document_store=document_store, top_k=4))
pipe.add_component("sampler", TopPSampler(top_p=0.9))
pipe.add_component("prompt_builder", PromptBuilder(template=template, required_variables=["query", "documents"]))
pipe.add_component("llm", FakeGenerator())
pipe.connect("retriever.documents", "sampler.documents")
pipe.connect("sampler.documents", "prompt_builder.documents")
pipe.connect("prompt_builder", "llm")

query = "How do bees make honey?"
result = pipe.run({"retriever": {"query": query}, "prompt_builder": {"query": query}}, include_outputs_from={"sampler"})
for doc in result["sampler"]["documents"]:
    print(round(doc.score, 3), doc.content)
print(result["llm"]["replies"][0])
