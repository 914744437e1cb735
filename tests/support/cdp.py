"""A small Chrome DevTools Protocol client for the browser tests: a real headless Chromium
driven over ``--remote-debugging-pipe`` (no Playwright, no Selenium, no downloads).

Chromium reads commands from its fd 3 and writes replies and events to its fd 4, each a JSON
object followed by a NUL byte. :func:`open_chromium` starts ``/usr/bin/chromium`` (or
``$CHROMIUM``) with those two pipes, :meth:`Chromium.new_page` opens a tab (a target attached
with ``flatten=True``, so every command names its session), and :class:`Page` navigates,
evaluates JavaScript (to fill fields and click, as a person would), polls for a condition
and takes screenshots.

Without Chromium the browser tests are skipped, except under CI (``CI`` set), where they fail
(:func:`chromium_or_skip`), like the PostgreSQL tests.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

#: How long one protocol command may take before the test fails naming it.
COMMAND_TIMEOUT = 30.0


def chromium_path() -> str | None:
    """The Chromium binary: ``$CHROMIUM``, else ``chromium`` (Debian) or ``chromium-browser``."""
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return explicit
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found is not None:
            return found
    return None


def chromium_or_skip() -> str:
    """The Chromium binary; skips the test without one (fails under CI: ``CI`` set)."""
    path = chromium_path()
    if path is None:
        message = "Chromium is not installed (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; under CI the browser tests need it")
        pytest.skip(message)
    return path


class ProtocolError(Exception):
    """Chromium answered a command with an error."""


class Chromium:
    """One Chromium process and its protocol pipe (see :func:`open_chromium`)."""

    def __init__(self, to_browser: trio.lowlevel.FdStream, from_browser: trio.lowlevel.FdStream):
        self._out = to_browser
        self._in = from_browser
        self._next_id = 0
        self._waiting: dict[int, tuple[trio.Event, list[dict[str, Any]]]] = {}
        self._send_lock = trio.Lock()
        #: Every event received (method, params, sessionId), oldest first.
        self.events: list[dict[str, Any]] = []

    async def reader(self) -> None:
        """Read replies and events until Chromium closes the pipe."""
        buffer = b""
        while True:
            chunk = await self._in.receive_some(1 << 16)
            if not chunk:
                return
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for raw in messages:
                message = json.loads(raw)
                if "id" in message and message["id"] in self._waiting:
                    event, box = self._waiting.pop(message["id"])
                    box.append(message)
                    event.set()
                elif "method" in message:
                    self.events.append(message)

    async def call(self, method: str, session_id: str | None = None, **params: Any) -> Any:
        """Send one command and return its ``result``; :class:`ProtocolError` on an error."""
        self._next_id += 1
        command: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session_id is not None:
            command["sessionId"] = session_id
        event, box = trio.Event(), []
        self._waiting[self._next_id] = (event, box)
        with trio.fail_after(COMMAND_TIMEOUT):
            async with self._send_lock:
                await self._out.send_all(json.dumps(command).encode() + b"\0")
            await event.wait()
        reply = box[0]
        if "error" in reply:
            raise ProtocolError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    async def new_page(self, width: int = 1100, height: int = 720) -> Page:
        """A new tab (about:blank), attached with ``flatten=True``, at *width* x *height*."""
        target = await self.call("Target.createTarget", url="about:blank")
        attached = await self.call(
            "Target.attachToTarget", targetId=target["targetId"], flatten=True
        )
        page = Page(self, attached["sessionId"])
        await page.call("Page.enable")
        await page.call("Runtime.enable")
        await page.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        return page


class Page:
    """One tab: navigate, evaluate JavaScript, wait for a condition, screenshot."""

    def __init__(self, browser: Chromium, session_id: str) -> None:
        self.browser = browser
        self.session_id = session_id

    async def call(self, method: str, **params: Any) -> Any:
        return await self.browser.call(method, self.session_id, **params)

    async def evaluate(self, expression: str) -> Any:
        """The value of *expression* in the page (promises awaited); a thrown error fails."""
        result = await self.call(
            "Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True
        )
        if "exceptionDetails" in result:
            raise ProtocolError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, seconds: float = 20.0) -> None:
        """Poll *expression* until it is truthy in JavaScript's sense (an element counts; a
        page may be mid-navigation: retried); fails after *seconds* naming it."""
        with trio.fail_after(seconds):
            while True:
                try:
                    value = await self.evaluate(f"Boolean({expression})")
                except ProtocolError:  # the context went away with a navigation
                    value = False
                if value:
                    return
                await trio.sleep(0.05)

    async def goto(self, url: str) -> None:
        """Navigate to *url* and wait until the document has loaded."""
        reply = await self.call("Page.navigate", url=url)
        if reply.get("errorText"):
            raise ProtocolError(f"navigating to {url}: {reply['errorText']}")
        await self.wait_for(
            f"location.href.startsWith({json.dumps(url)}) && document.readyState === 'complete'"
        )

    async def text(self) -> str:
        """The page's visible text."""
        value = await self.evaluate("document.body ? document.body.innerText : ''")
        return str(value)

    async def screenshot(self, path: Path) -> int:
        """Save a PNG of the viewport to *path*; return its size in bytes."""
        data = await self.call("Page.captureScreenshot", format="png")
        raw = base64.b64decode(data["data"])
        await trio.Path(path).write_bytes(raw)
        return len(raw)


def _high(fd: int) -> int:
    high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return high


@asynccontextmanager
async def open_chromium(binary: str | None = None) -> AsyncIterator[Chromium]:
    """A headless Chromium for the block (a fresh profile), killed and reaped at the end."""
    binary = binary or chromium_or_skip()
    commands_read, commands_write = os.pipe()
    replies_read, replies_write = os.pipe()
    # The child's ends away from 3 and 4, which bash below redirects them onto.
    commands_read, replies_write = _high(commands_read), _high(replies_write)
    profile = tempfile.mkdtemp(prefix="lionexec-chromium-")
    flags = [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        "--remote-debugging-pipe",
        f"--user-data-dir={profile}",
        "about:blank",
    ]
    # The protocol pipe must be the child's fds 3 and 4: bash moves them there (dash reads
    # one-digit fd numbers only).
    script = (
        f'exec "$0" "$@" 3<&{commands_read} 4>&{replies_write} '
        f"{commands_read}<&- {replies_write}>&-"
    )
    try:
        process = await trio.lowlevel.open_process(
            ["/bin/bash", "-c", script, binary, *flags],
            pass_fds=(commands_read, replies_write),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    finally:
        os.close(commands_read)
        os.close(replies_write)
    browser = Chromium(
        trio.lowlevel.FdStream(commands_write), trio.lowlevel.FdStream(replies_read)
    )
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(browser.reader)
            try:
                yield browser
            finally:
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            process.kill()
            await process.wait()
        await browser._out.aclose()
        await browser._in.aclose()
        shutil.rmtree(profile, ignore_errors=True)
