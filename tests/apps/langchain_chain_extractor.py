# Source: LangChain how-to "How to do retrieval with contextual compression"
#   (https://python.langchain.com/docs/how_to/contextual_compression/), section "Adding contextual
#   compression with an LLMChainExtractor": LLMChainExtractor.from_llm(llm) behind a
#   ContextualCompressionRetriever over a FAISS retriever, pretty_print_docs as in the page.
# Offline swaps: the State of the Union text file -> four inline paragraphs; OpenAIEmbeddings ->
#   a deterministic bag-of-words Embeddings class; OpenAI(temperature=0) -> FakeListChatModel whose
#   answers are the extractions (NO_OUTPUT for the documents with nothing relevant).
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_classic.retrievers.document_compressors import LLMChainExtractor
from langchain_community.vectorstores import FAISS
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import FakeListChatModel


class WordEmbeddings(Embeddings):
    """Deterministic offline stand-in: a hashed bag of lowercase words."""

    def _vec(self, text):
        v = [0.0] * 64
        for w in text.lower().replace(".", " ").replace("?", " ").replace(",", " ").split():
            v[sum(map(ord, w)) % 64] += 1.0
        return v

    def embed_documents(self, texts):
        return [self._vec(t) for t in texts]

    def embed_query(self, text):
        return self._vec(text)


def pretty_print_docs(docs):
    print(f"\n{'-' * 100}\n".join([f"Document {i + 1}:\n\n" + d.page_content for i, d in enumerate(docs)]))


texts = [
    "One of the most serious constitutional responsibilities is nominating a Justice. I "
    "nominated Judge Ketanji Brown Jackson. She will continue Justice Breyer's legacy.",
    "Tonight I call on the Senate to pass the Freedom to Vote Act. Justice Breyer has served the country for decades.",
    "We will lower the cost of prescription drugs. Insulin costs ten dollars to make.",
    "We will secure the border and fix the immigration system.",
]
retriever = FAISS.from_documents([Document(page_content=t) for t in texts], WordEmbeddings()).as_retriever()

llm = FakeListChatModel(
    responses=[
        "I nominated Judge Ketanji Brown Jackson. She will continue Justice Breyer's legacy.",
        "NO_OUTPUT",
        "NO_OUTPUT",
        "NO_OUTPUT",
    ]
)
compressor = LLMChainExtractor.from_llm(llm)
compression_retriever = ContextualCompressionRetriever(base_compressor=compressor, base_retriever=retriever)

compressed_docs = compression_retriever.invoke("What did the president say about Ketanji Jackson Brown")
pretty_print_docs(compressed_docs)
