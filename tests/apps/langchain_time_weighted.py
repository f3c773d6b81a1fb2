# Source: LangChain "How to use a time-weighted vector store retriever"
#   (https://python.langchain.com/docs/how_to/time_weighted_vectorstore/), the "High decay rate"
#   section: a FAISS IndexFlatL2 store, TimeWeightedVectorStoreRetriever(decay_rate=0.999, k=1), one
#   document last accessed yesterday, one new, and retriever.invoke("hello world").
# Offline swaps: OpenAIEmbeddings -> a deterministic bag-of-words Embeddings class (embedding_size
#   16 instead of 1536); the result's texts are printed (the page shows the Documents as the cell's
#   output; their last_accessed_at timestamps differ between two runs).
from datetime import datetime, timedelta

import faiss
from langchain_classic.retrievers import TimeWeightedVectorStoreRetriever
from langchain_community.docstore import InMemoryDocstore
from langchain_community.vectorstores import FAISS
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings


class WordEmbeddings(Embeddings):
    """Deterministic offline stand-in: a hashed bag of lowercase words, unit length (as OpenAI's)."""

    def _vec(self, text):
        v = [0.0] * 16
        for w in text.lower().split():
            v[sum(map(ord, w)) % 16] += 1.0
        norm = sum(x * x for x in v) ** 0.5 or 1.0
        return [x / norm for x in v]

    def embed_documents(self, texts):
        return [self._vec(t) for t in texts]

    def embed_query(self, text):
        return self._vec(text)


# Define your embedding model
embeddings_model = WordEmbeddings()
# Initialize the vectorstore as empty
embedding_size = 16
index = faiss.IndexFlatL2(embedding_size)
vectorstore = FAISS(embeddings_model, index, InMemoryDocstore({}), {})
retriever = TimeWeightedVectorStoreRetriever(vectorstore=vectorstore, decay_rate=0.999, k=1)

yesterday = datetime.now() - timedelta(days=1)
retriever.add_documents([Document(page_content="hello world", metadata={"last_accessed_at": yesterday})])
retriever.add_documents([Document(page_content="hello foo")])

# "Hello Foo" is returned first because "hello world" is mostly forgotten
print([doc.page_content for doc in retriever.invoke("hello world")])
