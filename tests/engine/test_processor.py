"""The Processor's parameters, queue, cycles, capacity, service, cancellation and statistics."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from trio.testing import wait_all_tasks_blocked

from lionexec.engine import Event, EventStatus, Processor
from lionexec.errors import ConfigurationError, EventTypeError, LionexecError, ProcessorBusyError

PENDING = EventStatus.PENDING
COMPLETED = EventStatus.COMPLETED
SKIPPED = EventStatus.SKIPPED
CANCELLED = EventStatus.CANCELLED
FAILED = EventStatus.FAILED


class Tracker:
    """Counts events running at once and remembers the most ever seen."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0

    def enter(self) -> None:
        self.now += 1
        self.most = max(self.most, self.now)

    def leave(self) -> None:
        self.now -= 1


class Job(Event):
    """Sleeps *delay* on trio's clock, then returns its name or raises *fail*."""

    def __init__(
        self,
        name: str = "job",
        delay: float = 0.0,
        fail: Exception | None = None,
        tracker: Tracker | None = None,
        on_start: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self.name = name
        self.delay = delay
        self.fail = fail
        self.tracker = tracker
        self.on_start = on_start
        self.started_at: float | None = None
        self.finished_at: float | None = None

    @property
    def request(self) -> dict[str, Any]:
        return {"name": self.name}

    async def _invoke(self) -> str:
        self.started_at = trio.current_time()
        if self.on_start is not None:
            self.on_start()
        if self.tracker is not None:
            self.tracker.enter()
        try:
            await trio.sleep(self.delay)
        finally:
            if self.tracker is not None:
                self.tracker.leave()
        self.finished_at = trio.current_time()
        if self.fail is not None:
            raise self.fail
        return self.name

    def __repr__(self) -> str:
        return f"Job({self.name!r})"


class Chunks(Event):
    """A streaming event: yields 0..n-1, sleeping 1 before each chunk."""

    def __init__(self, n: int, tracker: Tracker | None = None) -> None:
        super().__init__(streaming=True)
        self.n = n
        self.tracker = tracker
        self.seen: list[int] = []
        self.invoked = False

    async def _invoke(self) -> None:
        self.invoked = True

    async def _stream(self) -> AsyncIterator[int]:
        if self.tracker is not None:
            self.tracker.enter()
        try:
            for i in range(self.n):
                await trio.sleep(1)
                self.seen.append(i)
                yield i
        finally:
            if self.tracker is not None:
                self.tracker.leave()


Decision = str  # "allow" | "deny" | "defer"


class Policy(Processor):
    """A processor whose permission check asks *decide(name)*; records every check."""

    def __init__(
        self,
        *args: Any,
        decide: Callable[[str], Decision] = lambda name: "allow",
        check_delay: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.decide = decide
        self.check_delay = check_delay
        self.checks: list[dict[str, Any]] = []
        self._decision = "allow"

    async def request_permission(self, **kwargs: Any) -> bool:
        self.checks.append(kwargs)
        if self.check_delay:
            await trio.sleep(self.check_delay)
        self._decision = self.decide(kwargs["name"])
        return self._decision == "allow"

    async def handle_denied(self, event: Event) -> bool:
        if self._decision == "defer":
            return False
        return await super().handle_denied(event)


def queued(processor: Processor) -> list[Event]:
    return list(processor._queue)


def jobs(*names: str, **kwargs: Any) -> list[Job]:
    return [Job(name, **kwargs) for name in names]


async def fill(processor: Processor, events: list[Any]) -> None:
    for event in events:
        await processor.enqueue(event)


# -- parameters --------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, 1.5, True, None])
def test_queue_capacity_must_be_an_integer_of_at_least_one(value: Any) -> None:
    with pytest.raises(ConfigurationError, match=rf"queue_capacity .* got {value!r}"):
        Processor(value, 1.0, None)


@pytest.mark.parametrize("value", [0, -0.5, math.nan, "1", None, False])
def test_capacity_refresh_time_must_be_positive(value: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"capacity_refresh_time .* got"):
        Processor(1, value, None)


@pytest.mark.parametrize(
    "value",
    [10**400, -(10**400), 10**5000, math.inf, -math.inf, math.nan],
    ids=["huge", "-huge", "unprintable", "inf", "-inf", "nan"],
)
def test_capacity_refresh_time_must_be_finite(value: float) -> None:
    with pytest.raises(ConfigurationError, match=r"capacity_refresh_time .* finite .* got"):
        Processor(queue_capacity=1, capacity_refresh_time=value, concurrency_limit=None)


def test_configuration_errors_are_value_errors_and_lionexec_errors() -> None:
    with pytest.raises(ValueError, match="queue_capacity"):
        Processor(0, 1.0, None)
    with pytest.raises(LionexecError):
        Processor(0, 1.0, None)


def test_negative_concurrency_limit_is_rejected() -> None:
    with pytest.raises(ConfigurationError, match=r"concurrency_limit .* got -1"):
        Processor(1, 1.0, -1)


@pytest.mark.parametrize("limit", [0, None])
async def test_zero_or_none_concurrency_means_no_limiter(
    limit: int | None, autojump_clock: trio.testing.MockClock
) -> None:
    processor = Processor(10, 1.0, limit)
    tracker = Tracker()
    await fill(processor, jobs(*"abcdefghij", delay=1, tracker=tracker))
    await processor.process()
    assert tracker.most == 10
    assert processor.concurrency_limit is None
    assert processor.statistics().concurrency_limit is None


def test_negative_max_queue_size_is_rejected() -> None:
    """Refused: the reference implementation accepted it, then reported an empty queue as full."""
    with pytest.raises(ConfigurationError, match=r"max_queue_size .* got -1"):
        Processor(1, 1.0, None, max_queue_size=-1)


async def test_max_queue_size_zero_is_unbounded_and_never_full() -> None:
    processor = Processor(1, 1.0, None, max_queue_size=0)
    for event in jobs(*(str(i) for i in range(1000))):
        assert not processor.queue_full
        assert processor.try_enqueue(event)
    assert not processor.queue_full
    assert len(queued(processor)) == 1000


async def test_positive_max_queue_size_bounds_the_queue() -> None:
    processor = Processor(1, 1.0, None, max_queue_size=2)
    a, b, c = jobs("a", "b", "c")
    assert not processor.queue_full
    await processor.enqueue(a)
    assert not processor.queue_full
    await processor.enqueue(b)
    assert processor.queue_full
    assert not processor.try_enqueue(c)
    assert queued(processor) == [a, b]


# -- the queue ---------------------------------------------------------------------------------


async def test_enqueue_waits_for_space_and_is_served_when_a_slot_frees() -> None:
    processor = Processor(1, 1.0, None, max_queue_size=1)
    a, b = jobs("a", "b")
    await processor.enqueue(a)
    enqueued = trio.Event()

    async def producer() -> None:
        await processor.enqueue(b)
        enqueued.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(producer)
        await wait_all_tasks_blocked()
        assert not enqueued.is_set()
        assert processor.statistics().producers_waiting == 1
        await processor.process()  # a starts, which frees its slot for b
        await enqueued.wait()
    assert a.status is COMPLETED
    assert queued(processor) == [b]


async def test_waiting_producers_are_served_in_order_before_try_enqueue() -> None:
    processor = Processor(1, 1.0, None, max_queue_size=1)
    first, second, third, late = jobs("first", "second", "third", "late")
    await processor.enqueue(first)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(processor.enqueue, second)
        await wait_all_tasks_blocked()
        nursery.start_soon(processor.enqueue, third)
        await wait_all_tasks_blocked()
        await processor.process()  # first leaves: its slot goes to the longest waiter
        assert not processor.try_enqueue(late)
        assert queued(processor) == [second]
        await processor.process()
    assert queued(processor) == [third]


async def test_enqueue_cancelled_while_waiting_adds_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(1, 1.0, None, max_queue_size=1)
    a, b = jobs("a", "b")
    await processor.enqueue(a)
    with trio.move_on_after(5) as scope:
        await processor.enqueue(b)
    assert scope.cancelled_caught
    assert queued(processor) == [a]
    assert processor.statistics().producers_waiting == 0
    await processor.process()
    assert b.status is PENDING
    assert queued(processor) == []


async def test_enqueue_is_a_checkpoint_even_with_room() -> None:
    processor = Processor(1, 1.0, None)
    (a,) = jobs("a")
    with trio.CancelScope() as scope:
        scope.cancel()
        await processor.enqueue(a)
    assert scope.cancelled_caught
    assert queued(processor) == []


async def test_try_enqueue_returns_false_when_full_and_true_otherwise() -> None:
    processor = Processor(1, 1.0, None, max_queue_size=1)
    a, b = jobs("a", "b")
    assert processor.try_enqueue(a) is True
    assert processor.try_enqueue(b) is False
    assert queued(processor) == [a]


async def test_enqueue_refuses_events_of_the_wrong_type() -> None:
    class JobProcessor(Processor):
        event_type = Job

    processor = JobProcessor(1, 1.0, None)
    with pytest.raises(EventTypeError, match="expected an event of type Job, got Event"):
        await processor.enqueue(Event())
    with pytest.raises(TypeError):
        processor.try_enqueue(Event())
    processor.try_enqueue(Job())
    assert len(queued(processor)) == 1


# -- one cycle ---------------------------------------------------------------------------------


async def test_queue_capacity_bounds_the_events_one_cycle_takes() -> None:
    processor = Processor(2, 1.0, None)
    events = jobs("a", "b", "c", "d", "e")
    await fill(processor, events)
    await processor.process()
    assert [e.status for e in events] == [COMPLETED, COMPLETED, PENDING, PENDING, PENDING]
    assert queued(processor) == events[2:]


async def test_request_permission_receives_the_event_request() -> None:
    processor = Policy(5, 1.0, None)
    await fill(processor, jobs("a", "b"))
    await processor.process()
    assert processor.checks == [{"name": "a"}, {"name": "b"}]


async def test_default_permission_allows_every_event() -> None:
    processor = Processor(5, 1.0, None)
    events = jobs("a", "b")
    await fill(processor, events)
    await processor.process()
    assert [e.status for e in events] == [COMPLETED, COMPLETED]
    assert await processor.request_permission(anything=1) is True


async def test_default_denial_marks_skipped_and_is_terminal() -> None:
    processor = Policy(5, 1.0, None, decide=lambda name: "deny")
    (a,) = jobs("a")
    waiter = a.completion_event
    await processor.enqueue(a)
    await processor.process()
    assert a.status is SKIPPED
    assert waiter.is_set()
    assert a.started_at is None
    assert queued(processor) == []


async def test_terminal_denial_takes_one_unit_of_capacity_and_leaves_the_queue() -> None:
    processor = Policy(2, 1.0, None, decide=lambda name: "deny" if name in "xy" else "allow")
    x, y, a = jobs("x", "y", "a")
    await fill(processor, [x, y, a])
    await processor.process()
    assert (x.status, y.status, a.status) == (SKIPPED, SKIPPED, PENDING)
    assert queued(processor) == [a]


async def test_handle_denied_returning_true_on_a_pending_event_skips_it() -> None:
    class Forgetful(Policy):
        async def handle_denied(self, event: Event) -> bool:
            return True  # "terminal", but leaves the event pending

    processor = Forgetful(2, 1.0, None, decide=lambda name: "deny")
    (a,) = jobs("a")
    await processor.enqueue(a)
    await processor.process()
    assert a.status is SKIPPED
    assert queued(processor) == []


async def test_deferring_an_event_the_handler_made_terminal_does_not_requeue_it() -> None:
    class Muddled(Policy):
        async def handle_denied(self, event: Event) -> bool:
            event.status = EventStatus.ABORTED
            return False

    processor = Muddled(2, 1.0, None, decide=lambda name: "deny")
    (a,) = jobs("a")
    await processor.enqueue(a)
    await processor.process()
    assert a.status is EventStatus.ABORTED
    assert queued(processor) == []
    assert processor.statistics().aborted == 1


async def test_deferral_requeues_pending_without_taking_capacity() -> None:
    processor = Policy(
        1, 1.0, None, decide=lambda name: "defer" if name.startswith("d") else "allow"
    )
    d1, d2, a = jobs("d1", "d2", "a")
    await fill(processor, [d1, d2, a])
    await processor.process()
    # Three dequeues in a cycle of capacity 1: deferrals took nothing.
    assert [c["name"] for c in processor.checks] == ["d1", "d2", "a"]
    assert a.status is COMPLETED
    assert (d1.status, d2.status) == (PENDING, PENDING)
    assert queued(processor) == [d1, d2]
    assert processor.statistics().deferrals == 2


async def test_cycle_stops_after_a_full_lap_of_deferrals(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Policy(10, 1.0, None, decide=lambda name: "defer")
    events = jobs("a", "b", "c")
    await fill(processor, events)
    start = trio.current_time()
    await processor.process()
    assert len(processor.checks) == 3  # one lap, no spin
    assert trio.current_time() == start  # and no sleeping either
    assert queued(processor) == events  # same order, all pending
    assert all(e.status is PENDING for e in events)


async def test_lap_counts_from_the_last_dispatch() -> None:
    order = iter(["defer", "allow", "defer", "defer"])
    processor = Policy(10, 1.0, None, decide=lambda name: next(order))
    d, a, e = jobs("d", "a", "e")
    await fill(processor, [d, a, e])
    await processor.process()
    # d deferred, a dispatched (lap restarts), e deferred, d deferred: a full lap of two.
    assert [c["name"] for c in processor.checks] == ["d", "a", "e", "d"]
    assert queued(processor) == [e, d]


async def test_streaming_events_are_drained_through_stream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(5, 1.0, None)
    event = Chunks(3)
    await processor.enqueue(event)
    await processor.process()
    assert event.seen == [0, 1, 2]
    assert not event.invoked
    assert event.status is COMPLETED


async def test_each_event_holds_one_limiter_token_for_its_whole_invoke(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(5, 1.0, 2)
    tracker = Tracker()
    borrowed: list[int] = []
    events = [
        Job(
            str(i),
            delay=1,
            tracker=tracker,
            on_start=lambda: borrowed.append(processor.statistics().limiter_borrowed),
        )
        for i in range(5)
    ]
    await fill(processor, events)
    start = trio.current_time()
    await processor.process()
    assert tracker.most == 2
    assert trio.current_time() - start == 3  # ceil(5 / 2) rounds of one second
    assert all(n <= 2 for n in borrowed)
    assert processor.statistics().limiter_borrowed == 0


async def test_each_streaming_event_holds_its_token_until_the_stream_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(5, 1.0, 1)
    tracker = Tracker()
    a, b = Chunks(2, tracker), Chunks(2, tracker)
    await fill(processor, [a, b])
    start = trio.current_time()
    await processor.process()
    assert tracker.most == 1
    assert trio.current_time() - start == 4
    assert a.status is COMPLETED and b.status is COMPLETED


async def test_process_returns_after_every_event_of_its_cycle_finished(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(5, 1.0, None)
    events = [Job("a", delay=3), Job("b", delay=1), Job("c", delay=7)]
    await fill(processor, events)
    start = trio.current_time()
    await processor.process()
    assert trio.current_time() - start == 7
    assert all(e.status is COMPLETED for e in events)


async def test_one_failing_event_never_cancels_a_sibling(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(5, 1.0, None)
    boom, slow = Job("boom", fail=ValueError("boom")), Job("slow", delay=5)
    await fill(processor, [boom, slow])
    await processor.process()  # does not raise
    assert boom.status is FAILED
    assert isinstance(boom.execution.error, ValueError)
    assert slow.status is COMPLETED


async def test_capacity_is_taken_during_a_cycle_and_given_back_at_its_end() -> None:
    processor = Processor(3, 1.0, None)
    seen: list[int] = []
    events = [Job(n, on_start=lambda: seen.append(processor.available_capacity)) for n in "ab"]
    await fill(processor, events)
    assert processor.available_capacity == 3
    await processor.process()
    assert seen == [1, 1]
    assert processor.available_capacity == 3


async def test_terminal_denials_give_their_capacity_back_too() -> None:
    """Capacity comes back after every cycle; the reference implementation only gave it back
    after a cycle that dispatched something."""
    processor = Policy(2, 1.0, None, decide=lambda name: "deny")
    await fill(processor, jobs("a", "b", "c"))
    await processor.process()
    assert processor.available_capacity == 2
    assert len(queued(processor)) == 1


async def test_process_on_an_empty_queue_is_a_checkpoint() -> None:
    processor = Processor(1, 1.0, None)
    with trio.CancelScope() as scope:
        scope.cancel()
        await processor.process()
    assert scope.cancelled_caught


# -- join --------------------------------------------------------------------------------------


async def test_join_runs_cycles_until_the_queue_is_empty(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(2, 100.0, None)
    events = jobs("a", "b", "c", "d", "e", delay=1)
    await fill(processor, events)
    start = trio.current_time()
    await processor.join()
    assert all(e.status is COMPLETED for e in events)
    assert queued(processor) == []
    assert trio.current_time() - start == 3  # three cycles of at most two, no refresh sleeps


async def test_join_sleeps_capacity_refresh_time_after_a_cycle_without_progress(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    processor = Policy(
        5,
        1.0,
        None,
        decide=lambda name: "allow" if trio.current_time() - start >= 2.5 else "defer",
    )
    (a,) = jobs("a")
    await processor.enqueue(a)
    await processor.join()
    assert a.status is COMPLETED
    assert len(processor.checks) == 4  # at 0, 1, 2 and 3: one check per refresh, no spinning
    assert trio.current_time() - start == 3


async def test_join_on_an_empty_queue_is_a_checkpoint() -> None:
    processor = Processor(1, 1.0, None)
    with trio.CancelScope() as scope:
        scope.cancel()
        await processor.join()
    assert scope.cancelled_caught


async def test_more_terminal_denials_than_capacity_all_reach_skipped_under_join(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Terminal denials cannot exhaust capacity under join(): in the reference implementation the
    queue stalled once enough denials had happened."""
    processor = Policy(2, 1.0, None, decide=lambda name: "deny")
    events = jobs(*"abcdefg")
    await fill(processor, events)
    with trio.fail_after(60):
        await processor.join()
    assert all(e.status is SKIPPED for e in events)
    assert processor.statistics().skipped == 7


# -- the service -------------------------------------------------------------------------------


async def test_more_terminal_denials_than_capacity_all_reach_skipped_under_execute(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Terminal denials cannot exhaust capacity under execute() either."""
    processor = Policy(2, 1.0, None, decide=lambda name: "deny")
    events = jobs(*"abcdefg")
    await fill(processor, events)
    async with trio.open_nursery() as nursery:
        await nursery.start(processor.execute)
        with trio.fail_after(60):
            for event in events:
                await event.wait_completed()
        processor.stop()
    assert all(e.status is SKIPPED for e in events)


async def test_execute_reports_readiness_and_stop_ends_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(5, 10.0, None)
    assert not processor.is_executing()
    async with trio.open_nursery() as nursery:
        await nursery.start(processor.execute)
        assert processor.is_executing()
        assert not processor.is_stopped()
        start = trio.current_time()
        processor.stop()
        assert processor.is_stopped()
    assert trio.current_time() == start  # an idle service wakes for stop() at once
    assert not processor.is_executing()
    assert processor.is_stopped()


async def test_execute_clears_an_earlier_stop() -> None:
    processor = Processor(5, 10.0, None)
    processor.stop()
    assert processor.is_stopped()
    async with trio.open_nursery() as nursery:
        await nursery.start(processor.execute)
        assert not processor.is_stopped()
        (a,) = jobs("a")
        await processor.enqueue(a)
        await a.wait_completed()
        processor.stop()


async def test_start_clears_stop_without_running_anything() -> None:
    processor = Processor(5, 10.0, None)
    processor.stop()
    processor.start()
    assert not processor.is_stopped()
    assert not processor.is_executing()


async def test_idle_execute_wakes_at_once_for_new_work(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(5, 10.0, None)
    async with trio.open_nursery() as nursery:
        await nursery.start(processor.execute)
        await trio.sleep(3)
        (a,) = jobs("a")
        await processor.enqueue(a)
        await a.wait_completed()
        assert a.started_at == 3
        processor.stop()


async def test_execute_rests_capacity_refresh_time_after_a_cycle_that_took_capacity(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(2, 10.0, None)
    events = jobs(*"abcde")
    await fill(processor, events)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(processor.execute)
        for event in events:
            await event.wait_completed()
        processor.stop()
    assert [e.started_at - start for e in events if e.started_at is not None] == [
        0,
        0,
        10,
        10,
        20,
    ]


async def test_stop_wakes_a_resting_service_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(2, 100.0, None)
    (a,) = jobs("a")
    await processor.enqueue(a)
    async with trio.open_nursery() as nursery:
        await nursery.start(processor.execute)
        await a.wait_completed()
        await trio.sleep(1)
        processor.stop()
        stopped_at = trio.current_time()
    assert trio.current_time() == stopped_at


async def test_stop_lets_the_cycle_in_progress_finish(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(2, 100.0, None)
    slow, later = Job("slow", delay=5), Job("later")
    await processor.enqueue(slow)
    async with trio.open_nursery() as nursery:
        await nursery.start(processor.execute)
        await trio.sleep(1)
        processor.stop()
        await processor.enqueue(later)
    assert slow.status is COMPLETED
    assert trio.current_time() == 5
    assert later.status is PENDING
    assert queued(processor) == [later]


async def test_idle_execute_checks_deferred_events_every_refresh(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    processor = Policy(
        5, 1.0, None, decide=lambda name: "allow" if trio.current_time() - start >= 3 else "defer"
    )
    (a,) = jobs("a")
    await processor.enqueue(a)
    async with trio.open_nursery() as nursery:
        await nursery.start(processor.execute)
        await a.wait_completed()
        processor.stop()
    assert a.started_at == start + 3
    assert len(processor.checks) == 4


async def test_cancelling_the_service_cancels_its_running_events(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(2, 1.0, None)
    slow = Job("slow", delay=10)
    await processor.enqueue(slow)
    async with trio.open_nursery() as nursery:
        await nursery.start(processor.execute)
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert slow.status is CANCELLED
    assert not processor.is_executing()
    assert processor.available_capacity == 2


async def test_a_second_execute_is_refused() -> None:
    processor = Processor(2, 1.0, None)
    async with trio.open_nursery() as nursery:
        await nursery.start(processor.execute)
        with pytest.raises(ProcessorBusyError) as info:
            await processor.execute()
        assert isinstance(info.value, trio.BusyResourceError)
        assert processor.is_executing()
        processor.stop()


# -- cancellation ------------------------------------------------------------------------------


async def test_cancelled_cycle_cancels_started_events_and_leaves_queued_ones_pending(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(2, 1.0, None)
    events = jobs("a", "b", "c", "d", delay=10)
    await fill(processor, events)
    with trio.move_on_after(1):
        await processor.process()
    assert [e.status for e in events] == [CANCELLED, CANCELLED, PENDING, PENDING]
    assert queued(processor) == events[2:]
    stats = processor.statistics()
    assert (stats.running, stats.taken, stats.available_capacity) == (0, 0, 2)
    assert stats.cancelled == 2


async def test_events_waiting_for_a_token_go_back_to_the_head_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(3, 1.0, 1, max_queue_size=4)
    events = jobs("a", "b", "c", "d", delay=10)
    await fill(processor, events)
    with trio.move_on_after(1):
        await processor.process()
    # a, b and c were dispatched; whichever got the one token started and was cancelled.
    started = [e for e in events[:3] if e.status is CANCELLED]
    waiting = [e for e in events[:3] if e.status is PENDING]
    assert len(started) == 1 and len(waiting) == 2
    assert queued(processor) == [*waiting, events[3]]
    stats = processor.statistics()
    assert (stats.taken, stats.limiter_borrowed, stats.limiter_waiting) == (0, 0, 0)
    # The two kept their places in the bound all along: room for exactly one more.
    assert not processor.queue_full
    await processor.join()
    assert all(e.status is COMPLETED for e in queued(processor) + waiting + [events[3]])


async def test_event_cancelled_during_its_permission_check_goes_back_to_the_head(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Policy(5, 1.0, None, check_delay=2)
    a, b = jobs("a", "b")
    await fill(processor, [a, b])
    with trio.move_on_after(1):
        await processor.process()
    assert (a.status, b.status) == (PENDING, PENDING)
    assert queued(processor) == [a, b]
    assert processor.statistics().taken == 0


async def test_failing_permission_check_lets_dispatched_events_finish_then_raises(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def decide(name: str) -> Decision:
        if name == "bad":
            raise RuntimeError("policy is broken")
        return "allow"

    processor = Policy(5, 1.0, None, decide=decide)
    ok, bad, after = Job("ok", delay=3), Job("bad"), Job("after")
    await fill(processor, [ok, bad, after])
    with pytest.raises(RuntimeError, match="policy is broken"):
        await processor.process()
    assert ok.status is COMPLETED
    assert trio.current_time() == 3
    assert (bad.status, after.status) == (PENDING, PENDING)
    assert queued(processor) == [bad, after]
    assert processor.available_capacity == 5


async def test_service_cancelled_while_events_wait_for_tokens_loses_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Processor(10, 1.0, 2)
    events = jobs(*"abcdef", delay=5)
    await fill(processor, events)
    with trio.move_on_after(1):
        await processor.execute()
    cancelled = [e for e in events if e.status is CANCELLED]
    pending = [e for e in events if e.status is PENDING]
    assert len(cancelled) == 2 and len(pending) == 4
    assert queued(processor) == pending


# -- statistics --------------------------------------------------------------------------------


async def test_statistics_is_a_frozen_snapshot_of_the_live_state(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = Policy(
        4, 1.0, 1, max_queue_size=10, decide=lambda n: "deny" if n == "x" else "allow"
    )
    events = [
        Job("a", delay=1),
        Job("b", delay=1, fail=ValueError("no")),
        Job("x"),
        Job("c", delay=1),
    ]
    events.append(Job("d"))
    await fill(processor, events)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(processor.process)
        await wait_all_tasks_blocked()
        during = processor.statistics()
    # a runs; b was taken and waits for the single token, which it takes before its
    # permission is asked (a grant is used at once): x, c and d wait in the queue.
    assert during.running == 1
    assert during.limiter_borrowed == 1
    assert during.limiter_waiting == 1
    assert during.taken == 1  # b still holds its place in the queue's bound
    assert during.queued == 3
    assert during.available_capacity == 2
    assert during.cycles_running == 1
    assert during.skipped == 0
    after = processor.statistics()
    assert (after.completed, after.failed, after.skipped, after.cancelled) == (2, 1, 1, 0)
    assert (after.queued, after.taken, after.running, after.available_capacity) == (1, 0, 0, 4)
    assert (after.max_queue_size, after.queue_capacity, after.concurrency_limit) == (10, 4, 1)
    assert (after.executing, after.stopped, after.deferrals) == (False, False, 0)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        after.queued = 5  # type: ignore[misc]


class _Sleeper(Event):
    def __init__(self, n: int, seconds: float = 10) -> None:
        super().__init__()
        self.n, self.seconds = n, seconds

    @property
    def request(self) -> dict[str, Any]:
        return {"n": self.n}

    async def _invoke(self) -> int:
        await trio.sleep(self.seconds)
        return self.n


async def test_overlapping_cycles_never_take_more_than_the_capacity(
    autojump_clock: trio.abc.Clock,
) -> None:
    # A cycle takes an event's unit before asking permission: a cycle alongside sees only
    # what is left (both took the last unit, and available_capacity went to -1).
    class SlowPolicy(Processor):
        async def request_permission(self, **_: Any) -> bool:
            await trio.sleep(1)
            return True

    processor = SlowPolicy(queue_capacity=1, capacity_refresh_time=0.1, concurrency_limit=None)
    await processor.enqueue_many([_Sleeper(i) for i in range(3)])
    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(processor.process)
            nursery.start_soon(processor.process)
            await trio.sleep(2)
            stats = processor.statistics()
            assert stats.available_capacity == 0 and stats.running == 1
    assert processor.statistics().available_capacity == 1


async def test_the_default_denial_never_rewrites_an_outcome_made_elsewhere(
    autojump_clock: trio.abc.Clock,
) -> None:
    class Refusing(Processor):
        async def request_permission(self, **_: Any) -> bool:
            await trio.sleep(1)  # (a remote policy service, say)
            return False

    processor = Refusing(queue_capacity=5, capacity_refresh_time=0.1, concurrency_limit=None)
    ran_elsewhere, aborted = _Sleeper(1, seconds=0), _Sleeper(2, seconds=0)
    await processor.enqueue_many([ran_elsewhere, aborted])
    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(processor.join)
            await trio.sleep(0.5)  # ran_elsewhere is being checked, and is run meanwhile
            await ran_elsewhere.invoke()
            await trio.sleep(1)  # now aborted is being checked, and its owner ends it
            aborted.status = EventStatus.ABORTED
    assert ran_elsewhere.status is EventStatus.COMPLETED and ran_elsewhere.response == 1
    assert aborted.status is EventStatus.ABORTED
