"""The HTML report in a real headless Chromium (Debian's ``chromium`` package): it loads from a file with
nothing fetched, its key elements render, and a screenshot is kept in test-artifacts/ for a human to look at."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from test_cli_errors import ragtrail

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="LOUD SKIP: headless Chromium is not installed, so the HTML report was NOT tested in a browser. "
    "Lead: add `apt-get update && apt-get install -y chromium` to .ci/run.",
)


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=120)


class _Collect(HTMLParser):
    """Tags with their attributes and text, enough to check what the browser built."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text_by_id: dict[str, str] = {}
        self._open: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = {k: v or "" for k, v in attrs}
        self.elements.append((tag, a))
        self._open.append(a.get("id"))
        if a.get("id"):
            self.text_by_id.setdefault(a["id"], "")

    def handle_endtag(self, tag: str) -> None:
        if self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        for ident in self._open:
            if ident:
                self.text_by_id[ident] += data

    def count(self, tag: str, **attrs: str) -> int:
        return sum(1 for t, a in self.elements if t == tag and all(v in a.get(k, "").split() or a.get(k) == v for k, v in attrs.items()))


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("report")
    target = cwd / "demo-report.html"
    result = ragtrail("demo", "--report", str(target), cwd=cwd)
    assert result.returncode == 0, result.stderr
    return target


def test_report_renders_in_chromium(report, tmp_path):
    result = _chromium(tmp_path, "--dump-dom", report.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    dom = _Collect()
    dom.feed(result.stdout)
    assert dom.count("svg", id="funnel-chart") == 1
    assert dom.count("g", **{"class": "funnel-row"}) == 8  # every stage that handles candidates
    assert dom.count("rect") == 16  # kept and excluded bar per stage
    assert dom.count("li", **{"class": "hop"}) == 3
    assert dom.count("table", **{"class": "candidate-table"}) == 8
    assert dom.count("table", **{"class": "exclusion-table"}) == 5
    assert (
        "the answer claims presence: supported by what was read (3 of 20 read; an absence claim would not be)" in dom.text_by_id["coverage-statement"]
    )
    assert "faithful" in dom.text_by_id["fidelity-verdict"]
    assert "policy-2026-01" in dom.text_by_id["candidates"] and "budget_exceeded" in dom.text_by_id["candidates"]


def test_report_screenshot_shows_the_funnel(report, tmp_path):
    PIL = pytest.importorskip("PIL.Image")
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    shot.unlink(missing_ok=True)
    result = _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1200,1600", "--hide-scrollbars", report.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    image = PIL.open(shot).convert("RGB")
    assert image.size == (1200, 1600)
    # the funnel's "handed on" bars are drawn in #3b82c4: the chart rendered, not just the text
    colours = image.getcolors(maxcolors=1 << 20)
    bar_pixels = sum(n for n, rgb in colours if rgb == (0x3B, 0x82, 0xC4))
    assert bar_pixels > 2000, bar_pixels
    excluded_pixels = sum(n for n, rgb in colours if rgb == (0xF2, 0xB8, 0xB5))
    assert excluded_pixels > 200, excluded_pixels
