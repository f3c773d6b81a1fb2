# Source: LanceDB's quickstart (https://lancedb.github.io/lancedb/basic/: lancedb.connect, create_table
#   from a list of dicts, tbl.search(vector).limit(2).to_pandas()) and its full-text search guide
#   (https://lancedb.github.io/lancedb/fts/: the "Frodo was a happy puppy" rows, create_fts_index on
#   "text", search("puppy", query_type="fts")), plus the quickstart's `where` filter on a vector search.
# Offline swaps: none (LanceDB is embedded). Added: an "id" column, so each row has the id an
#   application keeps (ragtrail records it; without one the rows are identified by their text).
import lancedb
from lancedb.index import FTS

db = lancedb.connect("data/sample-lancedb")
data = [
    {"id": 1, "vector": [3.1, 4.1], "text": "Frodo was a happy puppy", "price": 10.0},
    {"id": 2, "vector": [5.9, 26.5], "text": "There are several kittens playing", "price": 20.0},
    {"id": 3, "vector": [60.0, 70.0], "text": "Sam carried the puppy home", "price": 30.0},
]
tbl = db.create_table("my_table", data=data, mode="overwrite")

result = tbl.search([100, 100]).limit(2).to_pandas()
for _, row in result.iterrows():
    print(row["id"], row["text"], round(row["_distance"], 2))

filtered = tbl.search([100, 100]).where("price < 25").limit(2).to_list()
for row in filtered:
    print(row["id"], row["text"], round(row["_distance"], 2))

tbl.create_index("text", config=FTS())
for row in tbl.search("puppy", query_type="fts").limit(10).to_list():
    print(row["id"], row["text"], round(row["_score"], 4))
