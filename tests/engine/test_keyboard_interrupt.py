"""KeyboardInterrupt never leaves an event ``processing``.

Trio delivers a SIGINT at once unless the code running is KI-protected. An event's
bookkeeping before and after its work (status, clock, response, error) runs in protected
steps, so an interrupt landing there keeps the outcome already recorded; one landing in the
few unprotected bytecodes around them ends the event ``cancelled`` before it propagates.
Covered for ``invoke()``, ``stream()`` and a processor's cycle.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator

import pytest
import trio
from trio.testing import MockClock

from lionexec.engine import Event, EventStatus, Processor, Unset

COMPLETED = EventStatus.COMPLETED
CANCELLED = EventStatus.CANCELLED


class InterruptingClock(trio.abc.Clock):
    """A MockClock (autojumping) whose next read, once armed, is interrupted.

    ``signal=True``: the read raises a real SIGINT, which trio's handler turns into a
    ``KeyboardInterrupt`` right there unless the code reading is KI-protected (then trio
    delivers it later, to the main task). ``signal=False``: the read raises
    ``KeyboardInterrupt`` itself, as a KI landing in unprotected code would.
    """

    def __init__(self, *, signal: bool) -> None:
        self.inner = MockClock(autojump_threshold=0)
        self.signal = signal
        self.armed = False

    def start_clock(self) -> None:
        self.inner.start_clock()

    def deadline_to_sleep_time(self, deadline: float) -> float:
        return self.inner.deadline_to_sleep_time(deadline)

    def current_time(self) -> float:
        now = self.inner.current_time()
        if self.armed:
            self.armed = False
            if self.signal:
                signal.raise_signal(signal.SIGINT)
            else:
                raise KeyboardInterrupt
        return now


def arm() -> None:
    clock = trio.lowlevel.current_clock()
    assert isinstance(clock, InterruptingClock)
    clock.armed = True


class Work(Event):
    """Arms the clock, when asked to, for the read that ends its run."""

    def __init__(self, *, arm_end: bool = False) -> None:
        super().__init__()
        self.arm_end = arm_end
        self.ran = False

    async def _invoke(self) -> str:
        self.ran = True
        if self.arm_end:
            arm()
        return "done"


class Chunks(Event):
    def __init__(self, *, arm_end: bool = False) -> None:
        super().__init__(streaming=True)
        self.arm_end = arm_end
        self.ran = False

    async def _stream(self) -> AsyncIterator[int]:
        self.ran = True
        yield 1
        if self.arm_end:
            arm()


async def drain(event: Event) -> None:
    async for _ in event.stream():
        pass


@pytest.fixture
def sigint_reaches_trio() -> None:
    # trio installs its SIGINT handler only over Python's default one.
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT has a non-default handler here; trio would not install its own")


@pytest.mark.usefixtures("sigint_reaches_trio")
@pytest.mark.parametrize("streaming", [False, True], ids=["invoke", "stream"])
def test_sigint_while_recording_the_outcome_keeps_the_outcome(streaming: bool) -> None:
    event: Work | Chunks = Chunks(arm_end=True) if streaming else Work(arm_end=True)

    async def main() -> None:
        await (drain(event) if streaming else event.invoke())

    with pytest.raises(KeyboardInterrupt):
        trio.run(main, clock=InterruptingClock(signal=True))
    assert event.status is COMPLETED  # recorded in one protected step, then interrupted
    assert event.execution.error is None
    assert event.execution.duration is not Unset
    assert event.completion_event.is_set()
    if not streaming:
        assert event.response == "done"


@pytest.mark.usefixtures("sigint_reaches_trio")
@pytest.mark.parametrize("streaming", [False, True], ids=["invoke", "stream"])
def test_sigint_while_starting_cancels_the_event_before_its_work(streaming: bool) -> None:
    event: Work | Chunks = Chunks() if streaming else Work()

    async def main() -> None:
        arm()  # the next read is the start time's
        await (drain(event) if streaming else event.invoke())

    with pytest.raises(KeyboardInterrupt):
        trio.run(main, clock=InterruptingClock(signal=True))
    assert event.status is CANCELLED
    assert type(event.execution.error) is KeyboardInterrupt
    assert not event.ran
    assert event.completion_event.is_set()


@pytest.mark.usefixtures("sigint_reaches_trio")
def test_sigint_while_a_processor_records_an_outcome_keeps_it_and_counts_it() -> None:
    event = Work(arm_end=True)
    processor = Processor(queue_capacity=2, capacity_refresh_time=1, concurrency_limit=None)

    async def main() -> None:
        await processor.enqueue(event)
        await processor.join()
        await trio.sleep_forever()  # the interrupt comes here, if not before

    # delivered at a checkpoint of the main task, here inside join()'s cycle nursery
    with pytest.RaisesGroup(KeyboardInterrupt, allow_unwrapped=True, flatten_subgroups=True):
        trio.run(main, clock=InterruptingClock(signal=True))
    assert (event.status, event.response) == (COMPLETED, "done")
    stats = processor.statistics()
    assert (stats.completed, stats.cancelled, stats.running) == (1, 0, 0)


@pytest.mark.parametrize("streaming", [False, True], ids=["invoke", "stream"])
@pytest.mark.parametrize("where", ["start", "end"])
def test_a_keyboard_interrupt_in_the_bookkeeping_still_ends_the_event_cancelled(
    streaming: bool, where: str
) -> None:
    # The clock raising KeyboardInterrupt itself stands for a KI landing in the few
    # unprotected bytecodes between the work and its record: whatever the spot, the event
    # is terminal when the interrupt leaves.
    end = where == "end"
    event: Work | Chunks = Chunks(arm_end=end) if streaming else Work(arm_end=end)

    async def main() -> None:
        if not end:
            arm()
        await (drain(event) if streaming else event.invoke())

    with pytest.raises(KeyboardInterrupt):
        trio.run(main, clock=InterruptingClock(signal=False))
    assert event.status is CANCELLED
    assert type(event.execution.error) is KeyboardInterrupt
    assert event.ran is end
    assert (event.execution.duration is Unset) is not end  # no start time: no duration
    assert event.completion_event.is_set()
