"""How a journal reaches its store: the async side of a backend."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import TypeVar

import trio

from .store import MemoryStore, Store

__all__ = ["Backend", "MemoryBackend"]

T = TypeVar("T")


class Backend(abc.ABC):
    """Runs :class:`~lionexec.journal.store.Store` methods, each in one transaction.

    Attributes:
        target: what the backend opened, printable (a path, or a URL without its password).
    """

    target: str

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and bring the schema up to date (migrations)."""

    @abc.abstractmethod
    async def run(self, fn: Callable[[Store], T], *, cancellable: bool = True) -> T:
        """Run ``fn(store)`` in one transaction, off the trio thread for a database.

        With *cancellable* false, a cancellation waits for the transaction to end (a group
        commit is never abandoned half-way); otherwise the backend stops the query as best
        it can (PostgreSQL cancels it on the server).
        """

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Disconnect. Idempotent."""


class MemoryBackend(Backend):
    """A :class:`~lionexec.journal.store.MemoryStore`: fast, and gone when the process ends."""

    target = ":memory:"

    def __init__(self) -> None:
        self.store = MemoryStore()

    async def open(self) -> None:
        await trio.lowlevel.checkpoint()

    async def run(self, fn: Callable[[Store], T], *, cancellable: bool = True) -> T:
        await trio.lowlevel.checkpoint()
        return fn(self.store)

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()
