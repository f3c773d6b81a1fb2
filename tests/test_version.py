"""The version is written once, as ``ragtrail.__version__``; packaging reads it from there.

Two copies drift (a release bumps one); the tracer name's version (``instrumentation/_base.py``)
and the installed distribution's metadata must be the same number.
"""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest

import ragtrail

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_reads_the_version_from_the_package() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in pyproject["project"], "the version is ragtrail.__version__, not a second copy"
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "ragtrail.__version__"}


def test_installed_metadata_is_the_package_version() -> None:
    try:
        installed = importlib.metadata.version("ragtrail")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("ragtrail is not installed (pip install -e .): no metadata to compare")
    assert installed == ragtrail.__version__


def test_the_changelog_names_the_version() -> None:
    """A version number that CHANGELOG.md does not know is a release nobody described."""
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(rf"^## \[{re.escape(ragtrail.__version__)}\]", text, re.MULTILINE), ragtrail.__version__
