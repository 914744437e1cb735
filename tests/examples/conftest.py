"""The server under test (:mod:`lionexec.server`), and the demo tools of
``examples/server.py`` (loaded once by path: it is a program, not a package)."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import lionexec.server as server

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
