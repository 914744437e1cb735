"""The evidence sink that journals one branch: its write-ahead point and its outcomes.

How a journal joins the act transaction: :meth:`Journal.branch
<lionexec.journal.Journal.branch>` returns a :class:`~lionexec.act.Branch` whose evidence
sinks include a :class:`JournalSink`. The sink

* at the **write-ahead point** (before each attempt of a tool) commits the call's request
  and every message of the history not yet journaled, and claims the call's idempotency key;
  a key already completed answers the call with its recorded outcome (the tool does not run),
  a key held by a call still running waits for it, a key used with other arguments fails the
  call (:class:`~lionexec.journal.IdempotencyKeyConflict`); a call submitted to workers
  (:meth:`Journal.submit <lionexec.journal.Journal.submit>`, seen in the same transaction)
  claims nothing: it waits for the workers' answer, which becomes its recorded outcome (the
  tool does not run here);
* when the drain service hands it **recorded outcomes**, commits the rest of the history
  (responses included) and marks the calls done.

Every commit goes through the journal's group commit (:mod:`lionexec.journal._commit`).
The sink satisfies the durable half of :class:`~lionexec.act.EvidenceSink`: ``durable``,
``committed``, ``known_call_ids`` and ``expedite``.
"""

from __future__ import annotations

import time
import uuid
import weakref
from collections.abc import Sequence

import trio

from lionexec._jsonable import utf8_text
from lionexec.act import Branch, EvidenceRecord, WriteAhead, WriteAheadReply
from lionexec.act._evidence import SinkFeed
from lionexec.conversation import ActionRequest, ActionResponse, Message, MessageManager

from ._commit import POLL_MAX, CommitEngine
from ._history import message_body, recorded_content
from ._keys import canonical_json, cut, storable_key
from ._submitted import answered
from .backends.base import DONE, Batch, Queued, message_row, outcome_op, request_op
from .errors import IdempotencyKeyConflict
from .workers._queue import load_request, load_response

__all__ = ["JournalSink"]


class JournalSink:
    """The evidence sink that journals one branch (made by :meth:`Journal.branch`).

    It mirrors the branch's history into the journal: each commit writes the messages
    appended since the last one, in order (:meth:`MessageManager.appended_since`). The journal
    keeps the whole history; a branch with ``retain=`` trims only what was committed.

    Args:
        engine: the journal's group commit (a journal's own: :meth:`Journal.branch` gives it).
        branch_id: the branch's id (a UUID's text).
        history: the branch's history, as committed so far.
    """

    #: :meth:`Branch.act` returns only once its batch's outcomes are committed.
    durable = True

    def __init__(self, engine: CommitEngine, branch_id: str, history: MessageManager) -> None:
        self.engine = engine
        self.branch_id = branch_id
        self.history = history
        self._branch: weakref.ref[Branch] | None = None
        self._mirrored = history.appended
        #: How many of the history's messages (``MessageManager.appended``) the journal holds:
        #: a branch with ``retain=`` trims only among those.
        self.committed = history.appended
        self._registered = len(history) > 0
        #: The position (and the id's text) of each request staged and not yet claimed or
        #: answered, by id: a write-ahead that knows it may be appended to the log (see
        #: backends._log).
        self._positions: dict[uuid.UUID, tuple[int, str]] = {}
        #: Its last commit failed: the next may write the same messages again.
        self._rewriting = False

    def __repr__(self) -> str:
        return f"JournalSink({self.engine.target!r}, branch={self.branch_id})"

    @property
    def branch(self) -> Branch | None:
        """The branch this sink journals (``None`` before it is set, or once the branch is
        gone). Held weakly: the branch holds its sinks, and a dropped branch, its history
        with it, is freed at once rather than at the next full collection."""
        ref = self._branch
        return None if ref is None else ref()

    @branch.setter
    def branch(self, branch: Branch | None) -> None:
        self._branch = None if branch is None else weakref.ref(branch)

    async def write_ahead(self, entry: WriteAhead) -> WriteAheadReply | None:
        """Commit the request (and the history so far), claim the key; see the module docs.

        Blocks for one group commit (and, for a key held by a running call, until that call
        is answered; for a call submitted to workers, until they answered it: their answer
        is the call's recorded outcome, and nothing is claimed for it here). Cancellation
        while waiting: the call is recorded ``cancelled``; if its request was already in a
        commit, that commit completes.
        """
        request = entry.request
        content = request.content
        context = entry.context
        tool = context.tool if context is not None else None
        key = context.idempotency_key if context is not None else None
        # (text a model sent: stored as UTF-8 whatever it holds)
        call_id, function = utf8_text(content.call_id), utf8_text(content.function)
        key = storable_key(key or f"{self.branch_id}/{call_id}", content.call_id, function)
        arguments = canonical_json(entry.arguments)
        staged = self._positions.pop(request.id, None)
        seq, request_id = (None, str(request.id)) if staged is None else staged
        op = request_op(
            key,
            self.branch_id,
            call_id,
            request_id,
            function,
            arguments,
            tool.effect if tool is not None else "unsafe",
            time.time(),
            entry.attempt == 1,
            seq,
        )
        claim = await self.engine.commit(self, op)
        assert claim is not None
        if isinstance(claim, Queued):  # submitted to workers: theirs to run, never here
            submitted = load_request(claim.request)
            proposed = canonical_json(request.arguments)
            if submitted.function != request.function or (
                canonical_json(submitted.arguments) != proposed
            ):
                raise IdempotencyKeyConflict(
                    f"call {request.call_id!r} (branch {self.branch_id}) was submitted to "
                    f"workers as tool {submitted.function!r} with arguments "
                    f"{cut(canonical_json(submitted.arguments))}; act() proposes it as tool "
                    f"{request.function!r} with arguments {cut(proposed)}",
                    key=key,
                    first_call_id=request.call_id,
                    call_id=request.call_id,
                )
            record = claim.response
            if record is None:
                pair = (self.branch_id, op.call_id)
                [done] = await answered(self.engine, [pair], POLL_MAX)
                record = done.response
                assert record is not None  # (a done row holds its response)
            return WriteAheadReply(recorded=load_response(record).content)
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
                f"{row.branch_id}) with arguments {cut(row.arguments)}; call "
                f"{request.call_id!r} (branch {self.branch_id}) passes other arguments "
                f"{cut(arguments)}",
                key=key,
                first_call_id=row.call_id,
                call_id=request.call_id,
            )
        if row.state != DONE:
            row = await self.engine.wait_done(key)
        return WriteAheadReply(recorded=recorded_content(row))

    async def known_call_ids(self, call_ids: Sequence[str]) -> set[str]:
        """Which of *call_ids* the branch's journaled history has used (trimmed from memory
        or not); one read. :meth:`Branch.act <lionexec.act.Branch.act>` asks, before
        recording anything, when its history no longer holds every call (``retain=``)."""
        branch_id = self.branch_id
        wanted = [utf8_text(call_id) for call_id in call_ids]
        known = await self.engine.run(lambda store: store.known_call_ids(branch_id, wanted))
        return {call_id for call_id in call_ids if utf8_text(call_id) in known}

    async def write(self, records: Sequence[EvidenceRecord]) -> None:
        """Commit the history written since the last commit (the records' responses).

        Lingers (at most ``journal.linger`` seconds) to share the next commit led by another
        caller, unless someone waits (:meth:`expedite`). Returns at once, without a
        checkpoint, if a commit has carried the whole history already (the records are
        in it): the write-ahead of another call often has.
        """
        if records and self.committed >= self.history.appended:
            return
        await self.engine.commit(self, None, lazy=True)

    def expedite(self) -> None:
        """Someone waits for the records given to :meth:`write`: commit them without
        lingering. Called by the sink feed (``act()`` about to return, the feed closing)."""
        self.engine.expedite()

    async def flush(self) -> None:
        """Commit every message of the history not yet journaled (messages added by hand)."""
        await self.engine.commit(self, None)

    async def aclose(self) -> None:
        """Commit what is left; the journal forgets this branch (it can be opened again)."""
        try:
            if self.engine.is_open:
                await self.engine.commit(self, None)
            else:
                await trio.lowlevel.checkpoint()
        finally:
            if self.engine.sinks.get(self.branch_id) is self:
                del self.engine.sinks[self.branch_id]

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

    def _stage(self, batch: Batch, *, defer_answers: bool = False) -> int:
        """Add the messages not yet journaled to *batch*; return where they start.

        *defer_answers*: only those before the first response (a commit that need not be
        synced: see :mod:`lionexec.journal._commit`), unless a request comes after it (the
        request is staged, and so is everything before it). All or nothing: if a message
        cannot be serialized, *batch* is left as it was.
        """
        start = self._mirrored
        messages = self.history.appended_since(start)
        if defer_answers:
            messages = before_answers(messages)
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
        if self._rewriting:
            batch.plain = False
        branch_id = self.branch_id
        positions = self._positions
        rows = batch.messages
        seq = start
        for message in messages:
            message_id = str(message.id)
            body = message_body(message, message_id)
            call_id = None
            if isinstance(message, ActionRequest):
                call_id = utf8_text(message.content.call_id)
                positions[message.id] = (seq, message_id)
            elif isinstance(message, ActionResponse):
                request_id = message.content.action_request_id
                if request_id is not None:
                    positions.pop(request_id, None)
                    request = self.history[request_id]
                    if isinstance(request, ActionRequest):
                        call_id = utf8_text(request.content.call_id)
                        outcome = message.content.outcome.value
                        batch.outcomes.append(outcome_op(branch_id, call_id, outcome, body, now))
            rows.append(message_row(branch_id, seq, message_id, message.kind, body, call_id))
            seq += 1

    @property
    def _unstaged(self) -> bool:
        """Whether the history holds messages not staged yet (answers deferred)."""
        return self._mirrored < self.history.appended

    def _unstage(self, start: int) -> None:
        self._mirrored = start
        self._rewriting = True


def before_answers(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """*messages* up to their first response (excluded), if no request follows it; else all
    of them (a request must be staged, and every message before it)."""
    for index, message in enumerate(messages):
        if isinstance(message, ActionResponse):
            for later in messages[index + 1 :]:
                if isinstance(later, ActionRequest):
                    return messages
            return messages[:index]
    return messages
