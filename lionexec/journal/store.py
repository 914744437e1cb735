"""What a journal stores, and the synchronous store interface every backend implements.

A journal keeps three kinds of rows (the same in every backend; see :mod:`.sql` for the
tables):

* **branches**: one per journaled branch;
* **messages**: each branch's history, in order (``seq`` is the message's position), each
  message as its strict-JSON record; requests are stored unlinked (the response that follows
  links them again when the history is loaded);
* **calls**: one per idempotency key that reached the write-ahead point: who holds it (branch,
  call id, request id), the normalized arguments, the tool's effect class, the attempts
  started, and once known the outcome with the response's record.

A :class:`Store` method runs in one transaction and is synchronous: backends call it in a
worker thread (SQL) or inline (memory). :meth:`Store.commit` applies a whole
:class:`Batch` atomically: the group commit of many calls' write-aheads and outcomes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

from .errors import JournalError

__all__ = [
    "Batch",
    "CallRow",
    "Claim",
    "MemoryStore",
    "MessageRow",
    "OutcomeOp",
    "RequestOp",
    "Store",
]

REQUESTED = "requested"
DONE = "done"


@attrs.frozen
class MessageRow:
    branch_id: str
    seq: int
    message_id: str
    kind: str
    body: str


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


@attrs.define
class Batch:
    """Everything one transaction writes, applied in this order."""

    branches: list[tuple[str, float]] = attrs.Factory(list)
    messages: list[MessageRow] = attrs.Factory(list)
    requests: list[RequestOp] = attrs.Factory(list)
    outcomes: list[OutcomeOp] = attrs.Factory(list)

    def __bool__(self) -> bool:
        return bool(self.branches or self.messages or self.requests or self.outcomes)


class Store(Protocol):
    """The journal's storage, one transaction per method. Synchronous."""

    def commit(self, batch: Batch) -> list[Claim]:
        """Apply *batch* atomically; return a :class:`Claim` per request op, in order.

        Raises if a message position of a branch is taken (another writer): nothing is
        applied then.
        """

    def branches(self) -> list[str]:
        """Every branch id, oldest first."""

    def messages(self, branch_id: str) -> list[MessageRow]:
        """A branch's messages in order (empty if unknown)."""

    def calls(self, branch_id: str | None, unfinished: bool) -> list[CallRow]:
        """Calls (of one branch, or all), oldest first; only those with no outcome if asked."""

    def call(self, key: str) -> CallRow | None:
        """The row of idempotency key *key*."""


def claim_for(op: RequestOp, row: CallRow) -> tuple[Claim, CallRow]:
    """The claim of *op* on *row* (the key's row before the op), and the row after it."""
    if row.request_id == op.request_id:
        after = attrs.evolve(row, attempts=row.attempts + 1)
        return Claim(after, True, row.attempts), after
    return Claim(row, False, row.attempts), row


def new_row(op: RequestOp) -> CallRow:
    return CallRow(
        key=op.key,
        branch_id=op.branch_id,
        call_id=op.call_id,
        request_id=op.request_id,
        function=op.function,
        arguments=op.arguments,
        effect=op.effect,
        attempts=0,
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
        self._calls: dict[str, CallRow] = {}
        self._by_call: dict[tuple[str, str], str] = {}

    def commit(self, batch: Batch) -> list[Claim]:
        # Check everything first: the commit is all or nothing.
        next_seq = {b: len(rows) for b, rows in self._messages.items()}
        ids: set[str] = set()
        for message in batch.messages:
            expected = next_seq.get(message.branch_id, 0)
            if message.seq != expected or message.message_id in self._message_ids | ids:
                raise JournalError(
                    f"another writer holds position {message.seq} of branch "
                    f"{message.branch_id} (or message id {message.message_id}): one branch is "
                    "journaled by one process at a time"
                )
            next_seq[message.branch_id] = expected + 1
            ids.add(message.message_id)
        for branch_id, at in batch.branches:
            self._branches.setdefault(branch_id, at)
        for message in batch.messages:
            self._messages.setdefault(message.branch_id, []).append(message)
            self._message_ids.add(message.message_id)
        claims = []
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
