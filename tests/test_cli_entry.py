"""``python -m ragtrail`` and ``python -m ragtrail.cli`` run the ``ragtrail`` command (issue 23).

Users reach for them when the console script is not on PATH (a venv that is not activated). Each is run
in a subprocess, as a user runs it: with the ``cli`` extra it is the whole command (help, errors and
exit codes); without it, one line saying what to install and the usage exit code, never a traceback.
"Without" is simulated by a ``sitecustomize`` that marks the extra's libraries as absent
(``sys.modules[name] = None``: ``find_spec`` answers ``None`` and ``import`` raises ``ImportError``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragtrail.command import CLI_LIBRARIES, EXIT_MISSING_EXTRA

MODULES = ("ragtrail", "ragtrail.cli")


def python(*args: str, cwd: Path, before: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The suite's interpreter on its own path, ``before`` (if given) first on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGTRAIL_", "OTEL_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(before) if before else "", env.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


def run_module(module: str, *args: str, cwd: Path, before: Path | None = None) -> subprocess.CompletedProcess[str]:
    return python("-m", module, *args, cwd=cwd, before=before)


@pytest.fixture(scope="module")
def without_extra(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory whose ``sitecustomize`` makes the ``cli`` extra's libraries absent."""
    path = tmp_path_factory.mktemp("no_cli_extra")
    (path / "sitecustomize.py").write_text("import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in CLI_LIBRARIES))
    return path


@pytest.mark.parametrize("module", MODULES)
def test_help(module: str, tmp_path: Path) -> None:
    result = run_module(module, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: ragtrail [OPTIONS] COMMAND [ARGS]..."), result.stdout
    for command in ("show", "verify", "diff", "report", "demo", "ls", "stats", "compare", "gate"):
        assert f"\n  {command} " in result.stdout, command
    assert result.stderr == ""


@pytest.mark.parametrize("module", MODULES)
def test_a_user_error_is_one_line_and_its_exit_code(module: str, tmp_path: Path) -> None:
    result = run_module(module, "show", "last", cwd=tmp_path)
    assert result.returncode == 3, (result.stdout, result.stderr)
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith("ragtrail: error: no local store"), result.stderr


@pytest.mark.parametrize("module", MODULES)
def test_without_the_cli_extra_one_line_says_what_to_install(module: str, tmp_path: Path, without_extra: Path) -> None:
    result = run_module(module, "--help", cwd=tmp_path, before=without_extra)
    assert result.returncode == EXIT_MISSING_EXTRA, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr == (
        f"ragtrail: the ragtrail command needs the inspector's libraries ({', '.join(CLI_LIBRARIES)} missing): pip install 'ragtrail[cli]'\n"
    )


def test_the_simulation_really_hides_the_extra(tmp_path: Path, without_extra: Path) -> None:
    """The host application's side still imports (the recording path needs none of the extra)."""
    code = f"import importlib.util, ragtrail; print([importlib.util.find_spec(n) for n in {CLI_LIBRARIES!r}])"
    result = python("-c", code, cwd=tmp_path, before=without_extra)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str([None] * len(CLI_LIBRARIES))
