"""What a journal stores, and the synchronous store interface every backend implements.

A journal keeps three kinds of rows (the same in every backend; see :mod:`.sql` for the
tables):

* **branches**: one per journaled branch;
* **messages**: each branch's history, in order (``seq`` is the message's position), each
  message as its strict-JSON record; requests are stored unlinked (the response that follows
  links them again when the history is loaded);
* **approvals**: one per call an ``escalate`` decision parked (see :mod:`.approvals`): the
  call, the digest of its normalized arguments and of the policy that asked, and its state
  (``pending`` → ``approved`` → ``used``, or ``rejected`` / ``expired``);
* **calls**: one per idempotency key that reached the write-ahead point: who holds it (branch,
  call id, request id), the normalized arguments, the tool's effect class, the attempts
  started, and once known the outcome with the response's record.

A :class:`Store` method runs in one transaction and is synchronous: backends call it in a
worker thread (SQL) or inline (memory). :meth:`Store.commit` applies a whole
:class:`Batch` atomically: the group commit of many calls' write-aheads and outcomes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import attrs

from lionexec._jsonable import is_unicode, json_encoder

from .errors import JournalError

__all__ = [
    "ApprovalRow",
    "Batch",
    "CallRow",
    "Claim",
    "MemoryStore",
    "MessageRow",
    "OutcomeOp",
    "Queued",
    "RequestOp",
    "Store",
    "dumps_record",
]

REQUESTED = "requested"
DONE = "done"

#: The states of an approval.
PENDING = "pending"
APPROVED = "approved"
USED = "used"
REJECTED = "rejected"
EXPIRED = "expired"
APPROVAL_STATES = (PENDING, APPROVED, USED, REJECTED, EXPIRED)


@attrs.frozen
class MessageRow:
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

    def __bool__(self) -> bool:
        return bool(
            self.branches or self.messages or self.requests or self.outcomes or self.approvals
        )


class Store(Protocol):
    """The journal's storage, one transaction per method. Synchronous."""

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


def claim_for(op: RequestOp, row: CallRow) -> tuple[Claim, CallRow]:
    """The claim of *op* on *row* (the key's row before the op), and the row after it."""
    if row.request_id == op.request_id:
        after = attrs.evolve(row, attempts=row.attempts + 1)
        return Claim(after, True, row.attempts), after
    return Claim(row, False, row.attempts), row


def new_row(op: RequestOp, *, attempts: int = 0) -> CallRow:
    """The row of a key first requested by *op* (before its claim: no attempt yet)."""
    return CallRow(
        key=op.key,
        branch_id=op.branch_id,
        call_id=op.call_id,
        request_id=op.request_id,
        function=op.function,
        arguments=op.arguments,
        effect=op.effect,
        attempts=attempts,
        state=REQUESTED,
        outcome=None,
        response=None,
        requested_at=op.at,
        finished_at=None,
    )


class MemoryStore:
    """A :class:`Store` in dictionaries: the journal of one process, lost when it ends."""

    def __init__(self) -> None:
        self._branches: dict[str, float] = {}
        self._messages: dict[str, list[MessageRow]] = {}
        self._message_ids: set[str] = set()
        # each branch's call ids: of its requests, of its responses
        self._call_ids: dict[tuple[str, bool], set[str]] = {}
        self._calls: dict[str, CallRow] = {}
        self._by_call: dict[tuple[str, str], str] = {}
        self._approvals: dict[str, ApprovalRow] = {}
        self._approval_of: dict[tuple[str, str], str] = {}

    def commit(self, batch: Batch) -> list[Claim | Queued]:
        # (No queue in memory: Journal.submit needs a SQL journal, so no op is Queued.)
        # Check everything first: the commit is all or nothing.
        next_seq = {b: len(rows) for b, rows in self._messages.items()}
        ids: set[str] = set()
        new: list[MessageRow] = []
        for message in batch.messages:
            stored = self._messages.get(message.branch_id, ())
            if message.seq < len(stored) and stored[message.seq].message_id == message.message_id:
                continue  # written by a commit that landed but was reported failed
            expected = next_seq.get(message.branch_id, 0)
            taken = message.message_id in self._message_ids or message.message_id in ids
            if message.seq != expected or taken:
                raise JournalError(
                    f"another writer holds position {message.seq} of branch "
                    f"{message.branch_id} (or message id {message.message_id}): one branch is "
                    "journaled by one process at a time"
                )
            next_seq[message.branch_id] = expected + 1
            ids.add(message.message_id)
            new.append(message)
        for branch_id, at in batch.branches:
            self._branches.setdefault(branch_id, at)
        for message in new:
            self._messages.setdefault(message.branch_id, []).append(message)
            self._message_ids.add(message.message_id)
            if message.call_id is not None:
                answer = (message.branch_id, message.kind == "action_response")
                self._call_ids.setdefault(answer, set()).add(message.call_id)
        for approval in batch.approvals:
            pair = (approval.branch_id, approval.call_id)
            if approval.approval_id not in self._approvals and pair not in self._approval_of:
                self._approvals[approval.approval_id] = approval
                self._approval_of[pair] = approval.approval_id
        claims: list[Claim | Queued] = []
        for op in batch.requests:
            key = op.key
            row = self._calls.get(key)
            if row is None:
                held = self._by_call.get((op.branch_id, op.call_id))
                row = self._calls[held] if held is not None else new_row(op)
                key = row.key
            claim, after = claim_for(op, row)
            self._calls[key] = after
            self._by_call.setdefault((after.branch_id, after.call_id), key)
            claims.append(claim)
        for outcome in batch.outcomes:
            key_of = self._by_call.get((outcome.branch_id, outcome.call_id))
            row = self._calls.get(key_of) if key_of is not None else None
            if row is not None and row.state == REQUESTED:
                self._calls[row.key] = attrs.evolve(
                    row,
                    state=DONE,
                    outcome=outcome.outcome,
                    response=outcome.response,
                    finished_at=outcome.at,
                )
        return claims

    def branches(self) -> list[str]:
        return sorted(self._branches, key=self._branches.__getitem__)

    def messages(self, branch_id: str) -> list[MessageRow]:
        return list(self._messages.get(branch_id, ()))

    def known_call_ids(
        self, branch_id: str, call_ids: Sequence[str], *, answered: bool = False
    ) -> set[str]:
        return self._call_ids.get((branch_id, answered), set()).intersection(call_ids)

    def calls(self, branch_id: str | None, unfinished: bool) -> list[CallRow]:
        rows: Sequence[CallRow] = list(self._calls.values())
        return [
            row
            for row in rows
            if (branch_id is None or row.branch_id == branch_id)
            and not (unfinished and row.state != REQUESTED)
        ]

    def call(self, key: str) -> CallRow | None:
        return self._calls.get(key)

    def approval(self, approval_id: str) -> ApprovalRow | None:
        return self._approvals.get(approval_id)

    def approval_of(self, branch_id: str, call_id: str) -> ApprovalRow | None:
        approval_id = self._approval_of.get((branch_id, call_id))
        return None if approval_id is None else self._approvals[approval_id]

    def approvals(self, branch_id: str | None, state: str | None) -> list[ApprovalRow]:
        rows = [
            row
            for row in self._approvals.values()
            if (branch_id is None or row.branch_id == branch_id)
            and (state is None or row.state == state)
        ]
        return sorted(rows, key=lambda row: (row.created_at, row.approval_id))

    def set_approval(
        self,
        approval_id: str,
        expected: str,
        state: str,
        at: float,
        by: str | None,
        reason: str | None,
    ) -> ApprovalRow | None:
        row = self._approvals.get(approval_id)
        if row is None or row.state != expected:
            return None
        after = attrs.evolve(row, state=state, decided_at=at, decided_by=by, reason=reason)
        self._approvals[approval_id] = after
        return after

    def expire_approvals(self, now: float) -> int:
        expired = [
            row
            for row in self._approvals.values()
            if row.state == PENDING and row.expires_at is not None and row.expires_at <= now
        ]
        for row in expired:
            self._approvals[row.approval_id] = attrs.evolve(
                row, state=EXPIRED, decided_at=now, decided_by=None, reason=None
            )
        return len(expired)


def dumps_record(record: Any) -> str:
    """*record* (a message as the journal stores it) as compact strict JSON text that
    encodes as UTF-8.

    Non-ASCII text is kept as it is (readable in the database); a lone surrogate (a string a
    model or a tool produced, ``"\\ud800"``), which UTF-8 cannot hold, makes the whole record
    written with ``\\u`` escapes instead: lossless (reading it back gives the same string,
    so a branch's history after a restart is the one before) and stored like any other text.
    """
    text = _dumps(record)
    if is_unicode(text):
        return text
    return _dumps_ascii(record)


_dumps = json_encoder()
_dumps_ascii = json_encoder(ensure_ascii=True)
