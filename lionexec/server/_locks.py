"""Conversation locks shared by server replicas on one PostgreSQL database.

psycopg (the ``postgres`` extra) is imported only when :class:`ReplicaLocks` is entered."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import trio

__all__ = ["ReplicaLocks"]

# -- replicas ------------------------------------------------------------------------------------


class ReplicaLocks:
    """One lock per conversation shared by every server replica on one PostgreSQL database.

    A journaled branch has one writer at a time; replicas that serve the same conversation
    take turns through a PostgreSQL *session advisory lock* keyed by the conversation's
    branch id, held on a connection of this pool for the whole request (a replica that dies
    drops its connection, and the server releases its locks). Waiting polls
    ``pg_try_advisory_lock`` with a short backoff, so it is cancellable like any trio wait.
    At most *size* locks are held at once (a request beyond that waits for a connection).
    A connection whose unlock failed is closed, not pooled still holding the lock.

    Use it as ``async with ReplicaLocks(url, size) as locks:`` (needs the ``postgres``
    extra).
    """

    def __init__(self, url: str, size: int) -> None:
        self.url = url
        self._limiter = trio.CapacityLimiter(size)
        self._size = size
        self._pool: Any = None

    async def __aenter__(self) -> ReplicaLocks:
        from psycopg_pool import ConnectionPool

        pool = ConnectionPool(
            self.url,
            min_size=1,
            max_size=self._size,
            open=False,
            kwargs={"autocommit": True},
            name="lionexec-server-locks",
        )
        await trio.to_thread.run_sync(partial(pool.open, wait=True, timeout=10.0))
        self._pool = pool
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        pool, self._pool = self._pool, None
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(pool.close)

    @asynccontextmanager
    async def hold(self, branch_id: uuid.UUID) -> AsyncIterator[None]:
        """Hold the lock of *branch_id* for the block. Waits (cancellably) for it."""
        key = int.from_bytes(branch_id.bytes[:8], "big", signed=True)
        pool = self._pool
        async with self._limiter:
            conn = await trio.to_thread.run_sync(pool.getconn)
            held = False
            try:
                delay = 0.002
                while not await trio.to_thread.run_sync(_try_lock, conn, key):
                    await trio.sleep(delay)
                    delay = min(delay * 2, 0.1)
                held = True
                try:
                    yield
                finally:
                    with trio.CancelScope(shield=True):
                        await trio.to_thread.run_sync(_unlock, conn, key)
                    held = False
            finally:  # bounded: closing or returning one connection, off the trio thread
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(_release, pool, conn, held)


def _try_lock(conn: Any, key: int) -> bool:
    row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
    return bool(row[0])


def _unlock(conn: Any, key: int) -> None:
    conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


def _release(pool: Any, conn: Any, held: bool) -> None:
    """Return *conn* to *pool*; closed first if it may still hold a lock (an unlock that
    failed): the server then frees its session locks, and the pool replaces it."""
    if held:
        conn.close()
    pool.putconn(conn)
