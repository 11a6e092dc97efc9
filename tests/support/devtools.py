"""Headless Chromium driven over its DevTools pipe, for the tests that look at a page at a
given width, click links and read back what the layout did."""

from __future__ import annotations

import base64
import json
import os
import select
import subprocess
import time
from pathlib import Path


class DevTools:
    """A headless Chromium driven over its DevTools pipe (fd 3 in, fd 4 out, messages
    ending in NUL), offline: every host name resolves to nothing."""

    TIMEOUT = 60.0

    def __init__(self, browser: str, profile: Path):
        to_browser, from_browser = os.pipe(), os.pipe()

        def onto_3_and_4():  # in the child, before exec
            reads, writes = os.dup(to_browser[0]), os.dup(from_browser[1])
            os.dup2(reads, 3)
            os.dup2(writes, 4)

        self.process = subprocess.Popen(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-extensions",
                "--no-first-run",
                "--hide-scrollbars",
                "--host-resolver-rules=MAP * ~NOTFOUND",
                f"--user-data-dir={profile}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            preexec_fn=onto_3_and_4,
            pass_fds=(3, 4),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser[0])
        os.close(from_browser[1])
        self._out, self._in = to_browser[1], from_browser[0]
        self._buffer, self._events, self._id = b"", [], 0
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable", self.session)

    def _message(self) -> dict:
        deadline = time.monotonic() + self.TIMEOUT
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._in], [], [], max(deadline - time.monotonic(), 0))
            assert ready, "chromium did not answer within a minute"
            chunk = os.read(self._in, 1 << 20)
            assert chunk, "chromium closed its DevTools pipe"
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: str | None = None, **params) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._message()
            if answer.get("id") == self._id:
                assert "error" not in answer, (method, answer["error"])
                return answer["result"]
            self._events.append(answer)

    def wait_for(self, event: str) -> None:
        while not any(m.get("method") == event for m in self._events):
            self._events.append(self._message())
        self._events.clear()

    def load(self, url: str, width: int) -> None:
        """`url` in a viewport `width` CSS px wide (a phone's, with touch, below 600)."""
        self.call(
            "Emulation.setDeviceMetricsOverride",
            self.session,
            width=width,
            height=900,
            deviceScaleFactor=1,
            mobile=width < 600,
        )
        self._events.clear()
        self.call("Page.navigate", self.session, url=url)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str):
        answer = self.call("Runtime.evaluate", self.session, expression=expression, returnByValue=True)
        assert "exceptionDetails" not in answer, answer["exceptionDetails"]
        return answer["result"]["value"]

    def screenshot(self, path: Path, width: int) -> None:
        """The whole page, top to bottom, as a PNG."""
        height = self.evaluate("document.documentElement.scrollHeight")
        shot = self.call(
            "Page.captureScreenshot",
            self.session,
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
        )
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        try:
            self.call("Browser.close")
            self.process.wait(timeout=10)
        except (AssertionError, OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait(timeout=10)
        finally:
            os.close(self._out)
            os.close(self._in)
