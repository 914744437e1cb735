"""``import lionexec`` needs no httpx; the limiter and processor need none either."""

from __future__ import annotations

import subprocess
import sys

import trio

from lionexec.engine import EventStatus
from lionexec.models import Endpoint, ModelCall


def test_import_lionexec_does_not_import_httpx() -> None:
    code = (
        "import sys, lionexec, lionexec.models;"
        "from lionexec.limits import RateLimiter;"
        "from lionexec.models import RateLimitedProcessor;"
        "assert 'httpx' not in sys.modules, 'httpx imported';"
        "from lionexec.models import ModelCall;"
        "assert 'httpx' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


async def test_stream_of_a_terminal_call_yields_nothing_and_sends_nothing() -> None:
    """stream() returns without yielding when the status is terminal."""
    call = ModelCall(endpoint=Endpoint("http://127.0.0.1:9/v1"), payload={}, streaming=True)
    call.status = EventStatus.COMPLETED
    assert [chunk async for chunk in call.stream()] == []
    await call.invoke()
    assert call.attempts == 0
    await trio.lowlevel.checkpoint()
