"""Drive headless Chromium (Debian's ``chromium``) over the DevTools protocol: open a page, wait for a
text, click a disclosure, take a screenshot. Just what the Phoenix UI tests need, on loopback only."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import ragtrail_backends as rb
from websockets.sync.client import connect

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    def __init__(self, profile: Path, width: int = 1600, height: int = 1800) -> None:
        assert CHROMIUM is not None
        self.port = rb.free_port()
        self.proc = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                f"--remote-debugging-port={self.port}",
                "--remote-debugging-address=127.0.0.1",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._connection = ExitStack()
        try:
            page = rb.wait_until(self._page, 60, what="chromium's DevTools endpoint")
            # a context manager, as websockets 14+ asks (a bare connect() warns, and warnings are errors)
            self.ws = self._connection.enter_context(connect(page["webSocketDebuggerUrl"], max_size=64 << 20, open_timeout=30))
            self._id = 0
            self.call("Page.enable")
            self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        except BaseException:
            self.close()  # never leave a chromium behind when the browser could not be set up
            raise

    def _page(self) -> Any:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=2) as resp:  # noqa: S310
                pages = [p for p in json.loads(resp.read()) if p.get("type") == "page"]
        except OSError:
            return None
        return pages[0] if pages else None

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        ident = self._id
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=60))
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result.get("result", {}).get("value")

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def text(self) -> str:
        return self.evaluate("document.body ? document.body.innerText : ''") or ""

    def wait_for_text(self, *needles: str, timeout: float = 90.0) -> str:
        return rb.wait_until(
            lambda: (lambda t: t if all(n in t for n in needles) else None)(self.text()), timeout, interval=0.5, what=f"{needles} on the page"
        )

    def click_text(self, label: str) -> bool:
        """Click the first button whose own text is exactly ``label`` (a Phoenix disclosure)."""
        return bool(
            self.evaluate(
                "(() => { const b = [...document.querySelectorAll('button')].find(e => e.innerText.trim() === "
                + json.dumps(label)
                + "); if (!b) return false; b.click(); return true; })()"
            )
        )

    def screenshot(self, path: Path) -> None:
        time.sleep(0.5)  # let the last layout settle
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self._connection.close()
        finally:
            self.proc.kill()
            self.proc.wait(10)
