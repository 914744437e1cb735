"""The journal of each backend, and :func:`open_journal`, which picks one for a target."""

from __future__ import annotations

import os
from typing import Any

from ._journal import Journal, MemoryJournal
from .backends import SqliteBackend
from .backends._sqlite import Synchronous
from .backends.base import Durability
from .errors import JournalConnectionError

__all__ = ["PostgresJournal", "SqliteJournal", "open_journal"]


class SqliteJournal(Journal):
    """A :class:`~lionexec.journal.Journal` in the SQLite file at *path*.

    One file in WAL mode, written by a thread of its own; several processes on one file
    queue up for its write lock (see :class:`~lionexec.journal.backends.SqliteBackend`).

    Args:
        path: the journal file (created if it does not exist).
        durability: ``"process"`` (the default) survives a crash of the process
            (``synchronous=NORMAL``); ``"power"`` fsyncs every commit and survives a power
            loss (``synchronous=FULL``). See ``docs/journal.md`` for what each costs.
        synchronous: SQLite's own ``synchronous`` setting, instead of *durability*.
        busy_timeout: seconds a transaction waits for another process's write lock.
        checkpoint_commits: commits between two WAL checkpoints.
        commit_timeout: seconds a group commit may take (see :class:`Journal`).

    Opening refuses a write-ahead log (``PATH-wal``) that SQLite would replay only in part
    (a damaged frame followed by committed transactions): a
    :class:`~lionexec.journal.NotAJournalError` naming it and what would be lost. A full disk
    is a :class:`~lionexec.journal.JournalError` saying ``disk full``, at open and at commit.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Durability | None = None,
        synchronous: Synchronous | None = None,
        busy_timeout: float = 10.0,
        checkpoint_commits: int = 100,
        commit_timeout: float | None = 30.0,
    ) -> None:
        super().__init__(
            SqliteBackend(
                path,
                durability=durability,
                synchronous=synchronous,
                busy_timeout=busy_timeout,
                checkpoint_commits=checkpoint_commits,
            ),
            commit_timeout=commit_timeout,
        )


class PostgresJournal(Journal):
    """A :class:`~lionexec.journal.Journal` in a PostgreSQL database at *url*.

    Needs the ``postgres`` extra (``pip install 'lionexec[postgres]'``): psycopg is imported
    when a ``PostgresJournal`` is made, not by ``import lionexec.journal``. Several processes
    or machines may share one database (see
    :class:`~lionexec.journal.backends.PostgresBackend`).

    Args:
        url: a libpq URL (``postgresql://user:password@host:port/dbname``).
        min_size: connections the pool keeps open.
        max_size: connections it may open (and worker threads it uses), besides the one its
            group commits go over.
        connect_timeout: seconds opening may wait for the first connection.
        commit_timeout: seconds a group commit may take (see :class:`Journal`).
        durability: ``"process"`` (the default): commits as the server's
            ``synchronous_commit`` says; ``"power"``: ``synchronous_commit=on`` on every
            connection of the journal (each commit flushed to disk before it returns).
    """

    def __init__(
        self,
        url: str,
        *,
        durability: Durability = "process",
        min_size: int = 1,
        max_size: int = 4,
        connect_timeout: float = 10.0,
        commit_timeout: float | None = 30.0,
    ) -> None:
        from .backends._postgres import PostgresBackend  # (psycopg: the postgres extra)

        super().__init__(
            PostgresBackend(
                url,
                durability=durability,
                min_size=min_size,
                max_size=max_size,
                connect_timeout=connect_timeout,
            ),
            commit_timeout=commit_timeout,
        )


def open_journal(target: str | os.PathLike[str] | None = None, **options: Any) -> Journal:
    """A journal for *target* (not yet open: use ``async with``).

    ``None`` or ``":memory:"``: in memory; ``postgresql://...`` (or ``postgres://``):
    PostgreSQL (needs the ``postgres`` extra); anything else: an SQLite file path.
    *options* go to the backend's constructor.
    """
    if target is None or str(target) == ":memory:":
        if options:
            raise TypeError(f"an in-memory journal takes no options, got {sorted(options)}")
        return MemoryJournal()
    text = str(target)
    if text.startswith(("postgresql://", "postgres://")):
        return PostgresJournal(text, **options)
    if "://" in text:
        raise JournalConnectionError(
            f"unknown journal URL scheme in {text.split('://', 1)[0]!r}://...: use a file path "
            "(SQLite), postgresql://... or ':memory:'"
        )
    return SqliteJournal(text, **options)
