# Source: LangChain "Qdrant" vector store integration page
#   (https://python.langchain.com/docs/integrations/vectorstores/qdrant/): QdrantClient(":memory:"),
#   create_collection, QdrantVectorStore(client=..., collection_name="demo_collection", embedding=...),
#   add_documents with ids, similarity_search (k=2), similarity_search_with_score (k=1), a search
#   with a qdrant_client Filter, and an MMR retriever (search_type="mmr", k=1).
# Offline swaps: OpenAIEmbeddings(model="text-embedding-3-large") -> a deterministic bag-of-words
#   Embeddings class (size 32 instead of 3072); the page's ten documents -> its first six;
#   uuid4() ids -> fixed UUIDs (the printed metadata carries each point's id, and two runs must print
#   the same).
from uuid import UUID

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_qdrant import QdrantVectorStore
from qdrant_client import QdrantClient, models
from qdrant_client.http.models import Distance, VectorParams


class WordEmbeddings(Embeddings):
    """Deterministic offline stand-in: a hashed bag of lowercase words."""

    def _vec(self, text):
        v = [0.0] * 32
        for w in text.lower().replace(".", " ").replace("?", " ").replace("!", " ").replace(",", " ").split():
            v[sum(map(ord, w)) % 32] += 1.0
        return v

    def embed_documents(self, texts):
        return [self._vec(t) for t in texts]

    def embed_query(self, text):
        return self._vec(text)


embeddings = WordEmbeddings()
client = QdrantClient(":memory:")

client.create_collection(
    collection_name="demo_collection",
    vectors_config=VectorParams(size=32, distance=Distance.COSINE),
)

vector_store = QdrantVectorStore(
    client=client,
    collection_name="demo_collection",
    embedding=embeddings,
)

document_1 = Document(page_content="I had chocalate chip pancakes and scrambled eggs for breakfast this morning.", metadata={"source": "tweet"})
document_2 = Document(
    page_content="The weather forecast for tomorrow is cloudy and overcast, with a high of 62 degrees.", metadata={"source": "news"}
)
document_3 = Document(page_content="Building an exciting new project with LangChain - come check it out!", metadata={"source": "tweet"})
document_4 = Document(page_content="Robbers broke into the city bank and stole $1 million in cash.", metadata={"source": "news"})
document_5 = Document(page_content="Wow! That was an amazing movie. I can't wait to see it again.", metadata={"source": "tweet"})
document_6 = Document(page_content="Is the new iPhone worth the price? Read this review to find out.", metadata={"source": "website"})

documents = [document_1, document_2, document_3, document_4, document_5, document_6]
uuids = [str(UUID(int=i + 1)) for i in range(len(documents))]

vector_store.add_documents(documents=documents, ids=uuids)

results = vector_store.similarity_search("LangChain provides abstractions to make working with LLMs easy", k=2)
for res in results:
    print(f"* {res.page_content} [{res.metadata}]")

results = vector_store.similarity_search_with_score(query="Will it be hot tomorrow", k=1)
for doc, score in results:
    print(f"* [SIM={score:3f}] {doc.page_content} [{doc.metadata}]")

results = vector_store.similarity_search(
    query="Who are the best soccer players in the world?",
    k=1,
    filter=models.Filter(should=[models.FieldCondition(key="metadata.source", match=models.MatchValue(value="news"))]),
)
for doc in results:
    print(f"* {doc.page_content} [{doc.metadata}]")

retriever = vector_store.as_retriever(search_type="mmr", search_kwargs={"k": 1})
print(retriever.invoke("Stealing from the bank is a crime"))
