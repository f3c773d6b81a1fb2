"""The demo pipeline's spans are pinned byte for byte (scripts/wire_snapshot.py, real SDK): a refactor
of the recorder that changes anything on the wire fails here. After an intended contract change,
regenerate with ``.venv/bin/python scripts/wire_snapshot.py --only demo > tests/fixtures/wire_snapshot_demo.json``
and review the diff."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("wire_snapshot", ROOT / "scripts" / "wire_snapshot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_demo_spans_are_unchanged_on_the_wire():
    expected = (ROOT / "tests" / "fixtures" / "wire_snapshot_demo.json").read_text(encoding="utf-8")
    got = _script().snapshot(["demo"])
    assert got == expected
