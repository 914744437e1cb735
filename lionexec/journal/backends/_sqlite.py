"""The SQLite backend: one file, WAL mode, stdlib :mod:`sqlite3` on a writer thread of its own.

One connection, used by one long-lived **writer thread** that takes transactions from a
queue: SQLite has one writer anyway, and the group commit gathers every call waiting into one
transaction. A hand-off to a waiting thread is about half the cost of a
``trio.to_thread.run_sync`` round trip, and a strictly sequential batch pays one per call.
Every transaction is ``BEGIN IMMEDIATE``, so several processes on one file queue up rather
than deadlock: the lock is retried for up to ``busy_timeout`` seconds, in short waits, so that
an abandoned transaction (cancelled, or past the journal's ``commit_timeout``) stops waiting.

**Checkpoints** (copying the WAL back into the database file, with an ``fsync`` in
``synchronous="NORMAL"``) do not run on the writer: the writer connection has
``wal_autocheckpoint=0``, and a checkpointer thread with its own connection runs a
``PASSIVE`` checkpoint (which never blocks the writer) every ``checkpoint_commits``
transactions. What is durable is unchanged: a transaction is durable when its
``COMMIT`` returns, whether or not a checkpoint ran since.

Durability (``durability=``): ``"process"`` (the default) is ``synchronous="NORMAL"``, which in
WAL mode survives a crash of the process (a kill, an OOM): every committed transaction is in
the WAL. A power loss may lose the last transactions. ``"power"`` is ``synchronous="FULL"``:
every commit is fsync'd before it returns, except a transaction the journal runs with
``synced=False`` (the write-ahead of calls that may run again), which is committed with
``synchronous=NORMAL``: the next synced commit, which syncs the WAL file, makes it durable
too. ``synchronous=`` sets SQLite's own setting instead.
"""

from __future__ import annotations

import contextlib
import os
import queue
import resource
import sqlite3
import struct
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Final, Generic, Literal, TypeVar

import trio

from ..errors import JournalError, NotAJournalError
from ._log import FOLD_ROWS
from ._sql import SqlStore, current_version, migrate
from .base import NOT_NOW, Backend, Durability, NotNow, Store, check_durability

__all__ = ["SqliteBackend"]

T = TypeVar("T")
Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
#: SQLite's ``synchronous`` setting for each durability.
_SYNCHRONOUS: Final[dict[str, Synchronous]] = {"process": "NORMAL", "power": "FULL"}

#: Seconds SQLite itself waits for the write lock before the writer looks again (whether its
#: transaction was abandoned, whether ``busy_timeout`` is over).
_LOCK_WAIT: Final = 0.05
#: Seconds between two looks, by an idle writer or checkpointer thread, at whether the
#: ``trio.run`` it serves has ended (a journal never closed: the thread closes its
#: connection and ends).
_ORPHAN_PROBE = 1.0
#: ``UPDATE ... FROM`` arrived in SQLite 3.33.
_UPDATE_FROM: Final = sqlite3.sqlite_version_info >= (3, 33, 0)
#: Parameters per statement at most (SQLite's own limit may be lower: then that one).
_MAX_PARAMS: Final = 32_766
#: The writer's own automatic checkpoint, in pages: only a backstop for a checkpointer that
#: cannot keep up (the WAL restarts from its start only once it was wholly checkpointed).
_BACKSTOP_PAGES: Final = 20_000


#: Free bytes on a journal's filesystem under which a write SQLite could not make (a full
#: or an I/O error) is reported as a full disk.
_LOW_SPACE: Final = 1 << 20
#: The WAL header's magic numbers: checksums in little- or big-endian words.
_WAL_MAGIC: Final = {0x377F0682: "<", 0x377F0683: ">"}


def _wal_checksum(data: bytes, s0: int, s1: int, order: str) -> tuple[int, int]:
    """SQLite's WAL checksum of *data* (a multiple of 8 bytes), continued from (*s0*, *s1*)."""
    for first, second in struct.iter_unpack(order + "2I", data):
        s0 = (s0 + first + s1) & 0xFFFFFFFF
        s1 = (s1 + second + s0) & 0xFFFFFFFF
    return s0, s1


def wal_damage(wal: Path) -> tuple[int, int, int, int] | None:
    """What SQLite would drop of the write-ahead log *wal* if the journal were opened now.

    SQLite replays a WAL's frames up to the first one that fails its checksum (or carries
    other salt values than the header) and ignores everything after it. After a crash that is
    only the torn end of the last transaction; but when frames after the bad one still carry
    the header's salts and check out against their predecessor (so they were written after
    it, in this generation of the log), committed transactions would be dropped silently.
    Returns ``(bad frame, frames, frames lost, commits lost)`` then (frames counted from 1;
    ``0``: the header itself is damaged), else ``None``. Reads the whole file (blocking).
    """
    try:
        with wal.open("rb") as f:
            header = f.read(32)
            if len(header) < 32:
                return None
            magic, _version, page_size, _seq, salt1, salt2, c1, c2 = struct.unpack(">8I", header)
            if page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
                page_size = 4096  # (damaged: the usual size, to count what follows)
            frame_size = 24 + page_size
            frames = (wal.stat().st_size - 32) // frame_size
            order = _WAL_MAGIC.get(magic, "<")
            intact = magic in _WAL_MAGIC and _wal_checksum(header[:24], 0, 0, order) == (c1, c2)
            bad: int | None = None if intact else 0
            ends_one = False
            seed = (c1, c2)
            lost = commits = 0
            for index in range(1, frames + 1):
                frame = f.read(frame_size)
                if len(frame) < frame_size:
                    break
                page, size, f1, f2, k1, k2 = struct.unpack(">6I", frame[:24])
                if bad == 0 and index == 1:  # the header's salts are damaged: the log's own
                    salt1, salt2 = f1, f2
                valid = (
                    (f1, f2) == (salt1, salt2)
                    and page != 0
                    and _wal_checksum(frame[:8] + frame[24:], *seed, order) == (k1, k2)
                )
                if bad is None and not valid:
                    bad = index
                    ends_one = bool(size) and (f1, f2) == (salt1, salt2)
                elif bad is not None and valid and size:
                    commits += 1  # a commit written after the bad frame, in this log
                    lost = index - max(bad, 1) + 1
                # the next frame's checksum continues this one's as stored (valid or not)
                seed = (k1, k2)
    except OSError:
        return None  # (unreadable here: SQLite says why when it opens it)
    if bad is None or not commits:
        return None  # intact, or only a torn last transaction (what a crash leaves)
    if bad and ends_one:
        commits += 1  # the bad frame was the commit of a transaction of its own
    return bad, frames, lost, commits


def _in_use(shm: Path) -> bool:
    """Whether a connection (of any process, this one's included) has the journal of the
    shared-memory file *shm* open: SQLite holds a lock on it then (read from Linux's
    ``/proc/locks``, which is only read: a descriptor of the file opened and closed here would
    drop this process's own SQLite locks on it). ``False`` where it cannot be told."""
    try:
        stat = shm.stat()
        locks = Path("/proc/locks").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    key = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    return any(key in line.split() for line in locks.splitlines())


#: Bytes a write may add to a file at once (a WAL frame of the largest page, rounded up).
_WRITE_SLACK: Final = 1 << 17


def _code(exc: sqlite3.Error) -> int | None:
    """The primary result code of *exc* (its extended code without the extension)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


class _Tx:
    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql, params).fetchall()

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        return self.conn.executemany(sql, rows).rowcount

    def execute_count(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self.conn.execute(sql, params).rowcount


class _Job(Generic[T]):
    """One transaction handed to the writer thread."""

    __slots__ = ("abandoned", "done", "error", "finished", "fn", "token", "value")

    def __init__(self, fn: Callable[[_Job[T]], T], token: trio.lowlevel.TrioToken | None) -> None:
        self.fn = fn
        #: Where to say it is done (``None``: nobody waits for it).
        self.token = token
        self.done = trio.Event()
        self.finished = False
        self.value: T | None = None
        self.error: BaseException | None = None
        #: Set (from the trio thread) when nobody waits for it any more: a transaction not
        #: yet committed is rolled back, a wait for the lock ends.
        self.abandoned = False

    def run(self) -> None:  # on the writer thread
        try:
            self.value = self.fn(self)
        except BaseException as exc:  # handed to the waiting task, which raises it
            self.error = exc
        self.finished = True
        if self.token is not None:
            with contextlib.suppress(trio.RunFinishedError):  # trio.run ended meanwhile
                self.token.run_sync_soon(self.done.set)

    def result(self) -> T:
        """The job's value, or raise its error (once it is done)."""
        assert self.finished
        if self.error is not None:
            error, self.error = self.error, None  # no reference cycle through the traceback
            raise error
        return self.value  # type: ignore[return-value]


def _run_finished(token: trio.lowlevel.TrioToken) -> bool:
    """Whether the ``trio.run`` of *token* ended (from another thread)."""
    try:
        token.run_sync_soon(_nothing)
    except trio.RunFinishedError:
        return True
    return False


def _nothing() -> None:
    pass


def _fold(store: Store) -> int:
    """Fold the log of the journal *store* is a transaction of (see :mod:`._log`)."""
    assert isinstance(store, SqlStore)
    return store.fold()


class _Writer:
    """A long-lived thread running :class:`_Job` s one at a time, in order.

    It ends after :meth:`stop`, or once the ``trio.run`` that made it has ended (a journal
    never closed: it looks every :data:`_ORPHAN_PROBE` seconds while idle), calling
    :attr:`on_orphaned` (closing the connection) then.
    """

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[_Job[Any] | None] = queue.SimpleQueue()
        self.current: _Job[Any] | None = None
        #: Held while a job runs: whoever else uses the connection (a transaction on the trio
        #: thread) takes it first.
        self.connection_lock = threading.Lock()
        self.on_orphaned: Callable[[], None] | None = None
        self._token = trio.lowlevel.current_trio_token()
        #: Held while :attr:`current` changes, and by :meth:`interrupt_if_current`.
        self._current_lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=_ORPHAN_PROBE)
            except queue.Empty:
                if not _run_finished(self._token):
                    continue
                orphaned = self.on_orphaned
                if orphaned is not None:
                    with contextlib.suppress(Exception):
                        orphaned()
                return
            if job is None:
                return
            with self._current_lock:
                self.current = job
            with self.connection_lock:
                job.run()
            with self._current_lock:
                self.current = None

    def interrupt_if_current(self, job: _Job[Any], interrupt: Callable[[], None]) -> None:
        """Call *interrupt* if *job* is the one running: the writer cannot move on to the
        next job meanwhile (whose statement it would interrupt instead)."""
        with self._current_lock:
            if self.current is job:
                interrupt()

    async def run(
        self,
        fn: Callable[[_Job[T]], T],
        *,
        abandon_on_cancel: bool,
        on_abandon: Callable[[_Job[T]], None] | None = None,
    ) -> T:
        """Run ``fn(job)`` on the thread; wait for it.

        Cancellation: with *abandon_on_cancel*, the wait ends at once (the job is marked
        abandoned and *on_abandon* called); otherwise it is ignored until the job is done
        (then delivered at the next checkpoint).
        """
        job = _Job(fn, trio.lowlevel.current_trio_token())
        self._jobs.put(job)
        if abandon_on_cancel:
            try:
                await job.done.wait()
            except trio.Cancelled:
                job.abandoned = True
                if on_abandon is not None:
                    on_abandon(job)
                raise
        else:
            with trio.CancelScope(shield=True):
                await job.done.wait()
        return job.result()

    def submit(self, fn: Callable[[_Job[T]], T]) -> None:
        """Queue ``fn(job)`` on the thread without waiting for it (its outcome is dropped)."""
        self._jobs.put(_Job(fn, None))

    def stop(self) -> None:
        """The thread ends after the jobs queued so far."""
        self._jobs.put(None)


class _Checkpointer:
    """A thread with its own connection that runs ``PASSIVE`` checkpoints when asked.

    It ends after :meth:`stop`, or once the ``trio.run`` that made it has ended (looking every
    :data:`_ORPHAN_PROBE` seconds while idle).
    """

    def __init__(self, path: Path, name: str) -> None:
        self.path = path
        self._token = trio.lowlevel.current_trio_token()
        self._wake = threading.Event()
        self._stopping = False
        self.checkpoints = 0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def request(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    def _loop(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                if not self._wake.wait(_ORPHAN_PROBE):
                    if _run_finished(self._token):
                        return
                    continue
                self._wake.clear()
                if self._stopping:
                    return
                try:
                    if conn is None:
                        conn = sqlite3.connect(self.path, timeout=_LOCK_WAIT, isolation_level=None)
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.checkpoints += 1
                except sqlite3.Error:  # busy, or the file went away: the writer's backstop
                    pass
        finally:
            if conn is not None:
                conn.close()


class SqliteBackend(Backend):
    """See the module docs. *path* is created if it does not exist.

    Args:
        path: the journal file.
        durability: ``"process"`` (the default: ``synchronous=NORMAL``) or ``"power"``
            (``synchronous=FULL``); see the module docs.
        synchronous: SQLite's own ``synchronous`` setting, instead of *durability* (not both).
        busy_timeout: seconds a transaction waits for another process's write lock.
        checkpoint_commits: commits between two checkpoints (run by the checkpointer thread).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Durability | None = None,
        synchronous: Synchronous | None = None,
        busy_timeout: float = 10.0,
        checkpoint_commits: int = 100,
    ) -> None:
        if synchronous is None:
            durability = check_durability("process" if durability is None else durability)
            synchronous = _SYNCHRONOUS[durability]
        elif durability is not None:
            raise ValueError(
                f"pass durability= ({durability!r}) or synchronous= ({synchronous!r}), not both"
            )
        elif synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(
                f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}"
            )
        else:  # OFF and NORMAL lose nothing when only the process dies (the OS has the writes)
            durability = "power" if synchronous in ("FULL", "EXTRA") else "process"
        if not isinstance(checkpoint_commits, int) or checkpoint_commits < 1:
            raise ValueError(f"checkpoint_commits must be an int >= 1, not {checkpoint_commits!r}")
        self.path = Path(path)
        self.target = str(self.path)
        #: What a committed transaction survives.
        self.durability: Durability = durability
        self.synchronous: Synchronous = synchronous
        self.busy_timeout = busy_timeout
        self.checkpoint_commits = checkpoint_commits
        self._conn: sqlite3.Connection | None = None
        self._max_params = 999  # (the connection's own limit, once open)
        self._writer: _Writer | None = None
        self._checkpointer: _Checkpointer | None = None
        self._since_checkpoint = 0
        #: Transactions committed (or run), and how many of them ran on the trio thread
        #: (:meth:`run_now`); the others each cost a hand-off to the writer thread.
        self.transactions = 0
        self.transactions_now = 0
        #: Of :attr:`transactions`, those run without the ``fsync`` that
        #: ``durability="power"`` makes (``synced=False``: see the module docs).
        self.transactions_unsynced = 0
        #: Log rows appended since the last fold (as far as this process knows), and whether
        #: a fold is queued on the writer thread.
        self._unfolded = 0
        self._fold_queued = False

    @property
    def syncs_commits(self) -> bool:
        """Whether a synced commit waits for an ``fsync`` (``durability="power"``) that one
        run with ``synced=False`` does not (see :meth:`Backend.run
        <lionexec.journal.backends.Backend.run>`)."""
        return self.durability == "power"

    async def open(self) -> None:
        writer = _Writer(f"lionexec-journal-writer {self.target}")
        try:
            self._conn = await writer.run(lambda job: self._open(), abandon_on_cancel=False)
        except BaseException:
            writer.stop()
            raise
        conn = self._conn
        writer.on_orphaned = conn.close
        self._writer = writer
        self._checkpointer = _Checkpointer(self.path, f"lionexec-journal-checkpoint {self.target}")

    def _open(self) -> sqlite3.Connection:
        if self.path.is_dir():
            raise NotAJournalError(
                f"{self.target} is a directory, not a journal file", target=self.target
            )
        self._check_wal()
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
            # Before anything that writes (WAL mode is written into the file's header): another
            # program's database is left untouched.
            self._tables(conn)
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()
            if mode is None or str(mode[0]).lower() != "wal":
                raise NotAJournalError(
                    f"{self.target}: SQLite refused WAL mode ({mode!r})", target=self.target
                )
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute(f"PRAGMA wal_autocheckpoint={_BACKSTOP_PAGES}")
            conn.execute("BEGIN IMMEDIATE")
            try:
                tables = self._tables(conn)  # again, now that no one else can write
                tx = _Tx(conn)
                migrate(tx, current_version(tx, bool(tables)), target=self.target)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            # The lock is waited for by _begin, in short sleeps on the writer thread; SQLite
            # itself never waits (a transaction run on the trio thread must not).
            conn.execute("PRAGMA busy_timeout=0")
            limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
            self._max_params = min(_MAX_PARAMS, limit)
        except sqlite3.DatabaseError as exc:
            conn.close()
            full = self._full(exc)
            if full is not None:
                raise JournalError(
                    f"{self.target}: {full}, then open it again (it cannot be opened now; "
                    "nothing was changed)"
                ) from exc
            if _code(exc) == sqlite3.SQLITE_IOERR:
                raise JournalError(
                    f"{self.target}: SQLite could not read or write it (an I/O error: "
                    f"{getattr(exc, 'sqlite_errorname', '')} {exc}); nothing was changed: check "
                    "the disk and the permissions of its directory (SQLite makes its -wal and "
                    "-shm files there)"
                ) from exc
            raise NotAJournalError(
                f"{self.target} is not a lionexec journal (corrupt or not SQLite): {exc}",
                target=self.target,
            ) from exc
        except UnicodeDecodeError as exc:  # a damaged schema table: its text is not UTF-8
            conn.close()
            raise NotAJournalError(
                f"{self.target} is not a lionexec journal (corrupt: a name in its schema is "
                f"not UTF-8: {exc})",
                target=self.target,
            ) from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_wal(self) -> None:
        """Refuse a write-ahead log SQLite would replay only in part (see
        :func:`wal_damage`): raises :class:`~lionexec.journal.NotAJournalError` naming it and
        what would be lost."""
        wal = Path(f"{self.path}-wal")
        try:
            if wal.stat().st_size <= 32:
                return
        except OSError:
            return  # none (the journal was closed cleanly, or is new)
        if _in_use(Path(f"{self.path}-shm")):
            # Another connection has the journal open (its log is live, and being written):
            # SQLite replays a log only when the first connection opens it.
            return
        found = wal_damage(wal)
        if found is None:
            return
        again = wal_damage(wal)  # a log that another process is writing moves: look twice
        if again is None or (found[0], found[2], found[3]) != (again[0], again[2], again[3]):
            return
        bad, frames, lost, commits = found
        where = (
            "its header fails its checksum"
            if bad == 0
            else f"frame {bad} of its {frames} frames fails its checksum"
        )
        raise NotAJournalError(
            f"{wal} (the write-ahead log of the journal {self.target}) is damaged: {where}, "
            f"and {lost} frame(s) from there on hold {commits} committed transaction(s) that "
            "still carry the log's current salt. SQLite would open the journal without them, "
            "silently dropping what they committed (responses callers were given). Nothing "
            "was opened or changed: restore the journal and its -wal file from a backup, or "
            f"move {wal.name} aside to open the journal without those transactions (they are "
            "lost then)",
            target=self.target,
        )

    def _full(self, exc: sqlite3.Error) -> str | None:
        """Why SQLite could not write, if it was for lack of space: the disk (or this
        process's file size limit) is full. ``None`` otherwise."""
        if _code(exc) not in (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR):
            return None
        folder = self.path.parent
        try:
            stat = os.statvfs(folder)
            free = stat.f_bavail * stat.f_frsize
        except OSError:
            free = None
        if free is not None and free < _LOW_SPACE:
            return (
                f"disk full: {free} bytes free on the filesystem of {folder} ({exc}); free "
                "some space"
            )
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if limit != resource.RLIM_INFINITY:
            sizes = []
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(OSError):
                    sizes.append(Path(f"{self.path}{suffix}").stat().st_size)
            if sizes and max(sizes) + 2 * _WRITE_SLACK >= limit:
                return (
                    f"disk full for this process: its file size limit (RLIMIT_FSIZE) of "
                    f"{limit} bytes is reached ({exc}); raise the limit (`ulimit -f`)"
                )
        if _code(exc) == sqlite3.SQLITE_FULL:
            return f"disk full ({exc}); free some space"
        return None

    def _tables(self, conn: sqlite3.Connection) -> set[str]:
        """The database's tables; raises NotAJournalError if they are another program's."""
        tables = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if tables and "lionexec_schema_version" not in tables:
            raise NotAJournalError(
                f"{self.target} is an SQLite database of another program (tables: "
                f"{', '.join(sorted(tables)[:5])}), not a lionexec journal; left untouched",
                target=self.target,
            )
        return tables

    async def run(
        self, fn: Callable[[Store], T], *, cancellable: bool = True, synced: bool = True
    ) -> T:
        """Run ``fn(store)`` in one transaction on the writer thread (*synced* false: without
        an ``fsync``, whatever the durability; see the module docs).

        Cancellation: *cancellable* abandons the transaction at once (rolled back if it has
        not committed yet; a statement running is interrupted); otherwise waits for it.
        """
        conn, writer = self._conn, self._writer
        if conn is None or writer is None:
            raise JournalError(f"the journal at {self.target} is not open")

        def interrupt(job: _Job[Any]) -> None:
            writer.interrupt_if_current(job, conn.interrupt)

        def transact(job: _Job[T | NotNow]) -> T | NotNow:
            return self._transact(conn, fn, job, synced)

        result: T | NotNow = await writer.run(
            transact, abandon_on_cancel=cancellable, on_abandon=interrupt
        )
        self._fold_if_due()
        if isinstance(result, NotNow):  # (only without a job)
            raise AssertionError("a transaction on the writer thread did not run")
        return result

    def _begin(self, conn: sqlite3.Connection, job: _Job[Any] | None) -> bool:
        """Begin a write transaction. Waits for another connection's lock (up to
        ``busy_timeout``, in sleeps of at most ``_LOCK_WAIT``, looking whether *job* was
        abandoned in between); without a *job* (on the trio thread) never: ``False`` then."""
        deadline = time.monotonic() + self.busy_timeout
        pause = 0.0005
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return True
            except sqlite3.OperationalError as exc:
                if _code(exc) != sqlite3.SQLITE_BUSY:
                    raise
                if job is None:
                    return False
                now = time.monotonic()
                if job.abandoned or now >= deadline:
                    raise
                time.sleep(min(pause, deadline - now))
                pause = min(pause * 2, _LOCK_WAIT)

    @trio.lowlevel.enable_ki_protection  # (a KeyboardInterrupt waits for the transaction)
    def run_now(self, fn: Callable[[Store], T], *, synced: bool = True) -> T | NotNow:
        """Run ``fn(store)`` in one transaction on the trio thread, if it can run at once.

        It can when its commit needs no ``fsync`` (the durability is ``"process"``, or
        *synced* is false: then a commit writes the WAL alone, in tens of microseconds, less
        than a hand-off to the writer thread costs), the writer thread is not using the
        connection and no other connection holds the write lock. Otherwise
        :data:`NOT_NOW`: nothing is waited for, nothing is done.
        """
        conn, writer = self._conn, self._writer
        if conn is None or writer is None or (synced and self.durability != "process"):
            return NOT_NOW
        if not writer.connection_lock.acquire(blocking=False):
            return NOT_NOW  # (the writer thread is using it)
        try:
            result = self._transact(conn, fn, None, synced)
        finally:
            writer.connection_lock.release()
        if result is not NOT_NOW:
            self.transactions_now += 1
        self._fold_if_due()
        return result

    def _fold_if_due(self) -> None:
        """Fold the log on the writer thread once it holds :data:`FOLD_ROWS` rows (on the
        trio thread, after a transaction)."""
        conn, writer = self._conn, self._writer
        if self._unfolded < FOLD_ROWS or self._fold_queued or conn is None or writer is None:
            return
        self._fold_queued = True

        def fold(job: _Job[int | NotNow]) -> int | NotNow:  # on the writer thread
            try:  # (not if another process holds the lock: after the next transaction, then)
                return self._transact(conn, _fold, None)
            finally:
                self._fold_queued = False

        writer.submit(fold)

    def _transact(
        self,
        conn: sqlite3.Connection,
        fn: Callable[[Store], T],
        job: _Job[Any] | None,
        synced: bool = True,
    ) -> T | NotNow:
        """:meth:`_transaction`; not *synced*: committed without an ``fsync`` (see the module
        docs), the connection's own setting put back after it."""
        if synced or self.synchronous not in ("FULL", "EXTRA"):
            return self._transaction(conn, fn, job)
        # (SQLite takes a new ``synchronous`` only outside a transaction)
        conn.execute("PRAGMA synchronous=NORMAL")
        try:
            result = self._transaction(conn, fn, job)
        finally:
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
        if result is not NOT_NOW:
            self.transactions_unsynced += 1
        return result

    def _transaction(
        self, conn: sqlite3.Connection, fn: Callable[[Store], T], job: _Job[Any] | None
    ) -> T | NotNow:
        try:
            if job is not None and job.abandoned:
                raise JournalError(f"{self.target}: transaction abandoned before it began")
            if not self._begin(conn, job):
                return NOT_NOW
            try:
                store = SqlStore(
                    _Tx(conn), max_params=self._max_params, update_from=_UPDATE_FROM, log=True
                )
                result = fn(store)
                if job is not None and job.abandoned:
                    raise JournalError(f"{self.target}: transaction abandoned; rolled back")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            if store.log_empty:
                self._unfolded = 0
            self._unfolded += store.appended
        except sqlite3.IntegrityError as exc:
            raise JournalError(
                f"{self.target}: another writer holds this branch's next message position "
                f"(one branch is journaled by one process at a time): {exc}"
            ) from exc
        except sqlite3.Error as exc:
            full = self._full(exc)
            if full is not None:
                raise JournalError(
                    f"{self.target}: {full} (this transaction was not committed; what was "
                    "committed before is kept)"
                ) from exc
            raise JournalError(f"{self.target}: {type(exc).__name__}: {exc}") from exc
        self.transactions += 1
        self._since_checkpoint += 1
        if self._since_checkpoint >= self.checkpoint_commits and self._checkpointer is not None:
            self._since_checkpoint = 0
            self._checkpointer.request()
        return result

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        writer, self._writer = self._writer, None
        checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            checkpointer.stop()
        if conn is not None and writer is not None:
            try:
                # The tables hold everything once the journal is closed (for SQL of others');
                # what is not folded (the lock taken, an error) stays in the log, folded by
                # the next reader.
                def fold(job: _Job[int | NotNow]) -> int | NotNow:
                    return self._transact(conn, _fold, None)  # (never waiting for a lock)

                with contextlib.suppress(JournalError):
                    await writer.run(fold, abandon_on_cancel=False)
                await writer.run(lambda job: conn.close(), abandon_on_cancel=False)
            finally:
                writer.stop()
        else:
            await trio.lowlevel.checkpoint()
