"""The Processor: queued events run in capacity-limited cycles in trio nurseries."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable
from typing import Any, ClassVar, Final

import attrs
import trio

from lionexec.errors import (
    ConfigurationError,
    EventStateError,
    EventTypeError,
    ProcessorBusyError,
)

from ._event import Event
from ._execution import drop_tracebacks
from ._queue import BoundedQueue
from ._status import TERMINAL_STATUSES, EventStatus

__all__ = ["Processor", "ProcessorStatistics"]

_PENDING: Final = EventStatus.PENDING
_SKIPPED: Final = EventStatus.SKIPPED
_FAILED: Final = EventStatus.FAILED


@attrs.frozen
class ProcessorStatistics:
    """A snapshot of a :class:`Processor`, as returned by :meth:`Processor.statistics`.

    The outcome fields (``completed`` to ``aborted``) count runs and terminal denials, one per
    admission: a processor runs an event at most once per enqueue (see the class docstring of
    :class:`Processor`), and an event that someone else started or finished while it was queued
    is counted in ``discarded`` instead. An event set back to ``pending`` after its run and
    enqueued again is run, and counted, again.
    """

    queued: int
    """Events waiting in the queue."""

    taken: int
    """Events a cycle has taken from the queue whose work has not started yet (being
    permission-checked, or waiting for a concurrency token). They still count against
    ``max_queue_size``."""

    running: int
    """Events whose :meth:`~Event.invoke` or :meth:`~Event.stream` is in progress."""

    max_queue_size: int
    """The queue's bound; ``0`` means unbounded."""

    producers_waiting: int
    """Tasks blocked in :meth:`Processor.enqueue`."""

    queue_capacity: int
    """Events all running cycles together may take (dispatch or terminally deny)."""

    available_capacity: int
    """What is left of ``queue_capacity`` right now."""

    cycles_running: int
    """:meth:`Processor.process` cycles in progress (including the service's)."""

    concurrency_limit: int | None
    """Events that may run at once, or ``None`` for no limit."""

    limiter_borrowed: int
    """Concurrency tokens in use (``0`` without a limit)."""

    limiter_waiting: int
    """Dispatched events waiting for a concurrency token (``0`` without a limit)."""

    executing: bool
    """Whether the :meth:`Processor.execute` service is running."""

    stopped: bool
    """Whether :meth:`Processor.stop` was called since the service last started."""

    completed: int
    """Events this processor ran that ended ``completed``."""

    failed: int
    """Events this processor ran that ended ``failed``."""

    skipped: int
    """Events that ended ``skipped`` (by default, every terminally denied event)."""

    cancelled: int
    """Events this processor started that ended ``cancelled``."""

    aborted: int
    """Events that ended ``aborted``."""

    deferrals: int
    """Times a denied event was deferred (put back in the queue)."""

    discarded: int
    """Events dropped without running because they were no longer ``pending`` when their
    turn came: started or finished elsewhere (say by a direct :meth:`~Event.invoke`) while
    queued. Not counted in the outcome fields."""


def _integer(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _seconds(name: str, value: object) -> float:
    """*value* as a finite number of seconds > 0, or :class:`ConfigurationError` naming *name*."""
    seconds = math.nan
    if isinstance(value, int | float) and not isinstance(value, bool):
        with contextlib.suppress(OverflowError):  # an int too large for a float
            seconds = float(value)
    if not (math.isfinite(seconds) and seconds > 0):
        raise ConfigurationError(
            f"{name} must be a finite number of seconds > 0, got {_shown(value)}"
        )
    return seconds


def _shown(value: object) -> str:
    """``repr(value)``, except for an int too long to print in full (or at all)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"<int with {value.bit_length()} bits>"
    return repr(value)


class Processor:
    """Runs queued events in capacity-limited cycles, under an optional concurrency limit.

    Args:
        queue_capacity: how many events running cycles may take (dispatch, or deny
            terminally) before the capacity comes back. At least 1.
        capacity_refresh_time: seconds :meth:`execute` rests after a cycle that took
            capacity (and at most waits, idle, before checking deferred events again), and
            :meth:`join` waits after a cycle that made no progress. A finite number greater
            than 0 (an int must fit a float).
        concurrency_limit: how many events may run at once, each holding one token of a
            :class:`trio.CapacityLimiter`; ``0`` or ``None`` means no limit. Not negative.
        max_queue_size: how many events may wait in the queue; ``0`` (the default) means
            unbounded. Not negative: a negative bound is refused, never read as unbounded.

    Invalid values raise :class:`~lionexec.errors.ConfigurationError` naming the parameter.

    **Capacity.** :attr:`available_capacity` starts at ``queue_capacity``. Each event a cycle
    dispatches or terminally denies takes one unit; a deferred event takes none. Every cycle
    gives back all the units it took when it ends, however it ends (returning, raising or
    cancelled). So between cycles the full ``queue_capacity`` is available again, and terminal
    denials can never exhaust it (nor stall the queue). ``capacity_refresh_time`` does not refill
    capacity; it is the rest between the cycles of :meth:`execute`, which makes
    ``queue_capacity`` per ``capacity_refresh_time`` that service's throughput limit.

    **Queue bound.** An event occupies one place of ``max_queue_size`` from the moment it is
    enqueued until its work starts or it is terminally denied. A cycle that has taken an event
    keeps that place while it checks permission and while the event waits for a concurrency
    token, so putting a deferred event back never waits and never exceeds the bound.

    **Once per admission.** An event is admitted only while it is ``pending`` and not already
    in this processor (queued, taken by a cycle, or running; see :meth:`__contains__`);
    anything else raises :class:`~lionexec.errors.EventStateError`. A cycle runs an event only
    if it is still ``pending`` when its turn comes. So an event, streaming or not, runs at
    most once per admission, and never twice at the same time. Its run ends its membership,
    and a status has no transition graph (any status may be set): an event set back to ``pending``
    afterwards may be enqueued again, and is then run again (and counted again in the
    statistics, which count runs). To run the same work again, :meth:`~Event.as_fresh_event`
    is the supported way.

    **Permission.** Subclasses override :meth:`request_permission` (called with
    ``**event.request``) and :meth:`handle_denied`. While :meth:`request_permission` is the
    default, it is not called at all: every event is allowed.

    **Cycles may overlap.** A :meth:`process` call made while another cycle runs (for example
    the service's) takes what it can from the remaining capacity, right away. So don't
    :meth:`join` from inside an event this processor runs: the capacity it needs may be held
    by the very cycle that is waiting for that event.
    """

    event_type: ClassVar[type[Event]] = Event
    """The class (or base class) of the events this processor accepts."""

    __slots__ = (
        "__weakref__",
        "_available_capacity",
        "_capacity_refresh_time",
        "_checks_permission",
        "_concurrency_limit",
        "_cycles_running",
        "_deferrals",
        "_discarded",
        "_executing",
        "_limiter",
        "_members",
        "_outcomes",
        "_queue",
        "_queue_capacity",
        "_running",
        "_stop",
    )

    def __init__(
        self,
        queue_capacity: int,
        capacity_refresh_time: float,
        concurrency_limit: int | None,
        max_queue_size: int = 0,
    ) -> None:
        self._queue_capacity = _integer("queue_capacity", queue_capacity, 1)
        self._capacity_refresh_time = _seconds("capacity_refresh_time", capacity_refresh_time)
        if concurrency_limit is not None:
            _integer("concurrency_limit", concurrency_limit, 0)
        self._concurrency_limit = concurrency_limit or None
        self._limiter = trio.CapacityLimiter(concurrency_limit) if concurrency_limit else None
        self._queue: BoundedQueue[Event] = BoundedQueue(
            _integer("max_queue_size", max_queue_size, 0)
        )
        self._available_capacity = self._queue_capacity
        self._checks_permission = type(self).request_permission is not Processor.request_permission
        self._cycles_running = 0
        self._running = 0
        self._deferrals = 0
        self._discarded = 0
        self._outcomes = dict.fromkeys(EventStatus, 0)
        # id() of every event from its admission until it leaves for good (terminal denial,
        # discarded, or its run ended). Members are referenced by the queue, a cycle or a
        # running task, so their ids cannot be reused meanwhile.
        self._members: set[int] = set()
        self._executing = False
        self._stop = trio.Event()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} queue_capacity={self._queue_capacity} "
            f"capacity_refresh_time={self._capacity_refresh_time} "
            f"concurrency_limit={self._concurrency_limit} "
            f"max_queue_size={self._queue.maxsize} queued={len(self._queue)}>"
        )

    # -- configuration ----------------------------------------------------------------------

    @property
    def queue_capacity(self) -> int:
        """The capacity running cycles share (see the class docstring)."""
        return self._queue_capacity

    @property
    def capacity_refresh_time(self) -> float:
        """The service's rest between cycles and :meth:`join`'s wait after no progress."""
        return self._capacity_refresh_time

    @property
    def concurrency_limit(self) -> int | None:
        """How many events may run at once, or ``None`` for no limit."""
        return self._concurrency_limit

    @property
    def max_queue_size(self) -> int:
        """The queue's bound; ``0`` means unbounded."""
        return self._queue.maxsize

    # -- state ------------------------------------------------------------------------------

    @property
    def available_capacity(self) -> int:
        """Units of ``queue_capacity`` not taken by a running cycle. Never negative."""
        return self._available_capacity

    @property
    def queue_full(self) -> bool:
        """Whether :meth:`enqueue` would block. Always ``False`` when unbounded."""
        return self._queue.full

    def is_stopped(self) -> bool:
        """Whether :meth:`stop` was called since the service last started."""
        return self._stop.is_set()

    def is_executing(self) -> bool:
        """Whether the :meth:`execute` service is running."""
        return self._executing

    def statistics(self) -> ProcessorStatistics:
        """Return a :class:`ProcessorStatistics` snapshot of this processor."""
        limiter = self._limiter
        borrowed = waiting = 0
        if limiter is not None:
            stats = limiter.statistics()
            borrowed, waiting = stats.borrowed_tokens, stats.tasks_waiting
        outcomes = self._outcomes
        queue = self._queue
        return ProcessorStatistics(
            queued=len(queue),
            taken=queue.held,
            running=self._running,
            max_queue_size=queue.maxsize,
            producers_waiting=queue.producers_waiting,
            queue_capacity=self._queue_capacity,
            available_capacity=self._available_capacity,
            cycles_running=self._cycles_running,
            concurrency_limit=self._concurrency_limit,
            limiter_borrowed=borrowed,
            limiter_waiting=waiting,
            executing=self._executing,
            stopped=self._stop.is_set(),
            completed=outcomes[EventStatus.COMPLETED],
            failed=outcomes[EventStatus.FAILED],
            skipped=outcomes[EventStatus.SKIPPED],
            cancelled=outcomes[EventStatus.CANCELLED],
            aborted=outcomes[EventStatus.ABORTED],
            deferrals=self._deferrals,
            discarded=self._discarded,
        )

    # -- queueing ---------------------------------------------------------------------------

    def __contains__(self, event: object) -> bool:
        """Whether *event* is in this processor.

        True from the moment it is admitted by an ``enqueue`` method (while that call still
        waits for room, too) until it leaves for good: its run ends, it is terminally denied,
        or it is discarded. An event that is in the processor cannot be enqueued again.
        """
        return id(event) in self._members

    def _admit(self, event: Event) -> int:
        """Check that *event* may be enqueued; return its membership key."""
        if not isinstance(event, self.event_type):
            raise EventTypeError(self.event_type, type(event))
        key = id(event)
        status = event.execution.status
        if key in self._members:
            raise EventStateError(
                f"event {event.id} is already in this processor (queued, taken or running); "
                "it runs at most once per enqueue",
                event_id=event.id,
                status=status,
            )
        if status is not _PENDING:
            raise EventStateError(
                f"event {event.id} is {status.value!r}; only a pending event can be enqueued "
                "(use as_fresh_event() to run the same work again)",
                event_id=event.id,
                status=status,
            )
        return key

    async def enqueue(self, event: Event) -> None:
        """Put *event* at the back of the queue, blocking while the queue is full.

        Always a checkpoint. Producers blocked here (or in :meth:`enqueue_many`) are served in
        the order they arrived. If the call is cancelled, the event was not enqueued.

        Raises:
            EventTypeError: if *event* is not an instance of :attr:`event_type`.
            EventStateError: if *event* is already in this processor or is not ``pending``.
        """
        key = self._admit(event)
        members = self._members
        members.add(key)
        try:
            await self._queue.put(event)
        except BaseException:
            members.discard(key)
            raise

    def enqueue_nowait(self, event: Event) -> None:
        """Put *event* at the back of the queue, or raise :exc:`trio.WouldBlock` if it is full.

        Never blocks, never a checkpoint. Producers blocked in :meth:`enqueue` keep their turn:
        while one waits, the queue counts as full.

        Raises:
            trio.WouldBlock: if the queue is full; the event was not enqueued.
            EventTypeError: as for :meth:`enqueue`.
            EventStateError: as for :meth:`enqueue`.
        """
        key = self._admit(event)
        self._queue.put_nowait(event)
        self._members.add(key)

    def try_enqueue(self, event: Event) -> bool:
        """Like :meth:`enqueue_nowait`, but return ``False`` instead of raising when full.

        Returns ``True`` if *event* was enqueued, ``False`` if the queue was full (the event
        was not enqueued). :class:`~lionexec.errors.EventTypeError` and
        :class:`~lionexec.errors.EventStateError` are raised as by :meth:`enqueue`.
        """
        key = self._admit(event)
        try:
            self._queue.put_nowait(event)
        except trio.WouldBlock:
            return False
        self._members.add(key)
        return True

    async def enqueue_many(self, events: Iterable[Event]) -> None:
        """Put *events* at the back of the queue, in order, waiting for room as needed.

        One checkpoint for the whole batch when there is room for it (instead of one per
        event, as a loop of :meth:`enqueue` would make); when the queue fills up, it waits in
        line with the other producers for each slot that frees, and goes on.

        Every event is checked before any is enqueued: if one is refused, nothing was
        enqueued.

        Cancellation is exact: the call first checks for cancellation, so a call cancelled
        before it starts enqueues nothing. After that, cancellation can only arrive while it
        waits for room, and then the events enqueued are exactly a prefix of *events*: all
        those before the one it was waiting to place, and none from that one on. The events
        that were not enqueued are the ones still ``pending`` and not in the processor::

            left = [e for e in batch if e.status is EventStatus.PENDING and e not in processor]

        Raises:
            EventTypeError: if an event is not an instance of :attr:`event_type`.
            EventStateError: if an event is already in this processor, is not ``pending``, or
                appears twice in *events*.
        """
        batch = list(events)
        keys: set[int] = set()
        for event in batch:
            key = self._admit(event)
            if key in keys:
                raise EventStateError(
                    f"event {event.id} appears more than once in the batch",
                    event_id=event.id,
                    status=event.execution.status,
                )
            keys.add(key)
        await trio.lowlevel.checkpoint_if_cancelled()
        members = self._members
        members |= keys
        queue = self._queue
        placed = queue.put_many_nowait(batch)
        if placed == len(batch):
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        try:
            while placed < len(batch):
                await queue.wait_to_put(batch[placed])
                placed = queue.put_many_nowait(batch, placed + 1)
        except BaseException:
            members.difference_update(id(event) for event in batch[placed:])
            raise

    # -- permission -------------------------------------------------------------------------

    async def request_permission(self, **kwargs: Any) -> bool:
        """Decide whether the event whose ``request`` is *kwargs* may run now.

        The default allows everything (and the processor then skips the call altogether);
        like every public async method here, it is a checkpoint. If an override raises, the
        cycle stops taking events, the event goes back to the head of the queue, the events
        already dispatched run to the end, and then :meth:`process` raises the error.
        """
        await trio.lowlevel.checkpoint()
        return True

    async def handle_denied(self, event: Event) -> bool:
        """Deal with an event :meth:`request_permission` refused.

        Return ``True`` if the denial is terminal: the event takes one unit of capacity and
        leaves the queue for good (if the event is not terminal by then, it is marked
        ``skipped``). Return ``False`` to defer it: it goes back to the tail of the queue,
        still pending, without taking capacity (unless the handler made it terminal, in which
        case it is treated as a terminal denial: a terminal event is never queued again).

        The default marks the event ``skipped`` (unless it was finished elsewhere meanwhile:
        an outcome it did not produce is never rewritten) and returns ``True``; it is a
        checkpoint, and if cancelled, it did not mark the event. Errors are treated as for
        :meth:`request_permission`.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if event.execution.status not in TERMINAL_STATUSES:
            event.status = _SKIPPED
        await trio.lowlevel.cancel_shielded_checkpoint()
        return True

    # -- cycles -----------------------------------------------------------------------------

    async def process(self) -> None:
        """Run one cycle: take events while capacity remains and the queue is not empty.

        Each allowed event is started in this cycle's nursery, where it runs
        :meth:`~Event.invoke` (or, if ``event.streaming``, drains :meth:`~Event.stream`)
        holding one concurrency token for its whole run. When permission is asked (a
        subclass overrides :meth:`request_permission`), the event takes its token first, the
        cycle waiting for it: a grant (a rate limit's, say) is used at once, never after a
        wait. Ordinary failures are captured by the
        event, so one event failing never disturbs another. Denied events are handled by
        :meth:`handle_denied`. The cycle stops taking events once every event left in the
        queue has been deferred since the last one was dispatched: a queue that is denied
        for now is checked once per cycle, not spun on.

        An event that is no longer ``pending`` when its turn comes (started or finished
        elsewhere while queued) is dropped without running and without taking capacity; it is
        counted in :attr:`ProcessorStatistics.discarded`.

        Returns when every event the cycle started has finished. Always a checkpoint.

        Cancellation: every event the cycle started ends ``cancelled``; every event it had
        taken but not started (waiting for a concurrency token, or being permission-checked)
        goes back to the head of the queue, still pending, in its place in the queue's order:
        ahead of every event queued after it, in the order they were enqueued (a deferred
        event's place is the tail it went back to), even when several overlapping cycles are
        cancelled together. Nothing is lost.
        """
        await self._cycle()

    # KI-protected, as act's _concurrently: a KeyboardInterrupt landing as this frame resumes
    # from its nursery's __aexit__ would leave the nursery never exited (trio corrupt); trio
    # delivers it at the next checkpoint instead. The events run in tasks of their own.
    @trio.lowlevel.enable_ki_protection
    async def _cycle(self) -> int:
        """One cycle; returns the units of capacity it took."""
        await trio.lowlevel.checkpoint_if_cancelled()
        queue = self._queue
        if not queue or self._available_capacity <= 0:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return 0
        members = self._members
        checks_permission = self._checks_permission
        limiter = self._limiter
        unstarted: list[tuple[int, Event]] = []
        in_hand: tuple[int, Event] | None = None
        failure: Exception | None = None
        consumed = deferred = 0
        self._cycles_running += 1
        try:
            async with trio.open_nursery() as nursery:
                while self._available_capacity > 0 and queue:
                    seq, event = queue.take()
                    if event.execution.status is not _PENDING:
                        self._discard(event)
                        continue
                    # Its unit is taken now, before any await: a cycle running alongside
                    # (while this one asks for permission) sees only what is left.
                    self._available_capacity -= 1
                    consumed += 1
                    if checks_permission:
                        in_hand = seq, event
                        held = False
                        try:
                            # Its concurrency token first: a grant is used at once (a rate
                            # limit grants what is sent then, not after a wait for a token).
                            if limiter is not None:
                                await self._token(event)
                                held = True
                            allowed = False
                            elsewhere = event.execution.status is not _PENDING
                            if not elsewhere:
                                allowed = await self.request_permission(**event.request)
                                elsewhere = event.execution.status is not _PENDING
                                if not (allowed or elsewhere):
                                    terminal = await self.handle_denied(event)
                        except BaseException as exc:
                            if held:
                                limiter.release_on_behalf_of(event)  # type: ignore[union-attr]
                            if not isinstance(exc, Exception):
                                raise
                            failure = exc
                            break
                        in_hand = None
                        if held and (elsewhere or not allowed):
                            limiter.release_on_behalf_of(event)  # type: ignore[union-attr]
                        if elsewhere:  # started or finished elsewhere while it was asked for
                            if allowed:
                                self._ungranted(event)
                            self._available_capacity += 1
                            consumed -= 1
                            self._discard(event)
                            continue
                        if allowed:
                            self._granted(event)
                        else:
                            if terminal or event.execution.status in TERMINAL_STATUSES:
                                if event.execution.status not in TERMINAL_STATUSES:
                                    event.status = _SKIPPED
                                self._outcomes[event.execution.status] += 1
                                queue.release()
                                members.discard(id(event))
                            else:  # deferred: it takes no capacity
                                self._available_capacity += 1
                                consumed -= 1
                                queue.give_back(event)
                                self._deferrals += 1
                                deferred += 1
                                if deferred >= len(queue):
                                    break
                            continue
                    nursery.start_soon(self._run, event, seq, unstarted, checks_permission)
                    deferred = 0
        finally:
            self._cycles_running -= 1
            self._available_capacity += consumed
            if unstarted or in_hand is not None:
                self._put_back(unstarted, in_hand)
        if failure is not None:
            raise failure
        return consumed

    def _granted(self, event: Event) -> None:
        """*event* was granted permission and starts now (a subclass's bookkeeping)."""

    def _ungranted(self, event: Event) -> None:
        """*event* was granted permission but did not start (it went back to the queue, or
        was finished elsewhere): a subclass gives back what the grant took."""

    async def _token(self, event: Event) -> None:
        """Take a concurrency token for *event* (it is the borrower: its run releases it)."""
        limiter = self._limiter
        assert limiter is not None
        try:
            limiter.acquire_on_behalf_of_nowait(event)
        except trio.WouldBlock:
            await limiter.acquire_on_behalf_of(event)

    def _discard(self, event: Event) -> None:
        """Drop a taken event that is no longer pending: it leaves without running."""
        self._queue.release()
        self._members.discard(id(event))
        self._discarded += 1

    @staticmethod
    @trio.lowlevel.enable_ki_protection
    def _failed(event: Event, exc: Exception) -> None:
        """Record *exc*, raised by an override of ``invoke()``/``stream()``, on *event*:
        added to its errors (without tracebacks unless it retains them), and the event ends
        ``failed`` unless it is terminal already. Synchronous."""
        if not event.retain_tracebacks:
            drop_tracebacks(exc)
        event.execution.add_error(exc)
        if event.execution.status not in TERMINAL_STATUSES:
            event.status = _FAILED

    def _put_back(
        self, unstarted: list[tuple[int, Event]], in_hand: tuple[int, Event] | None
    ) -> None:
        """Return a cycle's taken-but-unstarted events to the head of the queue, each to its
        place in the queue's order (see :meth:`BoundedQueue.restore`)."""
        entries = list(unstarted)
        if in_hand is not None:
            event = in_hand[1]
            if event.execution.status in TERMINAL_STATUSES:
                # Its denial handler finished it before failing or being cancelled.
                self._outcomes[event.execution.status] += 1
                self._queue.release()
                self._members.discard(id(event))
            else:
                entries.append(in_hand)
        self._queue.restore(entries)

    async def _run(
        self, event: Event, seq: int, unstarted: list[tuple[int, Event]], granted: bool
    ) -> None:
        """Run *event*, holding a concurrency token; *granted*: its permission was asked,
        and its token taken before it (by the cycle)."""
        limiter = self._limiter
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
            if limiter is not None and not granted:
                await self._token(event)
        except BaseException:
            # Cancelled before its work began: the event is still pending, and goes back.
            if granted:
                if limiter is not None:
                    limiter.release_on_behalf_of(event)
                self._ungranted(event)
            unstarted.append((seq, event))
            raise
        if event.execution.status is not _PENDING:
            # Started or finished elsewhere while it waited for its token: not ours to run.
            if limiter is not None:
                limiter.release_on_behalf_of(event)
            if granted:
                self._ungranted(event)
            self._discard(event)
            return
        self._queue.release()
        self._running += 1
        try:
            if event.streaming:
                # Drained to the end: the generator only stops early by raising, which
                # finishes it, so there is nothing left to close.
                async for _ in event.stream():
                    pass
            else:
                await event.invoke()
        except Exception as exc:
            # invoke() and stream() capture ordinary failures; only an override of them (which
            # bypasses their guarantees) raises one. It is this event's failure, not the
            # cycle's: recorded on the event, never raised into the nursery (its siblings run on).
            self._failed(event, exc)
        finally:
            self._running -= 1
            if limiter is not None:
                limiter.release_on_behalf_of(event)
            self._members.discard(id(event))
            self._outcomes[event.execution.status] += 1

    async def join(self) -> None:
        """Run cycles until the queue is empty.

        After a cycle that took nothing (every queued event deferred, or no capacity left by
        overlapping cycles), sleeps ``capacity_refresh_time`` before the next one; a queue
        that stays deferred therefore keeps ``join()`` waiting until the policy changes or the
        caller cancels it. Events taken by *other* cycles may still be running when it
        returns. Always a checkpoint. Cancellation is handled as in :meth:`process`.
        """
        queue = self._queue
        if not queue:
            await trio.lowlevel.checkpoint()
            return
        while queue:  # every cycle is a checkpoint
            if not await self._cycle() and queue:
                await trio.sleep_until(self._idle_until())

    # -- the service ------------------------------------------------------------------------

    def start(self) -> None:
        """Clear a previous :meth:`stop`, so that :meth:`is_stopped` is ``False`` again.

        :meth:`execute` does this itself when it starts.
        """
        if self._stop.is_set():
            self._stop = trio.Event()

    def stop(self) -> None:
        """Ask the :meth:`execute` service to finish.

        The service lets a cycle in progress run to its end, then returns without starting
        another; it wakes at once if it was resting. To interrupt running events instead,
        cancel the service's scope.
        """
        self._stop.set()
        self._queue.wake()

    async def execute(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run cycles until :meth:`stop` is called or the call is cancelled.

        Start it with ``await nursery.start(processor.execute)``: it clears any earlier
        :meth:`stop`, then reports readiness. After a cycle that took capacity it rests
        ``capacity_refresh_time`` (waking early only for :meth:`stop`), so it handles at most
        ``queue_capacity`` events per cycle plus rest. After a cycle that took nothing it waits
        for the next :meth:`enqueue`, :meth:`stop`, or ``capacity_refresh_time`` (when
        deferred events are checked again), whichever comes first.

        Cancellation is handled as in :meth:`process`.

        Raises:
            ProcessorBusyError: if this processor's service is already running.
        """
        if self._executing:
            raise ProcessorBusyError(f"{self!r} is already executing")
        self._executing = True
        try:
            self.start()
            task_status.started()
            queue = self._queue
            rest = self._capacity_refresh_time
            while not self._stop.is_set():
                puts = queue.puts
                if await self._cycle():
                    with trio.move_on_after(rest):
                        await self._stop.wait()
                elif queue.puts == puts and not self._stop.is_set():
                    with trio.move_on_at(self._idle_until()):
                        await queue.wait_put()
        finally:
            self._executing = False

    def _idle_until(self) -> float:
        """When to try again after a cycle that took nothing: ``capacity_refresh_time``
        from now. A subclass that knows better (the earliest not-before time of a deferred
        event, say) overrides this, not :meth:`join` or :meth:`execute`."""
        return trio.current_time() + self._capacity_refresh_time
