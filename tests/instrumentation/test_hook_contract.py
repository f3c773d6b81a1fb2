"""The import contracts that keep the hooks on the recorder's public surface (pyproject.toml, run by
tests/test_static_checks.py) catch what they are for: a copy of the package with a hook importing a
recorder internal, and the decorators importing an integration, must break them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).parent / "lint-imports"


def _violate(tmp_path: Path, module: str, line: str) -> str:
    """lint-imports' report on a copy of the package where ``module`` (a path under src/ragtrail)
    gets ``line``."""
    if not LINT.exists():
        message = f"lint-imports is not installed next to {sys.executable} (pip install -e '.[test]')"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    shutil.copytree(ROOT / "src" / "ragtrail", tmp_path / "src" / "ragtrail")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "src" / "ragtrail" / module
    target.write_text(target.read_text() + f"\n{line}  # deliberate violation\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "src"))
    result = subprocess.run([str(LINT)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode != 0, result.stdout
    return result.stdout


def test_a_hook_importing_a_recorder_internal_breaks_the_contract(tmp_path: Path) -> None:
    out = _violate(tmp_path, "instrumentation/langchain/_splitters.py", "import ragtrail.recorder.writer")
    assert "Hooks and the decorators touch only the recorder's public modules BROKEN" in out, out
    assert "ragtrail.instrumentation.langchain._splitters -> ragtrail.recorder.writer" in out, out


def test_the_decorators_importing_an_integration_break_the_contract(tmp_path: Path) -> None:
    out = _violate(tmp_path, "api.py", "import ragtrail.instrumentation._base")
    assert "The hook skeleton and the decorators know no library integration BROKEN" in out, out
    assert "ragtrail.api -> ragtrail.instrumentation._base" in out, out
