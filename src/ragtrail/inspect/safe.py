"""Trace data is untrusted input: anyone who can write a document id, a metadata value or a query
controls it. Everything the inspector shows in a terminal goes through :func:`plain` (or :func:`text`
for rich), so no markup is interpreted, no escape sequence reaches the terminal, and one record
stays on one line whatever the data holds. JSON written to stdout goes through :func:`json_text`.

What is escaped: every character of Unicode's control (Cc), format (Cf), surrogate (Cs), line (Zl) and
paragraph (Zp) separator categories. That is the C0/C1 controls (ESC starts ANSI/OSC sequences, a
newline would start a forged record, a carriage return would overwrite one), DEL, the bidi overrides
and isolates that reorder what the eye reads, zero-width and other invisible characters that make
two different ids look the same (the Unicode "tag" block can smuggle whole invisible sentences),
U+2028/U+2029 (line breaks to ``str.splitlines`` and some terminals), and lone surrogates, which
cannot be encoded to the terminal at all and would make printing fail.
"""

from __future__ import annotations

import json
import re
from typing import Any

# the Cc, Cf, Cs, Zl and Zp code points (tests/test_inspect_safe.py checks the list against the
# running Python's unicodedata, so a newer Unicode with new format characters is noticed)
_RANGES = (
    "\x00-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u206f\ud800-\udfff\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
_UNSAFE = re.compile(f"[{_RANGES}]")
# json.dumps already escapes C0 controls inside strings: any left in its output are its own indentation
_JSON_UNSAFE = re.compile(f"[{_RANGES[3:]}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    ch = match.group(0)
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def plain(value: Any) -> str:
    """``value`` as one printable line: control, format and bidi characters written as backslash escapes.

    ``None`` and non-strings are shown as ``str(value)``, escaped the same way; a CI log's ``##[``
    command prefix is broken (:func:`log_inert`)."""
    s = value if isinstance(value, str) else str(value)
    if "##[" in s:
        s = log_inert(s)
    if s.isascii() and s.isprintable():  # the common case: nothing to escape (both checks run at C speed)
        return s
    return _UNSAFE.sub(_escape, s)


def log_inert(value: str) -> str:
    """``value`` with the legacy ``##[`` CI-log command prefix broken (written ``##\\x5b``).

    The GitHub Actions runner acts on ``##[command]`` *anywhere* in any line of a job's log (not only
    at its start, as ``::command::``), so a document id holding ``##[stop-commands]tok`` printed by
    ``ragtrail show`` or the gate in a CI step would silence every later annotation."""
    return value.replace("##[", "##\\x5b")


def text(value: Any, style: str = "") -> Any:
    """A ``rich.text.Text`` of :func:`plain` ``value``: shown literally, never parsed as markup or emoji codes."""
    from rich.text import Text

    return Text(plain(value), style=style)


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON writes a code point above U+FFFF as a surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def json_text(data: Any, **options: Any) -> str:
    """``json.dumps(data, ensure_ascii=False, **options)`` with every character :func:`plain` escapes
    written as a JSON ``\\u`` escape instead: the same JSON value for a program, inert for a terminal.

    (json.dumps escapes C0 controls inside strings itself, and outside strings JSON is ASCII: every other
    such character is inside a string, where ``\\uXXXX`` is legal.)"""
    out = json.dumps(data, ensure_ascii=False, **options)
    if out.isascii() and "\x7f" not in out:  # the common case, checked at C speed (a 50 MB manifest: ~10 ms)
        return out
    return _JSON_UNSAFE.sub(_json_escape, out)
