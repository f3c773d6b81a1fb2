"""The static checks (ruff's lint rules and formatter, mypy strict, import-linter) run by the test
command itself, with the settings of pyproject.toml.

The tools are looked up next to the suite's own interpreter (the venv's bin/, where the ``test``
extra installs them). Outside CI a missing tool skips loudly; in CI (``CI=1``) it fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _tool(name: str) -> Path:
    path = BIN / name
    if not path.exists():
        message = f"{name} is not installed next to {sys.executable} (pip install -e '.[test]')"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def _run(args: list[str], cwd: Path = ROOT, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(pythonpath or ROOT / "src")
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def _assert_ok(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"


PYTHON_TREES = ["src", "tests", "benchmarks", "scripts", "examples"]


def test_ruff() -> None:
    _assert_ok(_run([str(_tool("ruff")), "check", *PYTHON_TREES]))


def test_ruff_format() -> None:
    """One formatter, so a diff shows what changed rather than who edited it."""
    _assert_ok(_run([str(_tool("ruff")), "format", "--check", *PYTHON_TREES]))


def test_mypy() -> None:
    """Strict mode over src/ragtrail (``strict = true`` in pyproject.toml)."""
    _assert_ok(_run([str(_tool("mypy")), "--python-executable", sys.executable]))


def test_import_contracts() -> None:
    result = _run([str(_tool("lint-imports"))])
    _assert_ok(result)
    assert "0 broken" in result.stdout, result.stdout


def test_import_contracts_catch_a_forbidden_import(tmp_path: Path) -> None:
    """A copy of the package with the inspector importing the recorder must break the contract."""
    shutil.copytree(ROOT / "src" / "ragtrail", tmp_path / "src" / "ragtrail")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "src" / "ragtrail" / "inspect" / "safe.py"
    target.write_text(target.read_text() + "\nimport ragtrail.recorder.stage  # deliberate violation\n")
    result = _run([str(_tool("lint-imports"))], cwd=tmp_path, pythonpath=tmp_path / "src")
    assert result.returncode != 0, result.stdout
    assert "The inspector knows only the wire contract BROKEN" in result.stdout, result.stdout
    assert "ragtrail.inspect.safe -> ragtrail.recorder.stage" in result.stdout, result.stdout
