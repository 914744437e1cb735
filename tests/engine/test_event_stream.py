"""The stream() wrapper: chunks pass through unchanged; the outcome is recorded as by invoke()."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from lionexec import Event, EventStatus


class Chunks(Event):
    def __init__(self, chunks: list[Any], *, fail_after: int | None = None, delay: float = 0.0):
        super().__init__(streaming=True)
        self.chunks = chunks
        self.fail_after = fail_after
        self.delay = delay
        self.closed = False

    async def _stream(self) -> AsyncIterator[Any]:
        try:
            for i, chunk in enumerate(self.chunks):
                if self.fail_after is not None and i == self.fail_after:
                    raise ValueError(f"broke after {i} chunks")
                if self.delay:
                    await trio.sleep(self.delay)
                yield chunk
        finally:
            self.closed = True


async def drain(event: Event) -> list[Any]:
    return [chunk async for chunk in event.stream()]


@pytest.mark.parametrize(
    "status", [s for s in EventStatus if s.is_terminal], ids=lambda s: s.value
)
async def test_stream_yields_nothing_when_terminal(status: EventStatus) -> None:
    event = Chunks([1, 2])
    event.status = status
    assert await drain(event) == []
    assert event.status is status


async def test_stream_may_restart_a_processing_event() -> None:
    event = Chunks(["a"])
    event.execution.status = EventStatus.PROCESSING
    assert await drain(event) == ["a"]
    assert event.status is EventStatus.COMPLETED


async def test_stream_yields_chunks_unchanged_and_does_not_accumulate_them() -> None:
    payload = [{"x": 1}, "two", None, 3.0]
    event = Chunks(payload)
    got = await drain(event)
    assert got == payload
    assert all(a is b for a, b in zip(got, payload, strict=True))
    assert event.response is None


async def test_stream_exhaustion_completes_and_records_duration(
    autojump_clock: trio.abc.Clock,
) -> None:
    event = Chunks([1, 2, 3], delay=0.5)
    await drain(event)
    assert event.status is EventStatus.COMPLETED
    assert event.execution.duration == pytest.approx(1.5)
    assert event.closed


async def test_stream_failure_after_chunks_is_captured_and_ends_iteration(
    autojump_clock: trio.abc.Clock,
) -> None:
    event = Chunks([1, 2, 3], fail_after=2, delay=1.0)
    assert await drain(event) == [1, 2]
    assert event.status is EventStatus.FAILED
    assert isinstance(event.execution.error, ValueError)
    assert event.execution.duration == pytest.approx(2.0)
    assert event.closed


async def test_stream_cancellation_is_recorded_and_reraised(
    autojump_clock: trio.abc.Clock,
) -> None:
    event = Chunks(list(range(10)), delay=1.0)
    got: list[Any] = []
    with trio.move_on_after(3.5) as scope:
        async for chunk in event.stream():
            got.append(chunk)
    assert scope.cancelled_caught
    assert got == [0, 1, 2]
    assert event.status is EventStatus.CANCELLED
    assert isinstance(event.execution.error, trio.Cancelled)
    assert event.execution.duration == pytest.approx(3.5)
    assert event.closed


async def test_consumer_closing_the_stream_early_records_cancelled_and_closes_inner() -> None:
    event = Chunks([1, 2, 3])
    stream = event.stream()
    assert await stream.__anext__() == 1
    await stream.aclose()  # type: ignore[attr-defined]
    assert event.status is EventStatus.CANCELLED
    assert isinstance(event.execution.error, GeneratorExit)
    assert event.closed


async def test_bare_stream_captures_not_implemented_as_failed() -> None:
    event = Event(streaming=True)
    assert await drain(event) == []
    assert event.status is EventStatus.FAILED
    assert isinstance(event.execution.error, NotImplementedError)


async def test_overriding_invoke_directly_bypasses_the_wrapper_guarantees() -> None:
    class Direct(Event):
        async def invoke(self) -> None:
            self.execution.response = "raw"

    event = Direct()
    await event.invoke()
    assert event.response == "raw"
    assert event.status is EventStatus.PENDING
    assert not event.completion_event.is_set()
