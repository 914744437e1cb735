"""A processor's cycle survives what goes wrong inside it, and loses no event.

An ``invoke()``/``stream()`` override that raises fails its own event, not the cycle, and its
siblings complete. Overlapping cycles cancelled in either order put their events back in
enqueue order; a deferred event's place is the tail it went back to.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from trio.testing import wait_all_tasks_blocked

from lionexec.engine import Event, EventStatus, Processor

PENDING = EventStatus.PENDING
COMPLETED = EventStatus.COMPLETED
FAILED = EventStatus.FAILED


# -- an invoke()/stream() override that raises fails its event, not the cycle ------------------


class Slow(Event):
    async def _invoke(self) -> str:
        await trio.sleep(1)
        return "ok"


class RaisingInvoke(Event):
    async def invoke(self) -> None:  # a direct override: bypasses invoke()'s capture
        self.status = EventStatus.PROCESSING
        await trio.lowlevel.checkpoint()
        raise RuntimeError("boom")


class RaisingStream(Event):
    async def stream(self) -> AsyncIterator[Any]:
        self.status = EventStatus.PROCESSING
        yield 1
        raise RuntimeError("boom")


@pytest.mark.parametrize("cls", [RaisingInvoke, RaisingStream])
async def test_an_override_raising_fails_its_event_and_its_siblings_complete(
    cls: type[Event], autojump_clock: trio.abc.Clock
) -> None:
    processor = Processor(queue_capacity=10, capacity_refresh_time=1, concurrency_limit=None)
    sibling, raising = Slow(), cls(streaming=cls is RaisingStream)
    await processor.enqueue(sibling)
    await processor.enqueue(raising)
    await processor.process()  # does not raise
    assert sibling.status is COMPLETED
    assert raising.status is FAILED
    error = raising.execution.error
    assert isinstance(error, RuntimeError) and str(error) == "boom"
    assert error.__traceback__ is None  # as invoke() records a failure
    assert raising.completion_event.is_set()
    assert raising not in processor
    stats = processor.statistics()
    assert (stats.completed, stats.failed, stats.cancelled, stats.running) == (1, 1, 0, 0)


async def test_an_override_raising_after_finishing_its_event_keeps_the_status() -> None:
    class AbortsThenRaises(Event):
        async def invoke(self) -> None:
            self.status = EventStatus.ABORTED
            raise ValueError("late")

    processor = Processor(queue_capacity=10, capacity_refresh_time=1, concurrency_limit=None)
    event = AbortsThenRaises()
    await processor.enqueue(event)
    await processor.process()
    assert event.status is EventStatus.ABORTED
    assert isinstance(event.execution.error, ValueError)
    assert processor.statistics().aborted == 1


# -- cancelled overlapping cycles restore the queue's order ------------------------------------


class Numbered(Event):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    async def _invoke(self) -> None:
        await trio.sleep(100)


@pytest.mark.parametrize("first_cancelled", ["earlier", "later"])
async def test_overlapping_cycles_cancelled_put_events_back_in_enqueue_order(
    first_cancelled: str,
) -> None:
    processor = Processor(queue_capacity=4, capacity_refresh_time=1, concurrency_limit=1)
    events = [Numbered(n) for n in range(1, 7)]
    earlier, later = trio.CancelScope(), trio.CancelScope()

    async def cycle(scope: trio.CancelScope) -> None:
        with scope:
            await processor.process()

    limiter = processor._limiter
    assert limiter is not None
    await limiter.acquire()  # the only token: every event taken waits for it
    async with trio.open_nursery() as nursery:
        await processor.enqueue_many(events[:2])
        nursery.start_soon(cycle, earlier)  # takes 1 and 2
        await wait_all_tasks_blocked()
        await processor.enqueue_many(events[2:])
        nursery.start_soon(cycle, later)  # takes 3 and 4 (the capacity left)
        await wait_all_tasks_blocked()
        assert processor.statistics().taken == 4
        scopes = [earlier, later] if first_cancelled == "earlier" else [later, earlier]
        for scope in scopes:  # each cycle puts its events back, one after the other
            scope.cancel()
            await wait_all_tasks_blocked()
    limiter.release()

    assert all(e.status is PENDING for e in events)
    assert [e.n for e in processor._queue] == [1, 2, 3, 4, 5, 6]
    assert processor.statistics().taken == 0


def test_a_deferred_events_place_is_the_tail_it_went_back_to() -> None:
    from lionexec.engine._queue import BoundedQueue

    queue: BoundedQueue[str] = BoundedQueue(0)
    queue.put_many_nowait(["a", "b", "c", "d"])
    a, b, c = queue.take(), queue.take(), queue.take()
    queue.give_back(b[1])  # deferred: to the tail, after d
    queue.restore([c])
    queue.restore([a])
    assert list(queue) == ["a", "c", "d", "b"]
    assert queue.held == 0
