"""The `phoenix` tier: a REAL Arize Phoenix server on loopback (one per session: it takes ~30 s to
start), started and stopped here. Every test in this directory is marked ``phoenix``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import phoenix_server as ps
import pytest

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).resolve().is_relative_to(_HERE):
            item.add_marker(pytest.mark.phoenix)


def pytest_report_header(config: pytest.Config) -> list[str]:
    binary = ps.phoenix_binary()
    if binary.is_file():
        return [f"ragtrail phoenix tier: {binary}"]
    verdict = "FAIL (CI is set)" if os.environ.get("CI") else "SKIP"
    return [f"ragtrail phoenix tier MISSING -> phoenix tests will {verdict}:" + ps.missing_message()]


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ps.Phoenix]:
    binary = ps.require_phoenix()
    server = ps.Phoenix(binary, tmp_path_factory.mktemp("phoenix"))
    server.start(timeout=240)
    try:
        yield server
    finally:
        server.stop()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "the real Phoenix server is not installed" in str(getattr(r, "longrepr", ""))]
    if skipped:
        terminalreporter.write_sep("!", f"{len(skipped)} ragtrail phoenix tests SKIPPED: no real Phoenix", red=True, bold=True)
        terminalreporter.write_line(ps.missing_message(), red=True)
