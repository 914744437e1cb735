"""The backend interface of a journal: the async :class:`Backend`, the synchronous
:class:`Store` it runs, and the rows they exchange.

A journal keeps four kinds of rows (the same in every backend; see
:mod:`lionexec.journal.backends._sql` for the tables):

* **branches**: one per journaled branch;
* **messages**: each branch's history, in order (``seq`` is the message's position), each
  message as its strict-JSON record; requests are stored unlinked (the response that follows
  links them again when the history is loaded);
* **approvals**: one per call an ``escalate`` decision parked (see
  :meth:`Journal.approvals <lionexec.journal.Journal.approvals>`): the call, the digest of
  its normalized arguments and of the policy that asked, and its state (``pending`` →
  ``approved`` → ``used``, or ``rejected`` / ``expired``);
* **calls**: one per idempotency key that reached the write-ahead point: who holds it (branch,
  call id, request id), the normalized arguments, the tool's effect class, the attempts
  started, and once known the outcome with the response's record.

A :class:`Store` method runs in one transaction and is synchronous: backends call it in a
worker thread (SQL) or inline (memory). :meth:`Store.commit` applies a whole
:class:`Batch` atomically: the group commit of many calls' write-aheads and outcomes.

The journal (:class:`~lionexec.journal.Journal`) picks a backend and owns it; a backend
knows nothing of the journal above it.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Sequence
from typing import Final, Literal, Protocol, TypeVar, get_args, runtime_checkable

import attrs

from lionexec._slots import builder

__all__ = [
    "NOT_NOW",
    "RERUNNABLE",
    "ApprovalRow",
    "Backend",
    "Batch",
    "CallRow",
    "Claim",
    "MessageRow",
    "NotNow",
    "OutcomeOp",
    "Queued",
    "RequestOp",
    "Store",
]

T = TypeVar("T")

REQUESTED = "requested"
DONE = "done"

#: The states of an approval.
PENDING = "pending"
APPROVED = "approved"
USED = "used"
REJECTED = "rejected"
EXPIRED = "expired"
APPROVAL_STATES = (PENDING, APPROVED, USED, REJECTED, EXPIRED)

#: The effect classes whose calls may run again: recovery runs such a call again when the
#: journal holds its request and no response. So the write-ahead of such a call need not
#: survive a power loss (see :meth:`Backend.run`'s *synced*): losing it loses a call whose
#: ``act`` had not returned, which recovery would have run again anyway.
RERUNNABLE: Final = frozenset({"pure", "idempotent", "keyed"})


@attrs.frozen
class MessageRow:
    """One message of a branch's history, as the journal stores it (``seq``: its position)."""

    branch_id: str
    seq: int
    message_id: str
    kind: str
    body: str
    #: A request's or response's call id (schema version 4), else ``None``.
    call_id: str | None = None


@attrs.frozen(kw_only=True)
class CallRow:
    """One journaled call (see :class:`~lionexec.journal.JournaledCall` for the public view)."""

    key: str
    branch_id: str
    call_id: str
    request_id: str
    function: str
    arguments: str
    effect: str
    attempts: int
    state: str
    outcome: str | None
    response: str | None
    requested_at: float
    finished_at: float | None


@attrs.frozen(kw_only=True)
class ApprovalRow:
    """One approval (see :class:`~lionexec.journal.Approval` for the public view)."""

    approval_id: str
    idempotency_key: str
    branch_id: str
    call_id: str
    request_id: str
    function: str
    arguments: str
    digest: str
    policy: str
    rule: str | None
    escalation: str
    state: str
    created_at: float
    expires_at: float | None
    decided_at: float | None
    decided_by: str | None
    reason: str | None


@attrs.frozen(kw_only=True)
class RequestOp:
    """Claim *key* for a call about to be invoked, and count the attempt."""

    key: str
    branch_id: str
    call_id: str
    request_id: str
    function: str
    arguments: str
    effect: str
    at: float
    #: The call's first attempt under this key (not a retry): a plain commit may append it
    #: without reading the key's row (there is none, unless the key was claimed elsewhere).
    fresh: bool = False
    #: The position of its request message in the branch's history, if the caller knows it.
    seq: int | None = None


@attrs.frozen(kw_only=True)
class OutcomeOp:
    """Record a call's outcome (the call is found by branch and call id)."""

    branch_id: str
    call_id: str
    outcome: str
    response: str
    at: float


@attrs.frozen
class Claim:
    """What :meth:`Store.commit` found for one :class:`RequestOp`.

    Attributes:
        row: the key's row after the commit.
        mine: the row belongs to the op's request (its attempt was counted).
        prior_attempts: attempts counted for the key before this one.
    """

    row: CallRow
    mine: bool
    prior_attempts: int


@attrs.frozen
class Queued:
    """What :meth:`Store.commit` found for a :class:`RequestOp` whose call is submitted to
    workers (a row of ``lionexec_queue``, seen in the transaction of the commit): nothing was
    claimed for it (no key, no attempt); the workers run it.

    Attributes:
        request: the queue row's request record (what was submitted under that call id).
        response: the queue row's response record once the workers answered, else ``None``.
    """

    request: str
    response: str | None


@attrs.define
class Batch:
    """Everything one transaction writes, applied in this order."""

    branches: list[tuple[str, float]] = attrs.Factory(list)
    messages: list[MessageRow] = attrs.Factory(list)
    requests: list[RequestOp] = attrs.Factory(list)
    outcomes: list[OutcomeOp] = attrs.Factory(list)
    approvals: list[ApprovalRow] = attrs.Factory(list)
    #: Nothing of it may have been written already (a branch whose last commit failed may
    #: write the same messages again): a log may append it as it is.
    plain: bool = True

    def __bool__(self) -> bool:
        return bool(
            self.branches or self.messages or self.requests or self.outcomes or self.approvals
        )

    def size(self) -> int:
        """How many rows the batch writes (or updates)."""
        return (
            len(self.branches)
            + len(self.messages)
            + len(self.requests)
            + len(self.outcomes)
            + len(self.approvals)
        )


@runtime_checkable
class Store(Protocol):
    """The journal's storage, one transaction per method. Synchronous.

    Contract:

    * **Who calls it, from where.** Only a :class:`Backend`, inside :meth:`Backend.run`: a SQL
      backend calls ``fn(store)`` on a thread of its own (a writer thread, a worker thread of
      ``trio.to_thread``), the memory backend inline on the trio thread. A store object is
      valid for that one call: it must not be kept.
    * **Transactions.** Each method the journal's code calls through ``fn`` runs in the
      transaction of that :meth:`Backend.run` call; everything ``fn`` did commits together, or
      nothing does (``fn`` raising rolls it back).
    * **Blocking.** Methods may block (disk, network): they run off the trio thread. They must
      not call into trio (no checkpoints; ``trio.from_thread`` is not needed by any of them).
    * **Cancellation** does not reach a store: a backend abandons or waits for the whole
      transaction (see :meth:`Backend.run`).
    * **Errors.** A method raises :class:`~lionexec.journal.JournalError` (naming what was
      wrong) when the journal refuses the operation (another writer took a message position,
      say); the backend turns a database's own errors into
      :class:`~lionexec.journal.JournalError` or
      :class:`~lionexec.journal.JournalConnectionError`.
    * **The work queue** of submitted calls needs SQL: a store that can hold it also has a
      ``tx`` attribute (its transaction: ``execute``, ``executemany`` and ``execute_count``
      with ``?`` placeholders) and ``bulk`` (true on PostgreSQL); on a store without ``tx``
      (in memory), submitting calls and running workers raise
      :class:`~lionexec.journal.JournalError`.
    * **Optional:** ``messages_from(branch_id, start) -> list[MessageRow]``, a branch's
      messages at positions ``start`` and after, in order (how a history kept in memory is
      brought up to date: :meth:`Journal.history <lionexec.journal.Journal.history>` with
      ``since=``). A store without it is read whole (:meth:`messages`) instead.
    """

    def commit(self, batch: Batch) -> list[Claim | Queued]:
        """Apply *batch* atomically; return a :class:`Claim` per request op, in order, or a
        :class:`Queued` for an op whose call is submitted to workers (claimed by nothing).

        Raises if a message position of a branch is taken (another writer): nothing is
        applied then.
        """

    def branches(self) -> list[str]:
        """Every branch id, oldest first."""

    def messages(self, branch_id: str) -> list[MessageRow]:
        """A branch's messages in order (empty if unknown)."""

    def known_call_ids(
        self, branch_id: str, call_ids: Sequence[str], *, answered: bool = False
    ) -> set[str]:
        """Which of *call_ids* a request journaled in branch *branch_id* has (with
        *answered*: a response)."""

    def calls(self, branch_id: str | None, unfinished: bool) -> list[CallRow]:
        """Calls (of one branch, or all), oldest first; only those with no outcome if asked."""

    def call(self, key: str) -> CallRow | None:
        """The row of idempotency key *key*."""

    def approval(self, approval_id: str) -> ApprovalRow | None:
        """The approval *approval_id*."""

    def approval_of(self, branch_id: str, call_id: str) -> ApprovalRow | None:
        """The approval of call *call_id* of branch *branch_id* (a call has at most one)."""

    def approvals(self, branch_id: str | None, state: str | None) -> list[ApprovalRow]:
        """Approvals (of one branch, or all; in one state, or all), oldest first."""

    def set_approval(
        self,
        approval_id: str,
        expected: str,
        state: str,
        at: float,
        by: str | None,
        reason: str | None,
    ) -> ApprovalRow | None:
        """Move approval *approval_id* from state *expected* to *state* (compare and set, one
        statement); the row after, or ``None`` if it was not in state *expected*."""

    def expire_approvals(self, now: float) -> int:
        """Move every pending approval whose ``expires_at`` is at or before *now* to
        ``expired``; return how many."""


class NotNow(enum.Enum):
    """What :meth:`Backend.run_now` returns when the transaction cannot run at once."""

    NOT_NOW = "not now"


#: :meth:`Backend.run_now` could not run the transaction at once: use :meth:`Backend.run`.
NOT_NOW: Final = NotNow.NOT_NOW


@runtime_checkable
class Backend(Protocol):
    """Runs :class:`Store` methods, each in one transaction: where a journal is kept.

    A journal owns one backend: it calls :meth:`open` once, then :meth:`run` any number of
    times (from many tasks at once), then :meth:`aclose`. Every method is called from the
    trio thread of one ``trio.run``.

    Contract:

    * :meth:`open` connects and brings the schema up to date; it fails with
      :class:`~lionexec.journal.NotAJournalError`,
      :class:`~lionexec.journal.JournalSchemaError` or
      :class:`~lionexec.journal.JournalConnectionError` naming :attr:`target`, leaving
      nothing open.
    * :meth:`run` may be called by several tasks at once; each call is one transaction,
      serialized or concurrent as the database allows. It blocks the calling task only: the
      work runs off the trio thread or waits on a socket with trio (a database), or is quick
      (memory). It raises what ``fn`` raised (the transaction rolled back), or a
      :class:`~lionexec.journal.JournalError` /
      :class:`~lionexec.journal.JournalConnectionError` for the database's own failures.
    * Cancellation of :meth:`run`: with ``cancellable=False`` the call waits for its
      transaction to end, then lets the cancellation through (a group commit others wait for
      is never abandoned half-way); with ``cancellable=True`` the backend abandons the
      transaction as best it can (rolled back if it has not committed; a statement running
      interrupted, a server-side query cancelled) and ``trio.Cancelled`` propagates.
    * :meth:`aclose` disconnects; it is idempotent, and no :meth:`run` is called after it.

    Attributes:
        target: what the backend opened, printable (a path, or a URL without its password).
    """

    target: str

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and bring the schema up to date (migrations)."""

    @abc.abstractmethod
    async def run(self, fn: Callable[[Store], T], *, cancellable: bool = True) -> T:
        """Run ``fn(store)`` in one transaction: off the trio thread for a database, or on it
        without blocking (waiting on a socket with trio, as PostgreSQL's group commits do).

        With *cancellable* false, a cancellation waits for the transaction to end (a group
        commit is never abandoned half-way); otherwise the backend stops the query as best
        it can (PostgreSQL cancels it on the server).

        Optionally, a keyword ``synced: bool = True``: the journal passes ``synced=False``
        for a transaction that need not survive a power loss, only a crash of the process
        (write-aheads of calls that may run again: :data:`RERUNNABLE`). A backend that syncs
        every commit (``durability="power"``) may then commit without waiting for the
        disk, provided a later synced commit makes this one durable too (as one log, WAL or
        write-ahead log, does). A backend whose ``run`` (or ``run_now``) has no such
        keyword is never passed it, and syncs as it always does.

        Optionally, an attribute ``syncs_commits: bool``: true where a synced commit waits
        for a disk flush (an ``fsync``, the server's WAL flush) that one run with
        ``synced=False`` does not. The journal then keeps the answers of calls (their
        responses and outcomes) out of commits that need no sync, and commits them in a
        synced commit of their own (see docs/journal.md, Durability). Without it, answers ride
        along with whatever commit comes next.
        """

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Disconnect. Idempotent."""

    def run_now(self, fn: Callable[[Store], T]) -> T | NotNow:
        """Run ``fn(store)`` in one transaction on the calling thread (the trio thread) if it
        can run at once, or return :data:`NOT_NOW` (then :meth:`run` it).

        Optional (this default always returns :data:`NOT_NOW`): a backend offers it where a
        small transaction costs less than a hand-off to another thread and never waits, so a
        backend must return :data:`NOT_NOW` rather than wait for a lock, a thread, the network
        or a disk flush. It is not cancellable and not bounded by the journal's
        ``commit_timeout``: the journal calls it only for small group commits.
        """
        return NOT_NOW


def claim_for(op: RequestOp, row: CallRow) -> tuple[Claim, CallRow]:
    """The claim of *op* on *row* (the key's row before the op), and the row after it."""
    if row.request_id == op.request_id:
        after = attrs.evolve(row, attempts=row.attempts + 1)
        return Claim(after, True, row.attempts), after
    return Claim(row, False, row.attempts), row


def new_row(op: RequestOp, *, attempts: int = 0) -> CallRow:
    """The row of a key first requested by *op* (before its claim: no attempt yet)."""
    return _call_row(
        op.key,
        op.branch_id,
        op.call_id,
        op.request_id,
        op.function,
        op.arguments,
        op.effect,
        attempts,
        REQUESTED,
        None,
        None,
        op.at,
        None,
    )


def fresh_claim(op: RequestOp) -> Claim:
    """The claim of *op* on a key no row held: a new row, its first attempt counted."""
    return _claim(new_row(op, attempts=1), True, 0)


# Trusted constructors of the rows every journaled call makes, for values the journal made
# itself (no attrs initializer: on a frozen class an ``object.__setattr__`` per field, a
# measurable part of a call's cost). A test checks each builds what the class builds.
message_row = builder(MessageRow, "branch_id", "seq", "message_id", "kind", "body", "call_id")
outcome_op = builder(OutcomeOp, "branch_id", "call_id", "outcome", "response", "at")
request_op = builder(
    RequestOp,
    "key",
    "branch_id",
    "call_id",
    "request_id",
    "function",
    "arguments",
    "effect",
    "at",
    "fresh",
    "seq",
)
_call_row = builder(
    CallRow,
    "key",
    "branch_id",
    "call_id",
    "request_id",
    "function",
    "arguments",
    "effect",
    "attempts",
    "state",
    "outcome",
    "response",
    "requested_at",
    "finished_at",
)
_claim = builder(Claim, "row", "mine", "prior_attempts")


#: What a committed transaction survives (a backend's ``durability=``). ``"process"``: a
#: crash of the process that wrote it (killed, out of memory); a power loss or an OS crash
#: may lose the last commits (never corrupt the journal). ``"power"``: a power loss too:
#: every commit is on disk (fsync'd) before it returns, except the write-aheads of calls that
#: may run again (:data:`RERUNNABLE`), which a later synced commit makes durable (the one
#: that records their outcomes, before ``act`` returns, at the latest).
Durability = Literal["process", "power"]


def check_durability(value: object) -> Durability:
    """*value*, if it is a durability; else a :class:`ValueError` naming the choices."""
    if value not in get_args(Durability):
        raise ValueError(
            f"durability must be 'process' (survive a crash of the process) or 'power' "
            f"(survive a power loss: every commit fsync'd), not {value!r}"
        )
    return value  # type: ignore[return-value]
