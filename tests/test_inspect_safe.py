"""ragtrail.inspect.safe: untrusted text shown as one printable line, JSON inert for a terminal."""

from __future__ import annotations

import json
import sys
import unicodedata

from rich.console import Console

from ragtrail.inspect.safe import json_text, plain, text

UNSAFE_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def test_every_control_format_surrogate_and_separator_character_is_escaped():
    unsafe = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) in UNSAFE_CATEGORIES]
    assert len(unsafe) > 2000
    joined = "".join(unsafe)
    shown = plain(joined)
    assert shown.isascii() and shown.isprintable()
    assert shown.count("\\") == len(unsafe)
    # and nothing else is touched: letters, marks, emoji, CJK, private use
    fine = "abc é ü 日本 👍 \ue000 [bold]x[/] :smile: \\n"
    assert plain(fine) == fine


def test_escapes_are_readable():
    assert plain("a\nb\rc\td") == "a\\nb\\rc\\td"
    assert plain("\x1b[2J\x07\x7f\x9b") == "\\x1b[2J\\x07\\x7f\\x9b"
    assert plain("x\u202ey\u2028z\ud800") == "x\\u202ey\\u2028z\\ud800"
    assert plain("tag\U000e0041") == "tag\\U000e0041"
    assert plain(None) == "None" and plain(5) == "5" and plain(["a\nb"]) == "['a\\nb']"


def test_text_is_never_markup():
    console = Console(width=200, record=True, color_system=None)
    console.print(text("[/] [bold]x :smile: \x1b[31m"))
    assert console.export_text() == "[/] [bold]x :smile: \\x1b[31m\n"


def test_json_text_is_the_same_json_value_and_inert():
    data = {"id": "a\u202eb\x1b[2J\x9b\n\ud800\U000e0041", "k\u2028": [1, None, "é"]}
    out = json_text(data, indent=2)
    assert out.isascii() or all(unicodedata.category(c) not in UNSAFE_CATEGORIES or c == "\n" for c in out)
    assert "\x1b" not in out and "\u202e" not in out and "\x9b" not in out and "\ud800" not in out
    assert json.loads(out) == data
    assert out.count("\n") == json.dumps(data, indent=2).count("\n")  # the indentation is kept


def test_plain_breaks_the_ci_log_command_prefix_anywhere_in_a_line():
    """The GitHub runner acts on ``##[command]`` anywhere in a log line: a document id holding one,
    printed by ``ragtrail show`` in a CI step, must not silence the step's annotations."""
    assert plain("doc ##[stop-commands]tok") == "doc ##\\x5bstop-commands]tok"
    assert plain("é ##[group]x\n") == "é ##\\x5bgroup]x\\n"
    assert plain("#[x] ## [y]") == "#[x] ## [y]"
