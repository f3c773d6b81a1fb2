"""Corpus sizes the recorder may use without loading the user's database.

A store's size comes only from what is cheap and already known: metadata the client already
holds, an approximate count the store reports anyway, or a number the user sets here with
:func:`ragtrail.corpus_size`. Never from a request ragtrail adds on the query path (an exact count
on a large collection is load the user did not ask for).

A store's identity (:func:`store_key`) is what makes "each store counted once" possible: the same
object (or the same name) searched by several stages is one store.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

__all__ = ["clear", "set_corpus_size", "store_key", "user_corpus_size"]

_lock = threading.Lock()
_by_object: weakref.WeakKeyDictionary[Any, tuple[int, bool]] = weakref.WeakKeyDictionary()
_by_id: dict[int, tuple[Any, int, bool]] = {}  # objects that cannot be weakly referenced (kept alive)
_by_name: dict[str, tuple[int, bool]] = {}


def store_key(store: Any) -> Any:
    """A hashable identity for a store: a name as is, an object by identity."""
    if isinstance(store, (str, int)):
        return ("name", store)
    if isinstance(store, tuple):
        return ("name", store)
    return ("object", id(store))


def set_corpus_size(store: Any, size: int, *, approximate: bool = False) -> None:
    """The user's own figure for a store's size (the client or index object, or a collection
    name): used instead of anything ragtrail would read for it. ``approximate`` when it is an
    estimate (then absence is never supported)."""
    size = int(size)
    if size < 0:
        raise ValueError("a corpus size is a count (>= 0)")
    with _lock:
        if isinstance(store, (str, int, tuple)):
            _by_name[str(store) if not isinstance(store, tuple) else repr(store)] = (size, bool(approximate))
            return
        try:
            _by_object[store] = (size, bool(approximate))
        except TypeError:
            _by_id[id(store)] = (store, size, bool(approximate))


def user_corpus_size(store: Any) -> tuple[int, bool] | None:
    """The size the user set for this store (object or name), ``None`` when none was set."""
    with _lock:
        if isinstance(store, (str, int, tuple)):
            return _by_name.get(str(store) if not isinstance(store, tuple) else repr(store))
        try:
            found = _by_object.get(store)
        except TypeError:
            found = None
        if found is not None:
            return found
        kept = _by_id.get(id(store))
        if kept is None:
            return None
        held, size, approximate = kept
        return (size, approximate) if held is store else None


def clear() -> None:
    """Forget every size the user set (tests)."""
    with _lock:
        _by_object.clear()
        _by_id.clear()
        _by_name.clear()
