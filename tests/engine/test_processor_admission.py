"""What a processor admits, and the enqueue operations: enqueue, enqueue_nowait, try_enqueue,
enqueue_many.

A processor runs an event at most once per enqueue: an event already in it, or no longer
pending, is refused with EventStateError; one that something else started or finished while it
was queued is discarded when its turn comes. So the statistics count runs, one per admission.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio
import trio.testing
from trio.testing import wait_all_tasks_blocked

from lionexec.engine import Event, EventStatus, Executor, Processor
from lionexec.errors import EventStateError, EventTypeError, LionexecError

PENDING = EventStatus.PENDING
COMPLETED = EventStatus.COMPLETED


class Job(Event):
    def __init__(self, name: str = "job", delay: float = 0.0) -> None:
        super().__init__()
        self.name = name
        self.delay = delay
        self.runs = 0

    async def _invoke(self) -> str:
        self.runs += 1
        await trio.sleep(self.delay)
        return self.name

    def __repr__(self) -> str:
        return f"Job({self.name!r})"


class Chunks(Event):
    """A streaming event: yields 0..n-1, one per second of trio's clock."""

    def __init__(self, n: int) -> None:
        super().__init__(streaming=True)
        self.n = n
        self.seen: list[int] = []

    async def _stream(self) -> AsyncIterator[int]:
        for i in range(self.n):
            await trio.sleep(1)
            self.seen.append(i)
            yield i


def jobs(*names: str, **kwargs: Any) -> list[Job]:
    return [Job(name, **kwargs) for name in names]


def queued(processor: Processor) -> list[Event]:
    return list(processor._queue)


async def enqueue_once(processor: Processor, event: Event) -> None:
    await processor.enqueue(event)


ENQUEUES: dict[str, Callable[[Processor, Event], Any]] = {
    "enqueue": enqueue_once,
    "enqueue_nowait": lambda p, e: p.enqueue_nowait(e),
    "try_enqueue": lambda p, e: p.try_enqueue(e),
    "enqueue_many": lambda p, e: p.enqueue_many([e]),
}


async def call(how: str, processor: Processor, event: Event) -> Any:
    result = ENQUEUES[how](processor, event)
    if isinstance(result, bool | None):
        return result
    return await result


# -- admission ---------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ENQUEUES)
async def test_an_event_already_queued_is_refused(how: str) -> None:
    processor = Processor(5, 1.0, None)
    (a,) = jobs("a")
    await processor.enqueue(a)
    match = rf"event {a.id} is already in this processor"
    with pytest.raises(EventStateError, match=match) as info:
        await call(how, processor, a)
    assert isinstance(info.value, LionexecError) and isinstance(info.value, ValueError)
    assert info.value.event_id == a.id and info.value.status is PENDING
    assert queued(processor) == [a]
    await processor.process()
    assert a.runs == 1
    assert processor.statistics().completed == 1


@pytest.mark.parametrize("how", ENQUEUES)
@pytest.mark.parametrize("status", [s for s in EventStatus if s is not PENDING])
async def test_an_event_that_is_not_pending_is_refused(how: str, status: EventStatus) -> None:
    processor = Processor(5, 1.0, None)
    (a,) = jobs("a")
    a.status = status
    with pytest.raises(EventStateError, match=rf"is {status.value!r}; only a pending event"):
        await call(how, processor, a)
    assert queued(processor) == []
    assert a not in processor


async def test_an_event_that_ran_cannot_be_enqueued_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(5, 1.0, None)
    (a,) = jobs("a", delay=1)
    await processor.enqueue(a)
    await processor.process()
    assert a not in processor
    with pytest.raises(EventStateError, match="'completed'"):
        await processor.enqueue(a)
    await processor.enqueue(Job("a"))  # a fresh event: the way to run the same work again


async def test_an_event_being_enqueued_is_in_the_processor_and_refused_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(5, 1.0, None, max_queue_size=1)
    a, b = jobs("a", "b")
    await processor.enqueue(a)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(processor.enqueue, b)  # blocks: the queue is full
        await wait_all_tasks_blocked()
        assert b in processor
        with pytest.raises(EventStateError):
            processor.try_enqueue(b)
        nursery.cancel_scope.cancel()
    assert b not in processor  # cancelled: not enqueued, so it may be enqueued later
    assert queued(processor) == [a]


async def test_a_streaming_event_enqueued_twice_runs_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(5, 1.0, None)
    event = Chunks(2)
    await processor.enqueue(event)
    with pytest.raises(EventStateError):
        await processor.enqueue(event)
    await processor.join()
    assert event.seen == [0, 1]
    stats = processor.statistics()
    assert (stats.completed, stats.discarded) == (1, 0)


async def test_a_streaming_event_started_elsewhere_is_not_streamed_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(5, 1.0, None)
    event = Chunks(2)
    await processor.enqueue(event)
    async with trio.open_nursery() as nursery:

        async def consume() -> None:
            async for _ in event.stream():
                pass

        nursery.start_soon(consume)
        await wait_all_tasks_blocked()
        assert event.status is EventStatus.PROCESSING
        await processor.process()  # its turn comes: no longer pending, so dropped
    assert event.seen == [0, 1]
    stats = processor.statistics()
    assert (stats.completed, stats.discarded, stats.queued) == (0, 1, 0)
    assert event not in processor


async def test_an_event_finished_elsewhere_while_queued_is_discarded_uncounted() -> None:
    processor = Processor(5, 1.0, None)
    a, b = jobs("a", "b")
    await processor.enqueue_many([a, b])
    await a.invoke()  # run directly while queued
    await processor.process()
    assert (a.runs, b.runs) == (1, 1)
    stats = processor.statistics()
    assert (stats.completed, stats.discarded, stats.available_capacity) == (1, 1, 5)


async def test_an_event_finished_elsewhere_while_waiting_for_a_token_is_discarded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(5, 1.0, 1)
    a, b = jobs("a", "b", delay=1)
    await processor.enqueue_many([a, b])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(processor.process)
        await wait_all_tasks_blocked()
        assert processor.statistics().limiter_waiting == 1  # one waits for the other's token
        (waiting,) = [e for e in (a, b) if e.runs == 0]
        waiting.status = EventStatus.ABORTED  # its owner gives up on it
    stats = processor.statistics()
    assert (stats.completed, stats.aborted, stats.discarded, stats.taken) == (1, 0, 1, 0)
    assert waiting.runs == 0 and waiting not in processor


@pytest.mark.parametrize("allowed", [True, False])
async def test_an_event_finished_elsewhere_during_its_permission_check_is_discarded(
    autojump_clock: trio.testing.MockClock, allowed: bool
) -> None:
    """Whatever the policy answers (deny: whatever the denial handler says), an event that
    its owner finished while the processor asked is discarded: not run, not counted among
    the outcomes, its unit of capacity given back."""
    asked = trio.Event()
    answer = trio.Event()

    class Asking(Processor):
        async def request_permission(self, **kwargs: Any) -> bool:
            asked.set()
            await answer.wait()
            return allowed

    processor = Asking(5, 1.0, None)
    [job] = jobs("a")
    await processor.enqueue(job)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(processor.process)
        await asked.wait()
        job.status = EventStatus.ABORTED  # its owner gives up on it
        answer.set()
    stats = processor.statistics()
    assert (stats.aborted, stats.skipped, stats.discarded) == (0, 0, 1)
    assert (stats.taken, stats.available_capacity) == (0, 5)
    assert job.runs == 0 and job not in processor


async def test_wrong_type_is_refused_by_every_enqueue() -> None:
    class JobProcessor(Processor):
        event_type = Job

    processor = JobProcessor(1, 1.0, None)
    for how in ENQUEUES:
        with pytest.raises(EventTypeError):
            await call(how, processor, Chunks(1))
    assert queued(processor) == []


async def test_an_event_set_back_to_pending_is_run_again_when_enqueued_again() -> None:
    runs = []

    class Counted(Event):
        async def _invoke(self) -> int:
            runs.append(self)
            await trio.lowlevel.checkpoint()
            return len(runs)

    processor = Processor(queue_capacity=10, capacity_refresh_time=1, concurrency_limit=None)
    event = Counted()
    await processor.enqueue(event)
    await processor.join()
    assert event not in processor  # its run ended its membership
    event.status = PENDING  # legal: any status may be set, there is no transition graph
    await processor.enqueue(event)
    await processor.join()
    assert runs == [event, event]
    assert event.response == 2
    assert processor.statistics().completed == 2  # runs, one per admission


# -- enqueue_nowait / try_enqueue --------------------------------------------------------------


async def test_enqueue_nowait_raises_would_block_when_full() -> None:
    processor = Processor(1, 1.0, None, max_queue_size=1)
    a, b = jobs("a", "b")
    processor.enqueue_nowait(a)
    with pytest.raises(trio.WouldBlock):
        processor.enqueue_nowait(b)
    assert queued(processor) == [a]
    assert b not in processor
    assert processor.try_enqueue(b) is False
    await processor.process()
    processor.enqueue_nowait(b)
    assert queued(processor) == [b]


async def test_enqueue_nowait_does_not_barge_ahead_of_a_waiting_producer() -> None:
    processor = Processor(1, 1.0, None, max_queue_size=1)
    first, waiting, late = jobs("first", "waiting", "late")
    processor.enqueue_nowait(first)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(processor.enqueue, waiting)
        await wait_all_tasks_blocked()
        await processor.process()  # first leaves; its slot goes to the waiting producer
        with pytest.raises(trio.WouldBlock):
            processor.enqueue_nowait(late)
    assert queued(processor) == [waiting]


async def test_enqueue_nowait_is_not_a_checkpoint() -> None:
    processor = Processor(1, 1.0, None)
    with trio.testing.assert_no_checkpoints():
        processor.enqueue_nowait(Job())
        assert processor.try_enqueue(Job())


# -- enqueue_many ------------------------------------------------------------------------------


class StepCounter(trio.abc.Instrument):
    """Counts the scheduler steps of one task."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1


async def steps_of(fn: Callable[[], Any]) -> int:
    counter = StepCounter(trio.lowlevel.current_task())
    trio.lowlevel.add_instrument(counter)
    try:
        await fn()
    finally:
        trio.lowlevel.remove_instrument(counter)
    return counter.steps


async def test_enqueue_many_yields_once_for_the_whole_batch() -> None:
    processor = Processor(1, 1.0, None)
    batch = [Job(str(i)) for i in range(100)]
    assert await steps_of(lambda: processor.enqueue_many(batch)) == 1
    assert queued(processor) == batch

    async def one_by_one() -> None:
        for event in [Job(str(i)) for i in range(100)]:
            await processor.enqueue(event)

    assert await steps_of(one_by_one) == 100


async def test_enqueue_many_accepts_any_iterable_and_keeps_order() -> None:
    processor = Processor(1, 1.0, None)
    batch = jobs("a", "b", "c")
    await processor.enqueue_many(iter(batch))
    assert queued(processor) == batch
    assert all(e in processor for e in batch)


@pytest.mark.parametrize("bad", ["duplicate", "not pending", "already queued", "wrong type"])
async def test_enqueue_many_checks_every_event_before_enqueuing_any(bad: str) -> None:
    class JobProcessor(Processor):
        event_type = Job

    processor = JobProcessor(1, 1.0, None)
    a, b, c = jobs("a", "b", "c")
    if bad == "already queued":
        await processor.enqueue(c)
    culprit: Event = c
    if bad == "not pending":
        c.status = EventStatus.COMPLETED
    elif bad == "wrong type":
        culprit = Chunks(1)
    batch: list[Event] = [a, b, a] if bad == "duplicate" else [a, b, culprit]
    error = EventTypeError if bad == "wrong type" else EventStateError
    with pytest.raises(error):
        await processor.enqueue_many(batch)
    assert a not in processor and b not in processor
    assert queued(processor) == ([c] if bad == "already queued" else [])


async def test_enqueue_many_duplicate_names_the_event() -> None:
    processor = Processor(1, 1.0, None)
    (a,) = jobs("a")
    with pytest.raises(EventStateError, match=rf"event {a.id} appears more than once"):
        await processor.enqueue_many([a, a])


async def test_enqueue_many_waits_for_room_as_needed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(2, 1.0, None, max_queue_size=2)
    batch = [Job(str(i), delay=1) for i in range(5)]
    async with trio.open_nursery() as nursery:
        await nursery.start(processor.execute)
        await processor.enqueue_many(batch)
        for event in batch:
            await event.wait_completed()
        processor.stop()
    assert [e.response for e in batch] == ["0", "1", "2", "3", "4"]
    assert processor.statistics().completed == 5


async def test_enqueue_many_waits_in_line_with_other_producers() -> None:
    processor = Processor(1, 1.0, None, max_queue_size=1)
    first, early, a, b = jobs("first", "early", "a", "b")
    await processor.enqueue(first)
    order: list[Event] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(processor.enqueue, early)  # arrived first: served first
        await wait_all_tasks_blocked()
        nursery.start_soon(processor.enqueue_many, [a, b])
        await wait_all_tasks_blocked()
        for _ in range(3):
            await processor.process()  # runs the head, freeing its slot for the next in line
            await wait_all_tasks_blocked()
            order.extend(queued(processor))
    assert order == [early, a, b]


async def test_enqueue_many_cancelled_before_it_starts_enqueues_nothing() -> None:
    processor = Processor(1, 1.0, None)
    batch = jobs("a", "b")
    with trio.CancelScope() as scope:
        scope.cancel()
        await processor.enqueue_many(batch)
    assert scope.cancelled_caught
    assert queued(processor) == []
    assert not any(e in processor for e in batch)


@pytest.mark.parametrize("slots_freed", [0, 1, 2])
async def test_enqueue_many_cancelled_while_waiting_enqueued_exactly_a_prefix(
    slots_freed: int, autojump_clock: trio.testing.MockClock
) -> None:
    processor = Processor(1, 1.0, None, max_queue_size=2)
    batch = [Job(str(i)) for i in range(5)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(processor.enqueue_many, batch)
        await wait_all_tasks_blocked()  # 0 and 1 placed, waiting to place 2
        for _ in range(slots_freed):
            await processor.process()  # runs the head: its slot goes to the batch
            await wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    enqueued = 2 + slots_freed
    assert [e.status is not PENDING or e in processor for e in batch] == [True] * enqueued + [
        False
    ] * (5 - enqueued)
    left = [e for e in batch if e.status is PENDING and e not in processor]
    assert left == batch[enqueued:]
    assert queued(processor) == batch[slots_freed:enqueued]
    assert processor.statistics().producers_waiting == 0
    async with trio.open_nursery() as nursery:  # the rest can be enqueued again later
        await nursery.start(processor.execute)
        await processor.enqueue_many(left)
        for event in batch:
            await event.wait_completed()
        processor.stop()
    assert all(e.status is COMPLETED for e in batch)
    assert processor.statistics().completed == 5


async def test_enqueue_many_of_nothing_is_fine() -> None:
    processor = Processor(1, 1.0, None, max_queue_size=1)
    await processor.enqueue_many([])
    assert queued(processor) == []


# -- statistics count events -------------------------------------------------------------------


async def test_statistics_count_each_event_once() -> None:
    processor = Processor(10, 1.0, None)
    a, b = jobs("a", "b")
    await processor.enqueue_many([a, b])
    with pytest.raises(EventStateError):
        await processor.enqueue(a)
    await processor.join()
    stats = processor.statistics()
    assert (stats.completed, stats.discarded) == (2, 0)
    assert (a.runs, b.runs) == (1, 1)


# -- the executor on top -------------------------------------------------------------------------


def executor() -> Executor:
    return Executor({"queue_capacity": 10, "capacity_refresh_time": 1.0, "concurrency_limit": 0})


async def test_forward_skips_events_already_in_the_processor_or_not_pending() -> None:
    ex = executor()
    queued_directly, finished, fresh = jobs("queued", "finished", "fresh")
    for event in (queued_directly, finished, fresh):
        ex.append(event)
    await ex.start().enqueue(queued_directly)
    await finished.invoke()
    await ex.forward()
    assert list(ex.pending) == []
    assert (queued_directly.runs, finished.runs, fresh.runs) == (1, 1, 1)
    assert ex.processor is not None
    assert ex.processor.statistics().completed == 2


async def test_reappending_after_forward_does_not_run_an_event_twice() -> None:
    ex = executor()
    (a,) = jobs("a")
    ex.append(a)
    await ex.forward()
    ex.append(a)
    await ex.forward()
    assert a.runs == 1


async def test_executor_statistics_is_a_frozen_snapshot() -> None:
    import attrs

    ex = executor()
    assert ex.statistics().processor is None
    a, b, c = jobs("a", "b", "c")
    for event in (a, b, c):
        ex.append(event)
    c.status = EventStatus.ABORTED
    stats = ex.statistics()
    assert (stats.owned, stats.unforwarded, stats.pending, stats.aborted) == (3, 3, 2, 1)
    assert stats.forwarding is False and stats.processor is None
    await ex.forward()
    after = ex.statistics()
    assert (after.owned, after.unforwarded, after.completed, after.aborted) == (3, 0, 2, 1)
    assert after.processor is not None and after.processor.completed == 2
    assert stats.owned == 3  # the earlier snapshot did not change
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        after.owned = 0  # type: ignore[misc]


async def test_executor_statistics_sees_a_forward_in_progress() -> None:
    ex = executor()
    blocker = trio.Event()

    class Wait(Event):
        async def _invoke(self) -> None:
            await blocker.wait()

    ex.append(Wait())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ex.forward)
        await wait_all_tasks_blocked()
        during = ex.statistics()
        blocker.set()
    assert during.processing == 1
    assert during.processor is not None and during.processor.running == 1
