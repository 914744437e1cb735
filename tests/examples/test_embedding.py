"""The embedding recipes of ``docs/embedding.md``: ``examples/embed_quart_trio.py`` and
``examples/embed_starlette.py``, each run as a real process serving on 127.0.0.1 (port 0)
with hypercorn's trio worker, driven over HTTP like any client would.

Each makes governed calls (one allowed, one denied by the policy), is stopped with SIGINT
(exit status 0: its shutdown committed and closed the journal), and is started again on the
same SQLite journal, which still holds the conversation: a re-sent call id is refused (409).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from .conftest import announced_url, call

BUDGET = 40.0
ROOT = Path(__file__).resolve().parents[2]
RECIPES = ["embed_quart_trio.py", "embed_starlette.py"]

pytestmark = pytest.mark.timeout(BUDGET + 20)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


async def _running(
    recipe: str, journal: Path, session: Callable[[httpx.AsyncClient], Awaitable[Any]]
) -> tuple[Any, int]:
    """Start *recipe*, run *session* against it, stop it with SIGINT; (result, exit status)."""
    command = [sys.executable, str(ROOT / "examples" / recipe), "--port", "0"]
    command += ["--journal", str(journal)]
    process = await trio.lowlevel.open_process(
        command, stdout=subprocess.PIPE, env=_env(), cwd=journal.parent
    )
    try:
        url = await announced_url(process)
        async with httpx.AsyncClient(base_url=url) as client:
            result = await session(client)
        process.send_signal(signal.SIGINT)
        status = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return result, status


@pytest.mark.parametrize("recipe", RECIPES)
async def test_a_recipe_serves_governed_journaled_calls(recipe: str, tmp_path: Path) -> None:
    journal = tmp_path / "app.db"
    calls = [call("add", {"a": 2, "b": 3}, "call_1"), call("delete_everything", {}, "call_2")]

    async def first(client: httpx.AsyncClient) -> list[httpx.Response]:
        act = "/conversations/conv-1/act"
        return [
            await client.post(act, json={"tool_calls": calls}),
            await client.post(act, json={"tool_calls": [calls[0]]}),  # the same id again
            await client.post(act, content=b"not json"),
            await client.post("/conversations/conv-2/act", json={"tool_calls": [calls[0]]}),
        ]

    async def after_restart(client: httpx.AsyncClient) -> httpx.Response:
        return await client.post("/conversations/conv-1/act", json={"tool_calls": [calls[0]]})

    with trio.fail_after(BUDGET):
        replies, status = await _running(recipe, journal, first)
        again, restarted_status = await _running(recipe, journal, after_restart)
    acted, repeated, malformed, other = replies
    assert acted.status_code == 200, acted.text
    assert [(r["call_id"], r["outcome"], r["output"]) for r in acted.json()] == [
        ("call_1", "completed", 5),
        ("call_2", "denied", None),
    ]
    assert acted.json()[1]["error"]["type"] == "PermissionDenied"
    assert repeated.status_code == 409
    assert "call_1" in repeated.json()["error"]
    assert malformed.status_code == 400
    assert other.status_code == 200  # another conversation: the id is its own
    assert other.json()[0]["outcome"] == "completed"
    assert status == 0
    # the journal kept conv-1 across the restart: its call id is still taken
    assert again.status_code == 409, again.text
    assert restarted_status == 0
