"""The in-memory backend (:class:`~lionexec.journal.MemoryJournal`'s): a store in
dictionaries, for one process and tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import attrs
import trio

from ..errors import JournalError
from .base import (
    DONE,
    EXPIRED,
    PENDING,
    REQUESTED,
    ApprovalRow,
    Backend,
    Batch,
    CallRow,
    Claim,
    MessageRow,
    Queued,
    Store,
    claim_for,
    new_row,
)

__all__ = ["MemoryBackend", "MemoryStore"]

T = TypeVar("T")


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

    def messages_from(self, branch_id: str, start: int) -> list[MessageRow]:
        return self._messages.get(branch_id, [])[max(start, 0) :]

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


class MemoryBackend(Backend):
    """A :class:`MemoryStore`: fast, and gone when the process ends."""

    target = ":memory:"

    def __init__(self) -> None:
        self.store = MemoryStore()

    async def open(self) -> None:
        await trio.lowlevel.checkpoint()

    async def run(self, fn: Callable[[Store], T], *, cancellable: bool = True) -> T:
        await trio.lowlevel.checkpoint()
        return fn(self.store)

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()
