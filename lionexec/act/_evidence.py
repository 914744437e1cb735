"""The evidence seam: where a call's record is written, and in what order.

A call's evidence is its linked :class:`~lionexec.conversation.ActionRequest` /
:class:`~lionexec.conversation.ActionResponse` pair and, for a call that was invoked, its
:class:`~lionexec.act.ActionLogRecord`. Two kinds of writers take it:

* **Synchronous writers** (the history and the in-memory event log) are written by
  :meth:`Evidence.record` in one synchronous, all-or-nothing step, protected from
  ``KeyboardInterrupt``: nothing can interrupt it, so a call is recorded wholly or not at all.
* **Sinks** (:class:`EvidenceSink`: the JSONL file, a durable journal) are fed through a
  bounded memory channel with ``send_nowait`` and drained by a service task started with
  ``nursery.start`` (:meth:`SinkFeed.serve`), so no sink I/O ever runs on the trio thread
  or inside the recording step.

Before a call's tool is invoked, :meth:`Evidence.write_ahead` is awaited: the **write-ahead
point**. Every sink's :meth:`EvidenceSink.write_ahead` runs there (a durable journal commits the
request before the tool can have any effect), and the call waits for room in every sink's
buffer, so invoked calls never overflow it. A sink may answer with a :class:`WriteAheadReply`:
a recorded outcome (a completed idempotency key: the tool is not invoked, the recorded
outcome is the call's) or attempts already made before a restart (counted in the call's).

Overflow policy: *block at admission, drop with a report at the end*. Records of calls that
never reach the write-ahead point (invalid, denied, or cancelled before they started) are
offered without waiting; if a sink's buffer is full then, that record is not given to that
sink, :attr:`SinkStatistics.dropped` counts it, and the failure is reported. The history and
the in-memory log always hold every record.
"""

from __future__ import annotations

import contextvars
import math
import uuid
from collections.abc import Callable, Sequence

import attrs
import trio

from lionexec.conversation import ActionRequest, ActionResponse, MessageManager
from lionexec.errors import ConfigurationError

from ._log import ActionLogRecord, EventLog
from .sinks.base import EvidenceRecord, EvidenceSink, WriteAhead, WriteAheadReply

__all__ = [
    "DEFAULT_SINK_CAPACITY",
    "Evidence",
    "SinkFeed",
    "SinkStatistics",
]

#: Records one sink may hold before calls wait at the write-ahead point.
DEFAULT_SINK_CAPACITY = 4096
#: Records the drain service hands a sink in one write, at most.
_MAX_BATCH = 512


@attrs.frozen
class SinkStatistics:
    """A snapshot of one sink's feed.

    Attributes:
        sink: ``repr`` of the sink.
        capacity: how many records the buffer holds.
        buffered: records waiting to be written.
        written: records handed to :meth:`EvidenceSink.write` that it accepted.
        dropped: records not given to the sink because its buffer was full.
        failed: records in batches whose write raised (reported, not retried).
        serving: whether the drain service is running.
    """

    sink: str
    capacity: int
    buffered: int
    written: int
    dropped: int
    failed: int
    serving: bool


Reporter = Callable[["EvidenceSink", "str | None", BaseException], None]


class SinkFeed:
    """A sink's bounded buffer and the service that drains it (see the module docs).

    Args:
        sink: the sink to feed.
        capacity: records the buffer holds (at least 1).
        report: called with ``(sink, call_id, error)`` for a failed write or a dropped record.
    """

    def __init__(self, sink: EvidenceSink, *, capacity: int, report: Reporter) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ConfigurationError(f"sink capacity must be an int >= 1, got {capacity!r}")
        self.sink = sink
        self.capacity = capacity
        self._report = report
        #: Whether :meth:`Branch.act` waits for its records to be written before returning.
        self.durable: bool = bool(getattr(sink, "durable", False))
        # A durable sink's records are never dropped (act() waits for them, so the buffer
        # holds no more than the calls in flight): only reservations count against capacity.
        size = math.inf if self.durable else capacity
        self._send, self._receive = trio.open_memory_channel[EvidenceRecord](size)
        self._room = trio.lowlevel.ParkingLot()
        self._settled_lot = trio.lowlevel.ParkingLot()
        self._accepted = 0  # records put in the buffer
        self._taken = 0  # records the service took out of it
        self._settled = 0  # records whose write returned (or raised)
        self._reserved: set[uuid.UUID] = set()
        self._written = 0
        self._dropped = 0
        self._failed = 0
        #: The exception of the latest write that failed, if any.
        self.last_error: Exception | None = None
        self._serving = False
        self._served = False  # a service ran (or the sink was closed without one)
        self._closed = False
        self._settle_waiters = 0  # tasks in wait_settled

    @property
    def serving(self) -> bool:
        return self._serving

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (its branch was left, normally or not)."""
        return self._closed

    def offer(self, record: EvidenceRecord) -> bool:
        """Put *record* in the buffer without waiting; on overflow count, report, drop it.
        Never raises: a record that cannot be buffered (the feed closed, its service
        stopped) is dropped the same way.

        A record of a call that reserved room (:meth:`wait_writable`) always fits, and so
        does every record of a durable sink.
        """
        request_id = record.request.id
        reserved = request_id in self._reserved
        if reserved:
            self._reserved.discard(request_id)
        elif self._used() >= self.capacity and not self.durable:
            return self._drop(record, full=True)
        try:
            self._send.send_nowait(record)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return self._drop(record, full=False)
        self._accepted += 1
        return True

    @property
    def accepted(self) -> int:
        """How many records were ever put in the buffer."""
        return self._accepted

    @property
    def settled(self) -> int:
        """How many records were ever written, or given to a write that failed."""
        return self._settled

    @property
    def lost(self) -> int:
        """How many records were ever dropped, or given to a write that failed."""
        return self._dropped + self._failed

    async def wait_settled(self, mark: int) -> None:
        """Wait until the first *mark* records accepted have been written (or failed).

        Returns early if the service stops. Always a checkpoint: a wait for the service is
        one (it parks), and otherwise there is one at the end. Cancellation: the records are
        still written by the service; only the wait ends.
        """
        self._settle_waiters += 1  # (held while waiting: each write is expedited meanwhile)
        parked = False
        try:
            while self._settled < mark and self._serving:
                self._expedite()
                parked = True
                await self._settled_lot.park()
        finally:
            self._settle_waiters -= 1
        if not parked:  # (a second schedule point would cost one more trip per act())
            await trio.lowlevel.checkpoint()

    async def wait_stopped(self) -> None:
        """Wait until the service is not running (it was never started, or it ended).
        Always a checkpoint."""
        while self._serving:
            await self._settled_lot.park()
        await trio.lowlevel.checkpoint()

    def _expedite(self) -> None:
        """Tell a sink that batches its writes (``expedite()``) that someone waits.

        A user sink's ``expedite()`` that raises is reported as a failed write would be, never
        raised into ``act()`` or ``close()``.
        """
        expedite = getattr(self.sink, "expedite", None)
        if expedite is not None:
            try:
                expedite()
            except Exception as exc:
                self._report(self.sink, None, exc)

    def _used(self) -> int:
        # (counted here: the channel's statistics() builds an object, 1.5 µs a call)
        return self._accepted - self._taken + len(self._reserved)

    def _drop(self, record: EvidenceRecord, *, full: bool) -> bool:
        self._dropped += 1
        call_id = record.request.content.call_id
        self._report(self.sink, call_id, _Overflow(full, self.capacity))
        return False

    async def wait_writable(self, request_id: uuid.UUID) -> None:
        """Wait until the buffer has room for the record of call *request_id*, and reserve it.

        The reservation holds until that call's record is offered. A checkpoint only when it
        waits for room: its one caller, :meth:`Evidence.write_ahead`, runs in a call that has
        passed a schedule point of its own just before (its task starting, the checkpoint
        before each call of a sequential batch, ``act()``'s own, a retry's delay), and a
        checkpoint here too would cost every journaled call one more trip through the
        scheduler. A call cancelled meanwhile still does not start its tool (the event's own
        check before it runs).
        """
        if request_id not in self._reserved:
            while self._used() >= self.capacity and not self._closed and self._serving:
                await self._room.park()
            self._reserved.add(request_id)

    async def serve(
        self,
        *,
        grace: float = 0.0,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Drain the buffer into the sink until :meth:`close`; then write what is left.

        Start it with ``await nursery.start(feed.serve)``. Each wake-up takes the records
        waiting (a batch of at most 512) and awaits one :meth:`EvidenceSink.write`. A write
        that raises is reported and its records counted as failed; the service goes on.
        When the feed is closed, the records still buffered are written and the sink is
        closed. Cancellation (or any other ``BaseException``) stops the service (a write in
        progress is cut short; a batch that reached it before its write began counts as
        buffered): the records buffered then are written in a shielded scope
        bounded by *grace* seconds, the sink is closed (:meth:`EvidenceSink.aclose` is always
        called: shielded, bounded by *grace* too, its failure or its running out of time
        reported) and the exception propagates; so is a close the cancellation cut short,
        closed again. Records not written (cut short, or left when the grace ran out) are
        counted as dropped and reported, as are records offered once the service stopped.
        """
        self._serving = self._served = True
        task_status.started()
        pending: EvidenceRecord | None = None
        try:
            async for first in self._receive:
                if trio.current_effective_deadline() == -math.inf:
                    # stopped after *first* reached the service, before its write began
                    # (the block was left by a cancellation as the call was recorded): it is
                    # written in the grace below, not dropped as a write cut short would be
                    pending = first
                    await trio.lowlevel.checkpoint()  # (raises the cancellation)
                    pending = None
                await self._write(first)
        except BaseException:
            try:
                with trio.CancelScope(shield=True) as scope:
                    scope.deadline = trio.current_time() + grace
                    await self._write_buffered(pending)
            finally:
                try:
                    await self._aclose_quietly(grace)
                finally:
                    self._stop()
            raise
        try:
            await self.sink.aclose()
        except Exception:
            raise
        except BaseException:  # cancelled while closing: closed again, shielded, in the grace
            await self._aclose_quietly(grace)
            raise
        finally:
            self._stop()

    async def _write(self, first: EvidenceRecord) -> None:
        """Take *first* and the records waiting behind it (at most 512) and write them."""
        batch = [first]
        while len(batch) < _MAX_BATCH:  # bounded: taking 10k records is one step
            try:
                batch.append(self._receive.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                break
        self._taken += len(batch)
        self._room.unpark_all()
        if self._settle_waiters:  # (an expedite since may have been used up)
            self._expedite()
        try:
            await self.sink.write(batch)
        except Exception as exc:
            self._failed += len(batch)
            self.last_error = exc
            self._report(self.sink, batch[0].request.call_id, exc)
        except BaseException:  # cut short (the service cancelled): not written
            for record in batch:
                self._drop(record, full=False)
            raise
        else:
            self._written += len(batch)
        self._settled += len(batch)
        self._settled_lot.unpark_all()

    async def _write_buffered(self, first: EvidenceRecord | None = None) -> None:
        """Write *first* (taken from the buffer already), then the records buffered now (the
        service is stopping); the caller bounds it."""
        while True:
            if first is None:
                try:
                    first = self._receive.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel):
                    return
            await self._write(first)
            first = None

    async def _aclose_quietly(self, grace: float) -> None:
        """Close the sink while an exception propagates: shielded, bounded by *grace*
        seconds; its failure is reported, never raised over that exception."""
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + grace
            try:
                await self.sink.aclose()
            except Exception as exc:
                self._report(self.sink, None, exc)
        if scope.cancelled_caught:
            self._report(
                self.sink,
                None,
                TimeoutError(f"the sink did not close within cancel_grace ({grace:g} s)"),
            )

    @trio.lowlevel.enable_ki_protection
    def _stop(self) -> None:
        """The service ends: later records are dropped on offer; the ones still buffered
        were not written, and are counted as dropped and reported."""
        while True:
            try:
                record = self._receive.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            self._taken += 1
            self._drop(record, full=False)
        self._receive.close()  # (offer() now drops and reports)
        self._serving = False
        self._room.unpark_all()
        self._settled_lot.unpark_all()

    @property
    def unserved(self) -> bool:
        """Whether the feed is closed and no service ever ran, nor will; its sink is then
        still to be closed (see :meth:`close_unserved`)."""
        return self._closed and not self._served

    async def close_unserved(self, grace: float) -> None:
        """Close the sink of an :attr:`unserved` feed: shielded, within *grace* seconds, its
        failure reported (never raised). Once; otherwise only a checkpoint."""
        if self.unserved:
            self._served = True
            await self._aclose_quietly(grace)
        else:
            await trio.lowlevel.checkpoint()

    def close(self) -> None:
        """No more records: the service writes what is buffered, closes the sink and ends."""
        self._closed = True
        self._send.close()
        self._room.unpark_all()
        self._expedite()

    def statistics(self) -> SinkStatistics:
        return SinkStatistics(
            sink=repr(self.sink),
            capacity=self.capacity,
            buffered=self._accepted - self._taken,
            written=self._written,
            dropped=self._dropped,
            failed=self._failed,
            serving=self._serving,
        )


def _combine(first: WriteAheadReply, second: WriteAheadReply) -> WriteAheadReply:
    return WriteAheadReply(
        recorded=first.recorded if first.recorded is not None else second.recorded,
        prior_attempts=max(first.prior_attempts, second.prior_attempts),
    )


class _Overflow(Exception):
    def __init__(self, full: bool, capacity: int) -> None:
        what = "full" if full else "closed (its branch closed, or its service stopped)"
        super().__init__(f"evidence sink buffer {what} (capacity {capacity}); record dropped")


class Evidence:
    """Writes every call's evidence: synchronous writers first, then the sinks' feeds.

    Args:
        history: the conversation history (synchronous writer).
        log: the in-memory event log (synchronous writer).
        feeds: the sinks' feeds.
    """

    def __init__(self, history: MessageManager, log: EventLog, feeds: Sequence[SinkFeed]) -> None:
        self.history = history
        self.log = log
        self.feeds = tuple(feeds)
        #: Whether a feed is durable (a journal): only then can a call wait for an approval.
        self.durable = any(feed.durable for feed in self.feeds)
        #: Whether a sink asked for the recording task's context (``captures_context``).
        self.captures_context = any(
            bool(getattr(feed.sink, "captures_context", False)) for feed in self.feeds
        )

    async def write_ahead(self, entry: WriteAhead) -> WriteAheadReply | None:
        """The write-ahead point, awaited just before a tool is invoked.

        Waits for room in every sink's buffer, then awaits every sink's
        :meth:`EvidenceSink.write_ahead` (a checkpoint as far as they are: see
        :meth:`SinkFeed.wait_writable`). With no sinks it is a plain checkpoint. Returns
        the sinks' replies combined (the first recorded outcome; the most prior attempts), or
        ``None`` if none replied. Cancellation: the call is recorded ``cancelled`` by the
        transaction; the tool has not run.
        """
        reply: WriteAheadReply | None = None
        for feed in self.feeds:
            await feed.wait_writable(entry.request.id)
            answer = await feed.sink.write_ahead(entry)
            if answer is not None:
                reply = answer if reply is None else _combine(reply, answer)
        if not self.feeds:
            await trio.lowlevel.checkpoint()
        return reply

    @trio.lowlevel.enable_ki_protection
    def record(
        self, request: ActionRequest, response: ActionResponse, log: ActionLogRecord | None
    ) -> None:
        """Write the linked pair and the log record, then offer them to the sinks.

        *response* is the one the transaction built for *request* (see
        :meth:`MessageManager._answer`).

        Synchronous, all-or-nothing for the history and the log, and protected from
        ``KeyboardInterrupt`` (which is delivered before or after, never inside). Raises
        :class:`~lionexec.errors.HistoryError` only if the history refuses the pair (a bug:
        the transaction checks everything first), in which case nothing was written.
        """
        self.history._answer(request, response)
        if log is not None:
            self.log.append(log)
        if self.feeds:
            # (copied only when a sink asked: a tracing sink reads the caller's span from it)
            context = contextvars.copy_context() if self.captures_context else None
            item = EvidenceRecord(request, response, log, context)
            for feed in self.feeds:
                feed.offer(item)
