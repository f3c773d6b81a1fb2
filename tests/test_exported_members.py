"""The recorder's surface for hooks, as written in docs/architecture.md, is what the code exports.

In the manner of httpx's ``tests/test_exported_members.py``: the list under "Where a new library
integration goes" is parsed and compared with each public recorder module's ``__all__``; the class
members it names exist; every recorder module declares ``__all__``; and the hooks (``instrumentation/``,
``api.py``, the hook skeleton) import from the recorder only documented modules and names, never
one marked as the recorder's own. Read from the source with :mod:`ast` where it can be.
"""

from __future__ import annotations

import ast
import importlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "ragtrail"
DOC = ROOT / "docs" / "architecture.md"
SECTION = "## Where a new library integration goes"

_MODULE_LINE = re.compile(r"^  - `(ragtrail\.recorder\.\w+)`: (.*)$")
_CLASS_LINE = re.compile(r"^    `(\w+)`: (.*)$")
_NAME = re.compile(r"`(\w+)(?:\(\))?`")
_OWN = re.compile(r"\(the recorder's own: ([^)]*)\)")


@dataclass
class Documented:
    """One public recorder module as the doc lists it."""

    hook: set[str] = field(default_factory=set)  # what a hook may import
    own: set[str] = field(default_factory=set)  # exported for the recorder's other modules only
    members: dict[str, set[str]] = field(default_factory=dict)  # class -> what a hook may use of it


def documented() -> dict[str, Documented]:
    """The doc's list: module -> names; an indented ```Class`: ...`` line lists the class's members, and
    any other indented line continues the line before it."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", len(SECTION))]
    blocks: list[list[str]] = []  # [module, class or "", what the lines say]
    current: list[str] | None = None
    for line in section.splitlines():
        module, member = _MODULE_LINE.match(line), _CLASS_LINE.match(line)
        if module:
            current = [module.group(1), "", module.group(2)]
            blocks.append(current)
        elif member and blocks:
            current = [blocks[-1][0], member.group(1), member.group(2)]
            blocks.append(current)
        elif line.startswith("    ") and current is not None:
            current[2] += " " + line.strip()
        else:
            current = None
    modules: dict[str, Documented] = {}
    for name, cls, said in blocks:
        entry = modules.setdefault(name, Documented())
        if cls:
            entry.members.setdefault(cls, set()).update(_NAME.findall(said))
            continue
        for own in _OWN.findall(said):
            entry.own.update(_NAME.findall(own))
        entry.hook.update(_NAME.findall(_OWN.sub("", said)))
    return modules


DOCUMENTED = documented()


def test_the_doc_lists_the_public_recorder_modules() -> None:
    assert set(DOCUMENTED) == {f"ragtrail.recorder.{name}" for name in ("stage", "pipeline", "candidates", "errors", "answer")}
    for entry in DOCUMENTED.values():
        assert entry.hook and not entry.hook & entry.own


@pytest.mark.parametrize("module", sorted(DOCUMENTED))
def test_documented_names_are_the_exported_ones(module: str) -> None:
    entry = DOCUMENTED[module]
    exported = importlib.import_module(module).__all__
    assert len(exported) == len(set(exported)), f"{module}.__all__ names a name twice"
    assert set(exported) == entry.hook | entry.own


@pytest.mark.parametrize("module", sorted(DOCUMENTED))
def test_documented_members_exist(module: str) -> None:
    loaded = importlib.import_module(module)
    for cls_name, members in DOCUMENTED[module].members.items():
        assert cls_name in DOCUMENTED[module].hook, f"{cls_name} is not exported by {module}"
        cls = getattr(loaded, cls_name)
        fields = getattr(cls, "__dataclass_fields__", {})
        for member in sorted(members):
            assert not member.startswith("_")
            instance_attribute = member in fields or member in _assigned_in_init(cls)
            assert hasattr(cls, member) or instance_attribute, f"{cls_name}.{member} is documented but does not exist"


def _assigned_in_init(cls: type) -> set[str]:
    """The ``self.<name> = ...`` attributes of ``cls.__init__`` (read from its source)."""
    init = cls.__dict__.get("__init__")
    path = Path(getattr(getattr(init, "__code__", None), "co_filename", "<none>"))
    if not path.is_file():  # no __init__ of its own, or one made by dataclasses
        return set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            return {
                target.attr
                for sub in ast.walk(node)
                if isinstance(sub, (ast.Assign, ast.AnnAssign))
                for target in (sub.targets if isinstance(sub, ast.Assign) else [sub.target])
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
            }
    return set()


def _all_of(path: Path) -> list[str] | None:
    """The module's ``__all__`` as written (a literal list), ``None`` when it declares none."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            value = node.value
            assert isinstance(value, ast.List), f"{path}: __all__ is not a literal list"
            return [ast.literal_eval(item) for item in value.elts]
    return None


# events.py is being rewritten beside this change (the wire columns' codec, issue 23): its __all__ comes with it
_ALL_PENDING: set[str] = set()


@pytest.mark.parametrize("path", sorted((SRC / "recorder").glob("*.py")), ids=lambda p: p.name)
def test_every_recorder_module_declares_what_it_exports(path: Path) -> None:
    exported = _all_of(path)
    if path.name in _ALL_PENDING and exported is None:
        pytest.skip(f"{path.name}: __all__ pending")
    assert exported is not None, f"{path.name} declares no __all__"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defined = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    defined |= {
        t.id
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Name)
    }
    defined |= {
        (alias.asname or alias.name).split(".")[0] for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names
    }
    assert not [name for name in exported if name not in defined], f"{path.name} exports names it does not define"
    assert not [name for name in exported if name.startswith("_")], f"{path.name} exports a private name"


def _hook_files() -> list[Path]:
    """The hooks: every integration, the decorators, and the hook skeleton wherever it lives."""
    files = sorted((SRC / "instrumentation").rglob("*.py")) + [SRC / "api.py"]
    return (
        files
        + [p for p in (SRC / "hooks.py", SRC / "hooks") if p.exists() and p.is_file()]
        + (sorted((SRC / "hooks").rglob("*.py")) if (SRC / "hooks").is_dir() else [])
    )


@pytest.mark.parametrize("path", _hook_files(), ids=lambda p: str(p.relative_to(SRC)))
def test_hooks_import_only_the_documented_surface(path: Path) -> None:
    offences = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "ragtrail.recorder":
            offences += [f"module {alias.name}" for alias in node.names if f"ragtrail.recorder.{alias.name}" not in DOCUMENTED]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ragtrail.recorder."):
            entry = DOCUMENTED.get(node.module)
            if entry is None:
                offences.append(f"module {node.module}")
                continue
            offences += [f"{node.module}.{alias.name}" for alias in node.names if alias.name not in entry.hook]
        elif isinstance(node, ast.Import):
            offences += [alias.name for alias in node.names if alias.name.startswith("ragtrail.recorder.") and alias.name not in DOCUMENTED]
    assert not offences, f"{path.relative_to(SRC)} imports from the recorder beyond its documented surface: {offences}"
