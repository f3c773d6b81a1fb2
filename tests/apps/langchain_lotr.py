# Source: LangChain integration page "LOTR (Merger Retriever)"
#   (https://python.langchain.com/docs/integrations/retrievers/merger_retriever/): two Chroma stores with
#   different embeddings, retriever_all (search_type="similarity") and retriever_multi_qa
#   (search_type="mmr"), MergerRetriever(retrievers=[retriever_all, retriever_multi_qa]); "Re-order
#   results to avoid performance degradation": DocumentCompressorPipeline(transformers=[
#   EmbeddingsRedundantFilter(embeddings=filter_embeddings), LongContextReorder()]) behind a
#   ContextualCompressionRetriever, compression_retriever.invoke(query).
# Offline swaps: HuggingFaceEmbeddings("all-MiniLM-L6-v2"), HuggingFaceEmbeddings("multi-qa-MiniLM-L6-dot-v1")
#   and OpenAIEmbeddings -> three deterministic hashed bag-of-words Embeddings (different sizes); the
#   page's persistent, already filled stores -> in-memory ones filled with add_texts (five short texts);
#   k 5 -> 3 (five texts); langchain_chroma.Chroma -> langchain_community's Chroma (langchain-chroma is
#   not installed here), so the page's "include_metadata": True is left out of search_kwargs
#   (langchain-community's Chroma hands it to chromadb, which raises TypeError).
from langchain_classic.retrievers import ContextualCompressionRetriever, MergerRetriever
from langchain_classic.retrievers.document_compressors import DocumentCompressorPipeline
from langchain_community.document_transformers import EmbeddingsRedundantFilter, LongContextReorder
from langchain_community.vectorstores import Chroma
from langchain_core.embeddings import Embeddings


class WordEmbeddings(Embeddings):
    """Deterministic offline stand-in: a hashed bag of lowercase words, `size` buckets."""

    def __init__(self, size):
        self.size = size

    def _vec(self, text):
        v = [0.0] * self.size
        for w in text.lower().replace(".", " ").replace("?", " ").replace(",", " ").split():
            v[sum(map(ord, w)) % self.size] += 1.0
        return v

    def embed_documents(self, texts):
        return [self._vec(t) for t in texts]

    def embed_query(self, text):
        return self._vec(text)


all_mini = WordEmbeddings(64)
multi_qa_mini = WordEmbeddings(48)
filter_embeddings = WordEmbeddings(32)

texts = [
    "The project ships a command line tool for searching logs.",
    "The command line tool reads logs from standard input.",
    "Releases are cut every second Tuesday.",
    "The web dashboard shows search results as a table.",
    "Contributors sign the license agreement before their first pull request.",
]
ids = [f"doc-{i}" for i in range(len(texts))]

db_all = Chroma(collection_name="project_store_all", embedding_function=all_mini)
db_all.add_texts(texts, ids=ids)
db_multi_qa = Chroma(collection_name="project_store_multi", embedding_function=multi_qa_mini)
db_multi_qa.add_texts(texts, ids=ids)

retriever_all = db_all.as_retriever(search_type="similarity", search_kwargs={"k": 3})
retriever_multi_qa = db_multi_qa.as_retriever(search_type="mmr", search_kwargs={"k": 3})

# The Lord of the Retrievers will hold the output of both retrievers and can be used as any other
# retriever on different types of chains.
lotr = MergerRetriever(retrievers=[retriever_all, retriever_multi_qa])

# You can use an additional document transformer to reorder documents after removing redundancy.
filter = EmbeddingsRedundantFilter(embeddings=filter_embeddings)
reordering = LongContextReorder()
pipeline = DocumentCompressorPipeline(transformers=[filter, reordering])
compression_retriever_reordered = ContextualCompressionRetriever(base_compressor=pipeline, base_retriever=lotr)

query = "How does the command line tool search logs?"
for doc in lotr.invoke(query):
    print("merged", doc.page_content)
for doc in compression_retriever_reordered.invoke(query):
    print("final", doc.page_content)
