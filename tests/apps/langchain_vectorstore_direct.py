# Source: LangChain's vector store how-to (https://python.langchain.com/docs/how_to/vectorstores/ and the
#   InMemoryVectorStore integration page: InMemoryVectorStore(embedding=...), add_documents(documents,
#   ids=[...]), vector_store.similarity_search(query, k=2), similarity_search_with_score(query, k=1),
#   max_marginal_relevance_search(query, k=2, fetch_k=3)), searched directly, no retriever.
# Offline swaps: OpenAIEmbeddings -> langchain_core's DeterministicFakeEmbedding (the docs' own testing
#   stand-in, no network).
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.vectorstores import InMemoryVectorStore

embeddings = DeterministicFakeEmbedding(size=256)
vector_store = InMemoryVectorStore(embedding=embeddings)

documents = [
    Document(page_content="I had chocolate chip pancakes and scrambled eggs for breakfast this morning.", metadata={"source": "tweet"}),
    Document(page_content="The weather forecast for tomorrow is cloudy and overcast, with a high of 62 degrees.", metadata={"source": "news"}),
    Document(page_content="Building an exciting new project with LangChain - come check it out!", metadata={"source": "tweet"}),
    Document(page_content="Robbers broke into the city bank and stole $1 million in cash.", metadata={"source": "news"}),
]
vector_store.add_documents(documents=documents, ids=["1", "2", "3", "4"])

query = "LangChain provides abstractions to make working with LLMs easy"
for doc in vector_store.similarity_search(query, k=2):
    print(doc.id, doc.page_content)

for doc, score in vector_store.similarity_search_with_score("Will it be hot tomorrow?", k=1):
    print(doc.id, round(score, 4))

for doc in vector_store.max_marginal_relevance_search(query, k=2, fetch_k=3):
    print(doc.id, doc.page_content)
