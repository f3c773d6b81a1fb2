"""Candidates and the adapters that turn library objects into them.

The recorder only ever sees :class:`Candidate`. Library integrations register an adapter for their
own types with :func:`register_adapter` (by class, resolved along the MRO), so this module imports
no library. Plain dicts, ``(doc, score)`` tuples, strings and objects with id/content/score/metadata
attributes work out of the box. Identity is the item's id; an item with no id is identified by
``sha256:`` of its content, never by string similarity.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ragtrail.contract.receipts import Receipt, canonical_json, content_id, receipt
from ragtrail.recorder.pipeline import PipelineState

__all__ = [
    "CONTENT_KEYS",
    "Adapter",
    "Candidate",
    "Packed",
    "adapt",
    "adapt_all",
    "hand_over",
    "is_candidate_list",
    "lookup_adapter",
    "normalize_id",
    "pack",
    "register_adapter",
    "stamped_candidate",
    "unpack",
    "unregister_adapter",
]

_MISSING = object()
_ID_KEYS = ("id", "doc_id", "document_id", "chunk_id", "node_id", "_id", "uuid", "corpus_id")
# the one order in which a payload's text is looked for (a payload with both ``content`` and ``text``
# gets the same receipt on every path: the adapters here and the vector-store hooks)
CONTENT_KEYS = ("content", "text", "page_content", "document", "body", "chunk", "passage")
_SCORE_KEYS = ("score", "relevance_score", "similarity", "distance", "rerank_score")
_META_KEYS = ("metadata", "meta", "payload")


@dataclass(slots=True)
class Candidate:
    """One piece of evidence as a stage saw it.

    ``content`` is what the receipt is stamped over (``None`` when the stage never saw it);
    ``raw`` keeps the original object so nothing needs to be re-adapted. A slots class: a stage
    makes one per document, and an instance with no ``__dict__`` is one object for the host's
    garbage collector to count, where :meth:`copy` of a dict-backed one made two."""

    id: str
    content: Any = None
    score: Any = None
    score_kind: str | None = None
    metadata: Mapping[str, Any] | None = None
    hop: int | None = None
    transform_rule: str | None = None
    derived_from: str | None = None
    raw: Any = field(default=None, repr=False, compare=False)
    _receipt: Receipt | None = field(default=None, repr=False, compare=False)
    # handed over (see :func:`hand_over`): the next stage list that meets it takes it as it is
    _handed: bool = field(default=False, init=False, repr=False, compare=False)

    @property
    def receipt(self) -> Receipt | None:
        """The content receipt, computed once (hashing is the recorder's main cost)."""
        if self._receipt is None and self.content is not None:
            self._receipt = receipt(self.content)
        return self._receipt

    def with_receipt(self, stamped: Receipt | None) -> Candidate:
        """This candidate carrying a receipt already stamped over exactly its content (a memo across
        stages), so the content is not hashed again. Returns the candidate itself."""
        self._receipt = stamped
        return self

    def copy(self, **changes: Any) -> Candidate:
        """A copy with some public fields changed. The content receipt travels with the copy unless
        the content itself changes (the same evidence is never hashed twice)."""
        duplicate = Candidate(
            self.id,
            self.content,
            self.score,
            self.score_kind,
            self.metadata,
            self.hop,
            self.transform_rule,
            self.derived_from,
            self.raw,
            self._receipt,
        )
        for name, value in changes.items():
            if name not in _PUBLIC_FIELDS:
                raise TypeError(f"Candidate has no public field {name!r}")
            setattr(duplicate, name, value)
        if "content" in changes and changes["content"] is not self.content:
            duplicate._receipt = None
        return duplicate


Packed = tuple[tuple[Any, ...], ...]  # candidates as columns: one tuple per init field, in field order


def pack(candidates: list[Candidate]) -> Packed:
    """``candidates`` as columns (ten tuples, not an object per candidate): for candidates that are
    kept but no longer read one by one. :func:`unpack` gives back equal candidates."""
    return tuple(
        zip(
            *[(c.id, c.content, c.score, c.score_kind, c.metadata, c.hop, c.transform_rule, c.derived_from, c.raw, c._receipt) for c in candidates],
            strict=True,
        )
    )


def unpack(packed: Packed) -> list[Candidate]:
    """The candidates :func:`pack` was given (equal, not the same objects)."""
    return [Candidate(*row) for row in zip(*packed, strict=True)]


def stamped_candidate(ident: str, content: Any, metadata: Mapping[str, Any] | None, raw: Any, stamped: Receipt | None) -> Candidate:
    """``Candidate(id=ident, content=content, metadata=metadata, raw=raw).with_receipt(stamped)``,
    built with positional arguments (an adapter makes one per Document per stage: keywords were a
    third of the cost). ``stamped`` must be the receipt of exactly ``content``."""
    return Candidate(ident, content, None, None, metadata, None, None, None, raw, stamped)


def hand_over(candidates: list[Candidate]) -> list[Candidate]:
    """Mark candidates an instrumentation has just made for one ``Stage.inputs``/``outputs`` call and
    changes no more: that stage takes each as it is, once, instead of copying it (a copy per
    candidate per stage is most of a hook's adaptation cost). Only for candidates whose ``raw`` is
    set (what the copy would fill in). Returns the list itself."""
    for candidate in candidates:
        if candidate.raw is not None:
            candidate._handed = True
    return candidates


def _take_over(item: Any) -> Candidate | None:
    """``item`` itself when it is a candidate handed over by :func:`hand_over` (taken once: a
    second use gets a copy, as any other Candidate does), else ``None``."""
    if type(item) is Candidate and item._handed:
        item._handed = False
        return item
    return None


_NOT_MEMOISED: tuple[Any, Receipt | None] = (None, None)


def adapt_all(
    items: Iterable[Any], score_kind: str | None, receipts: dict[int, tuple[Any, Receipt | None]], inherited: PipelineState | None = None
) -> list[Candidate]:
    """Adapt every item for one stage (a handed-over candidate taken as it is): ``score_kind`` for
    those that carry none; with ``inherited`` (a stage's inputs), the hop and score kind an earlier
    stage of that pipeline gave each id. ``receipts`` is the stage's memo, ``id(content)`` ->
    ``(content, receipt)``: the same content object seen as input and output is hashed once per stage."""
    kind_of = inherited.candidate_score_kind if inherited is not None else None
    hop_of = inherited.candidate_hop if inherited is not None else None
    get = receipts.get
    result: list[Candidate] = []
    append = result.append
    for item in list(items):  # once per candidate per stage: lookups bound above
        candidate = _take_over(item) or adapt(item)
        if candidate.score_kind is None:
            candidate.score_kind = score_kind or (kind_of(candidate.id) if kind_of is not None else None)
        if hop_of is not None and candidate.hop is None:
            candidate.hop = hop_of(candidate.id)
        content = candidate.content
        if content is not None and candidate._receipt is None:
            held, stamped = get(id(content), _NOT_MEMOISED)
            if held is content:
                candidate._receipt = stamped
            else:
                receipts[id(content)] = (content, candidate.receipt)
        append(candidate)
    return result


_PUBLIC_FIELDS = frozenset(("id", "content", "score", "score_kind", "metadata", "hop", "transform_rule", "derived_from", "raw"))


Adapter = Callable[[Any], "Candidate | None"]
_adapters: dict[type, Adapter] = {}
_adapters_lock = threading.Lock()
_resolved: dict[type, Adapter | None] = {}


def register_adapter(cls: type, adapter: Adapter) -> None:
    """Teach the recorder a library type. ``adapter(obj)`` returns a Candidate (or ``None`` when the
    object is not a candidate after all). Subclasses inherit their base's adapter."""
    with _adapters_lock:
        _adapters[cls] = adapter
        _resolved.clear()


def unregister_adapter(cls: type) -> None:
    """Forget the adapter of ``cls`` (an instrumentor's ``uninstrument``)."""
    with _adapters_lock:
        _adapters.pop(cls, None)
        _resolved.clear()


def lookup_adapter(cls: type) -> Adapter | None:
    """The adapter registered for ``cls`` or its nearest base (``None``: adapted generically)."""
    try:
        return _resolved[cls]
    except KeyError:
        pass
    found = None
    for base in cls.__mro__:
        if base in _adapters:
            found = _adapters[base]
            break
    _resolved[cls] = found
    return found


def normalize_id(value: Any) -> str | None:
    """Ids on the wire are strings: ints, UUIDs and numpy ints become their decimal/str form."""
    if type(value) is str:  # the common case, first
        return value or None
    if value is None or value is _MISSING:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():
        value = item()
    text = str(value)
    return text if text else None


def _first(mapping: Mapping[str, Any], keys: Iterable[str]) -> Any:
    get = mapping.get
    for key in keys:
        value = get(key)
        if value is not None:
            return value
    return _MISSING


def _first_attr(obj: Any, keys: Iterable[str]) -> Any:
    for key in keys:
        try:
            value = getattr(obj, key)
        except Exception:
            continue
        if value is not None and not callable(value):
            return value
    return _MISSING


def _from_mapping(item: Mapping[str, Any]) -> Candidate:
    get = item.get
    # the usual keys first, without a loop: this runs once per candidate per stage
    content = get("content")
    if content is None:
        content = _first(item, CONTENT_KEYS)
    meta = get("metadata")
    if meta is None:
        meta = _first(item, _META_KEYS)
    score = get("score")
    if score is None:
        score = _first(item, _SCORE_KEYS)
    ident = get("id")
    if ident is None:
        ident = _first(item, _ID_KEYS)
    kind = "distance" if "distance" in item and "score" not in item else item.get("score_kind")
    return _make(ident, content, score, meta, item, score_kind=kind)


def _from_object(item: Any) -> Candidate:
    content = _first_attr(item, CONTENT_KEYS)
    meta = _first_attr(item, _META_KEYS)
    score = _first_attr(item, _SCORE_KEYS)
    return _make(_first_attr(item, _ID_KEYS), content, score, meta, item)


def _make(id_value: Any, content: Any, score: Any, meta: Any, raw: Any, score_kind: str | None = None) -> Candidate:
    content = None if content is _MISSING else content
    score = None if score is _MISSING else score
    meta = meta if isinstance(meta, Mapping) else None
    ident = normalize_id(id_value)
    if ident is None:
        ident = content_id(content if content is not None else _identity_payload(raw))
    return Candidate(id=ident, content=content, score=score, metadata=meta, raw=raw, score_kind=score_kind)


def _identity_payload(raw: Any) -> str:
    """What an item with neither id nor content is identified by: its canonical JSON."""
    return canonical_json(raw)


def adapt(item: Any) -> Candidate:
    """Turn one item into a Candidate. Never raises for odd items: anything unknown is identified by
    its canonical form, so the recorder can still count it."""
    if type(item) is dict and dict not in _adapters:  # the common case, first
        return _from_mapping(item)
    if isinstance(item, Candidate):
        # a copy: the recorder assigns hops and score kinds, and must not touch the caller's object
        copy = item.copy()
        if copy.raw is None:
            copy.raw = item
        return copy
    adapter = lookup_adapter(type(item))
    if adapter is not None:
        result = adapter(item)
        if result is not None:
            if result.raw is None:
                result.raw = item
            return result
    if isinstance(item, str):
        return Candidate(id=content_id(item), content=item, raw=item)
    if isinstance(item, (bytes, bytearray)):
        return Candidate(id=content_id(bytes(item)), content=bytes(item), raw=item)
    if isinstance(item, Mapping):
        return _from_mapping(item)
    if isinstance(item, tuple) and len(item) == 2 and _is_number(item[1]):
        doc, score = item
        candidate = adapt(doc)
        return Candidate(
            id=candidate.id,
            content=candidate.content,
            score=score,
            score_kind=candidate.score_kind,
            metadata=candidate.metadata,
            raw=item,
            hop=candidate.hop,
        )
    if isinstance(item, (int, float)) and not isinstance(item, bool):
        return Candidate(id=normalize_id(item) or "", raw=item)
    return _from_object(item)


def _is_number(value: Any) -> bool:
    if value is None or isinstance(value, bool):
        return value is None
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, (str, bytes))


def is_candidate_list(value: Any) -> bool:
    """A stage output we can record without consuming anything: a list or tuple (not a string, a
    mapping, or an iterator that the host still has to read)."""
    return isinstance(value, (list, tuple))
