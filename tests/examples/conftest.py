"""The server under test (:mod:`lionexec.server`), and the demo tools of
``examples/server.py`` (loaded once by path: it is a program, not a package)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio

import lionexec.server as server
from lionexec.journal.backends._sql import SqlStore

SERVER_PATH = Path(__file__).resolve().parents[2] / "examples" / "server.py"


def _load(path: Path) -> ModuleType:
    if "lionexec_example_server" in sys.modules:
        return sys.modules["lionexec_example_server"]
    spec = importlib.util.spec_from_file_location("lionexec_example_server", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


example = _load(SERVER_PATH)
#: The tools ``examples/server.py`` serves: ``get_weather``, ``word_count``, ``slow_echo``.
DEMO_TOOLS: tuple[Callable[..., Any], ...] = example.DEMO_TOOLS

__all__ = ["DEMO_TOOLS", "SERVER_PATH", "call", "example", "server"]


def call(name: str, arguments: dict[str, Any] | str, call_id: str) -> dict[str, Any]:
    """An OpenAI ``tool_calls`` item (*arguments* as a dict, or the raw string)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}


async def announced_url(process: trio.Process) -> str:
    """The URL a starting ``python -m lionexec serve`` or ``examples/server.py`` prints."""
    assert process.stdout is not None
    text = b""
    while b"(Ctrl+C to stop)" not in text:
        chunk = await process.stdout.receive_some()
        assert chunk, f"the server exited: {text!r}"
        text += chunk
    match = re.search(rb"http://127\.0\.0\.1:\d+", text)
    assert match is not None, text
    return match.group().decode()


@pytest.fixture
def whole_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The branch ids whose whole history an SQL journal reads (``SqlStore.messages``), in
    order, from now on."""
    seen: list[str] = []
    whole = SqlStore.messages

    def messages(self: Any, branch_id: str) -> Any:
        seen.append(branch_id)
        return whole(self, branch_id)

    monkeypatch.setattr(SqlStore, "messages", messages)
    return seen
