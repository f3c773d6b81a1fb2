"""LlamaIndex nodes as ragtrail candidates, and the query a LlamaIndex call actually ran with.

Identity is the node id (``node.node_id``), stable across stages. The content the receipt is stamped
over is the node's own text (``MetadataMode.NONE``), so a candidate keeps the same content receipt
from retrieval to reranking; the budget stage, which sees the text chunks the synthesizer built,
stamps those chunks instead. Scores and metadata are copied at adaptation time: that is the snapshot
taken before a reranker or fusion overwrites ``NodeWithScore.score`` in place.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ragtrail import settings
from ragtrail.recorder.candidates import Candidate, lookup_adapter


def node_content(node: Any) -> Any:
    text = getattr(node, "text", None)
    if isinstance(text, str):
        return text
    try:
        return node.get_content()
    except Exception:
        return None


def adapt_node(node: Any) -> Candidate:
    meta = getattr(node, "metadata", None)
    if meta and settings.get().metadata:
        meta = dict(meta)  # copied only when metadata is captured: a later stage may write into it
    return Candidate(id=str(node.node_id), content=node_content(node), metadata=meta or None, raw=node)


def adapt_node_with_score(item: Any) -> Candidate:
    """:func:`adapt_node` of ``item.node`` with ``item``'s score, built in one go (a stage adapts ~100)."""
    node = item.node
    meta = getattr(node, "metadata", None)
    if meta and settings.get().metadata:
        meta = dict(meta)
    return Candidate(id=str(node.node_id), content=node_content(node), score=item.score, metadata=meta or None, raw=item)


class Snap(NamedTuple):
    """What a node looked like when it entered a stage (cheaper than a Candidate; the recorder
    adapts the node itself)."""

    id: str
    score: Any
    content: Any
    metadata: Any


def snap(item: Any) -> Snap:
    node = item.node
    return Snap(str(node.node_id), item.score, node_content(node), node.metadata)


def adapt_snapped(items: list[Any], snaps: list[Snap]) -> list[Candidate] | None:
    """The candidates :func:`adapt_node_with_score` makes of ``items``, built from their snaps taken
    just now (one read of each node instead of two); ``None`` when some item is adapted otherwise."""
    if any(lookup_adapter(type(item)) is not adapt_node_with_score for item in items):
        return None
    keep = settings.get().metadata
    return [
        Candidate(
            id=sn.id, content=sn.content, score=sn.score, metadata=(dict(sn.metadata) if keep else sn.metadata) if sn.metadata else None, raw=item
        )
        for item, sn in zip(items, snaps, strict=False)
    ]


def node_id(item: Any) -> str:
    node = getattr(item, "node", item)
    return str(node.node_id)


def query_text(value: Any) -> str | None:
    """The user-facing query string of a ``str`` or ``QueryBundle``."""
    if value is None or isinstance(value, str):
        return value
    text = getattr(value, "query_str", None)
    return text if isinstance(text, str) else None


def embedded_texts(value: Any) -> list[str]:
    """What an embedding retriever embeds for this query: the bundle's ``embedding_strs`` (HyDE puts
    its hypothetical document there and leaves ``query_str`` alone). Empty when the bundle already
    carries an embedding (nothing is embedded then) or is a plain string."""
    if value is None or isinstance(value, str):
        return [value] if value else []
    if getattr(value, "embedding", None) is not None:
        return []
    try:
        texts = value.embedding_strs
    except Exception:
        return []
    return [t for t in texts if isinstance(t, str)]
