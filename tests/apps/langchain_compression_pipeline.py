# Source: LangChain how-to "How to do retrieval with contextual compression"
#   (https://python.langchain.com/docs/how_to/contextual_compression/), section "Stringing
#   compressors and document transformers together": DocumentCompressorPipeline of a
#   CharacterTextSplitter(chunk_size=300, chunk_overlap=0, separator=". "), an
#   EmbeddingsRedundantFilter and an EmbeddingsFilter(similarity_threshold=0.76) behind a
#   ContextualCompressionRetriever over a FAISS retriever; pretty_print_docs as in the page.
# Offline swaps: the State of the Union text file -> four inline paragraphs; OpenAIEmbeddings ->
#   a deterministic bag-of-words Embeddings class; the threshold 0.76 -> 0.3 (the stand-in
#   embeddings are coarser than OpenAI's); chunk_size 300 -> 100 (the inline paragraphs are short).
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_classic.retrievers.document_compressors import DocumentCompressorPipeline, EmbeddingsFilter
from langchain_community.document_transformers import EmbeddingsRedundantFilter
from langchain_community.vectorstores import FAISS
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_text_splitters import CharacterTextSplitter


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
    "Tonight I call on the Senate to pass the Freedom to Vote Act. Justice Breyer has served "
    "the country for decades. Justice Breyer thank you for your service. We are grateful.",
    "One of the most serious constitutional responsibilities is nominating a Justice. I "
    "nominated Judge Ketanji Brown Jackson. She will continue Justice Breyer's legacy.",
    "We will lower the cost of prescription drugs. Insulin costs ten dollars to make. Families pay far more than that.",
    "We will secure the border and fix the immigration system. We are putting in new technology. We are setting up joint patrols.",
]
embeddings = WordEmbeddings()
retriever = FAISS.from_documents([Document(page_content=t) for t in texts], embeddings).as_retriever()

splitter = CharacterTextSplitter(chunk_size=100, chunk_overlap=0, separator=". ")
redundant_filter = EmbeddingsRedundantFilter(embeddings=embeddings)
relevant_filter = EmbeddingsFilter(embeddings=embeddings, similarity_threshold=0.3)
pipeline_compressor = DocumentCompressorPipeline(transformers=[splitter, redundant_filter, relevant_filter])
compression_retriever = ContextualCompressionRetriever(base_compressor=pipeline_compressor, base_retriever=retriever)

compressed_docs = compression_retriever.invoke("What did the president say about Ketanji Jackson Brown")
pretty_print_docs(compressed_docs)
