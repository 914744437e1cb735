"""Journal fixtures: every backend behind one factory.

The PostgreSQL server is the session's (``postgres_server``, ``tests/support/postgres.py``,
registered by ``tests/conftest.py``); each test gets a fresh database on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from lionexec.journal import Journal, MemoryJournal, SqliteJournal
from lionexec.journal.backends import MemoryBackend

from ..support.postgres import PostgresServer

BACKENDS = ("memory", "sqlite", "postgres")


@attrs.define
class JournalFactory:
    """Opens journals of one backend on one target (a new object per call: a "restart")."""

    kind: str
    target: str
    _memory: MemoryBackend | None = None

    def new(self) -> Journal:
        if self.kind == "memory":
            assert self._memory is not None
            return Journal(self._memory)
        if self.kind == "sqlite":
            return SqliteJournal(self.target)
        from lionexec.journal import PostgresJournal

        return PostgresJournal(self.target)


@pytest.fixture(params=BACKENDS)
def journals(request: pytest.FixtureRequest, tmp_path: Path) -> JournalFactory:
    kind = request.param
    if kind == "memory":
        backend = MemoryBackend()
        return JournalFactory(kind, ":memory:", backend)
    if kind == "sqlite":
        return JournalFactory(kind, str(tmp_path / "journal.db"))
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return JournalFactory(kind, server.create_database())


@pytest.fixture(params=("sqlite", "postgres"))
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> JournalFactory:
    """Only the backends that survive a process: for subprocess crash tests."""
    if request.param == "sqlite":
        return JournalFactory("sqlite", str(tmp_path / "journal.db"))
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return JournalFactory("postgres", server.create_database())


__all__ = ["BACKENDS", "JournalFactory", "MemoryJournal", "PostgresServer"]


class GatedBackend(MemoryBackend):
    """A memory backend whose transactions wait for a gate once armed (a slow database)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.gate = trio.Event()
        self.waiting = trio.Event()

    async def run(self, fn: Any, *, cancellable: bool = True) -> Any:
        if self.armed:
            self.waiting.set()
            await self.gate.wait()
        return await super().run(fn, cancellable=cancellable)


def flaky_once() -> Any:
    """A fresh tool function ``flaky(n)`` that raises on its first call and returns *n* after
    (register it idempotent, with a retry, to see a second attempt)."""
    failures = [1]

    def flaky(n: int) -> int:
        """Fail once."""
        if failures:
            failures.pop()
            raise RuntimeError("not yet")
        return n

    return flaky
