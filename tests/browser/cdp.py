"""A real headless Chromium driven over the DevTools protocol through a pipe (`--remote-debugging-pipe`): no
WebDriver, no websocket library, no port. The browser reads NUL-terminated JSON commands on its fd 3 and writes
responses and events on its fd 4.

    with Chromium.launch() as browser:
        page = browser.open("file:///tmp/report.html")      # waits for the load event, records every request
        page.evaluate("document.title")
        page.requests                                         # every URL the page asked for, the document first
        page.screenshot("/tmp/shot.png")

`find_chromium()` looks at $CHROMIUM, then chromium, chromium-browser, google-chrome on PATH;
`tests/browser/install.sh` installs Chromium from the OS packages.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from typing import Any

INSTALL_HINT = ("install it with `make browser` (tests/browser/install.sh: Debian's chromium package through apt, "
                "needs root or passwordless sudo), or point $CHROMIUM at a Chromium/Chrome binary")
CANDIDATES = ("chromium", "chromium-browser", "google-chrome-stable", "google-chrome", "chrome")


class BrowserError(RuntimeError):
    """The browser is missing, did not start, closed, or answered a command with an error."""


def find_chromium() -> str | None:
    """The Chromium/Chrome binary to use, or None."""
    env = os.environ.get("CHROMIUM")
    if env:
        return shutil.which(env) or (env if os.access(env, os.X_OK) else None)
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Page:
    """One tab, attached with a flat session; network events recorded from before the navigation."""

    def __init__(self, browser: Chromium, session: str, target: str) -> None:
        self.browser, self.session, self.target = browser, session, target
        self.requests: list[str] = []
        self.failed: list[dict] = []
        self.console: list[dict] = []

    def send(self, method: str, params: dict | None = None) -> dict:
        return self.browser.send(method, params, self.session)

    def evaluate(self, expression: str) -> Any:
        """A JavaScript expression's value (JSON-serialisable results only); BrowserError if it throws."""
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise BrowserError(f"evaluate {expression[:80]!r}: {r['exceptionDetails'].get('text')} "
                               f"{r['exceptionDetails'].get('exception', {}).get('description', '')}")
        return r["result"].get("value")

    def screenshot(self, path: str, full_page: bool = True) -> None:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.send("Page.captureScreenshot", params)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def _event(self, msg: dict) -> None:
        method, p = msg["method"], msg.get("params", {})
        if method == "Network.requestWillBeSent":
            self.requests.append(p["request"]["url"])
        elif method == "Network.loadingFailed":
            self.failed.append(p)
        elif method in ("Runtime.consoleAPICalled", "Log.entryAdded"):
            self.console.append(p)


class Chromium:
    """A headless Chromium process and its DevTools pipe."""

    def __init__(self, binary: str, timeout: float = 60.0) -> None:
        self.binary, self.timeout = binary, timeout
        self.profile = tempfile.mkdtemp(prefix="report-browser-")
        self._id = 0
        self._buf = b""
        self._pages: dict[str, Page] = {}
        self.version = ""
        self._log = open(os.path.join(self.profile, "stderr.log"), "w+b")  # noqa: SIM115 - closed in close()
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire() -> None:  # in the child: the protocol's fixed descriptors
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        args = [binary, "--headless", "--remote-debugging-pipe", f"--user-data-dir={self.profile}",
                "--no-first-run", "--no-default-browser-check", "--disable-gpu", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--metrics-recording-only", "--mute-audio", "--hide-scrollbars", "--window-size=1280,900",
                "about:blank"]
        if os.geteuid() == 0:  # Chromium refuses to run its sandbox as root
            args.insert(1, "--no-sandbox")
        self.proc = subprocess.Popen(args, pass_fds=(3, 4), preexec_fn=wire, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=self._log)
        os.close(to_browser_r)
        os.close(from_browser_w)

    @classmethod
    def launch(cls, timeout: float = 60.0) -> Chromium:
        binary = find_chromium()
        if binary is None:
            raise BrowserError(f"no Chromium found (looked at $CHROMIUM and {', '.join(CANDIDATES)} on PATH): "
                               f"{INSTALL_HINT}")
        browser = cls(binary, timeout)
        try:
            browser.version = browser.send("Browser.getVersion")["product"]
        except BrowserError:
            browser.close()
            raise
        return browser

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"no answer from {self.binary} within {self.timeout:.0f} s")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                self._log.seek(0)
                err = self._log.read().decode(errors="replace")[-2000:]
                raise BrowserError(f"{self.binary} closed the DevTools pipe (exit code {self.proc.poll()}): {err}")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        msg = json.loads(raw)
        if "method" in msg and msg.get("sessionId") in self._pages:
            self._pages[msg["sessionId"]]._event(msg)
        return msg

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """Send one command and return its result (events that arrive meanwhile go to their page)."""
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        try:
            os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        except OSError as e:
            raise BrowserError(f"{self.binary}: cannot write to the DevTools pipe ({e})") from None
        deadline = time.monotonic() + self.timeout
        while True:
            answer = self._read(deadline)
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise BrowserError(f"{method}: {answer['error'].get('message')}")
                return answer.get("result", {})

    def wait_event(self, method: str, session: str | None = None) -> dict:
        deadline = time.monotonic() + self.timeout
        while True:
            msg = self._read(deadline)
            if msg.get("method") == method and (session is None or msg.get("sessionId") == session):
                return msg.get("params", {})

    def open(self, url: str) -> Page:
        """A new tab with network recording on, navigated to `url`, after its load event."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session, target)
        self._pages[session] = page
        for domain in ("Network", "Page", "Runtime", "Log"):
            page.send(f"{domain}.enable")
        nav = page.send("Page.navigate", {"url": url})
        if nav.get("errorText"):
            raise BrowserError(f"navigate to {url}: {nav['errorText']}")
        self.wait_event("Page.loadEventFired", session)
        return page

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("Browser.close")
            except BrowserError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()
        shutil.rmtree(self.profile, ignore_errors=True)
