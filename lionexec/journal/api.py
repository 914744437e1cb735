"""The journal: one trio API over every backend (memory, SQLite, PostgreSQL).

A :class:`Journal` keeps, durably (with a database backend), each journaled branch's history
and every call that reached the write-ahead point, so that after a restart
``await journal.branch(branch_id)`` returns the same conversation and
:meth:`Journal.recover` gives each call that was running exactly one response.

How it joins the act transaction: :meth:`Journal.branch` returns a
:class:`~lionexec.act.Branch` whose evidence sinks include a :class:`JournalSink`. The sink

* at the **write-ahead point** (before each attempt of a tool) commits the call's request
  and every message of the history not yet journaled, and claims the call's idempotency key;
  a key already completed answers the call with its recorded outcome (the tool does not run),
  a key held by a call still running waits for it, a key used with other arguments fails the
  call (:class:`~lionexec.journal.IdempotencyKeyConflict`); a call submitted to workers
  (:meth:`Journal.submit`, seen in the same transaction) claims nothing: it waits for the
  workers' answer, which becomes its recorded outcome (the tool does not run here);
* when the drain service hands it **recorded outcomes**, commits the rest of the history
  (responses included) and marks the calls done.

**Group commit.** Every commit goes through one queue per journal: the first caller to find
no commit running leads one, taking everything queued (write-aheads and outcomes of all
branches) into one transaction; the others wait for it. So N concurrent calls pay a few
transactions, not N.

**Outcomes ride along.** An outcome need only be durable before ``act()`` returns and before
anything depends on it, so an outcome write does not lead a commit at once: it *lingers*
(while a commit runs, then at most :attr:`Journal.linger` seconds of trio's clock) for the
next commit led by someone else, typically
the write-ahead of the next call of a sequential batch, and the two share one transaction.
It stops lingering as soon as someone waits for it: ``act()`` about to return (the sink feed
asks the sink to :meth:`~JournalSink.expedite`), a call waiting for its idempotency key, a
branch closing, :meth:`Journal.flush`.

**Bounded.** A group commit is shielded from cancellation (others wait for it), so it is
bounded instead: past :attr:`Journal.commit_timeout` seconds of the wall clock (not trio's
clock: a ``MockClock`` jumping while a commit runs in a thread must not fire it) its
waiters get a
:class:`~lionexec.journal.JournalConnectionError` ("the commit may or may not have landed")
and the backend abandons the transaction (SQLite: rolled back if it has not committed, a
statement running interrupted; PostgreSQL: its query cancelled on the server).
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import trio

from lionexec import _unstructure
from lionexec._jsonable import json_encoder, jsonable, utf8_text
from lionexec.act import Branch, EvidenceRecord, WriteAhead, WriteAheadReply, read_batch
from lionexec.act._evidence import SinkFeed
from lionexec.conversation import (
    ActionRequest,
    ActionResponse,
    ActionResponseContent,
    Message,
    MessageManager,
)
from lionexec.errors import HistoryError
from lionexec.governance import PermissionPolicy
from lionexec.tools import ActionManager, Tool

from . import approvals as _approvals
from . import queue
from .approvals import Approval, ApprovalGate
from .backend import Backend, MemoryBackend
from .errors import IdempotencyKeyConflict, JournalConnectionError, JournalError
from .store import (
    APPROVED,
    DONE,
    REJECTED,
    ApprovalRow,
    Batch,
    CallRow,
    Claim,
    MessageRow,
    OutcomeOp,
    Queued,
    RequestOp,
    Store,
    dumps_record,
)

if TYPE_CHECKING:
    import os

    from .recovery import RecoveryReport, Resolution

__all__ = ["Journal", "JournalSink", "JournaledCall", "MemoryJournal", "open_journal"]

T = TypeVar("T")

#: Longest wait between two looks at a key held by a call in another process.
_POLL_MAX = 0.5
#: How long an outcome write waits, at most, for a commit to share once none is running
#: (seconds of trio's clock).
LINGER = 0.002
#: How long a group commit may take before its waiters are told it failed (seconds).
COMMIT_TIMEOUT = 30.0


#: The longest idempotency key a journal keeps, in bytes of UTF-8: PostgreSQL indexes at most
#: about 2.7 kB of one, and every backend keeps the same keys.
MAX_KEY_BYTES = 2048


def storable_key(key: str, call_id: str, function: str) -> str:
    """*key* (a call's idempotency key) as the journal stores it: UTF-8 (a lone surrogate
    becomes U+FFFD). Raises :class:`~lionexec.journal.JournalError` naming the call if no
    backend could keep it (longer than :data:`MAX_KEY_BYTES`, or holding a NUL character):
    checked before the key joins a group commit, whose other calls a key refused by the
    database would fail too."""
    key = utf8_text(key)
    # (at most 4 bytes a character: most keys need no encoding to be measured)
    size = len(key.encode()) if len(key) > MAX_KEY_BYTES // 4 else 0
    if size > MAX_KEY_BYTES or "\x00" in key:
        why = f"is {size} bytes long (UTF-8)" if size > MAX_KEY_BYTES else "holds a NUL character"
        raise JournalError(
            f"the idempotency key {_cut(repr(key), 80)} of call {_cut(repr(call_id), 80)} "
            f"(tool {function!r}) {why}: a journal keeps keys of at most {MAX_KEY_BYTES} bytes "
            "without NUL characters (derive a shorter key, a digest say); the tool did not run"
        )
    return key


def canonical_json(value: Any) -> str:
    """*value* as compact, key-sorted strict JSON (how arguments are stored and compared)."""
    return _canonical(jsonable(value))


_canonical = json_encoder(sort_keys=True)


@attrs.frozen(kw_only=True)
class JournaledCall:
    """A call the journal holds: it reached the write-ahead point at least once.

    Attributes:
        idempotency_key: its key.
        branch_id: the branch it belongs to.
        call_id: its tool-call id.
        request_id: the id of its request message.
        function: the tool name.
        arguments: the normalized arguments it was invoked with.
        effect: the tool's effect class when it was invoked.
        attempts: invocations started (across restarts).
        done: whether its outcome is recorded.
        outcome: the recorded outcome's value, or ``None``.
        requested_at: when it was first journaled (``time.time()``).
        finished_at: when its outcome was, or ``None``.
    """

    idempotency_key: str
    branch_id: str
    call_id: str
    request_id: str
    function: str
    arguments: Any
    effect: str
    attempts: int
    done: bool
    outcome: str | None
    requested_at: float
    finished_at: float | None

    @classmethod
    def from_row(cls, row: CallRow) -> JournaledCall:
        return cls(
            idempotency_key=row.key,
            branch_id=row.branch_id,
            call_id=row.call_id,
            request_id=row.request_id,
            function=row.function,
            arguments=json.loads(row.arguments),
            effect=row.effect,
            attempts=row.attempts,
            done=row.state == DONE,
            outcome=row.outcome,
            requested_at=row.requested_at,
            finished_at=row.finished_at,
        )


@attrs.define(eq=False)
class _Pending:
    """One write queued for the group commit, and the task waiting for it."""

    sink: JournalSink
    op: RequestOp | None
    approval: ApprovalRow | None = None
    claim: Claim | Queued | None = None
    error: BaseException | None = None
    done: bool = False
    #: Waiting for a commit to take it (see :meth:`Journal._linger`), not to lead one.
    lingering: bool = False
    #: The task parked on it (:meth:`wait`), or ``None``.
    task: trio.lowlevel.Task | None = None

    async def wait(self) -> None:
        """Park until :meth:`wake` (a commit took this item, or it is its turn to lead, or it
        lingers and should look again). Each waiter is woken for its own item, not every
        waiter after every commit: a batch of N calls pays N wake-ups per commit it waits
        through otherwise (bench row "journal: 1k concurrent calls, SQLite")."""
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


class Journal:
    """Durable conversations and calls behind one trio API (see the module docs).

    Use it as ``async with SqliteJournal(path) as journal:`` (or
    :func:`open_journal`), then ``branch = await journal.branch(branch_id)`` and
    ``async with branch: await branch.act(...)``. Close the branches before the journal.

    Args:
        backend: where the journal is kept.
        commit_timeout: seconds a group commit may take (``None``: no bound); see below.

    Attributes:
        approval_expiry: seconds a parked call's approval stays pending before it expires
            (``None``: never; a finite number >= 0, else ``ValueError``). Default one day.
        clock: the clock approvals are dated by (``time.time``; tests may set another).
        commit_timeout: past this many seconds of the wall clock (default 30; checked about
            every tenth of it, at most every second) a group commit's waiters get a
            :class:`~lionexec.journal.JournalConnectionError` (the commit may or may not have
            landed: recovery resolves it) and the backend abandons it.
        linger: seconds an outcome write waits, once no commit is running, for a commit led
            by another caller to share (see the module docs); ``0`` commits each at once.
    """

    def __init__(self, backend: Backend, *, commit_timeout: float | None = COMMIT_TIMEOUT) -> None:
        if commit_timeout is not None and not commit_timeout > 0:
            raise ValueError(f"commit_timeout must be > 0 seconds or None, not {commit_timeout!r}")
        self.backend = backend
        self.commit_timeout = commit_timeout
        self.linger = LINGER
        self._watchdog: _Watchdog | None = None
        self._approval_expiry: float | None = 86_400.0
        self.clock: Callable[[], float] = time.time
        #: Approvals consumed (``used``) in this process for a call about to run here.
        self._consumed_here: OrderedDict[str, None] = OrderedDict()
        #: Branches being resumed here (:meth:`resume`): a lock each, and how many hold or
        #: wait for it.
        self._resuming: dict[str, tuple[trio.Lock, list[int]]] = {}
        self._open = False
        self._closed = False
        self._pending: list[_Pending] = []
        self._committing = False
        self._hurry = False  # someone waits for lingering outcomes
        self._key_waiters = 0  # calls here waiting for a key's outcome
        self._sinks: dict[str, JournalSink] = {}
        #: Keys held by calls running here; the event once someone waits for the outcome.
        self._held: dict[str, trio.Event | None] = {}
        self._inflight: dict[tuple[str, str], str] = {}
        # call id -> branch, of calls submitted here ("": to more than one branch)
        self._submitted: dict[str, str] = {}
        #: Transactions committed, and the write-aheads and outcome writes they carried.
        self.commits = 0
        self.committed_items = 0

    @property
    def approval_expiry(self) -> float | None:
        """Seconds a parked call's approval stays pending before it expires (``None``:
        never); a number >= 0 (``0``: at once). Default one day."""
        return self._approval_expiry

    @approval_expiry.setter
    def approval_expiry(self, seconds: float | None) -> None:
        if seconds is not None:
            try:
                valid = not isinstance(seconds, bool) and isinstance(seconds, int | float)
                value = float(seconds) if valid else math.nan
            except OverflowError:  # (an int past a float's range)
                value = math.inf
            if not 0 <= value < math.inf:
                shown = (
                    f"an int of {seconds.bit_length()} bits"
                    if isinstance(seconds, int) and seconds.bit_length() > 256
                    else repr(seconds)[:80]
                )
                raise ValueError(
                    f"approval_expiry must be a finite number of seconds >= 0 or None, not {shown}"
                )
            seconds = value
        self._approval_expiry = seconds

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.backend.target}>"

    @property
    def target(self) -> str:
        """The path or URL (without password) of this journal."""
        return self.backend.target

    # -- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect and migrate the schema. Raises :class:`~lionexec.journal.NotAJournalError`,
        :class:`~lionexec.journal.JournalSchemaError` or
        :class:`~lionexec.journal.JournalConnectionError` naming the target."""
        if self._closed:
            raise JournalError(f"{self!r} is closed")
        if not self._open:
            await self.backend.open()
            self._open = True
        else:
            await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> Journal:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

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

    async def _run(self, fn: Callable[[Store], T], *, cancellable: bool = True) -> T:
        if not self._open:
            raise JournalError(f"{self!r} is not open (use `async with journal:`)")
        return await self.backend.run(fn, cancellable=cancellable)

    # -- branches -----------------------------------------------------------------------------

    async def branch(self, branch_id: uuid.UUID | str | None = None, **kwargs: Any) -> Branch:
        """The journaled branch *branch_id*: its history as committed, journaled from now on.

        ``None`` starts a new branch. Keyword arguments go to :class:`~lionexec.act.Branch`
        (``registry=``, ``policy=``, ``sinks=`` more sinks, ...). Within one journal a branch
        that is open (not yet closed) is returned as is. Enter the branch (``async with``)
        before acting; leaving it commits what is left. A ``policy=`` is given the journal's
        escalation handler (:meth:`approving`): its ``escalate`` decisions become durable
        approvals.
        """
        bid = _branch_uuid(branch_id)
        name = str(bid)
        sink = self._live_sink(name)
        while sink is not None and sink.closing:  # its last commit first: then its history
            await sink.wait_closed()
            sink = self._live_sink(name)
        if sink is not None and sink.branch is not None:
            await trio.lowlevel.checkpoint()
            return sink.branch
        history = await self.history(name)
        sink = self._live_sink(name)  # again: another task may have opened it meanwhile
        if sink is not None and sink.branch is not None:
            return sink.branch
        sink = JournalSink(self, name, history)
        extra = tuple(kwargs.pop("sinks", ()))
        if kwargs.get("policy") is not None:
            kwargs["policy"] = self.approving(kwargs["policy"])
        branch = Branch(id=bid, messages=history, sinks=(sink, *extra), **kwargs)
        sink.branch = branch
        self._sinks[name] = sink
        return branch

    def _live_sink(self, name: str) -> JournalSink | None:
        """The sink of branch *name* if that branch is open here, or still closing (see
        :attr:`JournalSink.closing`). A branch left with an error never closes its sink (its
        drain service was cancelled): it is forgotten here."""
        sink = self._sinks.get(name)
        if sink is None or sink.branch is None:
            return sink
        if any(f.closed and not f.serving for f in sink._feeds()):
            del self._sinks[name]
            return None
        return sink

    def approving(self, policy: PermissionPolicy) -> PermissionPolicy:
        """*policy* (an equal copy) whose escalations are settled by this journal's approvals.

        Its ``escalate`` decisions park the call as a pending approval (in a branch of this
        journal) and allow it once when its approval is resumed; see
        :mod:`lionexec.journal.approvals`. A policy with its own ``on_escalate`` handler keeps
        it for calls that have no approval (nothing is parked then). Idempotent.
        """
        handler = policy.on_escalate
        if isinstance(handler, ApprovalGate) and handler.journal is self:
            return policy
        if isinstance(handler, ApprovalGate):
            handler = handler.fallback
        return attrs.evolve(policy, on_escalate=ApprovalGate(self, policy, handler))

    # -- approvals ----------------------------------------------------------------------------

    async def approvals(
        self, branch_id: uuid.UUID | str | None = None, state: str | None = "pending"
    ) -> list[Approval]:
        """The approvals (of one branch, or all) in *state* (``None``: every state), oldest
        first. Pending approvals past their ``expires_at`` are marked ``expired`` first."""
        _approvals.check_state(state)
        name = None if branch_id is None else str(_branch_uuid(branch_id))
        now = self.clock()

        def listing(store: Store) -> list[ApprovalRow]:
            store.expire_approvals(now)
            return store.approvals(name, state)

        return [Approval.from_row(row) for row in await self._run(listing)]

    async def approval(self, approval_id: str) -> Approval:
        """The approval *approval_id*; raises :class:`~lionexec.journal.ApprovalNotFound`."""
        if not _approvals.plausible_id(approval_id):
            await trio.lowlevel.checkpoint()
            raise _approvals.not_found(approval_id)
        row = await self._run(lambda store: store.approval(approval_id))
        if row is None:
            raise _approvals.not_found(approval_id)
        return Approval.from_row(row)

    async def approve(self, approval_id: str, *, by: str | None = None) -> Approval:
        """Approve a pending approval (one compare-and-set transaction); return it.

        Only decides: the call runs when its branch's holder calls :meth:`resume` (or
        :meth:`recover`), in this process or another. Raises
        :class:`~lionexec.journal.ApprovalNotFound`, or
        :class:`~lionexec.journal.ApprovalClosed` naming the state if it is not pending (an
        approval is decided once; one past its ``expires_at`` is marked ``expired``).
        Not cancellable once its transaction started.
        """
        return await _approvals.decide_or_raise(self, approval_id, APPROVED, by, None)

    async def reject(self, approval_id: str, *, reason: str, by: str | None = None) -> Approval:
        """Reject a pending approval with *reason*; its call is answered ``denied`` (with the
        reason) by the next :meth:`resume`. Errors as :meth:`approve`."""
        if not isinstance(reason, str) or not reason:
            raise ValueError(f"reason must be a non-empty string, not {reason!r}")
        return await _approvals.decide_or_raise(self, approval_id, REJECTED, by, reason)

    async def resume(
        self,
        tools: ActionManager | Iterable[Tool | Callable[..., Any]] | None = None,
        *,
        only_branch: uuid.UUID | str | None = None,
        **branch_kwargs: Any,
    ) -> list[Resolution]:
        """Apply every decided approval whose call is still unanswered; return what was done.

        Expired approvals are marked first. An ``approved`` call moves its approval to
        ``used`` (one compare-and-set: a call resumed by two processes at once runs once),
        then is proposed again to its branch through the whole transaction; a ``rejected`` or
        ``expired`` one is answered ``denied`` with the reason, once. A branch open in this
        journal is used as it is (it must be running); another is opened with
        ``registry=`` *tools* and *branch_kwargs* (give the same ``policy=``: it is asked
        again, and its approval allows the call). Without *tools*, approved calls of branches
        not open here are left for later. Returns
        :class:`~lionexec.journal.Resolution` records with action ``approved``, ``rejected``
        or ``expired``. *only_branch*: only that branch's approvals (a server resuming the
        conversation it holds, not others).

        One resume of a branch runs at a time in this journal; another waits for it. A
        resume called by a tool that a resume is running skips the branches that resume
        holds (it waits for the tool): their approvals decided since, a later resume applies.
        """
        only = None if only_branch is None else str(_branch_uuid(only_branch))
        return await _approvals.resume(self, tools, only_branch=only, **branch_kwargs)

    async def branch_ids(self) -> list[uuid.UUID]:
        """Every journaled branch, oldest first."""
        return [uuid.UUID(b) for b in await self._run(lambda store: store.branches())]

    async def history(self, branch_id: uuid.UUID | str) -> MessageManager:
        """A fresh copy of a branch's committed history (empty for an unknown branch).

        Raises :class:`~lionexec.journal.JournalError` naming the branch and message position
        if a stored message cannot be read.
        """
        name = str(_branch_uuid(branch_id))
        rows = await self._run(lambda store: store.messages(name))
        return load_history(name, rows)

    async def calls(
        self, branch_id: uuid.UUID | str | None = None, *, unfinished: bool = False
    ) -> list[JournaledCall]:
        """The journaled calls (of one branch, or all), oldest first."""
        name = None if branch_id is None else str(_branch_uuid(branch_id))
        rows = await self._run(lambda store: store.calls(name, unfinished))
        return [JournaledCall.from_row(row) for row in rows]

    async def export(self) -> dict[str, Any]:
        """Everything in the journal as strict JSON data: each branch's history (linked, as
        ``lionexec.serialization`` writes it) and every call."""
        branches = []
        for bid in await self.branch_ids():
            history = await self.history(bid)
            branches.append(
                {"branch_id": str(bid), "history": _unstructure.converter.unstructure(history)}
            )
        calls = [_unstructure.converter.unstructure(c) for c in await self.calls()]
        approvals = [
            _unstructure.converter.unstructure(a) for a in await self.approvals(state=None)
        ]
        export: dict[str, Any] = jsonable(  # (strict JSON that encodes as UTF-8)
            {"target": self.target, "branches": branches, "calls": calls, "approvals": approvals}
        )
        return export

    @trio.lowlevel.enable_ki_protection  # (its nursery: see lionexec.act.Branch._serve)
    async def flush(self) -> None:
        """Commit everything the open branches recorded so far (their outcomes included).

        ``Branch.act`` returns once its batch's outcomes are committed (the journal's sink is
        durable); this commits what else was recorded (messages added by hand, say). One
        group commit.
        """
        sinks = list(self._sinks.values())
        if not sinks:
            await trio.lowlevel.checkpoint()
            return
        async with trio.open_nursery() as nursery:
            for sink in sinks:
                nursery.start_soon(sink.flush)

    async def recover(
        self,
        tools: ActionManager | Iterable[Tool | Callable[..., Any]] | None,
        **branch_kwargs: Any,
    ) -> RecoveryReport:
        """Give every journaled call left without an outcome exactly one response.

        See :func:`lionexec.journal.recovery.recover`.
        """
        from .recovery import recover

        return await recover(self, tools, **branch_kwargs)

    # -- submitted calls (run by workers: lionexec.journal.worker) ----------------------------

    async def submit(self, branch_id: uuid.UUID | str, tool_calls: object) -> list[str]:
        """Queue proposed calls of branch *branch_id* for workers; return their call ids.

        *tool_calls* is what :meth:`Branch.act <lionexec.act.Branch.act>` takes (one call, a
        list, an assistant message: only its calls are queued). Nothing runs here: each
        request is committed with status ``queued``; a worker claims it and runs it through
        the whole transaction (validation, gate, policy, hooks) where the tool is. All or
        nothing: a call id already submitted for the branch, or one the branch's own
        ``act()`` has run (it is running, or ran) or answered, raises
        :class:`~lionexec.errors.DuplicateCallError` and nothing is queued. A request the
        history holds unanswered and never run (a turn recorded for workers to answer) may
        be submitted. The other way round, the branch's ``act()`` of a call id submitted
        here does not run it: it waits for the workers' answer and records it.
        Needs a SQL journal (SQLite, PostgreSQL). One transaction; cancellable before it
        commits.
        """
        name = str(_branch_uuid(branch_id))
        batch = read_batch(tool_calls, sender=name)
        requests = [proposal.to_request(sender=name) for proposal in batch.proposals]
        if requests:
            await self._run(lambda store: queue.submit(store, name, requests))
        else:
            await trio.lowlevel.checkpoint()
        for request in requests:
            known = self._submitted.setdefault(request.call_id, name)
            if known != name:
                self._submitted[request.call_id] = ""  # ambiguous: wait() needs branch_id
        return [request.call_id for request in requests]

    async def wait(
        self,
        call_ids: Sequence[str],
        *,
        branch_id: uuid.UUID | str | None = None,
        poll: float = 0.5,
        into: Branch | None = None,
    ) -> list[ActionResponse]:
        """Wait for the responses of submitted calls; return them in the order of *call_ids*.

        *branch_id* names their branch; without it, each call id must have been submitted by
        this journal object, to one branch. Wakes on PostgreSQL's ``NOTIFY`` (polling every
        *poll* seconds as a fallback), polls on SQLite. Blocks until every call is answered:
        bound it with ``trio.fail_after``. Raises :class:`~lionexec.journal.JournalError`
        naming a call id that was never submitted (or, without *branch_id*, was submitted to
        more than one branch).

        *into*: the branch the calls were submitted for; each request and its response are
        recorded in its history (linked, as ``act()`` records them; a pair already there is
        left as is), and committed if it is a branch of this journal. Raises
        :class:`ValueError` if a call belongs to another branch.
        """
        pairs: list[tuple[str, str]] = []
        for call_id in call_ids:
            if branch_id is not None:
                pairs.append((str(_branch_uuid(branch_id)), call_id))
            elif self._submitted.get(call_id) == "":
                raise JournalError(
                    f"call id {call_id!r} was submitted to more than one branch through this "
                    "journal object: pass branch_id= to say which"
                )
            elif call_id in self._submitted:
                pairs.append((self._submitted[call_id], call_id))
            else:
                raise JournalError(
                    f"call {call_id!r} was not submitted through this journal object: pass "
                    "branch_id= to wait for calls submitted elsewhere"
                )
        done = await self._answered(pairs, poll)
        responses = [r for r in (row.response_message() for row in done) if r]
        if into is not None:
            await self._record_into(into, done, responses)
        for branch, call_id in pairs:
            if self._submitted.get(call_id) == branch:
                del self._submitted[call_id]
        return responses

    async def _answered(
        self, pairs: Sequence[tuple[str, str]], poll: float
    ) -> list[queue.QueuedCall]:
        """The queue rows of *pairs* ``(branch_id, call_id)``, in order, once every one is
        answered (``done``): woken by ``NOTIFY`` on PostgreSQL (and every *poll* seconds),
        polling on SQLite. Cancellable. Raises :class:`JournalError` naming a call that is
        not queued."""
        shared = getattr(self.backend, "shared_listener", None)
        listener = shared("lionexec_done") if shared is not None else None
        delay = 0.005
        while True:
            seen = 0
            if listener is not None:
                await listener.start()  # one connection for every wait (again if it was lost)
                seen = listener.generation
            rows = await self._run(lambda store: queue.lookup(store, pairs))
            done: list[queue.QueuedCall] = []
            for (branch, call_id), row in zip(pairs, rows, strict=True):
                if row is None:
                    raise JournalError(f"call {call_id!r} of branch {branch} is not queued")
                if row.state == queue.DONE:
                    done.append(row)
            if len(done) == len(pairs):
                return done
            if listener is not None:
                await listener.wait(seen, poll)
            else:
                await trio.sleep(delay)
                delay = min(delay * 2, poll)

    async def _record_into(
        self, branch: Branch, rows: list[queue.QueuedCall], responses: list[ActionResponse]
    ) -> None:
        for row in rows:
            if row.branch_id != branch.name:
                raise ValueError(
                    f"call {row.call_id!r} belongs to branch {row.branch_id}, not {branch.name}"
                )
        history = branch.messages
        for row, response in zip(rows, responses, strict=True):
            if row.request is None:  # pragma: no cover - every queued row has its request
                continue
            existing = history.request_for_call_id(row.call_id)
            if existing is not None and existing.action_response_id is not None:
                continue  # already recorded
            request = existing if existing is not None else queue.load_request(row.request)
            history.record_action(request, response)
        sink = self._sinks.get(branch.name)
        if sink is not None and sink.branch is branch:
            await sink.flush()

    async def queued(self, branch_id: uuid.UUID | str | None = None) -> list[queue.QueuedCall]:
        """Every submitted call (of one branch, or all), oldest first, with its state, the
        worker that answered it, its fencing token, attempts and deferrals."""
        name = None if branch_id is None else str(_branch_uuid(branch_id))
        return await self._run(lambda store: queue.listing(store, name))

    # -- the group commit ---------------------------------------------------------------------

    async def _commit(
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
            raise JournalError(f"{self!r} is not open; close branches before their journal")
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
                if self._committing:
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

    def _expedite(self) -> None:
        """Someone waits for what was queued: lingering outcomes commit now."""
        self._hurry = True
        for item in self._pending:
            if item.lingering:
                item.wake()

    async def _commit_batch(self, batch: Batch) -> list[Claim | Queued]:
        """One transaction for *batch*: shielded from cancellation (others wait for it: not
        cut short), bounded instead by :attr:`commit_timeout` seconds of the wall clock (see
        the module docs)."""
        timeout = self.commit_timeout
        if timeout is None:
            with trio.CancelScope(shield=True):
                claims = await self._run(lambda store: store.commit(batch), cancellable=False)
            return claims
        if not self._open:  # (closed meanwhile: no watchdog thread for a closed journal)
            raise JournalError(f"{self!r} is not open (use `async with journal:`)")
        watchdog = self._watchdog
        if watchdog is None:
            watchdog = self._watchdog = _Watchdog(min(1.0, timeout / 10))
        # One scope both shields and bounds the commit: cancel() on a shielding scope still
        # cancels what runs in it (one scope less per commit, about 3 % of the trio thread's
        # time in a sequential batch: bench row "journal: 1k sequential calls, SQLite").
        with trio.CancelScope(shield=True) as bound:
            watchdog.watch(bound, timeout)
            try:
                return await self._run(lambda store: store.commit(batch), cancellable=True)
            finally:
                watchdog.unwatch(bound)
        raise JournalConnectionError(
            f"the journal at {self.target} did not answer within {timeout:g} s; the commit may "
            "or may not have landed: recovery resolves it"
        )

    async def _lead(self) -> None:
        self._committing = True
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
                        staged[sink] = sink._stage(batch)
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
            claims: list[Claim | Queued] = []
            if batch:
                claims = await self._commit_batch(batch)
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

    async def _wait_done(self, key: str) -> CallRow:
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
                self._expedite()  # its outcome may be lingering
                try:
                    with trio.move_on_after(delay):
                        await event.wait()
                finally:
                    self._key_waiters -= 1
                if not event.is_set():
                    await self._commit_holder(key)
                    delay = min(delay * 2, _POLL_MAX)
            else:
                await trio.sleep(delay)
                delay = min(delay * 2, _POLL_MAX)
            row = await self._run(lambda store: store.call(key))
            if row is not None and row.state == DONE:
                return row

    async def _commit_holder(self, key: str) -> None:
        """Commit what the branch of the call holding *key* here recorded since its last
        commit, if anything (its outcome, once known). A commit that fails is left for the
        next poll."""
        for (branch_id, _), held in list(self._inflight.items()):
            sink = self._sinks.get(branch_id)
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


class MemoryJournal(Journal):
    """A journal in memory: the API of the durable ones, for one process and tests.

    Its commits cannot hang (no database), so it has no ``commit_timeout`` (and no watchdog
    thread).
    """

    def __init__(self) -> None:
        super().__init__(MemoryBackend(), commit_timeout=None)


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
        from .postgres import PostgresJournal

        return PostgresJournal(text, **options)
    if "://" in text:
        raise JournalConnectionError(
            f"unknown journal URL scheme in {text.split('://', 1)[0]!r}://...: use a file path "
            "(SQLite), postgresql://... or ':memory:'"
        )
    from .sqlite import SqliteJournal

    return SqliteJournal(text, **options)


# -- the sink ---------------------------------------------------------------------------------


class JournalSink:
    """The evidence sink that journals one branch (made by :meth:`Journal.branch`).

    It mirrors the branch's history into the journal: each commit writes the messages
    appended since the last one, in order (:meth:`MessageManager.appended_since`). The journal
    keeps the whole history; a branch with ``retain=`` trims only what was committed.
    """

    #: :meth:`Branch.act` returns only once its batch's outcomes are committed.
    durable = True

    def __init__(self, journal: Journal, branch_id: str, history: MessageManager) -> None:
        self.journal = journal
        self.branch_id = branch_id
        self.history = history
        self.branch: Branch | None = None
        self._mirrored = history.appended
        #: How many of the history's messages (``MessageManager.appended``) the journal holds:
        #: a branch with ``retain=`` trims only among those.
        self.committed = history.appended
        self._registered = len(history) > 0

    def __repr__(self) -> str:
        return f"JournalSink({self.journal.target!r}, branch={self.branch_id})"

    async def write_ahead(self, entry: WriteAhead) -> WriteAheadReply | None:
        """Commit the request (and the history so far), claim the key; see the module docs.

        Blocks for one group commit (and, for a key held by a running call, until that call
        is answered; for a call submitted to workers, until they answered it: their answer
        is the call's recorded outcome, and nothing is claimed for it here). Cancellation
        while waiting: the call is recorded ``cancelled``; if its request was already in a
        commit, that commit completes.
        """
        request = entry.request
        context = entry.context
        tool = context.tool if context is not None else None
        key = context.idempotency_key if context is not None else None
        # (text a model sent: stored as UTF-8 whatever it holds)
        key = storable_key(
            key or f"{self.branch_id}/{request.call_id}", request.call_id, request.function
        )
        arguments = canonical_json(entry.arguments)
        op = RequestOp(
            key=key,
            branch_id=self.branch_id,
            call_id=utf8_text(request.call_id),
            request_id=str(request.id),
            function=utf8_text(request.function),
            arguments=arguments,
            effect=tool.effect if tool is not None else "unsafe",
            at=time.time(),
        )
        claim = await self.journal._commit(self, op)
        assert claim is not None
        if isinstance(claim, Queued):  # submitted to workers: theirs to run, never here
            submitted = queue.load_request(claim.request)
            proposed = canonical_json(request.arguments)
            if submitted.function != request.function or (
                canonical_json(submitted.arguments) != proposed
            ):
                raise IdempotencyKeyConflict(
                    f"call {request.call_id!r} (branch {self.branch_id}) was submitted to "
                    f"workers as tool {submitted.function!r} with arguments "
                    f"{_cut(canonical_json(submitted.arguments))}; act() proposes it as tool "
                    f"{request.function!r} with arguments {_cut(proposed)}",
                    key=key,
                    first_call_id=request.call_id,
                    call_id=request.call_id,
                )
            record = claim.response
            if record is None:
                pair = (self.branch_id, op.call_id)
                [answered] = await self.journal._answered([pair], _POLL_MAX)
                record = answered.response
                assert record is not None  # (a done row holds its response)
            return WriteAheadReply(recorded=queue.load_response(record).content)
        if claim.mine:
            if entry.attempt == 1 and claim.prior_attempts:
                return WriteAheadReply(prior_attempts=claim.prior_attempts)
            return None
        row = claim.row
        if row.function != op.function:  # a call id used again (after retain= trimmed it)
            raise IdempotencyKeyConflict(
                f"idempotency key {key!r} belongs to call {row.call_id!r} (branch "
                f"{row.branch_id}) of tool {row.function!r}; call {request.call_id!r} (branch "
                f"{self.branch_id}) is of tool {op.function!r}",
                key=key,
                first_call_id=row.call_id,
                call_id=request.call_id,
            )
        if row.arguments != arguments:
            raise IdempotencyKeyConflict(
                f"idempotency key {key!r} belongs to call {row.call_id!r} (branch "
                f"{row.branch_id}) with arguments {_cut(row.arguments)}; call "
                f"{request.call_id!r} (branch {self.branch_id}) passes other arguments "
                f"{_cut(arguments)}",
                key=key,
                first_call_id=row.call_id,
                call_id=request.call_id,
            )
        if row.state != DONE:
            row = await self.journal._wait_done(key)
        return WriteAheadReply(recorded=recorded_content(row))

    async def known_call_ids(self, call_ids: Sequence[str]) -> set[str]:
        """Which of *call_ids* the branch's journaled history has used (trimmed from memory
        or not); one read. :meth:`Branch.act <lionexec.act.Branch.act>` asks, before
        recording anything, when its history no longer holds every call (``retain=``)."""
        branch_id = self.branch_id
        wanted = [utf8_text(call_id) for call_id in call_ids]
        known = await self.journal._run(lambda store: store.known_call_ids(branch_id, wanted))
        return {call_id for call_id in call_ids if utf8_text(call_id) in known}

    async def write(self, records: Sequence[EvidenceRecord]) -> None:
        """Commit the history written since the last commit (the records' responses).

        Lingers (at most ``journal.linger`` seconds) to share the next commit led by another
        caller, unless someone waits (:meth:`expedite`).
        """
        await self.journal._commit(self, None, lazy=True)

    def expedite(self) -> None:
        """Someone waits for the records given to :meth:`write`: commit them without
        lingering. Called by the sink feed (``act()`` about to return, the feed closing)."""
        self.journal._expedite()

    async def flush(self) -> None:
        """Commit every message of the history not yet journaled (messages added by hand)."""
        await self.journal._commit(self, None)

    async def aclose(self) -> None:
        """Commit what is left; the journal forgets this branch (it can be opened again)."""
        try:
            if self.journal._open:
                await self.journal._commit(self, None)
            else:
                await trio.lowlevel.checkpoint()
        finally:
            if self.journal._sinks.get(self.branch_id) is self:
                del self.journal._sinks[self.branch_id]

    @property
    def closing(self) -> bool:
        """Whether its branch was left and its drain service, which makes the last commit,
        has not ended yet (until then, :meth:`Journal.branch` waits to reopen the branch:
        the history it loads must hold that commit)."""
        return any(f.closed and f.serving for f in self._feeds())

    async def wait_closed(self) -> None:
        """Wait until its drain service has ended (see :attr:`closing`)."""
        for feed in self._feeds():
            await feed.wait_stopped()

    def _feeds(self) -> list[SinkFeed]:
        branch = self.branch
        return [] if branch is None else [f for f in branch._feeds if f.sink is self]

    # -- staging (on the trio thread, by the commit's leader) ---------------------------------

    def _stage(self, batch: Batch) -> int:
        """Add the messages not yet journaled to *batch*; return where they start.

        All or nothing: if a message cannot be serialized, *batch* is left as it was.
        """
        start = self._mirrored
        messages = self.history.appended_since(start)
        now = time.time()
        mark = (len(batch.branches), len(batch.messages), len(batch.outcomes))
        try:
            self._stage_messages(batch, start, messages, now)
        except Exception:
            del batch.branches[mark[0] :], batch.messages[mark[1] :], batch.outcomes[mark[2] :]
            raise
        self._mirrored = start + len(messages)
        return start

    def _stage_messages(
        self, batch: Batch, start: int, messages: Sequence[Message], now: float
    ) -> None:
        if not self._registered:
            batch.branches.append((self.branch_id, now))
        branch_id = self.branch_id
        for offset, message in enumerate(messages):
            record = _record_of(message)
            if isinstance(message, ActionRequest):
                record["content"]["action_response_id"] = None  # linked again on loading
            body = dumps_record(record)
            call_id = outcome = None
            if isinstance(message, ActionRequest):
                call_id = utf8_text(message.content.call_id)
            elif isinstance(message, ActionResponse):
                request_id = message.content.action_request_id
                request = self.history[request_id] if request_id is not None else None
                if isinstance(request, ActionRequest):
                    call_id = utf8_text(request.content.call_id)
                    outcome = OutcomeOp(
                        branch_id=branch_id,
                        call_id=call_id,
                        outcome=message.content.outcome.value,
                        response=body,
                        at=now,
                    )
            batch.messages.append(
                MessageRow(branch_id, start + offset, record["id"], message.kind, body, call_id)
            )
            if outcome is not None:
                batch.outcomes.append(outcome)

    def _unstage(self, start: int) -> None:
        self._mirrored = start


_HOOKS: dict[type, Callable[[Any], Any]] = {}


def _record_of(message: Message) -> Any:
    """*message* unstructured by the converter, its class's hook looked up once (a third of
    the converter's ``unstructure`` time went to finding it again; bench row "journal: 1k
    concurrent calls, SQLite")."""
    cls = type(message)
    hook = _HOOKS.get(cls)
    if hook is None:
        hook = _HOOKS[cls] = _unstructure.converter.get_unstructure_hook(cls)
    return hook(message)


def recorded_content(row: CallRow) -> ActionResponseContent:
    """The response content recorded for a done call."""
    assert row.response is not None
    message = _unstructure.converter.structure(json.loads(row.response), Message)
    assert isinstance(message, ActionResponse)
    return message.content


def load_history(branch_id: str, rows: Sequence[MessageRow]) -> MessageManager:
    """Rebuild a history from its rows (responses link their requests again)."""
    history = MessageManager()
    for row in rows:
        try:
            message = _unstructure.converter.structure(json.loads(row.body), Message)
            history.add_message(message)
        except (ValueError, TypeError, KeyError, HistoryError, Exception) as exc:
            raise JournalError(
                f"message {row.seq} ({row.message_id}) of branch {branch_id} cannot be read: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    return history


def _branch_uuid(branch_id: uuid.UUID | str | None) -> uuid.UUID:
    if branch_id is None:
        return uuid.uuid4()
    if isinstance(branch_id, uuid.UUID):
        return branch_id
    try:
        return uuid.UUID(str(branch_id))
    except ValueError:
        raise ValueError(f"a branch id is a UUID, not {branch_id!r}") from None


def _cut(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
