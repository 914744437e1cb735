"""Trio's rule for the engine: every public async function is a checkpoint, on every path.

A checkpoint is both a cancel point and a schedule point (``trio.testing.assert_checkpoints``
checks both). Fast paths are where this used to fail: ``invoke()`` on a finished event,
a ``process()`` cycle made only of denials, a default ``handle_denied()``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing
from trio.testing import assert_checkpoints, wait_all_tasks_blocked

from lionexec.engine import TERMINAL_STATUSES, Event, EventStatus, Executor, Processor

NON_PENDING = [s for s in EventStatus if s is not EventStatus.PENDING]


class Instant(Event):
    """Work that never awaits anything: returns, or raises *fail*."""

    def __init__(self, fail: Exception | None = None) -> None:
        super().__init__()
        self.fail = fail
        self.calls = 0

    async def _invoke(self) -> int:
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        return 1


class InstantStream(Event):
    """A stream of *n* chunks that never awaits anything."""

    def __init__(self, n: int = 0) -> None:
        super().__init__(streaming=True)
        self.n = n
        self.started = False

    async def _stream(self) -> AsyncIterator[int]:
        self.started = True
        for i in range(self.n):
            yield i


async def drain(event: Event) -> list[Any]:
    return [chunk async for chunk in event.stream()]


# -- Event ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", NON_PENDING)
async def test_invoke_on_a_non_pending_event_is_a_checkpoint(status: EventStatus) -> None:
    event = Instant()
    event.status = status
    with assert_checkpoints():
        await event.invoke()
    assert event.calls == 0
    assert event.status is status


@pytest.mark.parametrize("fail", [None, ValueError("no")])
async def test_invoke_of_work_that_never_awaits_is_a_checkpoint(fail: Exception | None) -> None:
    event = Instant(fail)
    with assert_checkpoints():
        await event.invoke()
    assert event.status is (EventStatus.COMPLETED if fail is None else EventStatus.FAILED)


async def test_invoke_in_a_cancelled_scope_does_not_start_the_work() -> None:
    event = Instant()
    with trio.CancelScope() as scope:
        scope.cancel()
        await event.invoke()
    assert scope.cancelled_caught
    assert event.calls == 0
    assert event.status is EventStatus.CANCELLED
    assert isinstance(event.execution.error, trio.Cancelled)


@pytest.mark.parametrize("status", sorted(TERMINAL_STATUSES))
async def test_stream_on_a_terminal_event_is_a_checkpoint(status: EventStatus) -> None:
    event = InstantStream(3)
    event.status = status
    with assert_checkpoints():
        assert await drain(event) == []
    assert not event.started


@pytest.mark.parametrize("n", [0, 2])
async def test_stream_of_work_that_never_awaits_is_a_checkpoint(n: int) -> None:
    event = InstantStream(n)
    with assert_checkpoints():
        assert await drain(event) == list(range(n))
    assert event.status is EventStatus.COMPLETED


async def test_stream_in_a_cancelled_scope_does_not_start_the_work() -> None:
    event = InstantStream(2)
    with trio.CancelScope() as scope:
        scope.cancel()
        await drain(event)
    assert scope.cancelled_caught
    assert not event.started
    assert event.status is EventStatus.CANCELLED


async def test_wait_completed_on_a_finished_event_is_a_checkpoint() -> None:
    event = Instant()
    await event.invoke()
    with assert_checkpoints():
        await event.wait_completed()


# -- Processor -----------------------------------------------------------------------------------


class DenyAll(Processor):
    """Denies every event without awaiting anything (the default handle_denied then runs)."""

    async def request_permission(self, **kwargs: Any) -> bool:
        return False


async def test_enqueue_is_a_checkpoint() -> None:
    processor = Processor(1, 1.0, None)
    with assert_checkpoints():
        await processor.enqueue(Instant())


@pytest.mark.parametrize("n", [0, 1, 5])
async def test_enqueue_many_with_room_is_a_checkpoint(n: int) -> None:
    processor = Processor(1, 1.0, None, max_queue_size=5)
    with assert_checkpoints():
        await processor.enqueue_many([Instant() for _ in range(n)])
    assert processor.statistics().queued == n


async def test_enqueue_many_that_waits_for_room_is_a_checkpoint() -> None:
    processor = Processor(5, 1.0, None, max_queue_size=1)
    events = [Instant(), Instant()]
    async with trio.open_nursery() as nursery:

        async def make_room() -> None:
            await wait_all_tasks_blocked()
            await processor.process()

        nursery.start_soon(make_room)
        with assert_checkpoints():
            await processor.enqueue_many(events)
    assert events[0].status is EventStatus.COMPLETED


async def test_process_on_an_empty_queue_is_a_checkpoint() -> None:
    with assert_checkpoints():
        await Processor(1, 1.0, None).process()


async def test_process_without_capacity_left_is_a_checkpoint() -> None:
    processor = Processor(1, 1.0, None)
    blocker = trio.Event()

    class Wait(Event):
        async def _invoke(self) -> None:
            await blocker.wait()

    await processor.enqueue(Wait())
    await processor.enqueue(Instant())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(processor.process)  # takes the only unit of capacity
        await wait_all_tasks_blocked()
        assert processor.available_capacity == 0
        with assert_checkpoints():
            await processor.process()
        blocker.set()


async def test_process_of_a_cycle_made_only_of_denials_is_a_checkpoint() -> None:
    processor = DenyAll(10, 1.0, None)
    events = [Instant() for _ in range(3)]
    for event in events:
        await processor.enqueue(event)
    with assert_checkpoints():
        await processor.process()
    assert [e.status for e in events] == [EventStatus.SKIPPED] * 3


async def test_process_of_a_cycle_that_dispatches_is_a_checkpoint() -> None:
    processor = Processor(10, 1.0, None)
    await processor.enqueue(Instant())
    with assert_checkpoints():
        await processor.process()


@pytest.mark.parametrize("queued", [0, 2])
async def test_join_is_a_checkpoint(queued: int) -> None:
    processor = DenyAll(1, 1.0, None)
    for _ in range(queued):
        await processor.enqueue(Instant())
    with assert_checkpoints():
        await processor.join()


async def test_execute_is_a_checkpoint_even_when_stopped_at_once() -> None:
    processor = Processor(1, 1.0, None)
    async with trio.open_nursery() as nursery:
        await nursery.start(processor.execute)
        processor.stop()
    with assert_checkpoints():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(processor.execute)
            await wait_all_tasks_blocked()
            processor.stop()


async def test_default_permission_hooks_are_checkpoints() -> None:
    processor = Processor(1, 1.0, None)
    event = Instant()
    with assert_checkpoints():
        assert await processor.request_permission() is True
    with assert_checkpoints():
        assert await processor.handle_denied(event) is True
    assert event.status is EventStatus.SKIPPED


async def test_default_handle_denied_cancelled_leaves_the_event_alone() -> None:
    event = Instant()
    with trio.CancelScope() as scope:
        scope.cancel()
        await Processor(1, 1.0, None).handle_denied(event)
    assert scope.cancelled_caught
    assert event.status is EventStatus.PENDING


# -- Executor ------------------------------------------------------------------------------------


@pytest.mark.parametrize("pending", [0, 2])
async def test_forward_is_a_checkpoint(pending: int) -> None:
    executor = Executor({"queue_capacity": 5, "capacity_refresh_time": 1, "concurrency_limit": 1})
    for _ in range(pending):
        executor.append(Instant())
    with assert_checkpoints():
        await executor.forward()


async def test_entering_and_leaving_running_are_checkpoints() -> None:
    executor = Executor({"queue_capacity": 5, "capacity_refresh_time": 1, "concurrency_limit": 1})
    with assert_checkpoints():
        async with executor.running():
            pass
