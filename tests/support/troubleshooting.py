"""The machinery of ``tests/test_troubleshooting.py``: the triggers' registry, reading the
page's quoted messages, and what the triggers share (the registry lives here so the triggers
can be spread over several modules, each registering its own)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import subprocess
import sys
import traceback
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
PAGE = ROOT / "docs" / "troubleshooting.md"

Trigger = Callable[[Path], "str | Awaitable[str]"]
TRIGGERS: dict[str, Trigger] = {}

_BLOCK = re.compile(
    r"^```\{code-block\} text\n:name: (?P<id>ts-[a-z0-9-]+)\n\n(?P<quote>.*?)\n```$",
    re.MULTILINE | re.DOTALL,
)
_PLACEHOLDER = re.compile(r"<[a-z][a-z0-9_ ]*>")


def trigger(entry: str) -> Callable[[Trigger], Trigger]:
    def register(func: Trigger) -> Trigger:
        assert entry not in TRIGGERS, f"two triggers for {entry}"
        TRIGGERS[entry] = func
        return func

    return register


def quoted() -> dict[str, str]:
    """The page's quoted messages by id."""
    found: dict[str, str] = {}
    for match in _BLOCK.finditer(PAGE.read_text(encoding="utf-8")):
        assert match["id"] not in found, f"{match['id']} is quoted twice"
        found[match["id"]] = match["quote"].strip()
    return found


def pattern(quote: str) -> re.Pattern[str]:
    """*quote* as a regular expression: literal, each ``<placeholder>`` any text."""
    parts = _PLACEHOLDER.split(quote)
    return re.compile(".+?".join(re.escape(part) for part in parts))


def matches(quote: str, produced: str) -> bool:
    regex = pattern(quote)
    return any(regex.fullmatch(line.strip()) for line in produced.splitlines())


def shown(exc: BaseException) -> str:
    """*exc* as the last line of its traceback shows it (``module.Type: message``)."""
    return "".join(traceback.format_exception_only(exc)).rstrip("\n")


def raised(func: Callable[[], object]) -> str:
    """Call *func*; the exception it raises, as its traceback ends."""
    try:
        func()
    except Exception as exc:
        return shown(exc)
    raise AssertionError(f"{func} raised nothing")


async def araised(func: Callable[[], Awaitable[object]]) -> str:
    """Await *func()*; the exception it raises, as its traceback ends."""
    try:
        await func()
    except Exception as exc:
        return shown(exc)
    raise AssertionError(f"{func} raised nothing")


def run_python(code: str, *args: str, cwd: Path | None = None) -> str:
    """Run *code* in a fresh interpreter (this checkout first on the path); its stderr and
    stdout together."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
    )
    return done.stderr + done.stdout


@contextlib.contextmanager
def logged(name: str = "lionexec") -> Iterator[list[logging.LogRecord]]:
    """The records logged on logger *name* while the block runs."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


def log_lines(records: list[logging.LogRecord]) -> str:
    """*records* as ``LEVEL: message`` lines."""
    return "\n".join(f"{r.levelname}: {r.getMessage()}" for r in records)


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def call(function: str, call_id: str | None = None, **arguments: Any) -> dict[str, Any]:
    envelope: dict[str, Any] = {"function": function, "arguments": arguments}
    if call_id is not None:
        envelope["call_id"] = call_id
    return envelope


def answered(response: Any) -> str:
    """A call's answer as the model (and the history) sees it: ``outcome Type: message``."""
    assert response.error is not None
    return f"{response.outcome.value} {response.error.type}: {response.error.message}"
