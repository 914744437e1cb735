"""Shared fixtures for the act-layer tests: a branch with a few tools."""

from __future__ import annotations

import pytest
import trio

from lionexec import Branch


async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def nothing() -> None:
    """Return nothing."""


async def fail(message: str = "kaput") -> None:
    """Always raise."""
    raise RuntimeError(message)


async def slow(seconds: float = 10.0) -> str:
    """Sleep on trio's clock, then answer."""
    await trio.sleep(seconds)
    return "late"


@pytest.fixture
def branch() -> Branch:
    b = Branch()
    b.register_tools([add, nothing, fail, slow])
    return b
