"""The journal: one trio API over every backend (memory, SQLite, PostgreSQL).

A :class:`Journal` keeps, durably (with a database backend), each journaled branch's history
and every call that reached the write-ahead point, so that after a restart
``await journal.branch(branch_id)`` returns the same conversation and
:meth:`Journal.recover` gives each call that was running exactly one response.

The class is a facade over the parts it owns, each in a module of its own:

* the **group commit** and the connection (:class:`~lionexec.journal._commit.CommitEngine`):
  every write goes through one queue into few transactions, outcomes linger to share the
  next one, and a commit is bounded by ``commit_timeout`` seconds of the wall clock;
* the **sink** of each journaled branch (:class:`~lionexec.journal.JournalSink`): how a
  journal joins the act transaction, at the write-ahead point and with recorded outcomes;
* **approvals** (:class:`~lionexec.journal._approvals.ApprovalDesk`), **recovery**
  (:mod:`lionexec.journal._recovery`) and **calls submitted to workers**
  (:class:`~lionexec.journal._submitted.SubmittedCalls`);
* the **backend** it was given (:mod:`lionexec.journal.backends`), which knows nothing of
  the journal.
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import trio

from lionexec import _unstructure
from lionexec._jsonable import jsonable
from lionexec.act import Branch
from lionexec.conversation import ActionResponse, MessageManager
from lionexec.governance import PermissionPolicy
from lionexec.tools import ActionManager, Tool

from ._approvals import Approval, ApprovalDesk, BranchOpener
from ._commit import COMMIT_TIMEOUT, CommitEngine
from ._history import JournaledCall
from ._keys import branch_uuid
from ._recovery import recover
from ._report import RecoveryReport, Resolution
from ._sink import JournalSink
from ._submitted import SubmittedCalls
from .backends import MemoryBackend
from .backends.base import Backend, Store
from .workers import QueuedCall

__all__ = ["Journal", "MemoryJournal"]

T = TypeVar("T")


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
            by another caller to share (see :mod:`lionexec.journal._commit`); ``0`` commits each
            at once.
    """

    def __init__(self, backend: Backend, *, commit_timeout: float | None = COMMIT_TIMEOUT) -> None:
        if commit_timeout is not None and not commit_timeout > 0:
            raise ValueError(f"commit_timeout must be > 0 seconds or None, not {commit_timeout!r}")
        name = f"<{type(self).__name__} {backend.target}>"
        self._engine = CommitEngine(backend, name=name, commit_timeout=commit_timeout)
        self._approvals = ApprovalDesk(self._engine, _weakly(self.branch))
        self._submitted = SubmittedCalls(self._engine)

    @property
    def backend(self) -> Backend:
        """Where the journal is kept."""
        return self._engine.backend

    @property
    def commit_timeout(self) -> float | None:
        """Seconds a group commit may take before its waiters are told it failed (``None``:
        no bound); see the class docs."""
        return self._engine.commit_timeout

    @commit_timeout.setter
    def commit_timeout(self, seconds: float | None) -> None:
        self._engine.commit_timeout = seconds

    @property
    def linger(self) -> float:
        """Seconds an outcome write waits, once no commit is running, for a commit led by
        another caller to share (``0`` commits each at once)."""
        return self._engine.linger

    @linger.setter
    def linger(self, seconds: float) -> None:
        self._engine.linger = seconds

    @property
    def clock(self) -> Callable[[], float]:
        """The clock approvals are dated by (``time.time``; tests may set another)."""
        return self._approvals.clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self._approvals.clock = clock

    @property
    def approval_expiry(self) -> float | None:
        """Seconds a parked call's approval stays pending before it expires (``None``:
        never); a number >= 0 (``0``: at once). Default one day."""
        return self._approvals.expiry

    @approval_expiry.setter
    def approval_expiry(self, seconds: float | None) -> None:
        self._approvals.expiry = seconds

    @property
    def commits(self) -> int:
        """Transactions committed (group commits)."""
        return self._engine.commits

    @property
    def committed_items(self) -> int:
        """The write-aheads and outcome writes the committed transactions carried."""
        return self._engine.committed_items

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
        await self._engine.open()

    async def __aenter__(self) -> Journal:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Disconnect. Idempotent. Branches still open can no longer commit."""
        await self._engine.aclose()

    async def _run(self, fn: Callable[[Store], T], *, cancellable: bool = True) -> T:
        """``fn(store)`` in one transaction of this journal (for the workers of
        :mod:`lionexec.journal.workers`, which run the queue's transactions through it)."""
        return await self._engine.run(fn, cancellable=cancellable)

    # -- branches -----------------------------------------------------------------------------

    async def branch(
        self,
        branch_id: uuid.UUID | str | None = None,
        *,
        since: MessageManager | None = None,
        **kwargs: Any,
    ) -> Branch:
        """The journaled branch *branch_id*: its history as committed, journaled from now on.

        ``None`` starts a new branch. Keyword arguments go to :class:`~lionexec.act.Branch`
        (``registry=``, ``policy=``, ``sinks=`` more sinks, ...). Within one journal a branch
        that is open (not yet closed) is returned as is (held weakly: one nothing else refers
        to any more is freed, and a new one is made). Enter the branch (``async with``)
        before acting; leaving it commits what is left. A ``policy=`` is given the journal's
        escalation handler (:meth:`approving`): its ``escalate`` decisions become durable
        approvals. *since*: the history of this branch as this process last committed it
        (the ``messages`` of a branch of this journal, closed since): brought up to date as
        :meth:`history` does, it becomes the new branch's history (so the closed branch must
        no longer be used), and only what was committed after it is read. (A branch open here
        is returned as is, *since* unused.)
        """
        bid = branch_uuid(branch_id)
        name = str(bid)
        engine = self._engine
        sink = engine.live_sink(name)
        while sink is not None and sink.closing:  # its last commit first: then its history
            await sink.wait_closed()
            sink = engine.live_sink(name)
        if sink is not None and sink.branch is not None:
            await trio.lowlevel.checkpoint()
            return sink.branch
        history = await self.history(name, since=since)
        sink = engine.live_sink(name)  # again: another task may have opened it meanwhile
        if sink is not None and sink.branch is not None:
            return sink.branch
        sink = JournalSink(engine, name, history)
        extra = tuple(kwargs.pop("sinks", ()))
        if kwargs.get("policy") is not None:
            kwargs["policy"] = self.approving(kwargs["policy"])
        branch = Branch(id=bid, messages=history, sinks=(sink, *extra), **kwargs)
        sink.branch = branch
        engine.sinks[name] = sink
        return branch

    def approving(self, policy: PermissionPolicy) -> PermissionPolicy:
        """*policy* (an equal copy) whose escalations are settled by this journal's approvals.

        Its ``escalate`` decisions park the call as a pending approval (in a branch of this
        journal) and allow it once when its approval is resumed; see
        :class:`~lionexec.journal.Approval`. A policy with its own ``on_escalate`` handler keeps
        it for calls that have no approval (nothing is parked then). Idempotent.
        """
        return self._approvals.approving(policy)

    # -- approvals ----------------------------------------------------------------------------

    async def approvals(
        self, branch_id: uuid.UUID | str | None = None, state: str | None = "pending"
    ) -> list[Approval]:
        """The approvals (of one branch, or all) in *state* (``None``: every state), oldest
        first. Pending approvals past their ``expires_at`` are marked ``expired`` first."""
        return await self._approvals.listing(branch_id, state)

    async def approval(self, approval_id: str) -> Approval:
        """The approval *approval_id*; raises :class:`~lionexec.journal.ApprovalNotFound`."""
        return await self._approvals.get(approval_id)

    async def approve(self, approval_id: str, *, by: str | None = None) -> Approval:
        """Approve a pending approval (one compare-and-set transaction); return it.

        Only decides: the call runs when its branch's holder calls :meth:`resume` (or
        :meth:`recover`), in this process or another. Raises
        :class:`~lionexec.journal.ApprovalNotFound`, or
        :class:`~lionexec.journal.ApprovalClosed` naming the state if it is not pending (an
        approval is decided once; one past its ``expires_at`` is marked ``expired``).
        Not cancellable once its transaction started.
        """
        return await self._approvals.approve(approval_id, by)

    async def reject(self, approval_id: str, *, reason: str, by: str | None = None) -> Approval:
        """Reject a pending approval with *reason*; its call is answered ``denied`` (with the
        reason) by the next :meth:`resume`. Errors as :meth:`approve`."""
        return await self._approvals.reject(approval_id, reason, by)

    async def resume(
        self,
        tools: ActionManager | Iterable[Tool | Callable[..., Any]] | None = None,
        *,
        only_branch: uuid.UUID | str | None = None,
        **branch_kwargs: Any,
    ) -> list[Resolution]:
        """Apply every decided approval whose call is still unanswered; return what was done.

        Expired approvals are marked first. An ``approved`` call's approval is claimed
        (moved to ``used`` in one transaction per branch: resumes in any number of processes
        or journal objects at once run each call once; the one that took nothing reports it
        ``resumed_elsewhere``, with its outcome if it has one; a claim whose run does not
        start is given back), then is proposed again to its branch through the whole
        transaction; a ``rejected`` or
        ``expired`` one is answered ``denied`` with the reason, once. A branch open in this
        journal is used as it is (it must be running); another is opened with
        ``registry=`` *tools* and *branch_kwargs* (give the same ``policy=``: it is asked
        again, and its approval allows the call). Without *tools*, approved calls of branches
        not open here are left for later. Returns
        :class:`~lionexec.journal.Resolution` records with action ``approved``, ``rejected``,
        ``expired`` or ``resumed_elsewhere``. *only_branch*: only that branch's approvals (a
        server resuming the conversation it holds, not others).

        One resume of a branch runs at a time in this journal; another waits for it. A
        resume called by a tool that a resume is running skips the branches that resume
        holds (it waits for the tool): their approvals decided since, a later resume applies.
        """
        return await self._approvals.resume(tools, only_branch=only_branch, **branch_kwargs)

    def committed_history(self, branch: Branch) -> MessageManager | None:
        """The history of *branch*, a branch of this journal that was closed, if the journal
        holds every message of it: what to keep, and pass as ``since=`` to the next
        :meth:`branch` (or :meth:`history`) of that id. ``None`` if the branch is still open,
        is not this journal's, trimmed its history (``retain=``), or closed without committing
        everything (its last commit failed). Synchronous."""
        history = branch.messages
        for sink in branch.sinks:
            if isinstance(sink, JournalSink) and sink.engine is self._engine:
                closed = all(feed.closed and not feed.serving for feed in sink._feeds())
                if (
                    closed
                    and self._engine.sinks.get(sink.branch_id) is not sink
                    and sink.committed == history.appended == len(history)
                ):
                    return history
        return None

    async def branch_ids(self) -> list[uuid.UUID]:
        """Every journaled branch, oldest first."""
        return [uuid.UUID(b) for b in await self._run(lambda store: store.branches())]

    async def history(
        self, branch_id: uuid.UUID | str, *, since: MessageManager | None = None
    ) -> MessageManager:
        """A fresh copy of a branch's committed history (empty for an unknown branch).

        *since*: a history of this branch that this process kept (the history of a branch
        of this journal, closed since, whose records were all committed). Only the messages
        committed after it (by another process, a recovery, a resume) are read, and appended
        to it: *since* itself is returned, up to date. It is checked first, in the same
        transaction: if the journal does not hold its last message at that position (it
        holds messages never committed, or trimmed ones, or it is another branch's), the
        whole history is read instead and a fresh copy returned (``result is since`` tells
        which). Reading only what is new makes the cost of a request in a long conversation
        independent of its length (see ``docs/journal.md``).

        Raises :class:`~lionexec.journal.JournalError` naming the branch and message position
        if a stored message cannot be read (*since* then holds the messages before it: drop
        it).
        """
        return await self._engine.history(str(branch_uuid(branch_id)), since)

    async def calls(
        self, branch_id: uuid.UUID | str | None = None, *, unfinished: bool = False
    ) -> list[JournaledCall]:
        """The journaled calls (of one branch, or all), oldest first."""
        name = None if branch_id is None else str(branch_uuid(branch_id))
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
        await self._engine.flush()

    async def recover(
        self,
        tools: ActionManager | Iterable[Tool | Callable[..., Any]] | None,
        **branch_kwargs: Any,
    ) -> RecoveryReport:
        """Give every journaled call left without an outcome exactly one response.

        Each request of a branch's committed history that has no response is resolved by
        the tool's effect class: a ``pure``, ``idempotent`` or ``keyed`` call is run again
        through ``Branch.act`` with the same idempotency key (``rerun``); an ``unsafe`` one is
        answered ``interrupted`` (it may or may not have taken effect) unless its
        ``reconcile`` hook finds out, or ``cancelled`` (``not_started``) if it never reached
        its write-ahead commit. Decided approvals are applied first (:meth:`resume`); calls
        submitted to workers are left to them.

        *tools*: the registry (or tools) to re-run calls with; a safe call whose tool is not
        among them is left unanswered (``left``) for a recovery that has it (``None``: every
        safe call; ``unsafe`` ones need no tool). *branch_kwargs* go to :meth:`branch`
        (``policy=``, ``hooks=``, ...). Branches open in this journal are skipped (their
        calls are running, not lost). Returns a :class:`~lionexec.journal.RecoveryReport`.
        """
        return await recover(self._approvals, tools, **branch_kwargs)

    # -- submitted calls (run by workers: lionexec.journal.workers) ---------------------------

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
        return await self._submitted.submit(branch_id, tool_calls)

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
        return await self._submitted.wait(call_ids, branch_id=branch_id, poll=poll, into=into)

    async def queued(self, branch_id: uuid.UUID | str | None = None) -> list[QueuedCall]:
        """Every submitted call (of one branch, or all), oldest first, with its state, the
        worker that answered it, its fencing token, attempts and deferrals."""
        return await self._submitted.queued(branch_id)


class MemoryJournal(Journal):
    """A journal in memory: the API of the durable ones, for one process and tests.

    Its commits cannot hang (no database), so it has no ``commit_timeout`` (and no watchdog
    thread).
    """

    def __init__(self) -> None:
        super().__init__(MemoryBackend(), commit_timeout=None)


def _weakly(branch: Callable[..., Any]) -> BranchOpener:
    """*branch* (a journal's bound :meth:`Journal.branch`), the journal held weakly: the
    journal holds its approval desk, and a desk holding the journal would keep a dropped
    journal for the next full collection instead of freeing it."""
    method = weakref.WeakMethod(branch)

    async def open_branch(branch_id: uuid.UUID | str | None = None, **kwargs: Any) -> Branch:
        opener = method()
        assert opener is not None  # (the desk is only used through its journal)
        result: Branch = await opener(branch_id, **kwargs)
        return result

    return open_branch
