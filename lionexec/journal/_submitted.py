"""Calls submitted to workers, as the journal sees them: queued here, answered elsewhere.

:meth:`Journal.submit <lionexec.journal.Journal.submit>` queues calls (rows of the work
queue, :mod:`lionexec.journal.workers`); :meth:`Journal.wait
<lionexec.journal.Journal.wait>` waits for the workers' answers, and so does a branch's
``act()`` of a call submitted here (:class:`~lionexec.journal.JournalSink`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import trio

from lionexec.act import Branch, read_batch
from lionexec.conversation import ActionResponse

from ._commit import CommitEngine
from ._keys import branch_uuid
from .errors import JournalError
from .workers import _queue as queue

__all__ = ["SubmittedCalls", "answered"]


class SubmittedCalls:
    """The calls a journal object submitted, and the waits for their answers.

    Args:
        engine: the journal's commit engine (its connection and open branches).
    """

    def __init__(self, engine: CommitEngine) -> None:
        self.engine = engine
        # call id -> branch, of calls submitted here ("": to more than one branch)
        self._submitted: dict[str, str] = {}

    async def submit(self, branch_id: uuid.UUID | str, tool_calls: object) -> list[str]:
        """Queue proposed calls for workers (see :meth:`Journal.submit
        <lionexec.journal.Journal.submit>`)."""
        name = str(branch_uuid(branch_id))
        batch = read_batch(tool_calls, sender=name)
        requests = [proposal.to_request(sender=name) for proposal in batch.proposals]
        if requests:
            await self.engine.run(lambda store: queue.submit(store, name, requests))
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
        """Wait for the responses of submitted calls (see :meth:`Journal.wait
        <lionexec.journal.Journal.wait>`)."""
        pairs: list[tuple[str, str]] = []
        for call_id in call_ids:
            if branch_id is not None:
                pairs.append((str(branch_uuid(branch_id)), call_id))
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
        done = await answered(self.engine, pairs, poll)
        responses = [r for r in (row.response_message() for row in done) if r]
        if into is not None:
            await self._record_into(into, done, responses)
        for branch, call_id in pairs:
            if self._submitted.get(call_id) == branch:
                del self._submitted[call_id]
        return responses

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
        sink = self.engine.sinks.get(branch.name)
        if sink is not None and sink.branch is branch:
            await sink.flush()

    async def queued(self, branch_id: uuid.UUID | str | None = None) -> list[queue.QueuedCall]:
        """Every submitted call (of one branch, or all), oldest first."""
        name = None if branch_id is None else str(branch_uuid(branch_id))
        return await self.engine.run(lambda store: queue.listing(store, name))


async def answered(
    engine: CommitEngine, pairs: Sequence[tuple[str, str]], poll: float
) -> list[queue.QueuedCall]:
    """The queue rows of *pairs* ``(branch_id, call_id)``, in order, once every one is
    answered (``done``): woken by ``NOTIFY`` on PostgreSQL (and every *poll* seconds),
    polling on SQLite. Cancellable. Raises :class:`JournalError` naming a call that is
    not queued."""
    shared = getattr(engine.backend, "shared_listener", None)
    listener = shared("lionexec_done") if shared is not None else None
    delay = 0.005
    while True:
        seen = 0
        if listener is not None:
            await listener.start()  # one connection for every wait (again if it was lost)
            seen = listener.generation
        rows = await engine.run(lambda store: queue.lookup(store, pairs))
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
