"""House rule: no function in src/ragtrail over 60 lines, no class over 300 (CONTRIBUTING.md).

A long function or class is where several concerns hide behind one name; the rule makes a split
the default rather than a review argument. Lines are counted from the ``def``/``class`` line to
the last line of the body (decorators aside, docstring and comments included), as ``ast`` reports
them. The bundled demo's pipeline (``demo/pipeline.py``) is exempt: it is one readable example
pipeline that users copy, its nested stages kept together on purpose.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "ragtrail"
MAX_FUNCTION_LINES = 60
MAX_CLASS_LINES = 300
EXEMPT = {PACKAGE / "demo" / "pipeline.py"}


class Oversized(NamedTuple):
    path: str
    line: int
    name: str
    lines: int
    limit: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.name}: {self.lines} lines (limit {self.limit})"


def oversized(root: Path = PACKAGE) -> list[Oversized]:
    """Every function (nested ones included, each counted whole) and class over its limit."""
    found: list[Oversized] = []
    for path in sorted(root.rglob("*.py")):
        if path in EXEMPT:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                limit = MAX_FUNCTION_LINES
            elif isinstance(node, ast.ClassDef):
                limit = MAX_CLASS_LINES
            else:
                continue
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                found.append(Oversized(str(path.relative_to(root.parent)), node.lineno, node.name, lines, limit))
    return found


def test_no_function_over_60_lines_and_no_class_over_300() -> None:
    found = oversized()
    assert not found, "split these (CONTRIBUTING.md, house rules):\n" + "\n".join(map(str, found))


def test_the_size_rule_sees_long_functions_and_classes(tmp_path: Path) -> None:
    """The counter itself: a 61-line function and a 301-line class are caught, 60 and 300 are not."""
    body = "\n".join(f"    x{i} = {i}" for i in range(59))
    (tmp_path / "sixty.py").write_text(f"def ok():\n{body}\n")
    (tmp_path / "sixty_one.py").write_text(f"async def long():\n{body}\n    return None\n")
    fields = "\n".join(f"    f{i}: int = {i}" for i in range(299))
    (tmp_path / "classes.py").write_text(f"class Ok:\n{fields}\n\n\nclass Long:\n{fields}\n    g: int = 0\n")
    assert sorted((o.name, o.lines) for o in oversized(tmp_path)) == [("Long", 301), ("long", 61)]
