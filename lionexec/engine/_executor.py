"""The Executor: owns live events and their pending order, and feeds a Processor."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import AsyncIterator, KeysView, Mapping
from contextlib import asynccontextmanager
from typing import Any, ClassVar, Final, Self, TypedDict

import attrs
import trio

from lionexec.errors import ConfigurationError, EventTypeError

from ._event import Event
from ._processor import Processor, ProcessorStatistics
from ._status import EventStatus

__all__ = ["Executor", "ExecutorState", "ExecutorStatistics"]

_COMPLETED: Final = EventStatus.COMPLETED
_PENDING: Final = EventStatus.PENDING


@attrs.frozen
class ExecutorStatistics:
    """A snapshot of an :class:`Executor`, as returned by :meth:`Executor.statistics`.

    The status fields count the events the executor owns *now*, by their current status
    (a live histogram, like :meth:`Executor.status_counts`); the processor's own outcome
    fields count what it ran, cumulatively.
    """

    owned: int
    """Events the executor owns, whatever their status."""

    unforwarded: int
    """Owned events appended and not yet moved to the processor (``len(executor.pending)``)."""

    pending: int
    """Owned events whose status is ``pending`` (forwarded or not)."""

    processing: int
    """Owned events whose status is ``processing``."""

    completed: int
    """Owned events whose status is ``completed``."""

    failed: int
    """Owned events whose status is ``failed``."""

    skipped: int
    """Owned events whose status is ``skipped``."""

    cancelled: int
    """Owned events whose status is ``cancelled``."""

    aborted: int
    """Owned events whose status is ``aborted``."""

    forwarding: bool
    """Whether a :meth:`Executor.forward` call is moving events right now."""

    processor: ProcessorStatistics | None
    """The processor's snapshot, or ``None`` if it was not created yet."""


class ExecutorState(TypedDict):
    """What :meth:`Executor.inspect_state` reports."""

    total_events: int
    status_counts: dict[str, int]
    pending_queue: int
    processor_running: bool
    processor_stopped: bool


class Executor:
    """Owns live events by id, remembers which are pending, and hands them to a processor.

    Args:
        processor_config: keyword arguments for :attr:`processor_type`, used when the
            processor is first needed (by :meth:`start`, :meth:`forward` or
            :meth:`running`). A bad configuration raises
            :class:`~lionexec.errors.ConfigurationError` at that point: a key the processor
            type does not take or a missing required one (named in the message, with the
            ``TypeError`` as its ``__cause__``), or a value it refuses.
        strict_event_type: accept only events whose class is exactly the processor's
            ``event_type``, not subclasses of it.

    The executor is bookkeeping, not a scheduler: :meth:`append` only records an event as
    pending; :meth:`forward` moves pending events into the processor's queue and runs a cycle;
    the processor's service (:meth:`running`) runs cycles in the background. Events stay
    owned here, whatever their status, until :meth:`cleanup_completed` or :meth:`remove`.
    """

    processor_type: ClassVar[type[Processor]] = Processor
    """The processor class this executor creates."""

    __slots__ = (
        "__weakref__",
        "_events",
        "_forward_lock",
        "_pending",
        "processor",
        "processor_config",
        "strict_event_type",
    )

    def __init__(
        self,
        processor_config: Mapping[str, Any] | None = None,
        strict_event_type: bool = False,
    ) -> None:
        self.processor_config: dict[str, Any] = dict(processor_config or {})
        self.strict_event_type = strict_event_type
        #: The processor, once :meth:`start` (or :meth:`forward`, :meth:`running`) created it.
        self.processor: Processor | None = None
        self._events: dict[uuid.UUID, Event] = {}
        self._pending: dict[uuid.UUID, None] = {}
        self._forward_lock = trio.Lock()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} events={len(self._events)} pending={len(self._pending)} "
            f"processor={self.processor!r}>"
        )

    @property
    def event_type(self) -> type[Event]:
        """The event class this executor accepts (its processor type's ``event_type``)."""
        return self.processor_type.event_type

    @property
    def pending(self) -> KeysView[uuid.UUID]:
        """The ids of events appended and not yet forwarded, in order (a live, set-like view)."""
        return self._pending.keys()

    # -- ownership --------------------------------------------------------------------------

    def append(self, event: Event) -> None:
        """Own *event* and mark it pending.

        Appending an event whose id is already owned replaces the stored event; its id keeps
        its place in the pending order and is never listed twice.

        Raises:
            EventTypeError: if *event* is not an :attr:`event_type` (exactly that class when
                ``strict_event_type``); nothing is recorded then.
        """
        expected = self.processor_type.event_type
        if self.strict_event_type:
            if type(event) is not expected:
                raise EventTypeError(expected, type(event), strict=True)
        elif not isinstance(event, expected):
            raise EventTypeError(expected, type(event))
        self._events[event.id] = event
        self._pending[event.id] = None

    def remove(self, ref: Event | uuid.UUID | str) -> Event:
        """Stop owning the event *ref* names (an event, its id, or the id as a string).

        Returns the event. Raises :class:`KeyError` if it is not owned here. An event already
        forwarded to the processor's queue stays there.
        """
        key = self._key(ref)
        if key is None or key not in self._events:
            raise KeyError(ref)
        self._pending.pop(key, None)
        return self._events.pop(key)

    def __getitem__(self, ref: Event | uuid.UUID | str) -> Event:
        key = self._key(ref)
        if key is None:
            raise KeyError(ref)
        return self._events[key]

    def __contains__(self, ref: object) -> bool:
        """Whether an event, an id, or an id string names an event owned here."""
        key = self._key(ref)
        return key is not None and key in self._events

    def __len__(self) -> int:
        return len(self._events)

    @staticmethod
    def _key(ref: object) -> uuid.UUID | None:
        if isinstance(ref, Event):
            return ref.id
        if isinstance(ref, uuid.UUID):
            return ref
        if isinstance(ref, str):
            try:
                return uuid.UUID(ref)
            except ValueError:
                return None
        return None

    # -- the processor ----------------------------------------------------------------------

    def _processor(self) -> Processor:
        processor = self.processor
        if processor is None:
            processor_type, config = self.processor_type, self.processor_config
            try:  # the keys first: a TypeError from inside the constructor is not about them
                inspect.signature(processor_type).bind(**config)
            except TypeError as exc:
                raise ConfigurationError(
                    f"processor_config does not fit {processor_type.__name__}: {exc}"
                ) from exc
            processor = self.processor = processor_type(**config)
        return processor

    def start(self) -> Processor:
        """Create the processor if there is none yet, clear its stop signal, and return it."""
        processor = self._processor()
        processor.start()
        return processor

    def stop(self) -> None:
        """Ask the processor's service to stop (see :meth:`Processor.stop`).

        A no-op if no processor was created.
        """
        if self.processor is not None:
            self.processor.stop()

    async def forward(self) -> None:
        """Move every pending event into the processor's queue, in order, then run one cycle.

        The processor is created first if needed. When the queue is full, a cycle is run to
        make room before waiting for it, so a bounded queue smaller than the pending list does
        not stall ``forward()`` on its own; a queue full of deferred events does make it wait
        (for the service, or another caller's cycle). Ids of events no longer owned are
        dropped, and so are those of events the processor cannot take: already in it (say
        enqueued directly, or appended again after an earlier ``forward()``), or no longer
        ``pending`` (run elsewhere). So no event is queued twice. Concurrent calls move events
        one call at a time.

        Always a checkpoint. Cancellation: events not yet moved stay pending, in order; the
        cycle is cancelled as described in :meth:`Processor.process`.
        """
        processor = self._processor()
        pending = self._pending
        events = self._events
        async with self._forward_lock:
            while pending:
                for key in list(pending):
                    event = events.get(key)
                    if (
                        event is not None
                        and key in pending
                        and _takes(processor, event)
                        and not processor.try_enqueue(event)
                    ):
                        await processor.process()
                        # Another task may have removed, enqueued or run it meanwhile.
                        if key in pending and _takes(processor, event):
                            await processor.enqueue(event)
                    pending.pop(key, None)
        await processor.process()

    @asynccontextmanager
    @trio.lowlevel.enable_ki_protection  # (its nursery: see Processor._cycle)
    async def running(self) -> AsyncIterator[Self]:
        """Run the processor's service for the duration of an ``async with`` block.

        ::

            async with executor.running():
                executor.append(event)
                await executor.forward()
                await event.wait_completed()

        On a normal exit the service is stopped (a cycle in progress finishes; queued events
        stay queued). If the block raises or is cancelled, the service is cancelled (see
        :meth:`Processor.process` for what happens to its events) and the block's exception
        propagates unchanged. An error from the service itself cancels the block and comes
        out of the ``async with`` in an exception group, as from any nursery; if the block
        raised an exception of its own meanwhile (other than ``trio.Cancelled``), the group
        holds it too, after the service's, as a plain nursery's would.
        """
        processor = self.start()
        failure: BaseException | None = None
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(processor.execute)
                try:
                    yield self
                except BaseException as exc:
                    # Raised by the block: cancel the service, then let the error out as it
                    # was (not wrapped in an exception group by the nursery).
                    failure = exc
                    nursery.cancel_scope.cancel()
                finally:
                    processor.stop()
        except BaseExceptionGroup as group:
            if failure is None or isinstance(failure, trio.Cancelled):
                raise
            # The service failed too: both errors, as a plain nursery reports them.
            raise BaseExceptionGroup(group.message, [*group.exceptions, failure]) from None
        if failure is not None:
            raise failure

    # -- views ------------------------------------------------------------------------------

    def _with_status(self, status: EventStatus) -> list[Event]:
        return [e for e in self._events.values() if e.execution.status is status]

    @property
    def completed_events(self) -> list[Event]:
        """A new list of the owned events that are ``completed``, in append order."""
        return self._with_status(EventStatus.COMPLETED)

    @property
    def pending_events(self) -> list[Event]:
        """A new list of the owned events whose status is ``pending``, in append order.

        This is by status: it includes events already forwarded but not started yet.
        """
        return self._with_status(EventStatus.PENDING)

    @property
    def failed_events(self) -> list[Event]:
        """A new list of the owned events that are ``failed``, in append order."""
        return self._with_status(EventStatus.FAILED)

    @property
    def cancelled_events(self) -> list[Event]:
        """A new list of the owned events that are ``cancelled``, in append order."""
        return self._with_status(EventStatus.CANCELLED)

    @property
    def skipped_events(self) -> list[Event]:
        """A new list of the owned events that are ``skipped``, in append order."""
        return self._with_status(EventStatus.SKIPPED)

    def status_counts(self) -> dict[str, int]:
        """How many owned events are in each of the seven statuses (zeros included)."""
        counts = dict.fromkeys(EventStatus, 0)
        for event in self._events.values():
            counts[event.execution.status] += 1
        return {status.value: n for status, n in counts.items()}

    def cleanup_completed(self) -> int:
        """Stop owning every ``completed`` event; return how many. Other statuses stay."""
        done = [k for k, e in self._events.items() if e.execution.status is _COMPLETED]
        for key in done:
            del self._events[key]
            self._pending.pop(key, None)
        return len(done)

    def statistics(self) -> ExecutorStatistics:
        """Return an :class:`ExecutorStatistics` snapshot of this executor and its processor."""
        counts = dict.fromkeys(EventStatus, 0)
        for event in self._events.values():
            counts[event.execution.status] += 1
        processor = self.processor
        return ExecutorStatistics(
            owned=len(self._events),
            unforwarded=len(self._pending),
            pending=counts[EventStatus.PENDING],
            processing=counts[EventStatus.PROCESSING],
            completed=counts[EventStatus.COMPLETED],
            failed=counts[EventStatus.FAILED],
            skipped=counts[EventStatus.SKIPPED],
            cancelled=counts[EventStatus.CANCELLED],
            aborted=counts[EventStatus.ABORTED],
            forwarding=self._forward_lock.locked(),
            processor=None if processor is None else processor.statistics(),
        )

    def inspect_state(self) -> ExecutorState:
        """A live snapshot: totals, the status histogram, and the processor's flags."""
        processor = self.processor
        return ExecutorState(
            total_events=len(self._events),
            status_counts=self.status_counts(),
            pending_queue=len(self._pending),
            processor_running=processor is not None and processor.is_executing(),
            processor_stopped=processor is None or processor.is_stopped(),
        )


def _takes(processor: Processor, event: Event) -> bool:
    """Whether *processor* would admit *event* (leaving its type to ``enqueue`` to check)."""
    return event.execution.status is _PENDING and event not in processor
