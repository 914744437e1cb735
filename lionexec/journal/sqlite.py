"""The SQLite journal: one file, WAL mode, stdlib :mod:`sqlite3` through ``trio.to_thread``.

One connection, used by one worker thread at a time (a ``CapacityLimiter(1)``): SQLite has
one writer anyway, and the group commit gathers every call waiting into one transaction.
Every transaction is ``BEGIN IMMEDIATE``, so several processes on one file queue up rather
than deadlock (``busy_timeout``).

Durability: ``synchronous="NORMAL"`` (the default) in WAL mode survives a crash of the
process (a kill, an OOM): every committed transaction is in the WAL. A power loss may lose
the last transactions; pass ``synchronous="FULL"`` to fsync every commit.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import trio

from .api import Journal
from .backend import Backend
from .errors import JournalError, NotAJournalError
from .sql import SqlStore, current_version, migrate
from .store import Store

__all__ = ["SqliteBackend", "SqliteJournal"]

T = TypeVar("T")
Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]


class _Tx:
    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql, params).fetchall()

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.conn.executemany(sql, rows)


class SqliteBackend(Backend):
    """See the module docs. *path* is created if it does not exist."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "NORMAL",
        busy_timeout: float = 10.0,
    ) -> None:
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(
                f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}"
            )
        self.path = Path(path)
        self.target = str(self.path)
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self._conn: sqlite3.Connection | None = None
        self._limiter: trio.CapacityLimiter | None = None

    async def open(self) -> None:
        self._limiter = trio.CapacityLimiter(1)
        self._conn = await trio.to_thread.run_sync(self._open, limiter=self._limiter)

    def _open(self) -> sqlite3.Connection:
        if self.path.is_dir():
            raise NotAJournalError(
                f"{self.target} is a directory, not a journal file", target=self.target
            )
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise NotAJournalError(
                f"cannot open {self.target} as SQLite: {exc}", target=self.target
            ) from exc
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()
            if mode is None or str(mode[0]).lower() != "wal":
                raise NotAJournalError(
                    f"{self.target}: SQLite refused WAL mode ({mode!r})", target=self.target
                )
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute("BEGIN IMMEDIATE")
            try:
                tables = {
                    row[0]
                    for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                }
                if tables and "lionexec_schema_version" not in tables:
                    raise NotAJournalError(
                        f"{self.target} is an SQLite database of another program (tables: "
                        f"{', '.join(sorted(tables)[:5])}), not a lionexec journal",
                        target=self.target,
                    )
                tx = _Tx(conn)
                migrate(tx, current_version(tx, bool(tables)), target=self.target)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise NotAJournalError(
                f"{self.target} is not a lionexec journal (corrupt or not SQLite): {exc}",
                target=self.target,
            ) from exc
        except BaseException:
            conn.close()
            raise
        return conn

    async def run(self, fn: Callable[[Store], T], *, cancellable: bool = True) -> T:
        if self._conn is None:
            raise JournalError(f"the journal at {self.target} is not open")
        conn = self._conn
        return await trio.to_thread.run_sync(self._transact, conn, fn, limiter=self._limiter)

    def _transact(self, conn: sqlite3.Connection, fn: Callable[[Store], T]) -> T:
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(SqlStore(_Tx(conn)))
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.IntegrityError as exc:
            raise JournalError(
                f"{self.target}: another writer holds this branch's next message position "
                f"(one branch is journaled by one process at a time): {exc}"
            ) from exc
        except sqlite3.Error as exc:
            raise JournalError(f"{self.target}: {type(exc).__name__}: {exc}") from exc
        return result

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await trio.to_thread.run_sync(conn.close, limiter=self._limiter)
        else:
            await trio.lowlevel.checkpoint()


class SqliteJournal(Journal):
    """A :class:`~lionexec.journal.Journal` in the SQLite file at *path* (see the module)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "NORMAL",
        busy_timeout: float = 10.0,
    ) -> None:
        super().__init__(SqliteBackend(path, synchronous=synchronous, busy_timeout=busy_timeout))
