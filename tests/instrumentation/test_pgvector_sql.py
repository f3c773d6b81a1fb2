"""The pgvector statement parser on the exact SQL the frameworks send (no server needed): LlamaIndex's
``PGVectorStore`` (SQLAlchemy's labels, ORDER BY the ``distance`` alias, bound vector and LIMIT) and
pgvector-haystack's ``PgvectorDocumentStore`` (``psycopg.sql`` composed: ``SELECT *`` and a score
form per ``vector_function``, the vector as a literal, quoted schema and table, and its ``!=`` filter
written ``IS DISTINCT FROM``, whose ``FROM`` is no clause)."""

from __future__ import annotations

import pytest

from ragtrail.instrumentation._pgvector_sql import Param, Search, parse

LLAMA_INDEX = (
    "SELECT public.data_paul_graham_essay.id, public.data_paul_graham_essay.node_id, public.data_paul_graham_essay.text, "
    "public.data_paul_graham_essay.metadata_, public.data_paul_graham_essay.embedding <=> %(embedding_1)s AS distance \n"
    "FROM public.data_paul_graham_essay \nWHERE metadata_->>'topic' = 'startups' ORDER BY distance asc \n LIMIT %(param_1)s"
)


def haystack(score: str, operator: str, where: str = "") -> str:
    vector = "'[0.1,0.2,0.3]'"
    return f'SELECT *, {score.format(vector)} FROM "public"."haystack_documents"{where} ORDER BY embedding {operator} {vector} ASC LIMIT 3'


def test_llama_index_sqlalchemy_statement() -> None:
    assert parse(LLAMA_INDEX) == Search(
        operator="<=>",
        table="public.data_paul_graham_essay",
        vector=Param(name="embedding_1"),
        limit=Param(name="param_1"),
        where="metadata_->>'topic' = 'startups'",
        where_params=(),
        score_item=4,
        score_alias="distance",
        score_kind="distance",
        star_before_score=False,
        columns=("id", "node_id", "text", "metadata_", None),
    )


@pytest.mark.parametrize(
    ("score", "operator", "kind"),
    [
        ("1 - (embedding <=> {}) AS score", "<=>", "similarity"),  # cosine_similarity
        ("(embedding <#> {}) * -1 AS score", "<#>", "similarity"),  # inner_product
        ("embedding <-> {} AS score", "<->", "distance"),  # l2_distance
    ],
)
def test_haystack_vector_functions(score: str, operator: str, kind: str) -> None:
    assert parse(haystack(score, operator)) == Search(
        operator=operator,
        table="public.haystack_documents",
        vector="[0.1,0.2,0.3]",
        limit=3,
        score_item=1,
        score_alias="score",
        score_kind=kind,
        star_before_score=True,
        columns=(),
    )


@pytest.mark.parametrize("comparison", ["IS DISTINCT FROM", "IS NOT DISTINCT FROM", "is  distinct\nfrom"])
def test_is_distinct_from_is_a_comparison_not_a_from_clause(comparison: str) -> None:
    where = f" WHERE meta->>'topic' {comparison} %s AND (meta->>'year')::integer < %s"
    found = parse(haystack("1 - (embedding <=> {}) AS score", "<=>", where))
    assert found is not None
    assert (found.table, found.where, found.where_params, found.limit) == (
        "public.haystack_documents",
        f"meta->>'topic' {' '.join(comparison.split())} %s AND (meta->>'year')::integer < %s",
        (Param(index=0), Param(index=1)),
        3,
    )


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT id FROM items FROM other ORDER BY embedding <-> %s LIMIT 2",  # a second FROM clause
        "SELECT id FROM items WHERE a IS DISTINCT FROM b ORDER BY embedding <-> %s DESC LIMIT 2",  # DESC
        "SELECT id FROM items WHERE distinctive FROM b ORDER BY embedding <-> %s LIMIT 2",  # not the word DISTINCT
        "SELECT *, ts_rank_cd(to_tsvector('english', content), query) AS score FROM t, plainto_tsquery('english', %s) query "
        "WHERE to_tsvector('english', content) @@ query ORDER BY score DESC LIMIT 10",  # Haystack's keyword search
    ],
)
def test_other_shapes_are_no_search(statement: str) -> None:
    assert parse(statement) is None
