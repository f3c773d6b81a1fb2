"""Which SQL statements are pgvector nearest-neighbour searches, and what they say (table, query
vector, k, WHERE filter, score column), read from the statement text alone.

Only a plain top-level ``SELECT ... ORDER BY <a> <op> <b> [ASC] ... LIMIT <n>`` is a search (``op``
one of pgvector's distance operators; the ORDER BY item may also name a selected alias or position
whose expression is the distance). Anything else (DESC order, UNION, no LIMIT, an operator only in a
subquery) is not, and passes through unrecorded. The parse is cached per statement text: an app
repeats the same few statements with new parameters.

Placeholders are psycopg's (``%s``, ``%(name)s``, and ``%b``/``%t``) or a raw cursor's ``$n``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ragtrail.contract import semconv as sc

# pgvector's distance operators (the ``bit`` ones too): every one orders lower-is-better
OPERATORS: Mapping[str, str] = {
    "<->": "l2",
    "<=>": "cosine",
    "<#>": "negative_inner_product",
    "<+>": "l1",
    "<~>": "hamming",
    "<%>": "jaccard",
}
_OPERATOR = re.compile("|".join(re.escape(op) for op in OPERATORS))
_PLACEHOLDER = re.compile(r"%%|%\((?P<name>[^)]+)\)[sbt]|%[sbt]|\$(?P<number>\d+)")
_CLAUSE = re.compile(r"\b(from|where|group\s+by|having|window|order\s+by|limit|offset|fetch|for|union|intersect|except)\b")
_DISTINCT = re.compile(r"\bdistinct\s*$")
_CAST = re.compile(r"::\s*[\w.]+(\s*\(\s*\d+\s*\))?\s*$")
_IDENT = re.compile(r'(?:"[^"]+"|[A-Za-z_][\w$]*)(?:\.(?:"[^"]+"|[A-Za-z_][\w$]*))*')
_CACHE_MAX = 512


@dataclass(frozen=True)
class Param:
    """A bound parameter: its position among the placeholders, or its name."""

    index: int | None = None
    name: str | None = None

    def value(self, params: Any) -> Any:
        """The bound value, or ``None`` when the parameters do not hold it."""
        try:
            if self.name is not None:
                return params[self.name] if isinstance(params, Mapping) else None
            if isinstance(params, Sequence) and not isinstance(params, (str, bytes)):
                return params[self.index]  # type: ignore[index]
        except (LookupError, TypeError):
            return None
        return None


@dataclass(frozen=True)
class Search:
    """A statement found to be a pgvector search."""

    operator: str
    table: str | None
    vector: Param | str | None  # the query vector: a parameter, or the literal text
    limit: Param | int | None
    where: str | None = None
    where_params: tuple[Param, ...] = ()
    score_item: int | None = None  # position in the select list of the column carrying the score
    score_alias: str | None = None
    score_kind: str | None = None  # of that column: the operator's distance, or a similarity form
    star_before_score: bool = False  # a ``*`` precedes it: its position in the result is not known from the text
    # the select list's plain column references, by position (``None`` for any other item), up to the
    # first ``*``: ``t.id AS t_id`` (SQLAlchemy's labels) is the ``id`` column under another name
    columns: tuple[str | None, ...] = ()


def statement_text(query: Any, context: Any) -> str | None:
    """The statement as text: a ``str``, UTF-8 ``bytes``, or a ``psycopg.sql`` composable rendered
    for ``context`` (client-side, no round trip)."""
    if isinstance(query, str):
        return query
    if isinstance(query, (bytes, bytearray, memoryview)):
        return bytes(query).decode("utf-8", "replace")
    as_string = getattr(query, "as_string", None)
    if callable(as_string):
        text = as_string(context)
        return text if isinstance(text, str) else None
    return None


def maybe_search(text: str) -> bool:
    """The cheap test run on every statement: does it hold a distance operator at all."""
    return "<" in text and _OPERATOR.search(text) is not None


_cache: dict[str, Search | None] = {}
_cache_lock = threading.Lock()


def parse(text: str) -> Search | None:
    """The search ``text`` is, or ``None`` (cached per text)."""
    try:
        return _cache[text]
    except KeyError:
        pass
    try:
        found = _parse(text)
    except (ValueError, IndexError):
        found = None
    with _cache_lock:
        if len(_cache) >= _CACHE_MAX:
            _cache.clear()
        _cache[text] = found
    return found


def _mask(text: str) -> str:
    """``text`` with quoted strings, comments and everything inside parentheses blanked (same
    length): what is left is the statement's top level."""
    out = list(text)
    depth = 0
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        end = i + 1
        if ch in "'\"":
            end = text.find(ch, i + 1)
            end = n if end < 0 else end + 1
        elif text.startswith("--", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
            out[i] = " "
        if end > i + 1 or depth > 0:
            out[i:end] = " " * (end - i)
        i = end
    return "".join(out)


def _split_top(text: str, masked: str) -> list[str]:
    """``text`` cut at top-level commas."""
    parts, start = [], 0
    for i, ch in enumerate(masked):
        if ch == ",":
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [part.strip() for part in parts]


def _clauses(text: str, masked: str) -> dict[str, tuple[int, int]] | None:
    """Top-level clause name -> (start, end) of its body; ``None`` for a statement that is not one
    plain SELECT."""
    lowered = masked.lower()
    body = lowered.lstrip()
    if not body.startswith("select"):
        return None
    spans: list[tuple[str, int, int]] = [("select", len(lowered) - len(body), len(lowered) - len(body) + 6)]
    for match in _CLAUSE.finditer(lowered):
        name = " ".join(match.group(1).split())
        if name == "from" and _DISTINCT.search(lowered, max(0, match.start() - 24), match.start()) is not None:
            continue  # ``a IS [NOT] DISTINCT FROM b``: a comparison (Haystack's ``!=`` filter), no clause
        if name in ("union", "intersect", "except"):
            return None
        spans.append((name, match.start(), match.end()))
    found: dict[str, tuple[int, int]] = {}
    for position, (name, _start, end) in enumerate(spans):
        stop = spans[position + 1][1] if position + 1 < len(spans) else len(text)
        if name in found:
            return None  # a keyword twice at top level: not a shape read here
        found[name] = (end, stop)
    return found


def _strip_parens(expr: str) -> str:
    expr = expr.strip()
    while expr.startswith("(") and expr.endswith(")") and _mask(expr[1:-1]).count(")") == _mask(expr[1:-1]).count("("):
        inner = expr[1:-1].strip()
        if not inner:
            break
        expr = inner
    return expr


def _normal(expr: str) -> str:
    return "".join(_strip_parens(expr).split()).lower()


def _params(text: str) -> dict[int, Param]:
    """Every placeholder's start offset -> its Param (positional placeholders counted in order)."""
    found: dict[int, Param] = {}
    count = 0
    for match in _PLACEHOLDER.finditer(text):
        if match.group(0) == "%%":
            continue
        if match.group("name") is not None:
            found[match.start()] = Param(name=match.group("name"))
        elif match.group("number") is not None:
            found[match.start()] = Param(index=int(match.group("number")) - 1)
        else:
            found[match.start()] = Param(index=count)
            count += 1
    return found


def _vector_of(expr: str, offset: int, params: dict[int, Param]) -> tuple[str, Param | str | None] | None:
    """``(operator, query operand)`` of a distance expression starting at ``offset`` in the statement."""
    match = _OPERATOR.search(expr)
    if match is None:
        return None
    for start, end in ((match.end(), len(expr)), (0, match.start())):
        side = expr[start:end]
        core = _strip_parens(_CAST.sub("", _strip_parens(side)))
        placeholder = _PLACEHOLDER.fullmatch(core)
        if placeholder is not None and placeholder.group(0) != "%%":
            # the placeholder's offset in the statement locates its Param
            at = offset + start + side.find(core)
            return match.group(0), params.get(at)
        if len(core) >= 2 and core[0] == "'" and core[-1] == "'":
            return match.group(0), core[1:-1]
    return match.group(0), None


def _score_form(expr: str, core: str) -> str | None:
    """The score kind of a select expression over the ordering distance ``core`` (normalised):
    the distance itself, ``1 - distance`` (cosine similarity) or the negated inner product."""
    e = _normal(expr)
    if e == core:
        return sc.SCORE_DISTANCE
    if e in (f"1-({core})", f"1-{core}", f"({core})*-1", f"-1*({core})", f"-({core})", f"{core}*-1"):
        return sc.SCORE_SIMILARITY
    return None


def _alias(item: str) -> tuple[str, str | None]:
    """A select item's expression and its alias (``AS x`` or a trailing bare name)."""
    masked = _mask(item)
    match = re.search(r"\s+as\s+(\"[^\"]+\"|[A-Za-z_][\w$]*)\s*$", masked, re.IGNORECASE)
    if match is None:
        match = re.search(r"(?<=[\s)])(\"[^\"]+\"|[A-Za-z_][\w$]*)\s*$", masked)
        if match is not None and _OPERATOR.search(item[: match.start()]) is None:
            match = None
    if match is None:
        return item, None
    alias = item[match.start(1) : match.end(1)]
    alias = alias[1:-1] if alias.startswith('"') else alias.lower()
    expr = item[: match.start(1)].rstrip()
    if expr[-2:].lower() == "as" and (len(expr) == 2 or not (expr[-3].isalnum() or expr[-3] == "_")):
        expr = expr[:-2]
    return expr.strip(), alias


def _parse(text: str) -> Search | None:
    masked = _mask(text)
    clauses = _clauses(text, masked)
    if clauses is None or "order by" not in clauses or "limit" not in clauses:
        return None
    params = _params(text)
    select_at = clauses["select"]
    items = _split_top(text[select_at[0] : select_at[1]], masked[select_at[0] : select_at[1]])
    order_at = clauses["order by"]
    order_items = _split_top(text[order_at[0] : order_at[1]], masked[order_at[0] : order_at[1]])
    first = order_items[0]
    words = first.split()
    if words and words[-1].lower() == "desc" or "nulls" in (w.lower() for w in words[-2:-1]):
        return None
    if words and words[-1].lower() == "asc":
        first = first[: first.lower().rfind("asc")].strip()
    offset = text.find(first, order_at[0])
    selected = [_alias(item) for item in items]
    score_item: int | None = None
    if _OPERATOR.search(first) is None:
        # ORDER BY an alias or a position naming a distance in the select list
        name = first.strip()
        position = int(name) - 1 if name.isdigit() else None
        names = [alias for _expr, alias in selected]
        key = name[1:-1] if name.startswith('"') else name.lower()
        score_item = position if position is not None else (names.index(key) if key in names else None)
        if score_item is None or not 0 <= score_item < len(items) or _OPERATOR.search(selected[score_item][0]) is None:
            return None
        first = selected[score_item][0]
        offset = text.find(first, select_at[0])
    found = _vector_of(first, offset, params)
    if found is None:
        return None
    operator, vector = found
    core = _normal(_strip_parens(first))
    kind: str | None = None
    if score_item is not None:
        kind = _score_form(first, core) or sc.SCORE_DISTANCE
    else:
        for position, (expr, _alias_name) in enumerate(selected):
            kind = _score_form(expr, core)
            if kind is not None:
                score_item = position
                break
    return Search(
        operator=operator,
        table=_table(text, masked, clauses),
        vector=vector,
        limit=_limit(text, clauses["limit"], params),
        where=" ".join(text[clauses["where"][0] : clauses["where"][1]].split()) if "where" in clauses else None,
        where_params=tuple(p for at, p in sorted(params.items()) if "where" in clauses and clauses["where"][0] <= at < clauses["where"][1]),
        score_item=score_item,
        score_alias=selected[score_item][1] if score_item is not None else None,
        score_kind=kind,
        star_before_score=any(expr.strip().endswith("*") for expr, _a in selected[: (score_item or 0) + 1]),
        columns=_column_names(selected),
    )


def _column_names(selected: list[tuple[str, str | None]]) -> tuple[str | None, ...]:
    """Each select item's column name when it is a plain (possibly qualified) column reference."""
    names: list[str | None] = []
    for expr, _alias_name in selected:
        expr = expr.strip()
        if expr.endswith("*"):
            break
        match = _IDENT.fullmatch(expr)
        last = expr.rsplit(".", 1)[-1] if match is not None else None
        names.append(None if last is None else last[1:-1] if last.startswith('"') else last.lower())
    return tuple(names)


def _table(text: str, masked: str, clauses: Mapping[str, tuple[int, int]]) -> str | None:
    """The first table of the FROM clause (schema-qualified as written, quotes removed), or ``None``."""
    if "from" not in clauses:
        return None
    start, end = clauses["from"]
    body = text[start:end].strip()
    match = _IDENT.match(body)
    if match is None:
        return None
    # a quoted identifier's name is what is inside its quotes
    return ".".join(part[1:-1] if part.startswith('"') else part for part in re.findall(r'"[^"]+"|[^.]+', match.group(0)))


def _limit(text: str, at: tuple[int, int], params: dict[int, Param]) -> Param | int | None:
    body = text[at[0] : at[1]].strip()
    if body.isdigit():
        return int(body)
    match = _PLACEHOLDER.fullmatch(_CAST.sub("", body).strip())
    if match is not None and match.group(0) != "%%":
        return params.get(at[0] + text[at[0] : at[1]].find(match.group(0)))
    return None
