"""The evidence sink contract, and the records a sink is given.

An evidence sink is where a :class:`~lionexec.act.Branch` writes its calls' evidence
asynchronously: a file (:class:`~lionexec.act.JsonlSink`), a durable journal. Every sink
implements :class:`EvidenceSink`; a sink that must hold a batch before :meth:`Branch.act
<lionexec.act.Branch.act>` returns (a journal) implements :class:`DurableEvidenceSink` too.
Both are checked duck-typed: a sink needs no base class, and a member of the durable half it
lacks is simply not used.

The records are :class:`WriteAhead` (what is known of a call just before its tool is
invoked), :class:`WriteAheadReply` (what a sink may answer then) and :class:`EvidenceRecord`
(one call's whole evidence, once it is recorded).
"""

from __future__ import annotations

import contextvars
from collections.abc import Collection, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from lionexec.conversation import ActionRequest, ActionResponse, ActionResponseContent
from lionexec.governance import CallContext

from .._log import ActionLogRecord

__all__ = [
    "DurableEvidenceSink",
    "EvidenceRecord",
    "EvidenceSink",
    "WriteAhead",
    "WriteAheadReply",
]


@attrs.frozen
class WriteAhead:
    """What is known of a call just before its tool is invoked.

    Attributes:
        branch_id: the branch's id, as a string.
        request: the recorded request (already in the history).
        arguments: the validated, authorized (and transformed) arguments the tool will get.
        attempt: which attempt is about to start (1 for the first).
        context: the call context (tool, idempotency key), when the transaction has one.
    """

    branch_id: str
    request: ActionRequest
    arguments: Any
    attempt: int
    context: CallContext | None = None


@attrs.frozen
class WriteAheadReply:
    """What a sink may answer at the write-ahead point (``None`` means: go on).

    Attributes:
        recorded: an outcome already recorded for this call's idempotency key: the tool is
            not invoked and the call is answered with it (attempts ``0``).
        prior_attempts: attempts made before this process took the call over (a journaled
            call re-run after a crash); added to the call's attempt count. Given only for
            ``attempt == 1``.
    """

    recorded: ActionResponseContent | None = None
    prior_attempts: int = 0


@attrs.frozen
class EvidenceRecord:
    """One call's whole evidence: the linked pair, and the log record if it was invoked.

    Attributes:
        request: the recorded request.
        response: the recorded response linked to it.
        log: the log record, for a call that was invoked; ``None`` otherwise.
        task_context: a copy of the :mod:`contextvars` context of the task that recorded
            the call (the caller of ``act()``, or the call's own task in a concurrent batch,
            which inherits the caller's context), taken as the call was recorded; ``None``
            unless a sink of the branch asks for it with a true ``captures_context``
            attribute. A tracing sink reads the caller's current span from it: the sink's
            :meth:`~EvidenceSink.write` runs in the drain service's task, whose context is
            not the caller's.
    """

    request: ActionRequest
    response: ActionResponse
    log: ActionLogRecord | None
    task_context: contextvars.Context | None = None


@runtime_checkable
class EvidenceSink(Protocol):
    """A destination for evidence that is written asynchronously (a file, a journal).

    A :class:`~lionexec.act.Branch` gives each of its sinks a bounded buffer and a drain
    service (started when the branch is entered, ``async with branch:``, or served,
    ``nursery.start(branch.serve)``). Every call is recorded first in the branch's history
    and in-memory log (synchronously, all or nothing), then offered to each sink's buffer;
    the service hands the buffered records to :meth:`write`. No sink I/O ever runs inside
    the recording step, and every method is called on the trio thread, in the branch's trio
    run: a sink that blocks on I/O must do it in a worker thread (as
    :class:`~lionexec.act.JsonlSink` does) or with trio's own I/O.

    **Ordering.** For one call, :meth:`write_ahead` (once per attempt) comes before the call's
    record reaches :meth:`write`. Records reach :meth:`write` in the order their calls were
    recorded. :meth:`aclose` comes after the last :meth:`write`.

    **Concurrency.** :meth:`write` is called by one task (the drain service), one call at a
    time. :meth:`write_ahead` is called from the calls' own tasks: the calls of a concurrent
    batch, or of several batches, may be in it at once, and while :meth:`write` runs.

    **Overflow.** An invoked call waits for room in every sink's buffer (it reserves it at
    the write-ahead point), so its record is never dropped. The record of a call that never
    reached the write-ahead point (invalid, denied, cancelled before it started) is offered
    without waiting: if the buffer is full then, this sink does not get it, and the drop is
    counted (:attr:`SinkStatistics.dropped <lionexec.act.SinkStatistics.dropped>`) and
    reported on the branch's failure log.

    **Errors.** A sink's exceptions never change what was recorded. One from
    :meth:`write_ahead` fails that one call. One from :meth:`write` is reported on the
    branch's :attr:`~lionexec.act.Branch.failures` (``where="sink"``) and counted in the
    feed's :class:`~lionexec.act.SinkStatistics` (of a durable sink, ``act()`` then raises
    :class:`~lionexec.errors.NotDurableError`). One from :meth:`aclose` is reported when the
    close ran under a cancellation, and propagates otherwise.

    **Context.** A sink with a true ``captures_context`` attribute (read once, when the
    branch is built) gets, on each record, a copy of the recording task's :mod:`contextvars`
    context (:attr:`EvidenceRecord.task_context`): what the caller had current (a tracing
    span) when the call was recorded. Copying it is cheap, but only done when asked.

    A sink that must hold each batch before ``act()`` returns (a journal), or that batches
    its writes, implements the members of :class:`DurableEvidenceSink` as well.
    """

    async def write_ahead(self, entry: WriteAhead) -> WriteAheadReply | None:
        """Called at the write-ahead point, before the tool runs; may block (a commit).

        Called from the call's task, once per attempt (a retried call is announced again,
        with ``entry.attempt`` counting from 1), after the call reserved room in this sink's
        buffer, and after the branch's earlier sinks answered (sinks are asked one after
        another, in :attr:`Branch.sinks <lionexec.act.Branch.sinks>` order). Only calls that
        got this far (valid, allowed, transformed) are announced. It may block: the call
        waits, bounded by its ``call_timeout`` (over it, the call is recorded ``timed_out``),
        not by the per-attempt ``timeout``. Cancellation: the call is recorded ``cancelled``
        without its tool having run, and the cancellation propagates.

        Returns ``None``, or a :class:`WriteAheadReply`. Raising fails the call (``failed``,
        the tool not invoked).
        """

    async def write(self, records: Sequence[EvidenceRecord]) -> None:
        """Write records taken from the feed, oldest first. Called by one task at a time.

        Called by the sink's drain service with between 1 and 512 records: every call the
        branch recorded, invoked or not (a record's ``log`` is ``None`` for a call that was
        not invoked). The records, and the history's messages they hold, are the branch's
        own: read them, never change them. It may block; records recorded meanwhile wait in
        the buffer (and invoked calls, at the write-ahead point, for room in it).

        An :class:`Exception` is reported, and its records counted as failed
        (:attr:`SinkStatistics.failed <lionexec.act.SinkStatistics.failed>`); they are not
        retried, and the service goes on with the next records. Cancellation (the branch
        left by a cancellation, or its service cancelled) cuts a write in progress short:
        its records are counted as dropped and reported; the records still buffered are
        then given to :meth:`write` in a shielded scope bounded by the branch's
        ``cancel_grace``.
        """

    async def aclose(self) -> None:
        """Release the sink's resources (close files). Called after the last write; called
        again, shielded and bounded by the branch's ``cancel_grace``, if a call of it was
        cancelled (the branch left by a cancellation while its sinks closed): it must then
        finish closing.

        Called once by the drain service when the branch is left (or
        :meth:`Branch.aclose <lionexec.act.Branch.aclose>`), after the buffered records were
        written; if the service is cancelled, it is called shielded within ``cancel_grace``,
        and its failure or its running out of time is reported (never raised over the
        cancellation). A branch closed without ever being served closes its sinks the same
        way. An :class:`Exception` from a close that nothing cancelled propagates out of the
        service (inside trio's exception groups): out of leaving the branch's block, or out
        of :meth:`Branch.serve <lionexec.act.Branch.serve>`.
        """


@runtime_checkable
class DurableEvidenceSink(EvidenceSink, Protocol):
    """An evidence sink that holds each batch before :meth:`Branch.act
    <lionexec.act.Branch.act>` returns (a journal), and may say what it already holds.

    A sink with a true ``durable`` attribute (a journal) makes :meth:`Branch.act` wait, before
    it returns, until the records of its batch have been written: a response a caller has
    seen is then one the sink holds (if the write fails, ``act()`` raises
    :class:`~lionexec.errors.NotDurableError` instead of returning). Other sinks (a log
    file) are written behind. A durable sink may also say, as an int attribute
    ``committed``, how many of the history's messages (:attr:`MessageManager.appended
    <lionexec.conversation.MessageManager.appended>`) it holds: ``act()`` then asks it
    whether the batch is among those (a write that failed may have been made good by a later
    one), and a branch with ``retain=`` trims only among those (a failed write keeps the rest
    in memory for the sink's next one). Such a sink keeps what the branch trims, call ids
    included: an ``async`` method ``known_call_ids(call_ids)`` returning the set of those it
    has used lets ``act()`` refuse a call id used before, once the branch's history no longer
    holds every call (:class:`~lionexec.errors.DuplicateCallError`, nothing recorded).

    A sink whose :meth:`write` may wait to batch records with later work (a journal's outcome
    commits linger for the next call's commit) may define a synchronous ``expedite()``: the
    feed calls it whenever someone waits for records to be written (``act()`` about to
    return, the feed closing), and again just before each :meth:`write` while someone waits
    (a sink may clear its hurry meanwhile), and the sink then stops waiting.

    Every member is looked up duck-typed, each on its own: a sink may define any of them
    (``expedite`` is used on any sink, durable or not), and one it lacks is not used. The
    members are read and called on the trio thread, by the branch.
    """

    #: Read once, when the branch is built (changing it later changes nothing). True: every
    #: ``act()`` waits, before it returns, until this sink's :meth:`write` of the batch's
    #: records returned (a cancellation ends only the wait; the records are still written),
    #: and raises :class:`~lionexec.errors.NotDurableError` (every call answered and
    #: recorded, the responses on the error) if the sink does not hold them. The sink's
    #: buffer is then unbounded (its records are never dropped for room: ``act()`` waiting
    #: bounds them by the calls in flight), and a call the permission policy parks for an
    #: approval (:class:`~lionexec.governance.AwaitingApproval`) is answered
    #: ``awaiting_approval`` instead of denied.
    durable: bool

    #: How many of the history's messages (:attr:`MessageManager.appended
    #: <lionexec.conversation.MessageManager.appended>`) this sink holds, an ``int``: read
    #: synchronously by ``act()`` once its wait for the batch's records ended, only of a
    #: durable sink. A batch whose messages are all among those is held, even if its own
    #: write failed (a later write made it good); a branch with ``retain=`` trims only among
    #: those. Without it, a batch is held when none of the sink's records was lost (dropped,
    #: or in a failed write) since the batch began.
    committed: int

    async def known_call_ids(self, call_ids: Sequence[str]) -> Collection[str]:
        """Which of *call_ids* this sink holds as used by the branch (trimmed from its
        memory by ``retain=`` or not).

        Called by ``act()`` in the caller's task, before anything of the batch is recorded,
        only on a durable sink and only once the branch has trimmed its history (its own
        index no longer knows every call id); once per ``act()``, with the batch's call ids
        the history does not hold. A call id it returns refuses the batch with
        :class:`~lionexec.errors.DuplicateCallError`. It may block (one read); an exception
        or a cancellation propagates out of ``act()``, with nothing recorded.
        """
        ...

    async def flush(self) -> None:
        """Hold every message of the history recorded so far, messages added by hand included
        (an instruction, a model's final answer): for :meth:`Branch.flush
        <lionexec.act.Branch.flush>`, in the caller's task, only on a durable sink. It may
        block (a journal: one commit); an exception or a cancellation propagates out of
        ``Branch.flush()``, and what was recorded is still written with the sink's next write.
        """
        ...

    def expedite(self) -> None:
        """Someone waits for the records given to :meth:`write`: write them without waiting
        for more work.

        Synchronous, and must not block: called on the trio thread by the feed when
        ``act()`` waits for its batch to be written, when the feed closes, and again before
        each :meth:`write` while someone waits. An :class:`Exception` is reported on the
        branch's failure log (``where="sink"``), never raised into ``act()`` or the close.
        """
        ...
