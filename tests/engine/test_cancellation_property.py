"""Cancellation delivered at any checkpoint leaves the event cancelled, with a duration."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from lionexec import Event, EventStatus

steps = st.lists(st.integers(0, 5), min_size=1, max_size=8)


class Steps(Event):
    def __init__(self, sleeps: list[int], *, streaming: bool = False) -> None:
        super().__init__(streaming=streaming)
        self.sleeps = sleeps

    async def _invoke(self) -> str:
        for seconds in self.sleeps:
            await trio.sleep(seconds)  # a checkpoint even when seconds == 0
        return "done"

    async def _stream(self) -> AsyncIterator[int]:
        for seconds in self.sleeps:
            await trio.sleep(seconds)
            yield seconds


def run(afn: object) -> None:
    trio.run(afn, clock=trio.testing.MockClock(autojump_threshold=0))  # type: ignore[arg-type]


@given(steps, st.integers(0, 30))
def test_invoke_cancelled_at_any_point_ends_cancelled_with_duration(
    sleeps: list[int], cancel_at: int
) -> None:
    event = Steps(sleeps)
    total = sum(sleeps)

    async def main() -> None:
        with trio.move_on_after(cancel_at + 0.5):
            await event.invoke()

    run(main)
    if cancel_at + 0.5 < total:
        assert event.status is EventStatus.CANCELLED
        assert isinstance(event.execution.error, trio.Cancelled)
        assert event.execution.duration == pytest.approx(cancel_at + 0.5)
    else:
        assert event.status is EventStatus.COMPLETED
        assert event.execution.duration == pytest.approx(total)


@given(steps, st.integers(0, 30))
def test_stream_cancelled_at_any_point_ends_cancelled_with_duration(
    sleeps: list[int], cancel_at: int
) -> None:
    event = Steps(sleeps, streaming=True)
    total = sum(sleeps)
    received: list[int] = []

    async def main() -> None:
        with trio.move_on_after(cancel_at + 0.5):
            async for chunk in event.stream():
                received.append(chunk)

    run(main)
    if cancel_at + 0.5 < total:
        assert event.status is EventStatus.CANCELLED
        assert event.execution.duration == pytest.approx(cancel_at + 0.5)
        assert sum(received) <= cancel_at + 0.5
    else:
        assert event.status is EventStatus.COMPLETED
        assert received == sleeps


@given(steps)
def test_cancelling_a_waiter_never_changes_the_event(sleeps: list[int]) -> None:
    event = Steps(sleeps)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            with trio.move_on_after(0.5):
                nursery.start_soon(event.invoke)
                await event.wait_completed()
        assert event.status is EventStatus.COMPLETED

    run(main)
