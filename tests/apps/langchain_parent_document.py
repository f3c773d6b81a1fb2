# Source: LangChain how-to "How to use the Parent Document Retriever"
#   (https://python.langchain.com/docs/how_to/parent_document_retriever/), "Retrieving full documents":
#   two TextLoader files, RecursiveCharacterTextSplitter(chunk_size=400) for the children, a Chroma
#   collection "full_documents" for the child chunks, an InMemoryStore for the parents,
#   retriever.add_documents(docs, ids=None), vectorstore.similarity_search("justice breyer"),
#   retriever.invoke("justice breyer").
# Offline swaps: OpenAIEmbeddings -> a deterministic bag-of-words Embeddings class; the two files are
#   short excerpts of the page's paul_graham_essay.txt and state_of_the_union.txt (tests/apps/data/parent_docs);
#   langchain_chroma.Chroma -> langchain_community's Chroma (the same class before it moved; the
#   langchain-chroma package is not installed here).
from langchain_classic.retrievers import ParentDocumentRetriever
from langchain_classic.storage import InMemoryStore
from langchain_community.document_loaders import TextLoader
from langchain_community.vectorstores import Chroma
from langchain_core.embeddings import Embeddings
from langchain_text_splitters import RecursiveCharacterTextSplitter


class WordEmbeddings(Embeddings):
    """Deterministic offline stand-in: a hashed bag of lowercase words."""

    def _vec(self, text):
        v = [0.0] * 64
        for w in text.lower().replace(".", " ").replace("?", " ").replace(",", " ").replace(":", " ").split():
            v[sum(map(ord, w)) % 64] += 1.0
        return v

    def embed_documents(self, texts):
        return [self._vec(t) for t in texts]

    def embed_query(self, text):
        return self._vec(text)


loaders = [
    TextLoader("data/paul_graham_essay.txt"),
    TextLoader("data/state_of_the_union.txt"),
]
docs = []
for loader in loaders:
    docs.extend(loader.load())

# This text splitter is used to create the child documents
child_splitter = RecursiveCharacterTextSplitter(chunk_size=400)
# The vectorstore to use to index the child chunks
vectorstore = Chroma(collection_name="full_documents", embedding_function=WordEmbeddings())
# The storage layer for the parent documents
store = InMemoryStore()
retriever = ParentDocumentRetriever(
    vectorstore=vectorstore,
    docstore=store,
    child_splitter=child_splitter,
)
retriever.add_documents(docs, ids=None)
print(len(list(store.yield_keys())))

sub_docs = vectorstore.similarity_search("justice breyer")
print(sub_docs[0].page_content)

retrieved_docs = retriever.invoke("justice breyer")
print(len(retrieved_docs[0].page_content))
