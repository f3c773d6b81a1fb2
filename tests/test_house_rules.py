"""House rules of ragtrail's import graph, checked rather than written down (issue 23).

- No import circle among ragtrail's modules. Function-level (lazy) imports count: a lazy import only
  hides a loop until the day someone imports the other end first (``python -m ragtrail.cli`` crashed
  that way). Imports under ``if TYPE_CHECKING:`` do not count: they never run.
- No private name crosses a module boundary: ``_x`` (not a dunder) belongs to the module or package
  that defines it and to that package's own modules. ``from ragtrail.a.b import _c`` from outside
  ``ragtrail.a.b``, or ``from ragtrail.a import _b`` from outside ``ragtrail.a``, is an offence.
  Private names of third-party libraries are not ragtrail's to police.

Both are read from the source with :mod:`ast` (no import of ragtrail or its optional libraries).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "ragtrail"


@dataclass(frozen=True)
class Import:
    """One imported name as written in ``importer``: ``module`` (absolute) and, for ``from`` imports, ``name``."""

    importer: str
    module: str
    name: str | None
    line: int
    type_checking: bool

    @property
    def target(self) -> str:
        return f"{self.module}.{self.name}" if self.name else self.module


def module_names() -> dict[str, Path]:
    """Every ragtrail module by dotted name (a package by its own name, read from ``__init__.py``)."""
    found: dict[str, Path] = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, type_checking: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    """Every node under ``node``, with whether it sits in the body of an ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                yield stmt, True
                yield from _walk(stmt, True)
            for stmt in child.orelse:
                yield stmt, type_checking
                yield from _walk(stmt, type_checking)
            continue
        yield child, type_checking
        yield from _walk(child, type_checking)


def imports_of(name: str, path: Path, is_package: bool) -> Iterator[Import]:
    """The ragtrail imports written in one module, relative ones made absolute."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if is_package else name.rpartition(".")[0]
    for node, type_checking in _walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(name, alias.name, None, node.lineno, type_checking)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                yield Import(name, base, None if alias.name == "*" else alias.name, node.lineno, type_checking)


def all_imports() -> list[Import]:
    modules = module_names()
    found = []
    for name, path in modules.items():
        for imp in imports_of(name, path, path.name == "__init__.py"):
            if imp.module == PACKAGE or imp.module.startswith(PACKAGE + "."):
                found.append(imp)
    return found


def _resolve(imp: Import, modules: dict[str, Path]) -> str | None:
    """The ragtrail module an import makes the importer depend on (``from pkg import mod`` names ``pkg.mod``)."""
    if imp.name and imp.target in modules:
        return imp.target
    return imp.module if imp.module in modules else None


def import_graph(include_type_checking: bool = False) -> dict[str, set[str]]:
    modules = module_names()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for imp in all_imports():
        if imp.type_checking and not include_type_checking:
            continue
        target = _resolve(imp, modules)
        if target is not None and target != imp.importer:
            graph[imp.importer].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def offends(importer: str, target: str) -> bool:
    """Whether ``importer`` reaches a private part of ``target`` from outside the module or package owning it."""
    parts = target.split(".")
    for i, part in enumerate(parts):
        owner = ".".join(parts[:i])
        if _private(part) and not (importer == owner or importer.startswith(owner + ".")):
            return True
    return False


def private_offences() -> list[str]:
    """Imports of a private name by a module outside the module or package that owns the name."""
    modules = module_names()
    return [
        f"{modules[imp.importer].relative_to(ROOT.parent)}:{imp.line}: {imp.importer} imports {imp.target}"
        for imp in all_imports()
        if offends(imp.importer, imp.target)
    ]


def test_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert not found, "import circles (lazy imports included):\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_private_name_imported_across_modules() -> None:
    offences = private_offences()
    assert not offences, "private names imported from another ragtrail module:\n" + "\n".join(offences)


# --- the checks check: each rule catches what it is for ------------------------------------------
def test_cycles_finds_a_lazy_loop_and_ignores_a_chain() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_import_reader_sees_lazy_and_relative_imports_and_skips_type_checking(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from .sibling import _hidden\n"
        "if TYPE_CHECKING:\n"
        "    from ragtrail.other import Thing\n"
        "def f():\n"
        "    from ..up import name\n"
    )
    found = {(i.target, i.type_checking) for i in imports_of("ragtrail.pkg.mod", source, False)}
    assert ("ragtrail.pkg.sibling._hidden", False) in found
    assert ("ragtrail.other.Thing", True) in found
    assert ("ragtrail.up.name", False) in found


@pytest.mark.parametrize(
    ("importer", "target", "offence"),
    [
        ("ragtrail.a.x", "ragtrail.a.y._z", True),  # a sibling module's private name
        ("ragtrail.b", "ragtrail.a._mod.name", True),  # a package's private module, from outside it
        ("ragtrail.a.x", "ragtrail.a._mod.name", False),  # ... from inside it
        ("ragtrail.a.x", "ragtrail.a.y.__version__", False),
    ],
)
def test_private_rule(importer: str, target: str, offence: bool) -> None:
    assert offends(importer, target) is offence
