"""The group commit: every write of a journal goes through one queue, into few transactions.

**Group commit.** The first caller to find no commit running leads one, taking everything
queued (write-aheads and outcomes of all branches) into one transaction; the others wait for
it. So N concurrent calls pay a few transactions, not N.

**Outcomes ride along.** An outcome need only be durable before ``act()`` returns and before
anything depends on it, so an outcome write does not lead a commit at once: it *lingers*
(while a commit runs, then at most :attr:`CommitEngine.linger` seconds of trio's clock) for
the next commit led by someone else, typically the write-ahead of the next call of a
sequential batch, and the two share one transaction. It stops lingering as soon as someone
waits for it: ``act()`` about to return (the sink feed asks the sink to
:meth:`~lionexec.journal.JournalSink.expedite`), a call waiting for its idempotency key, a
branch closing, :meth:`Journal.flush <lionexec.journal.Journal.flush>`.

**Synced where it matters.** A commit that holds only write-aheads of calls that may run
again (``pure``, ``idempotent``, ``keyed``: :data:`~lionexec.journal.backends.base.RERUNNABLE`)
is run with ``synced=False`` (see :meth:`Backend.run
<lionexec.journal.backends.Backend.run>`): it need survive a crash of the process, not a power
loss. Its calls' outcomes commit in a synced commit before ``act()`` returns, and that sync
makes every commit before it durable too; a power cut before then loses calls nobody was
answered for. Every other commit (an outcome, an approval, an ``unsafe`` call's write-ahead,
messages flushed) is synced as the backend's durability says.

**Answers apart where a sync costs a flush.** Where a synced commit waits for the disk and an
unsynced one does not (the backend's ``syncs_commits``: SQLite under ``"power"``,
PostgreSQL), an outcome riding along would make the next write-ahead's commit wait for the
disk. So a commit that may run unsynced (nobody waits for an answer; every write queued is
a write-ahead of a rerunnable call, or an outcome write still lingering) leaves each branch's
answers out: it stages the branch's new messages only up to its first response (all of
them if a request comes after one), and the outcome writes whose answers it left out linger
on. They commit, synced, when their linger ends or someone waits for them: a sequential
batch pays one flush per :attr:`CommitEngine.linger` of calls, not one per call.

**Bounded.** A group commit is shielded from cancellation (others wait for it), so it is
bounded instead: past :attr:`CommitEngine.commit_timeout` seconds of the wall clock (not
trio's clock: a ``MockClock`` jumping while a commit runs in a thread must not fire it) its
waiters get a :class:`~lionexec.journal.JournalConnectionError` ("the commit may or may not
have landed") and the backend abandons the transaction (SQLite: rolled back if it has not
committed, a statement running interrupted; PostgreSQL: its query cancelled on the server).

The engine knows the journal's backend and the sinks of its open branches
(:class:`~lionexec.journal.JournalSink`, which stage their messages into each commit); the
journal facade owns one engine and delegates to it.
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import trio

from lionexec.conversation import MessageManager

from ._history import extend_history, load_history
from .backends.base import (
    DONE,
    NOT_NOW,
    RERUNNABLE,
    ApprovalRow,
    Backend,
    Batch,
    CallRow,
    Claim,
    MessageRow,
    NotNow,
    Queued,
    RequestOp,
    Store,
)
from .errors import JournalConnectionError, JournalError

if TYPE_CHECKING:
    from ._sink import JournalSink

__all__ = ["COMMIT_TIMEOUT", "LINGER", "POLL_MAX", "CommitEngine"]

T = TypeVar("T")

#: Longest wait between two looks at a key held by a call in another process.
POLL_MAX = 0.5
#: How long an outcome write waits, at most, for a commit to share once none is running
#: (seconds of trio's clock).
LINGER = 0.002
#: How long a group commit may take before its waiters are told it failed (seconds).
COMMIT_TIMEOUT = 30.0
#: Rows a group commit may write and still run on the trio thread (when the backend can: see
#: :meth:`Backend.run_now <lionexec.journal.backends.Backend.run_now>`); a larger one goes to
#: the backend's thread, and the trio thread goes on meanwhile.
INLINE_ROWS = 16


@attrs.define(eq=False)
class _Pending:
    """One write queued for the group commit, and the task waiting for it."""

    sink: JournalSink
    op: RequestOp | None
    approval: ApprovalRow | None = None
    claim: Claim | Queued | None = None
    error: BaseException | None = None
    done: bool = False
    #: Waiting for a commit to take it (see :meth:`CommitEngine._linger`), not to lead one.
    lingering: bool = False
    #: A commit left its answers out (see :meth:`CommitEngine._deferrable`): its linger runs
    #: on through the commits that follow, or write-aheads that keep coming would hold it
    #: back until someone waits.
    passed: bool = False
    #: The task parked on it (:meth:`wait`), or ``None``.
    task: trio.lowlevel.Task | None = None

    async def wait(self) -> None:
        """Park until :meth:`wake` (a commit took this item, or it is its turn to lead, or it
        lingers and should look again). Each waiter is woken for its own item, not every
        waiter after every commit: a batch of N concurrent calls would pay N wake-ups per
        commit it waits through otherwise."""
        self.task = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(self._abort)

    def wake(self) -> None:
        """Reschedule the task parked on this item, if any."""
        task = self.task
        if task is not None:
            self.task = None
            trio.lowlevel.reschedule(task)

    def _abort(self, _: Any) -> trio.lowlevel.Abort:
        self.task = None
        return trio.lowlevel.Abort.SUCCEEDED


class CommitEngine:
    """The group commit of one journal (see the module docs), and the journal's connection.

    Owned by a :class:`~lionexec.journal.Journal`; the sinks, approvals and recovery of that
    journal reach the backend through it.

    Args:
        backend: where the journal is kept.
        name: how errors name the journal (its ``repr``).
        commit_timeout: seconds a group commit may take (``None``: no bound).

    Attributes:
        commit_timeout: seconds a group commit may take (see the module docs).
        linger: seconds an outcome write waits, once no commit is running, for a commit led
            by another caller to share; ``0`` commits each at once.
        sinks: the sink of each branch open (or closing) in the journal, by branch id.
        commits: transactions committed.
        committed_items: the write-aheads and outcome writes they carried.
    """

    def __init__(self, backend: Backend, *, name: str, commit_timeout: float | None) -> None:
        self.backend = backend
        self.name = name
        self.commit_timeout = commit_timeout
        self.linger = LINGER
        self._watchdog: _Watchdog | None = None
        #: The backend's ``run_now`` (run a small commit on the trio thread), if it has one
        #: of its own (the protocol's default never runs anything).
        run_now = getattr(backend, "run_now", None)
        if getattr(type(backend), "run_now", None) is Backend.run_now:
            run_now = None
        self._run_now = run_now
        #: Whether ``run_now`` takes ``synced=`` (see :meth:`Backend.run
        #: <lionexec.journal.backends.Backend.run>`), and whether the function behind the
        #: backend's ``run`` last asked does (it is looked up at each call: wrapped, say).
        self._now_relaxes = run_now is not None and _takes_synced(run_now)
        self._run_relaxes: tuple[object, bool] = (None, False)
        #: Whether commits of write-aheads alone leave the answers out (see the module docs):
        #: where a synced commit waits for a disk flush that an unsynced one does not.
        self._defers_answers = getattr(backend, "syncs_commits", False) is True
        self._open = False
        self._closed = False
        self._pending: list[_Pending] = []
        self._committing = False
        self._hurry = False  # someone waits for lingering outcomes
        self._key_waiters = 0  # calls here waiting for a key's outcome
        self.sinks: dict[str, JournalSink] = {}
        #: Keys held by calls running here; the event once someone waits for the outcome.
        self._held: dict[str, trio.Event | None] = {}
        self._inflight: dict[tuple[str, str], str] = {}
        #: Transactions committed, and the write-aheads and outcome writes they carried.
        self.commits = 0
        self.committed_items = 0

    @property
    def target(self) -> str:
        """The path or URL (without password) of the journal."""
        return self.backend.target

    @property
    def is_open(self) -> bool:
        """Whether the journal is open (and not closed since)."""
        return self._open

    # -- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect and migrate the schema (once; see :meth:`Journal.open
        <lionexec.journal.Journal.open>`)."""
        if self._closed:
            raise JournalError(f"{self.name} is closed")
        if not self._open:
            await self.backend.open()
            self._open = True
        else:
            await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        """Disconnect. Idempotent. Branches still open can no longer commit."""
        self._closed = True
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            watchdog.stop()
        if self._open:
            self._open = False
            await self.backend.aclose()
        else:
            await trio.lowlevel.checkpoint()

    async def run(
        self, fn: Callable[[Store], T], *, cancellable: bool = True, synced: bool = True
    ) -> T:
        """``fn(store)`` in one transaction of the backend (see :meth:`Backend.run
        <lionexec.journal.backends.Backend.run>`); raises if the journal is not open.
        *synced* false is passed on to a backend that takes it."""
        if not self._open:
            raise JournalError(f"{self.name} is not open (use `async with journal:`)")
        run: Callable[..., Awaitable[T]] = self.backend.run
        if not synced:
            func = getattr(run, "__func__", run)
            known, relaxes = self._run_relaxes
            if known is not func:
                relaxes = _takes_synced(run)
                self._run_relaxes = (func, relaxes)
            if relaxes:
                return await run(fn, cancellable=cancellable, synced=False)
        return await run(fn, cancellable=cancellable)

    async def history(self, branch_id: str, since: MessageManager | None = None) -> MessageManager:
        """The committed history of branch *branch_id* (a UUID's text): a fresh copy, or
        *since* brought up to date (see :meth:`Journal.history
        <lionexec.journal.Journal.history>`).

        Raises :class:`~lionexec.journal.JournalError` naming the branch and message position
        if a stored message cannot be read.
        """
        if since is not None and len(since) and len(since) == since.appended:
            tail = await self._tail(branch_id, since)
            if tail is not None:
                return extend_history(since, branch_id, tail)
        rows = await self.run(lambda store: store.messages(branch_id))
        return load_history(branch_id, rows)

    async def _tail(self, branch_id: str, since: MessageManager) -> list[MessageRow] | None:
        """The rows of branch *branch_id* after those *since* holds, if the journal holds
        *since*'s last message at its position (message ids are UUIDs, positions are never
        rewritten: then it holds all of them); ``None`` if not."""
        start = len(since) - 1
        last = str(since.appended_since(since.appended - 1)[0].id)

        def read(store: Store) -> list[MessageRow] | None:
            reader = getattr(store, "messages_from", None)
            if reader is not None:
                rows: list[MessageRow] = reader(branch_id, start)
            else:
                rows = [row for row in store.messages(branch_id) if row.seq >= start]
            if rows and rows[0].seq == start and rows[0].message_id == last:
                return rows[1:]
            return None

        # Usually no row, or a few: read at once on this thread when the backend can (as a
        # small commit is written), which costs less than the hand-off to its thread. (Each
        # row is decoded on this thread afterwards anyway, at several times its read's cost.)
        # A read writes nothing a power loss could take: unsynced, whatever the durability.
        now = self._at_once(read, synced=False)
        if isinstance(now, NotNow):
            return await self.run(read)
        await trio.lowlevel.checkpoint()
        return now

    def _at_once(self, fn: Callable[[Store], T], *, synced: bool = True) -> T | NotNow:
        """``fn(store)`` in one transaction on this thread if the backend can run it at once
        (see :meth:`Backend.run_now <lionexec.journal.backends.Backend.run_now>`), else
        :data:`NOT_NOW` (nothing done); raises if the journal is not open."""
        if self._run_now is None:
            return NOT_NOW
        if not self._open:
            raise JournalError(f"{self.name} is not open (use `async with journal:`)")
        if synced or not self._now_relaxes:
            result: T | NotNow = self._run_now(fn)
        else:
            result = self._run_now(fn, synced=False)
        return result

    # -- the open branches --------------------------------------------------------------------

    def live_sink(self, name: str) -> JournalSink | None:
        """The sink of branch *name* if that branch is open here, or still closing (see
        :attr:`JournalSink.closing`). A branch left with an error never closes its sink (its
        drain service was cancelled): it is forgotten here."""
        sink = self.sinks.get(name)
        if sink is None or sink.branch is None:
            return sink
        if any(f.closed and not f.serving for f in sink._feeds()):
            del self.sinks[name]
            return None
        return sink

    @trio.lowlevel.enable_ki_protection  # (its nursery: see lionexec.act.Branch._serve)
    async def flush(self) -> None:
        """Commit everything the open branches recorded so far (one group commit)."""
        sinks = list(self.sinks.values())
        if not sinks:
            await trio.lowlevel.checkpoint()
            return
        # The sinks share the group commit: one that fails fails them all, with one error.
        # It is raised as itself (a JournalError naming the journal), not in a group.
        errors: list[Exception] = []

        async def flush(sink: JournalSink) -> None:
            try:
                await sink.flush()
            except Exception as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            for sink in sinks:
                nursery.start_soon(flush, sink)
        if errors:
            raise errors[0]

    # -- the group commit ---------------------------------------------------------------------

    async def commit(
        self,
        sink: JournalSink,
        op: RequestOp | None,
        *,
        approval: ApprovalRow | None = None,
        lazy: bool = False,
    ) -> Claim | Queued | None:
        """Queue *sink*'s unjournaled messages (and *op*, *approval*) for the next group
        commit; wait. *lazy* (an outcome write): linger first for a commit led by another
        caller (see the module docs)."""
        if not self._open:
            raise JournalError(f"{self.name} is not open; close branches before their journal")
        item = _Pending(sink, op, approval)
        self._pending.append(item)
        try:
            if lazy and self.linger > 0:
                await self._linger(item)
            while not item.done:
                if self._committing:
                    await item.wait()
                else:
                    await self._lead()
        except BaseException:
            if not item.done and item in self._pending:
                self._pending.remove(item)
            raise
        error = item.error
        if error is not None:
            if isinstance(error, JournalConnectionError):
                raise JournalConnectionError(f"the group commit failed: {error}") from error
            raise JournalError(f"the group commit failed: {error}") from error
        return item.claim

    async def _linger(self, item: _Pending) -> None:
        """Wait for a commit led by someone else to take *item*: while a commit runs (the
        next one takes it), then at most :attr:`linger` seconds; not once someone waits."""
        deadline: float | None = None
        item.lingering = True
        try:
            while not item.done and not self._hurry and not self._key_waiters:
                if self._committing and not item.passed:
                    await item.wait()
                    deadline = None  # the next leader gets a whole linger
                    continue
                if deadline is None:
                    deadline = trio.current_time() + self.linger
                with trio.move_on_at(deadline) as waited:
                    await item.wait()
                if waited.cancelled_caught:
                    return
        finally:
            item.lingering = False

    def _hand_on(self) -> None:
        """A commit ended: the first waiter whose item is still queued leads the next one;
        if every queued item lingers, they all look again (their linger starts afresh)."""
        lingering = []
        for item in self._pending:
            if item.task is None:
                continue  # running already (or it will lead when it looks)
            if not item.lingering:
                item.wake()
                return
            lingering.append(item)
        for item in lingering:
            item.wake()

    def expedite(self) -> None:
        """Someone waits for what was queued: lingering outcomes commit now."""
        self._hurry = True
        for item in self._pending:
            if item.lingering:
                item.wake()

    async def _commit_batch(self, batch: Batch, *, synced: bool = True) -> list[Claim | Queued]:
        """One transaction for *batch*: shielded from cancellation (others wait for it: not
        cut short), bounded instead by :attr:`commit_timeout` seconds of the wall clock (see
        the module docs). A small one runs at once on this thread when the backend can (see
        :meth:`Backend.run_now <lionexec.journal.backends.Backend.run_now>`). *synced*
        false: it need not survive a power loss (see :func:`_needs_sync`)."""
        if self._run_now is not None and batch.size() <= INLINE_ROWS:
            now = self._at_once(lambda store: store.commit(batch), synced=synced)
            if not isinstance(now, NotNow):
                return now
        timeout = self.commit_timeout
        if timeout is None:
            with trio.CancelScope(shield=True):
                claims = await self.run(
                    lambda store: store.commit(batch), cancellable=False, synced=synced
                )
            return claims
        if not self._open:  # (closed meanwhile: no watchdog thread for a closed journal)
            raise JournalError(f"{self.name} is not open (use `async with journal:`)")
        watchdog = self._watchdog
        if watchdog is None:
            watchdog = self._watchdog = _Watchdog(min(1.0, timeout / 10))
        # One scope both shields and bounds the commit: cancel() on a shielding scope still
        # cancels what runs in it (one scope less per commit, about 3 % of the trio thread's
        # time in a sequential batch).
        with trio.CancelScope(shield=True) as bound:
            watchdog.watch(bound, timeout)
            try:
                return await self.run(
                    lambda store: store.commit(batch), cancellable=True, synced=synced
                )
            finally:
                watchdog.unwatch(bound)
        raise JournalConnectionError(
            f"the journal at {self.target} did not answer within {timeout:g} s; the commit may "
            "or may not have landed: recovery resolves it"
        )

    async def _lead(self) -> None:
        self._committing = True
        if self._run_now is not None and _tasks_runnable():
            # The commit may run at once, on this thread: let the tasks ready to run queue
            # their writes first, so that concurrent calls still share one commit.
            await trio.lowlevel.cancel_shielded_checkpoint()
        defer = self._defers_answers and self._deferrable()
        self._hurry = False
        taken = items = self._pending
        self._pending = []
        batch = Batch()
        staged: dict[JournalSink, int] = {}
        try:
            refused: dict[JournalSink, Exception] = {}
            for item in items:
                sink = item.sink
                if sink in refused:
                    continue
                if sink not in staged:
                    try:  # a branch whose messages cannot be written fails alone
                        staged[sink] = sink._stage(batch, defer_answers=defer)
                    except Exception as exc:
                        refused[sink] = exc
                        continue
                if item.op is not None:
                    batch.requests.append(item.op)
                if item.approval is not None:
                    batch.approvals.append(item.approval)
            for item in items:
                if item.sink in refused:
                    item.error, item.done = refused[item.sink], True
            items = [item for item in items if not item.done]
            if defer:  # an answer write whose answers were left out lingers on
                kept: list[_Pending] = []
                passed: list[_Pending] = []
                for item in items:
                    (passed if item.op is None and item.sink._unstaged else kept).append(item)
                if passed:
                    for item in passed:
                        item.passed = True
                    self._pending[:0] = passed
                    items = kept
            claims: list[Claim | Queued] = []
            if batch:
                claims = await self._commit_batch(batch, synced=_needs_sync(batch, items))
            else:
                await trio.lowlevel.checkpoint()
        except BaseException as exc:
            for sink, start in staged.items():
                sink._unstage(start)
            for item in items:
                item.error, item.done = exc, True
            if not isinstance(exc, Exception):
                raise
            return
        finally:
            self._committing = False
            for item in taken:
                item.wake()  # (they run once this task yields: every flag is set by then)
            self._hand_on()
        if batch:
            self.commits += 1
            self.committed_items += len(items)
        for sink in staged:
            sink._registered = True
            sink._rewriting = False
            sink.committed = sink._mirrored  # (nothing is staged for it while it commits)
        found = iter(claims)
        for item in items:
            if item.op is not None:
                claim = item.claim = next(found)
                if isinstance(claim, Claim) and claim.mine:
                    self._inflight[(item.op.branch_id, item.op.call_id)] = claim.row.key
                    self._held.setdefault(claim.row.key, None)
            item.done = True
        for outcome in batch.outcomes:
            key = self._inflight.pop((outcome.branch_id, outcome.call_id), None)
            if key is not None:
                event = self._held.pop(key, None)
                if event is not None:
                    event.set()

    def _deferrable(self) -> bool:
        """Whether the commit about to be led may leave the answers out: nobody waits for
        them, and every write queued is a write-ahead of a call that may run again or an
        answer write still lingering (see the module docs)."""
        if self._hurry or self._key_waiters:
            return False
        for item in self._pending:
            if item.approval is not None:
                return False
            op = item.op
            if op is None:
                if not item.lingering:
                    return False
            elif op.effect not in RERUNNABLE:
                return False
        return True

    async def wait_done(self, key: str) -> CallRow:
        """Wait until key *key* has an outcome (held here: its event; elsewhere: polling).

        A key held here whose outcome is recorded but not committed (its outcome commit
        failed: nothing else may commit that branch soon) is committed by the waiter, once
        per poll, until it is.
        """
        delay = 0.01
        while True:
            if key in self._held:
                event = self._held[key]
                if event is None:  # (made once someone waits: most keys never need one)
                    event = self._held[key] = trio.Event()
                self._key_waiters += 1
                self.expedite()  # its outcome may be lingering
                try:
                    with trio.move_on_after(delay):
                        await event.wait()
                finally:
                    self._key_waiters -= 1
                if not event.is_set():
                    await self._commit_holder(key)
                    delay = min(delay * 2, POLL_MAX)
            else:
                await trio.sleep(delay)
                delay = min(delay * 2, POLL_MAX)
            row = await self.run(lambda store: store.call(key))
            if row is not None and row.state == DONE:
                return row

    async def _commit_holder(self, key: str) -> None:
        """Commit what the branch of the call holding *key* here recorded since its last
        commit, if anything (its outcome, once known). A commit that fails is left for the
        next poll."""
        for (branch_id, _), held in list(self._inflight.items()):
            sink = self.sinks.get(branch_id)
            if held == key and sink is not None and sink.history.appended > sink._mirrored:
                with contextlib.suppress(JournalError):
                    await sink.flush()
                return
        await trio.lowlevel.checkpoint()


class _Watchdog:
    """Cancels the scopes it watches once they outlive their deadline on the wall clock
    (``time.monotonic``), from a thread that looks every *tick* seconds.

    How a commit is bounded in real time: a hung database is a matter of real seconds, and a
    bound on trio's clock would fire at once under a ``MockClock`` that jumps while a commit
    runs in a thread. Watching costs the trio thread two dictionary updates.
    """

    def __init__(self, tick: float) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._tick = tick
        self._watched: dict[trio.CancelScope, float] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        thread = threading.Thread(target=self._loop, name="lionexec-journal-watchdog")
        thread.daemon = True
        thread.start()

    def watch(self, scope: trio.CancelScope, seconds: float) -> None:
        with self._lock:
            self._watched[scope] = time.monotonic() + seconds

    def unwatch(self, scope: trio.CancelScope) -> None:
        with self._lock:
            self._watched.pop(scope, None)

    def stop(self) -> None:
        self._stopping.set()

    def _loop(self) -> None:  # on the watchdog thread
        while not self._stopping.wait(self._tick):
            now = time.monotonic()
            with self._lock:
                due = [scope for scope, deadline in self._watched.items() if deadline <= now]
            try:
                for scope in due:
                    self._token.run_sync_soon(self._fire, scope)
                self._token.run_sync_soon(_nothing)  # trio.run ended: stop
            except trio.RunFinishedError:
                return

    def _fire(self, scope: trio.CancelScope) -> None:  # on the trio thread
        with self._lock:
            watched = self._watched.pop(scope, None) is not None
        if watched:  # (not if its commit ended meanwhile)
            scope.cancel()


def _nothing() -> None:
    pass


def _needs_sync(batch: Batch, items: list[_Pending]) -> bool:
    """Whether *batch* (carrying *items*) must survive a power loss once committed: all but
    the write-aheads alone of calls that may run again (:data:`RERUNNABLE`). Losing those
    loses calls whose ``act`` has not returned: their outcomes commit in a synced commit
    before it does, which makes every commit before it durable too."""
    if batch.outcomes or batch.approvals:
        return True
    return not all(item.op is not None and item.op.effect in RERUNNABLE for item in items)


def _takes_synced(method: Callable[..., Any]) -> bool:
    """Whether *method* (a backend's ``run`` or ``run_now``) takes ``synced=``."""
    try:
        return "synced" in inspect.signature(method).parameters
    except (TypeError, ValueError):  # (no signature to be had: never passed)
        return False


def _tasks_runnable() -> bool:
    """Whether tasks are ready to run: ``trio.lowlevel.current_statistics().tasks_runnable``,
    read from trio's run queue itself where it is found (the statistics build two objects
    and ask the I/O manager: about 2 % of the instructions of a journaled sequential call,
    which asks once), else from the statistics. A test checks the two agree."""
    runq = getattr(getattr(_RUN_CONTEXT, "runner", None), "runq", None)
    if isinstance(runq, collections.deque):
        return bool(runq)
    return trio.lowlevel.current_statistics().tasks_runnable > 0


# (trio keeps the running run's state here; absent, or different, the statistics are asked)
_RUN_CONTEXT: object = getattr(
    getattr(getattr(trio, "_core", None), "_run", None), "GLOBAL_RUN_CONTEXT", None
)
