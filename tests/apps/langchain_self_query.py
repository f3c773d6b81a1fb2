# Source: LangChain how-to "How to do 'self-querying' retrieval"
#   (https://python.langchain.com/docs/how_to/self_query/): the page's six movies in a Chroma store,
#   its metadata_field_info and document_content_description, SelfQueryRetriever.from_llm(llm,
#   vectorstore, document_content_description, metadata_field_info), and two of its questions: "a query
#   and a filter" and "a query and composite filter".
# Offline swaps: OpenAIEmbeddings -> a deterministic bag-of-words Embeddings class; ChatOpenAI ->
#   langchain_core's FakeListChatModel scripted with the structured queries the page shows the model
#   writing; langchain_chroma.Chroma -> langchain_community's Chroma (the same class before it moved);
#   `langchain.` imports -> `langchain_classic.` (where LangChain 1.x keeps these classes);
#   structured_query_translator=ChromaTranslator() passed to from_llm (the one from_llm would pick for
#   a Chroma store: its lookup imports every translator, and with langchain-community 0.4 one of those
#   imports fails).
from langchain_classic.chains.query_constructor.base import AttributeInfo
from langchain_classic.retrievers.self_query.base import SelfQueryRetriever
from langchain_community.query_constructors.chroma import ChromaTranslator
from langchain_community.vectorstores import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models.fake_chat_models import FakeListChatModel


class WordEmbeddings(Embeddings):
    """Deterministic offline stand-in: a hashed bag of lowercase words."""

    def _vec(self, text):
        v = [0.0] * 64
        for w in text.lower().replace(".", " ").replace("?", " ").replace(",", " ").replace("/", " ").split():
            v[sum(map(ord, w)) % 64] += 1.0
        return v

    def embed_documents(self, texts):
        return [self._vec(t) for t in texts]

    def embed_query(self, text):
        return self._vec(text)


docs = [
    Document(
        page_content="A bunch of scientists bring back dinosaurs and mayhem breaks loose",
        metadata={"year": 1993, "rating": 7.7, "genre": "science fiction"},
    ),
    Document(
        page_content="Leo DiCaprio gets lost in a dream within a dream within a dream within a ...",
        metadata={"year": 2010, "director": "Christopher Nolan", "rating": 8.2},
    ),
    Document(
        page_content="A psychologist / detective gets lost in a series of dreams within dreams within dreams and Inception reused the idea",
        metadata={"year": 2006, "director": "Satoshi Kon", "rating": 8.6},
    ),
    Document(
        page_content="A bunch of normal-sized women are supremely wholesome and some men pine after them",
        metadata={"year": 2019, "director": "Greta Gerwig", "rating": 8.3},
    ),
    Document(
        page_content="Toys come alive and have a blast doing so",
        metadata={"year": 1995, "genre": "animated"},
    ),
    Document(
        page_content="Three men walk into the Zone, three men walk out of the Zone",
        metadata={
            "year": 1979,
            "director": "Andrei Tarkovsky",
            "genre": "thriller",
            "rating": 9.9,
        },
    ),
]
vectorstore = Chroma.from_documents(docs, WordEmbeddings())

metadata_field_info = [
    AttributeInfo(
        name="genre",
        description="The genre of the movie. One of ['science fiction', 'comedy', 'drama', 'thriller', 'romance', 'action', 'animated']",
        type="string",
    ),
    AttributeInfo(
        name="year",
        description="The year the movie was released",
        type="integer",
    ),
    AttributeInfo(
        name="director",
        description="The name of the movie director",
        type="string",
    ),
    AttributeInfo(name="rating", description="A 1-10 rating for the movie", type="float"),
]
document_content_description = "Brief summary of a movie"
llm = FakeListChatModel(
    responses=[
        '```json\n{"query": "women", "filter": "eq(\\"director\\", \\"Greta Gerwig\\")"}\n```',
        '```json\n{"query": "toys", "filter": "and(gt(\\"year\\", 1990), lt(\\"year\\", 2005), eq(\\"genre\\", \\"animated\\"))"}\n```',
    ]
)
retriever = SelfQueryRetriever.from_llm(
    llm,
    vectorstore,
    document_content_description,
    metadata_field_info,
    structured_query_translator=ChromaTranslator(),
)

# This example specifies a query and a filter
for doc in retriever.invoke("Has Greta Gerwig directed any movies about women"):
    print(doc.page_content, doc.metadata["year"])

# This example specifies a query and composite filter
for doc in retriever.invoke("What's a movie after 1990 but before 2005 that's all about toys, and preferably is animated"):
    print(doc.page_content, doc.metadata["year"])
