"""The PostgreSQL backend: psycopg 3 synchronous connections from a ``psycopg_pool`` pool,
driven through ``trio.to_thread`` (async psycopg is asyncio-only), and one connection of
its own for group commits, driven from the trio thread (:mod:`._postgres_trio`).

Needs the ``postgres`` extra (``pip install lionexec[postgres]``); this module and
:mod:`._postgres_trio` are the only ones that import psycopg.

A transaction that reads no result, as a group commit (see
:class:`~lionexec.journal.backends._sql.SqlStore`), goes whole in one round trip: its
``BEGIN``, its two or three statements and its ``COMMIT`` in one pipeline, sent from the
trio thread over the backend's own connection (a hand-off to a worker thread and back cost
as much as the round trip itself). One whose checks fail on the server (a message or a key
already there, a call queued for workers) is rolled back and run again the long way.

The long way, and every transaction that reads (loading a branch, listing calls, claiming
for workers), takes a pooled connection in a worker thread and runs pipelined too:
``BEGIN``, the statements whose results are not read and ``COMMIT`` share round trips with
the next statement whose result is read, so a read is two round trips.

Cancellation: a read is abandoned at once and its query is cancelled on the server
(``connection.cancel_safe()``, bounded); so is a commit bounded by the journal's
``commit_timeout`` once past it (the commit may or may not have landed: recovery says).
Otherwise a group commit is never abandoned half-way: its waiters wait for it to end
(commits are short). Opening takes a transaction-scoped advisory lock while migrating, so
several processes may open one database at once.

Durability (``durability=``): ``"process"`` (the default) commits as the server's
``synchronous_commit`` says (its default, ``on``, waits for the commit to be flushed to disk;
``off`` survives a crash of this process, not of the server); ``"power"`` sets
``synchronous_commit=on`` on every connection, whatever the server's setting. With either, a
transaction the journal runs with ``synced=False`` (the write-ahead of calls that may run
again) commits with ``synchronous_commit=off``: the server has it at once, so it survives a
crash of this process, and the next synced commit, which flushes the server's write-ahead log
up to itself, makes it durable too.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, TypeVar

import trio

try:
    import psycopg
    from psycopg import sql
    from psycopg_pool import ConnectionPool, PoolTimeout
except ModuleNotFoundError as exc:  # pragma: no cover - the extra is installed for the tests
    raise ModuleNotFoundError(
        f"{exc}: the PostgreSQL journal needs the postgres extra "
        "(pip install 'lionexec[postgres]')",
        name=exc.name,
    ) from exc

from ..errors import JournalConnectionError, JournalError
from ._postgres_trio import Reads, Statements, TrioConnection
from ._sql import OPTIMISM_FAILED, SqlStore, current_version, migrate
from .base import Backend, Durability, Store, check_durability

__all__ = ["PostgresBackend", "SharedListener", "redact"]

T = TypeVar("T")

#: The advisory lock id held while migrating (an arbitrary constant: "lionexec").
MIGRATION_LOCK: Final = 0x6C696F6E65786563 & 0x7FFFFFFFFFFFFFFF

_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")
#: A password given as a parameter of a URL's query (``?password=...``)
_QUERY_PASSWORD = re.compile(r"([?&](?:password|sslpassword)=)[^&#]*", re.IGNORECASE)
#: ... or of a keyword connection string (``password='...'``; unquoted, ``\`` escapes)
_KEYWORD_PASSWORD = re.compile(
    r"((?:^|\s)(?:password|sslpassword)\s*=\s*)(?:'(?:[^'\\]|\\.)*'|(?:\\.|[^\s\\])*)",
    re.IGNORECASE,
)


def redact(url: str) -> str:
    """*url* without its password (for messages and logs): in its ``user:password@`` part,
    or as a ``password`` (or ``sslpassword``) parameter of its query or of a keyword string."""
    if "://" in url:
        return _QUERY_PASSWORD.sub(r"\1***", _PASSWORD.sub(r"\1***@", url))
    return _KEYWORD_PASSWORD.sub(r"\1***", url)


def _placeholders(sql: str) -> str:
    """``?`` placeholders as psycopg's: an array (``?::type[]``, the bulk statements) in binary
    format, the rest as psycopg chooses. In text format psycopg escapes every element of a
    ``text[]`` with a Python regular expression: 80 % of the journal's CPU per concurrent call
    on PostgreSQL."""
    return sql.replace("?::", "%b::").replace("?", "%s")


class _Tx:
    """A transaction of *conn* in *pipeline* (or none: then a plain one). Its ``BEGIN`` is
    sent with its first statement; each statement whose result is read waits for it (a
    sync), and :meth:`send` does not."""

    __slots__ = ("begun", "conn", "pipeline")

    def __init__(
        self, conn: psycopg.Connection[Any], pipeline: psycopg.Pipeline | None = None
    ) -> None:
        self.conn = conn
        self.pipeline = pipeline
        #: ``BEGIN`` was sent (without a pipeline, psycopg's transaction says it).
        self.begun = pipeline is None

    def _begin(self) -> None:
        if not self.begun:
            self.begun = True
            self.conn.execute("BEGIN")

    def _run(self, sql: str, params: Sequence[Any]) -> psycopg.Cursor[Any]:
        self._begin()
        return self.conn.execute(_placeholders(sql), params)

    def _sync(self) -> None:
        if self.pipeline is not None:
            self.pipeline.sync()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cursor = self._run(sql, params)
        self._sync()
        return list(cursor.fetchall()) if cursor.description is not None else []

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        self._begin()
        with self.conn.cursor() as cursor:
            cursor.executemany(_placeholders(sql), rows)
            self._sync()
            return cursor.rowcount

    def execute_count(self, sql: str, params: Sequence[Any] = ()) -> int:
        cursor = self._run(sql, params)
        self._sync()
        return cursor.rowcount

    def send(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._run(sql, params)


#: The statement that lets a transaction commit without waiting for the disk (see the module
#: docs: ``synced=False``); a function call, so it is prepared as other statements are.
UNSYNCED: Final = ("SELECT set_config('synchronous_commit', 'off', true)", ())


def _transaction(
    conn: psycopg.Connection[Any], fn: Callable[[Store], T], *, unread: bool, synced: bool
) -> T:
    """``fn`` in one transaction of *conn* (an autocommit connection), pipelined: ``BEGIN``
    and ``COMMIT`` are statements of the pipeline (psycopg's own transaction would wait for
    each), and with *unread* a commit reads no result (see ``SqlStore``). *synced* false:
    committed without waiting for the disk."""
    try:
        with conn.pipeline() as pipeline:
            tx = _Tx(conn, pipeline)
            result = fn(SqlStore(tx, bulk=True, unread=tx if unread else None))
            if tx.begun:
                if not synced:
                    conn.execute(*UNSYNCED)
                conn.execute("COMMIT")
            # Leaving the pipeline syncs (one round trip, the only one of an unread commit):
            # the transaction ends there, or its error is raised. (An implicit transaction,
            # without BEGIN and COMMIT, was no faster with its statements prepared; and the
            # sync that ends a pipeline left by an error would commit what it had sent.)
    except BaseException:
        # (bounded: a broken connection fails at once; the pool then drops it.) After a
        # failed statement the server skipped everything up to the sync: roll back what
        # BEGIN opened. psycopg's rollback also forgets the statements it prepared in this
        # transaction (the server did).
        with contextlib.suppress(psycopg.Error):
            conn.rollback()
        raise
    return result


def _fsync_commits(conn: psycopg.Connection[Any]) -> None:
    """Each new connection of a ``durability="power"`` pool: commits wait for the disk."""
    conn.execute("SET synchronous_commit = on")  # (autocommit: set for the session)


class PostgresBackend(Backend):
    """See the module docs.

    Args:
        url: a libpq URL (``postgresql://user:password@host:port/dbname``).
        min_size: connections the pool keeps open.
        max_size: connections it may open (and worker threads it uses), besides the one its
            group commits go over.
        connect_timeout: seconds opening may wait for the first connection.
        durability: ``"process"`` (the default) or ``"power"`` (see the module docs).
    """

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 4,
        connect_timeout: float = 10.0,
        durability: Durability = "process",
    ) -> None:
        #: What a committed transaction survives.
        self.durability: Durability = check_durability(durability)
        #: A synced commit waits for the server's WAL flush (``synchronous_commit`` as the
        #: server has it under ``"process"``, ``on`` under ``"power"``); one run with
        #: ``synced=False`` does not (see :meth:`Backend.run
        #: <lionexec.journal.backends.Backend.run>`).
        self.syncs_commits = True
        self.url = url
        self.target = redact(url)
        self.min_size = min_size
        self.max_size = max_size
        self.connect_timeout = connect_timeout
        self._pool: ConnectionPool | None = None
        self._limiter: trio.CapacityLimiter | None = None
        self._shared: dict[str, SharedListener] = {}
        #: The connection group commits are sent over from the trio thread (opened with the
        #: journal; again by the next commit after it is lost).
        self._native: TrioConnection | None = None
        self._sending = False  # (a transaction is under way on it, or its opening)

    async def open(self) -> None:
        self._limiter = trio.CapacityLimiter(self.max_size)
        pool, conn = await trio.to_thread.run_sync(self._open, limiter=self._limiter)
        self._pool = pool
        # (opened with the journal, as the pool's connections are: no commit waits for it)
        self._native = TrioConnection(conn, cancel_timeout=self.connect_timeout)

    def _open(self) -> tuple[ConnectionPool, psycopg.Connection[Any]]:
        try:
            psycopg.conninfo.conninfo_to_dict(self.url)
        except psycopg.Error as exc:
            raise JournalConnectionError(f"not a PostgreSQL URL: {self.target} ({exc})") from exc
        pool = ConnectionPool(
            self.url,
            min_size=self.min_size,
            max_size=self.max_size,
            open=False,
            # (every transaction says BEGIN and COMMIT itself: see _transaction)
            kwargs={"autocommit": True, "connect_timeout": max(1, int(self.connect_timeout))},
            configure=_fsync_commits if self.durability == "power" else None,
            name="lionexec-journal",
        )
        try:
            pool.open(wait=True, timeout=self.connect_timeout)
            with pool.connection() as conn, conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
                row = conn.execute("SELECT to_regclass('lionexec_schema_version')").fetchone()
                tx = _Tx(conn)
                migrate(
                    tx,
                    current_version(tx, row is not None and row[0] is not None),
                    target=self.target,
                )
            conn = self._connect()  # (the group commits' own)
        except PoolTimeout as exc:
            pool.close()
            raise JournalConnectionError(
                f"cannot connect to PostgreSQL at {self.target} within {self.connect_timeout:g}s"
            ) from exc
        except psycopg.OperationalError as exc:
            pool.close()
            raise JournalConnectionError(f"PostgreSQL at {self.target}: {exc}") from exc
        except BaseException:
            pool.close()
            raise
        return pool, conn

    async def run(
        self, fn: Callable[[Store], T], *, cancellable: bool = True, synced: bool = True
    ) -> T:
        pool = self._pool
        if pool is None:
            raise JournalError(f"the journal at {self.target} is not open")
        unread = True
        if not self._sending:
            statements = Statements()
            try:
                result = fn(SqlStore(statements, bulk=True, unread=statements))
            except Reads:
                pass  # (nothing was sent: the thread-driven path runs it)
            else:
                try:
                    await self._send_whole(statements, cancellable, synced)
                except psycopg.Error as exc:
                    if exc.sqlstate != OPTIMISM_FAILED:
                        raise self._failed(exc) from exc
                    unread = False  # (rolled back: again, the long way)
                else:
                    return result
        used: list[psycopg.Connection[Any]] = []

        def work() -> T:
            try:
                with pool.connection() as conn:
                    used.append(conn)
                    if unread:
                        try:
                            return _transaction(conn, fn, unread=True, synced=synced)
                        except psycopg.Error as exc:
                            if exc.sqlstate != OPTIMISM_FAILED:
                                raise
                    # (rolled back: again)
                    return _transaction(conn, fn, unread=False, synced=synced)
            except PoolTimeout as exc:
                raise JournalConnectionError(f"no connection to {self.target}: {exc}") from exc
            except psycopg.Error as exc:
                raise self._failed(exc) from exc

        if not cancellable:
            return await trio.to_thread.run_sync(work, limiter=self._limiter)
        try:
            return await trio.to_thread.run_sync(
                work, limiter=self._limiter, abandon_on_cancel=True
            )
        except trio.Cancelled:
            if used:  # stop the abandoned query on the server (bounded cleanup)
                with trio.CancelScope(shield=True) as scope:
                    scope.deadline = trio.current_time() + self.connect_timeout
                    await trio.to_thread.run_sync(_cancel, used[0], abandon_on_cancel=True)
            raise

    async def _send_whole(self, statements: Statements, cancellable: bool, synced: bool) -> None:
        """Send a transaction that reads no result from the trio thread (see
        :mod:`._postgres_trio`), over this backend's own connection: a new one if it was
        lost since the last (the server ended it, restarted, or timed it out while idle).
        *synced* false: committed without waiting for the disk."""
        if not statements.sent:
            await trio.lowlevel.checkpoint()
            return
        self._sending = True
        try:
            with trio.CancelScope(shield=not cancellable):
                native = self._native
                if native is None or not native.usable():
                    conn = await trio.to_thread.run_sync(self._connect, abandon_on_cancel=True)
                    native = self._native = TrioConnection(
                        conn, cancel_timeout=self.connect_timeout
                    )
                await native.transact(statements.sent if synced else [UNSYNCED, *statements.sent])
        finally:
            self._sending = False

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            conn = psycopg.connect(
                self.url, autocommit=True, connect_timeout=max(1, int(self.connect_timeout))
            )
        except psycopg.Error as exc:
            raise self._failed(exc) from exc
        if self.durability == "power":
            try:
                _fsync_commits(conn)
            except BaseException:
                conn.close()
                raise
        return conn

    def _failed(self, exc: psycopg.Error) -> JournalError:
        """The journal's error for psycopg's *exc*."""
        if isinstance(exc, psycopg.OperationalError):
            return JournalConnectionError(f"PostgreSQL at {self.target}: {exc}")
        if isinstance(exc, psycopg.IntegrityError):
            return JournalError(
                f"{self.target}: another writer holds this branch's next message position "
                f"(one branch is journaled by one process at a time): {exc}"
            )
        return JournalError(f"{self.target}: {type(exc).__name__}: {exc}")

    def shared_listener(self, channel: str) -> SharedListener:
        """The one :class:`SharedListener` of this backend on *channel* (made on first use,
        its connection opened by its first waiter, closed with the backend)."""
        shared = self._shared.get(channel)
        if shared is None:
            shared = self._shared[channel] = SharedListener(
                self.url, self.target, channel, connect_timeout=self.connect_timeout
            )
        return shared

    async def aclose(self) -> None:
        for shared in self._shared.values():
            shared.stop()
        self._shared.clear()
        native, self._native = self._native, None
        if native is not None:
            native.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            await trio.to_thread.run_sync(pool.close)
        else:
            await trio.lowlevel.checkpoint()


class SharedListener:
    """``LISTEN`` on one channel over one connection, for every waiter of a process.

    A small fan-out: one thread reads the connection's notifications and, for each, bumps
    :attr:`generation` and wakes every task parked in :meth:`wait`; each waiter then looks
    again at what it waits for. So a thousand concurrent ``journal.wait`` calls hold one
    connection, not a thousand. Take :attr:`generation` *before* looking, and pass it to
    :meth:`wait`: a notification that came in between is not missed.

    The connection is opened by the first :meth:`start` (a failure raises
    :class:`~lionexec.journal.JournalConnectionError` and the next :meth:`start` tries again);
    a lost connection wakes every waiter and is opened again by the next :meth:`start`.
    """

    #: Seconds the reading thread waits for a notification before it looks whether it
    #: should stop (so it ends at most this long after :meth:`stop`).
    TICK = 0.5

    def __init__(
        self, url: str, target: str, channel: str, *, connect_timeout: float = 10.0
    ) -> None:
        self.url = url
        self.target = target
        self.channel = channel
        #: Seconds opening the connection may take (then :meth:`start` raises).
        self.connect_timeout = connect_timeout
        #: Notifications received (and lost connections).
        self.generation = 0
        #: Connections opened (one, unless one was lost).
        self.connections = 0
        self._lot = trio.lowlevel.ParkingLot()
        self._ready: trio.Event | None = None
        self._error: BaseException | None = None
        self._stopping = threading.Event()

    async def start(self) -> None:
        """Open the connection and ``LISTEN`` (once); wait until it listens."""
        if self._stopping.is_set():
            raise JournalError(f"the listener on {self.target} is closed")
        ready = self._ready
        if ready is None:
            ready = self._ready = trio.Event()
            self._error = None
            token = trio.lowlevel.current_trio_token()
            trio.lowlevel.start_thread_soon(
                lambda: self._read(token, ready), lambda result: None, name="lionexec-listen"
            )
        await ready.wait()
        error = self._error
        if error is not None:  # (an exception of its own for each waiter)
            raise JournalConnectionError(str(error)) from error

    async def wait(self, seen: int, seconds: float) -> bool:
        """Wait up to *seconds* for a notification after generation *seen*; ``True`` if one
        came (or came already). Cancellable."""
        if self.generation != seen:
            await trio.lowlevel.checkpoint()
            return True
        with trio.move_on_after(seconds):
            await self._lot.park()
            return True
        return False

    def stop(self) -> None:
        """The reading thread closes the connection and ends (within :attr:`TICK`)."""
        self._stopping.set()
        self._lot.unpark_all()

    # -- on the reading thread, and what it sends back to trio -------------------------------

    def _read(self, token: trio.lowlevel.TrioToken, ready: trio.Event) -> None:
        # Every failure is reported to trio (waiters never hang on `ready`).
        conn: psycopg.Connection[Any] | None = None
        try:
            conn = psycopg.connect(
                self.url, autocommit=True, connect_timeout=max(1, int(self.connect_timeout))
            )
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        except BaseException as exc:
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
            detail = str(exc) if isinstance(exc, psycopg.Error) else f"{type(exc).__name__}: {exc}"
            error = JournalConnectionError(f"PostgreSQL at {self.target}: {detail}")
            error.__cause__ = exc
            self._send(token, self._failed, ready, error)
            return
        self._send(token, self._listening, ready)
        try:
            while not self._stopping.is_set():
                for _ in conn.notifies(timeout=self.TICK):
                    if not self._send(token, self._wake):
                        return
                if not self._send(token, _nothing):  # trio.run ended: the journal was not closed
                    return
        except BaseException:  # lost (or broken): every waiter looks again
            self._send(token, self._lost, ready)
        finally:
            with contextlib.suppress(Exception):
                conn.close()

    @staticmethod
    def _send(token: trio.lowlevel.TrioToken, fn: Callable[..., None], *args: Any) -> bool:
        try:
            token.run_sync_soon(fn, *args)
        except trio.RunFinishedError:
            return False
        return True

    def _listening(self, ready: trio.Event) -> None:
        self.connections += 1
        ready.set()

    def _failed(self, ready: trio.Event, error: BaseException) -> None:
        self._error = error
        ready.set()
        if self._ready is ready:
            self._ready = None  # the next start tries again

    def _wake(self) -> None:
        self.generation += 1
        self._lot.unpark_all()

    def _lost(self, ready: trio.Event) -> None:
        if self._ready is ready:
            self._ready = None
        self._wake()


def _nothing() -> None:
    pass


def _cancel(conn: psycopg.Connection[Any]) -> None:
    with contextlib.suppress(Exception):  # the query may be over already
        conn.cancel_safe(timeout=5.0)
