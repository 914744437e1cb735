"""Regression tests for the engine bugs a review reproduced.

KeyboardInterrupt around an event's bookkeeping, an ``invoke()`` override raising inside a
cycle, ``Executor.running()`` with two failures, the queue order after overlapping cycles are
cancelled, ``Execution(status=...)``, string errors (grouping and strict JSON), strict
``dumps``, re-running a reset event, and configuration errors.
"""

from __future__ import annotations

import json
import math
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing
from trio.testing import MockClock, wait_all_tasks_blocked

from lionexec.engine import Event, EventStatus, Execution, Executor, Processor, Unset
from lionexec.errors import ConfigurationError
from lionexec.serialization import dumps

PENDING = EventStatus.PENDING
COMPLETED = EventStatus.COMPLETED
FAILED = EventStatus.FAILED
CANCELLED = EventStatus.CANCELLED


# -- 1: KeyboardInterrupt never leaves an event processing ----------------------------------


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


# -- 2: an invoke()/stream() override that raises fails its event, not the cycle -----------


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


# -- 3: Executor.running() keeps the block's exception when the service fails too ----------


class Flaky(Processor):
    async def request_permission(self, **kwargs: Any) -> bool:
        await trio.lowlevel.checkpoint()
        raise RuntimeError("permission backend down")


class FlakyExecutor(Executor):
    processor_type = Flaky


def flaky_executor() -> FlakyExecutor:
    return FlakyExecutor(
        {"queue_capacity": 1, "capacity_refresh_time": 1, "concurrency_limit": None}
    )


async def test_running_reports_the_blocks_error_with_the_services() -> None:
    ex = flaky_executor()
    with pytest.RaisesGroup(RuntimeError, ValueError) as caught:
        async with ex.running():
            assert ex.processor is not None
            await ex.processor.enqueue(Slow())  # the service's next cycle fails
            try:
                await trio.sleep_forever()  # cancelled by the failing service
            except trio.Cancelled:
                raise ValueError("cleanup failed while cancelled") from None
    # the service's first, as a plain nursery orders them
    assert [type(e) for e in caught.value.exceptions] == [RuntimeError, ValueError]


async def test_running_drops_the_blocks_cancelled_when_the_service_fails() -> None:
    ex = flaky_executor()
    with pytest.RaisesGroup(RuntimeError):
        async with ex.running():
            assert ex.processor is not None
            await ex.processor.enqueue(Slow())
            await trio.sleep_forever()


# -- 4: cancelled overlapping cycles restore the queue's order ------------------------------


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


# -- 5: Execution(status=...) is converted and checked ---------------------------------------


@pytest.mark.parametrize("status", list(EventStatus))
def test_execution_status_takes_the_enum_or_its_string(status: EventStatus) -> None:
    assert Execution(status=status).status is status
    assert Execution(status=status.value).status is status


@pytest.mark.parametrize("value", ["bogus", "PENDING", 3, None])
def test_execution_refuses_an_unknown_status_naming_it(value: Any) -> None:
    with pytest.raises(ValueError, match=rf"invalid event status {value!r}"):
        Execution(status=value)


async def test_an_event_built_with_a_string_status_runs() -> None:
    event = Work()
    event.execution = Execution(status="pending")  # type: ignore[arg-type]  # a caller's str
    await event.invoke()
    assert (event.status, event.response) == (COMPLETED, "done")


def test_assigning_execution_status_directly_still_bypasses_validation() -> None:
    # ADR-0003 D1: direct assignment bypasses the setter's validation (and signalling).
    execution = Execution()
    execution.status = "anything"  # type: ignore[assignment]
    assert execution.status == "anything"


# -- 6: strict JSON for string errors and for dumps() ----------------------------------------


def reject_constant(token: str) -> Any:
    raise ValueError(f"non-strict JSON token {token}")


def test_a_string_error_with_a_lone_surrogate_is_recorded_as_strict_json() -> None:
    event = Event()
    event.execution.error = "model said: \ud800"
    record = event.to_dict()
    assert record["execution"]["error"] == "model said: \ufffd"
    json.dumps(record, allow_nan=False, ensure_ascii=False).encode("utf-8")
    event.execution.error = "quota exceeded"
    assert event.to_dict()["execution"]["error"] == "quota exceeded"


def test_dumps_renders_non_finite_floats_as_strict_json() -> None:
    text = dumps({"score": math.nan, "limit": math.inf, "floor": -math.inf, "ok": 0.5})
    data = json.loads(text, parse_constant=reject_constant)
    assert data == {"score": "NaN", "limit": "Infinity", "floor": "-Infinity", "ok": 0.5}


async def test_dumps_of_an_event_record_is_strict_json() -> None:
    class Odd(Event):
        async def _invoke(self) -> list[float]:
            return [math.nan]

    event = Odd(metadata={"weight": math.inf})
    await event.invoke()
    data = json.loads(dumps(event), parse_constant=reject_constant)
    assert data["execution"]["response"] == ["NaN"]
    assert data["metadata"] == {"weight": "Infinity"}
    assert data["execution"]["status"] == "completed"


# -- 7: a recorded string error is grouped, not overwritten ----------------------------------


def test_add_error_groups_a_recorded_string_error() -> None:
    execution = Execution(error="quota exceeded")
    second = ValueError("second")
    execution.add_error(second)
    group = execution.error
    assert isinstance(group, BaseExceptionGroup)
    first, kept = group.exceptions
    assert (type(first), str(first)) == (Exception, "quota exceeded")
    assert kept is second
    third = KeyError("third")
    execution.add_error(third)  # appended to the same group
    assert isinstance(execution.error, BaseExceptionGroup)
    assert execution.error.exceptions[1:] == (second, third)


async def test_a_failure_after_a_string_error_keeps_both() -> None:
    class Partial(Event):
        async def _invoke(self) -> None:
            self.execution.error = "wrote 3 of 5 rows before failing"
            raise OSError("disk full")

    event = Partial()
    await event.invoke()
    assert event.status is FAILED
    record = event.to_dict()["execution"]["error"]
    messages = [member["message"] for member in record["exceptions"]]
    assert messages == ["wrote 3 of 5 rows before failing", "disk full"]


# -- 8: a processor runs an event once per admission -----------------------------------------


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
    event.status = PENDING  # legal: no transition graph (ADR-0003 D1)
    await processor.enqueue(event)
    await processor.join()
    assert runs == [event, event]
    assert event.response == 2
    assert processor.statistics().completed == 2  # runs, one per admission


# -- 9, 10: configuration errors name the parameter ------------------------------------------


@pytest.mark.parametrize(
    "value",
    [10**400, -(10**400), 10**5000, math.inf, -math.inf, math.nan],
    ids=["huge", "-huge", "unprintable", "inf", "-inf", "nan"],
)
def test_capacity_refresh_time_must_be_finite(value: float) -> None:
    with pytest.raises(ConfigurationError, match=r"capacity_refresh_time .* finite .* got"):
        Processor(queue_capacity=1, capacity_refresh_time=value, concurrency_limit=None)


@pytest.mark.parametrize(
    ("config", "named"),
    [
        (
            {
                "queue_capacity": 2,
                "capacity_refresh_time": 1,
                "concurrency_limit": None,
                "max_queue": 5,
            },
            "max_queue",
        ),
        ({"capacity_refresh_time": 1, "concurrency_limit": None}, "queue_capacity"),
    ],
    ids=["misspelled", "missing"],
)
async def test_a_processor_config_with_a_bad_key_is_a_configuration_error(
    config: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigurationError, match=rf"processor_config .*'{named}'") as caught:
        Executor(config).start()
    assert isinstance(caught.value.__cause__, TypeError)
    ex = Executor(config)
    with pytest.raises(ConfigurationError, match=named):
        await ex.forward()
    assert ex.processor is None
