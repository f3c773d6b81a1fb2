"""Trace data is untrusted input: anyone who can write a document id, a metadata value or a query
controls it. Everything the inspector shows in a terminal goes through :func:`plain` (or :func:`text`
for rich), so no markup is interpreted, no escape sequence reaches the terminal, and one record
stays on one line whatever the data holds."""

from __future__ import annotations

import re
from typing import Any

# C0 controls (newline and tab included: a newline inside an id must not forge a line), DEL, C1
# controls, and the bidi overrides/isolates that reorder what the eye reads
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: "re.Match[str]") -> str:
    ch = match.group(0)
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def plain(value: Any) -> str:
    """``value`` as one printable line: control and bidi characters written as backslash escapes."""
    s = value if isinstance(value, str) else str(value)
    return _UNSAFE.sub(_escape, s)


def text(value: Any, style: str = "") -> Any:
    """A ``rich.text.Text`` of :func:`plain` ``value``: shown literally, never parsed as markup."""
    from rich.text import Text

    return Text(plain(value), style=style)
